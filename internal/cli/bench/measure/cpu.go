package measure

import (
	"bufio"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
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
	c := CPU{Source: procCPU(s.SourcePID), Target: procCPU(s.TargetPID), Machine: machineBusy()}
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.Ferry = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	return c
}

// ServerPID finds the server process listening on addr by its command
// line (0 when not found): the test server does not expose its process.
func ServerPID(addr string) int {
	want := "--listen-addr=" + addr
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if slices.Contains(strings.Split(string(b), "\x00"), want) {
			return pid
		}
	}
	return 0
}

// clockTicks is the unit of utime and stime in /proc/<pid>/stat (USER_HZ,
// 100 on Linux).
const clockTicks = 100

// procCPU returns the user+system CPU seconds of process pid, 0 when
// unknown.
func procCPU(pid int) float64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name may hold spaces: fields start after its ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is the state (field 3); utime and stime are fields 14, 15.
	if len(fields) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(fields[11], 64)
	st, _ := strconv.ParseFloat(fields[12], 64)
	return (ut + st) / clockTicks
}

// machineBusy is the busy time of all CPUs since boot, in seconds, from
// /proc/stat (0 when unknown).
func machineBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	if len(fields) < 8 || fields[0] != "cpu" {
		return 0
	}
	var busy float64
	// user nice system idle iowait irq softirq steal ...; guest time is
	// already in user.
	for i, v := range fields[1:min(len(fields), 9)] {
		if i == 3 || i == 4 {
			continue
		}
		x, _ := strconv.ParseFloat(v, 64)
		busy += x
	}
	return busy / clockTicks
}

// ResetPeakRSS restarts this process's peak RSS count (Linux 4.0 and
// later); false when it could not.
func ResetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// memTotal is the machine's memory from /proc/meminfo, 0 when unknown.
func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
