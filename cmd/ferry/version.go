package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/mongoferry/mongoferry/internal/version"
)

func init() {
	commands = append(commands, &cobra.Command{
		Use:     "version",
		Short:   "Print the version",
		Example: "  ferry version",
		Args:    cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "ferry %s (%s, %s/%s)\n", version.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		},
	})
}
