package measure

import (
	"syscall"
	"time"

	"github.com/mongoferry/mongoferry/internal/procstat"
)

// CPU is user+system CPU time in seconds of this process, of the two
// servers and of the whole machine (busy time of all CPUs).
type CPU struct{ Ferry, Source, Target, Machine float64 }

// Sub is the CPU time between o and c.
func (c CPU) Sub(o CPU) CPU {
	return CPU{c.Ferry - o.Ferry, c.Source - o.Source, c.Target - o.Target, c.Machine - o.Machine}
}

// Ours is the CPU time of ferry and the servers.
func (c CPU) Ours() float64 { return c.Ferry + c.Source + c.Target }

// Others is the CPU time of every other process on the machine: load that
// was not the benchmark's and skews its figures.
func (c CPU) Others() float64 { return max(c.Machine-c.Ours(), 0) }

// Sampler reads the CPU time used so far by this process, by the servers
// with the given process ids (0: none) and by the machine.
type Sampler struct{ SourcePID, TargetPID int }

// Sample returns the CPU seconds used so far (0 for a server whose process
// was not found).
func (s Sampler) Sample() CPU {
	var ru syscall.Rusage
	c := CPU{Source: ProcessCPU(s.SourcePID), Target: ProcessCPU(s.TargetPID)}
	c.Machine, _ = procstat.MachineBusySeconds()
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.Ferry = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	return c
}

// ProcessCPU is the CPU seconds of process pid, 0 for none or when unknown.
func ProcessCPU(pid int) float64 {
	if pid == 0 {
		return 0
	}
	n, _ := procstat.CPUSeconds(pid)
	return n
}

// ResetPeakRSS restarts this process's peak RSS count; false when it
// could not.
func ResetPeakRSS() bool { return procstat.ResetPeakRSS() == nil }
