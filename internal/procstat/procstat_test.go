package procstat

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestReaders reads this machine's /proc through every reader: the figures
// of this process and of a child started with a known command line and
// environment, and the machine's.
// spin keeps the CPU-seconds test's busy loop from being optimized away.
var spin int

func TestReaders(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux's")
	}
	child := exec.Command("sleep", "30")
	child.Env = []string{"MONGOFERRY_PROCSTAT_TEST=canary"}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	pid := child.Process.Pid

	// Use some CPU, so that this process's CPU time is above zero.
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
	}
	tests := []struct {
		name string
		read func() (bool, error)
	}{
		{"peak RSS of this process", func() (bool, error) { n, err := PeakRSS("self"); return n > 1<<20, err }},
		{"CPU seconds of this process", func() (bool, error) {
			// The kernel counts in clock ticks (10 ms): work until one is
			// counted, or a second of wall time has passed.
			for deadline := time.Now().Add(time.Second); ; {
				s, err := CPUSeconds(os.Getpid())
				if err != nil || s > 0 || time.Now().After(deadline) {
					return s > 0, err
				}
				for i := 0; i < 1_000_000; i++ {
					spin += i
				}
			}
		}},
		{"machine busy seconds", func() (bool, error) { s, err := MachineBusySeconds(); return s > 0, err }},
		{"memory", func() (bool, error) { n, err := MemTotal(); return n > 64<<20, err }},
		{"load average", func() (bool, error) { l, err := LoadAverage(); return len(strings.Fields(l)) == 3, err }},
		{"processes", func() (bool, error) {
			p, err := PIDs()
			return slices.Contains(p, os.Getpid()) && slices.Contains(p, pid), err
		}},
		{"child's command line", func() (bool, error) { a, err := Cmdline(pid); return slices.Equal(a, []string{"sleep", "30"}), err }},
		{"child's environment", func() (bool, error) {
			e, err := Environ(pid)
			return slices.Equal(e, []string{"MONGOFERRY_PROCSTAT_TEST=canary"}), err
		}},
		{"reset peak RSS", func() (bool, error) { return true, ResetPeakRSS() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, err := tt.read()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				t.Fatal("implausible value")
			}
		})
	}
	if _, err := CPUSeconds(1 << 30); err == nil {
		t.Error("CPUSeconds of a process that does not exist: no error")
	}
}
