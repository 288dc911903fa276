package kubectlplugin

import "flag"

var update = flag.Bool("update", false, "write the golden files")
