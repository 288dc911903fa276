// Package version holds the build version, set with
// -ldflags "-X github.com/mongoferry/mongoferry/internal/version.Version=v1.2.3".
package version

// Version is the release this binary was built from.
var Version = "v0.1.0-dev"
