package verify

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/mongoferry/mongoferry/pkg/config"
)

// WriteTable writes the report as a table, one row per namespace (counts,
// hash or sample result, ok or DIFFERS), followed by the differences of
// each namespace that did not match with their example _ids.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := "NAMESPACE\tSOURCE DOCS\tTARGET DOCS\t"
	switch r.Mode {
	case config.VerifyHash:
		header += "HASH\t"
	case config.VerifySample:
		header += "SAMPLED\t"
	}
	fmt.Fprintln(tw, header+"RESULT")
	for _, ns := range r.Namespaces {
		row := ns.name() + "\t"
		if ns.Skipped {
			row += "-\t-\t"
			if r.Mode != config.VerifyCount {
				row += "-\t"
			}
			fmt.Fprintln(tw, row+ns.Note)
			continue
		}
		row += fmt.Sprintf("%d\t%d\t", ns.SourceCount, ns.TargetCount)
		switch r.Mode {
		case config.VerifyHash:
			if ns.SourceHash == ns.TargetHash && ns.SourceCount == ns.TargetCount {
				row += "match\t"
			} else {
				row += "differs\t"
			}
		case config.VerifySample:
			row += fmt.Sprintf("%d\t", ns.Sampled)
		}
		if ns.OK {
			row += "ok"
		} else {
			row += "DIFFERS"
		}
		fmt.Fprintln(tw, row)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	var b strings.Builder
	for _, ns := range r.Namespaces {
		if ns.OK && (ns.Skipped || ns.Note == "") {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\nDifferences:\n")
		}
		ns.writeDifferences(&b, r.Mode)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// name is "db.coll", or "db.coll -> db2.coll2" when renamed on the target.
func (ns *NamespaceResult) name() string {
	if ns.Source == ns.Target {
		return ns.Source.String()
	}
	return ns.Source.String() + " -> " + ns.Target.String()
}

func (ns *NamespaceResult) writeDifferences(b *strings.Builder, mode config.VerifyMode) {
	var parts []string
	if d := ns.TargetCount - ns.SourceCount; d != 0 {
		parts = append(parts, fmt.Sprintf("source has %d documents, target %d", ns.SourceCount, ns.TargetCount))
	}
	if mode == config.VerifyHash && ns.SourceHash != ns.TargetHash {
		parts = append(parts, fmt.Sprintf("hash %s on source, %s on target", ns.SourceHash, ns.TargetHash))
	}
	of := ""
	if mode == config.VerifySample {
		of = fmt.Sprintf(" of %d sampled", ns.Sampled)
	}
	if ns.MissingCount > 0 {
		parts = append(parts, fmt.Sprintf("%d%s missing on target", ns.MissingCount, of))
	}
	if ns.ExtraCount > 0 {
		parts = append(parts, fmt.Sprintf("%d extra on target", ns.ExtraCount))
	}
	if ns.ChangedCount > 0 {
		parts = append(parts, fmt.Sprintf("%d%s changed", ns.ChangedCount, of))
	}
	fmt.Fprintf(b, "  %s: %s\n", ns.name(), strings.Join(parts, "; "))
	if ns.Note != "" {
		fmt.Fprintf(b, "    note: %s\n", ns.Note)
	}
	list := func(kind string, ids []string, count int64) {
		for _, id := range ids {
			fmt.Fprintf(b, "    %-8s _id %s\n", kind, id)
		}
		if more := count - int64(len(ids)); more > 0 {
			fmt.Fprintf(b, "    ... and %d more %s\n", more, kind)
		}
	}
	list("missing", ns.Missing, ns.MissingCount)
	list("extra", ns.Extra, ns.ExtraCount)
	list("changed", ns.Changed, ns.ChangedCount)
}
