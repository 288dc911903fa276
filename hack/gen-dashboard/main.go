// Command gen-dashboard writes the chart's Grafana dashboard, built in Go by
// internal/dashboard, to the file named by its argument (make manifests).
package main

import (
	"fmt"
	"os"

	"github.com/mongoferry/mongoferry/internal/dashboard"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gen-dashboard FILE")
		os.Exit(2)
	}
	b, err := dashboard.JSON()
	if err == nil {
		err = os.WriteFile(os.Args[1], b, 0o644) //nolint:gosec // G306: a file of the chart, committed and world-readable like its others
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen-dashboard:", err)
		os.Exit(1)
	}
}
