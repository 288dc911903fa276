// Package explain is `ferry explain task`: the task file's fields, each
// with its type, default, allowed values and meaning, from the schema
// pkg/config generates from the types the SyncTask CRD is built from.
package explain

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/mongoferry/mongoferry/pkg/config"
)

// NewCommand returns `ferry explain`.
func NewCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "explain",
		Short: "Describe the fields of a task file",
	}
	var long bool
	task := &cobra.Command{
		Use:   "task [FIELD...]",
		Short: "Print every field of a task file: its type, default, allowed values and meaning",
		Long: `Print the task file's schema: every field's path, type, default and allowed
values, and one line of meaning. Name fields (threads, fullSync.workers) to
print only those and the fields under them, with their whole description.

A SyncTask's spec takes the same fields, except that its source and target
name Kubernetes Secrets for credentials and TLS (kubectl explain synctask.spec).`,
		Example: "  ferry explain task\n  ferry explain task fullSync\n  ferry explain task source.authMechanism --long",
		RunE: func(cmd *cobra.Command, args []string) error {
			fields := config.Schema(args...)
			if len(fields) == 0 {
				return fmt.Errorf("no task file field is named %s: run `ferry explain task` for the list", strings.Join(args, " or "))
			}
			return Print(cmd.OutOrStdout(), fields, long || len(args) > 0)
		},
	}
	task.Flags().BoolVar(&long, "long", false, "print each field's whole description instead of its first sentence")
	cmd.AddCommand(task)
	return cmd
}

// Print writes fields as a table (path, type, default, allowed values,
// first sentence of the meaning), or with long one block per field with
// its whole description.
func Print(w io.Writer, fields []config.SchemaField, long bool) error {
	if long {
		for _, f := range fields {
			facts := []string{f.Type}
			if f.Required {
				facts = append(facts, "required")
			} else if f.Default != "" {
				facts = append(facts, "default "+f.Default)
			}
			if f.Limits != "" {
				facts = append(facts, f.Limits)
			}
			if _, err := fmt.Fprintf(w, "%s (%s)\n", f.Path, strings.Join(facts, "; ")); err != nil {
				return err
			}
			for _, l := range wrap(f.Doc, 76) {
				fmt.Fprintf(w, "    %s\n", l)
			}
			fmt.Fprintln(w)
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FIELD\tTYPE\tDEFAULT\tALLOWED\tMEANING")
	for _, f := range fields {
		def := f.Default
		if f.Required {
			def = "(required)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", f.Path, f.Type, orDash(def), orDash(f.Limits), f.Summary)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// wrap breaks s into lines of at most width characters at spaces.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		if line != "" && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
