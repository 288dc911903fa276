// Package version is `ferry version`.
package version

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	buildversion "github.com/mongoferry/mongoferry/internal/version"
)

// NewCommand returns `ferry version`.
func NewCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version",
		Example: "  ferry version",
		Args:    cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "ferry %s (%s, %s/%s)\n", buildversion.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		},
	}
}
