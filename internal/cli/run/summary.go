package run

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// writeCutoverSummary prints how a cut-over ended: its step, the
// positions it recorded, the verification and how long it took.
func writeCutoverSummary(w io.Writer, s engine.Status) {
	c := s.Cutover
	pos := func(ts *workerapi.Timestamp) string {
		if ts == nil {
			return "-"
		}
		return fmt.Sprintf("%d,%d (%s)", ts.T, ts.I, time.Unix(int64(ts.T), 0).UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "cut-over:         %s\n", c.Step)
	fmt.Fprintf(w, "source drained to %s\n", pos(c.SourcePosition))
	fmt.Fprintf(w, "target position   %s  (a reverse sync starts here)\n", pos(c.TargetPosition))
	switch v := c.Verify; {
	case v == nil:
		fmt.Fprintf(w, "verification      none\n")
	case v.OK:
		fmt.Fprintf(w, "verification      %s: the target equals the source\n", v.Mode)
	default:
		fmt.Fprintf(w, "verification      %s: differences in %s\n", v.Mode, strings.Join(v.Differing, ", "))
	}
	if c.WritesBlocked {
		fmt.Fprintf(w, "source writes     blocked; they stay blocked (unblock with db.adminCommand({setUserWriteBlockMode: 1, global: false}))\n")
	}
	if c.FinishedAt != nil {
		fmt.Fprintf(w, "took              %s\n", c.FinishedAt.Sub(c.StartedAt).Round(time.Second))
	}
	if c.Message != "" {
		fmt.Fprintf(w, "message           %s\n", c.Message)
	}
}
