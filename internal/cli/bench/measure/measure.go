// Package measure holds what ferry's benchmarks share: the header naming
// the command line and the machine, CPU seconds of ferry, the servers and
// everything else (cpu.go), timed rounds, CPU profiles, medians and
// verdicts.
package measure

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"

	"github.com/mongoferry/mongoferry/internal/cli/progress"
	"github.com/mongoferry/mongoferry/internal/procstat"
)

// NoisyShare is the share of the machine's CPU capacity other processes
// may use during the rounds before a benchmark warns that its figures are
// skewed.
const NoisyShare = 0.1

// The source namespace of the benchmarks that load a server.
const (
	DB         = "bench"
	Collection = "usertable"
)

// Header prints the command line and the machine.
func Header(out io.Writer) {
	fmt.Fprintf(out, "command:   %s\n", shellQuote(os.Args))
	mem := "unknown memory"
	if n, err := procstat.MemTotal(); err == nil && n > 0 {
		mem = progress.Bytes(n) + " memory"
	}
	fmt.Fprintf(out, "machine:   %d CPUs (GOMAXPROCS %d), %s, %s %s/%s\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), mem, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// shellQuote writes args as a shell command line.
func shellQuote(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && !strings.ContainsFunc(a, func(r rune) bool {
			return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && !strings.ContainsRune("-_./=:,+@%", r)
		}) {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

// Median is the median of xs (0 for none).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Div is a/b, 0 when b is 0.
func Div(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// Verdict is what a benchmark says of a figure against its target.
func Verdict(reached bool) string {
	if reached {
		return "PASS"
	}
	return "BELOW TARGET"
}

// StartCPUProfile writes a CPU profile to the file name until the returned
// stop is called (stop may be called again); errors name --cpuprofile.
func StartCPUProfile(name string) (stop func(), err error) {
	pf, err := os.Create(name)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(pf); err != nil {
		_ = pf.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	stopped := false
	return func() {
		if !stopped {
			stopped = true
			pprof.StopCPUProfile()
			_ = pf.Close()
		}
	}, nil
}

// Logger is the engine's logger in a benchmark: warnings and errors only,
// on stderr, so that they do not mix with the figures.
func Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
