// Package procstat is the one place MongoFerry reads Linux's /proc: a
// process's peak memory, CPU time, command line and environment, the
// machine's CPU busy time, memory and load average, and the processes
// there are. Every reader returns an error (or a zero value, where a
// figure is only informative) where there is no /proc.
package procstat

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// root is where /proc is mounted.
const root = "/proc"

// clockTicks is the unit of utime and stime in /proc/<pid>/stat and of
// the times in /proc/stat (USER_HZ, 100 on Linux).
const clockTicks = 100

// path names a file under /proc; pid is a process id or "self".
func path(pid string, name string) string { return filepath.Join(root, pid, name) }

// PeakRSS returns the high-water resident set size of process pid ("self"
// for this process) in bytes, from VmHWM in /proc/<pid>/status.
func PeakRSS(pid string) (int64, error) {
	kb, err := kibField(path(pid, "status"), "VmHWM:")
	if err != nil {
		return 0, err
	}
	return kb << 10, nil
}

// SelfPeakRSS is this process's peak resident set size in bytes, 0 where
// there is no /proc.
func SelfPeakRSS() int64 {
	n, _ := PeakRSS("self")
	return n
}

// ResetPeakRSS restarts this process's peak RSS count (Linux 4.0 and
// later), so that a later PeakRSS is the peak since now.
func ResetPeakRSS() error {
	return os.WriteFile(path("self", "clear_refs"), []byte("5"), 0)
}

// MemTotal is the machine's memory in bytes, from /proc/meminfo.
func MemTotal() (int64, error) {
	kb, err := kibField(filepath.Join(root, "meminfo"), "MemTotal:")
	if err != nil {
		return 0, err
	}
	return kb << 10, nil
}

// kibField reads the value in kB of the line starting with key in a
// "Key:   123 kB" file such as /proc/<pid>/status or /proc/meminfo.
func kibField(file, key string) (int64, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), key); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse %s %q in %s: %w", strings.TrimSuffix(key, ":"), v, file, err)
			}
			return kb, nil
		}
	}
	if err := s.Err(); err != nil {
		return 0, fmt.Errorf("read %s: %w", file, err)
	}
	return 0, fmt.Errorf("no %s in %s", strings.TrimSuffix(key, ":"), file)
}

// CPUSeconds returns the user+system CPU seconds process pid has used,
// from /proc/<pid>/stat.
func CPUSeconds(pid int) (float64, error) {
	file := path(strconv.Itoa(pid), "stat")
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces: fields start after its ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("%s: no command name", file)
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is the state (field 3); utime and stime are fields 14, 15.
	if len(fields) < 13 {
		return 0, fmt.Errorf("%s: %d fields after the command name, want 13 or more", file, len(fields))
	}
	ut, err := strconv.ParseFloat(fields[11], 64)
	if err != nil {
		return 0, fmt.Errorf("%s: utime: %w", file, err)
	}
	st, err := strconv.ParseFloat(fields[12], 64)
	if err != nil {
		return 0, fmt.Errorf("%s: stime: %w", file, err)
	}
	return (ut + st) / clockTicks, nil
}

// MachineBusySeconds is the busy time of all CPUs since boot, in seconds,
// from the cpu line of /proc/stat: user, nice, system, irq, softirq and
// steal (guest time is already in user; idle and iowait are not busy).
func MachineBusySeconds() (float64, error) {
	file := filepath.Join(root, "stat")
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	if len(fields) < 8 || fields[0] != "cpu" {
		return 0, fmt.Errorf("%s: first line %q is not the cpu line", file, line)
	}
	var busy float64
	for i, v := range fields[1:min(len(fields), 9)] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		x, _ := strconv.ParseFloat(v, 64)
		busy += x
	}
	return busy / clockTicks, nil
}

// LoadAverage is the machine's 1, 5 and 15 minute load averages as
// /proc/loadavg writes them ("0.52 0.58 0.59").
func LoadAverage() (string, error) {
	file := filepath.Join(root, "loadavg")
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "", fmt.Errorf("%s: %q has fewer than 3 fields", file, b)
	}
	return strings.Join(f[:3], " "), nil
}

// PIDs lists the ids of the processes running now.
func PIDs() ([]int, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && e.IsDir() {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// Cmdline returns process pid's arguments, from /proc/<pid>/cmdline.
func Cmdline(pid int) ([]string, error) {
	return nulList(path(strconv.Itoa(pid), "cmdline"))
}

// Environ returns process pid's environment as KEY=value strings, from
// /proc/<pid>/environ (readable for this user's processes only).
func Environ(pid int) ([]string, error) {
	return nulList(path(strconv.Itoa(pid), "environ"))
}

// nulList reads a file of NUL-terminated strings.
func nulList(file string) ([]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	s := strings.TrimSuffix(string(b), "\x00")
	if s == "" {
		return nil, nil
	}
	return strings.Split(s, "\x00"), nil
}
