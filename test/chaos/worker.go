package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/mongoferry/mongoferry/internal/procstat"
	"github.com/mongoferry/mongoferry/pkg/engine"
)

// Worker is one `ferry run` process of the current task.
type Worker struct {
	cmd    *exec.Cmd
	addr   string
	exited chan struct{}
	err    error // the exit status, once exited is closed

	mu      sync.Mutex
	peakRSS int64
}

var statusClient = &http.Client{Timeout: 2 * time.Second}

// startWorker starts `ferry run` on a task file, serving /status on addr,
// with its output appended to logFile.
func startWorker(bin, taskFile, addr, logFile string) (*Worker, error) {
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	cmd := exec.Command(bin, "run", "-f", taskFile, "--progress", "none", "--listen", addr)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start ferry: %w", err)
	}
	w := &Worker{cmd: cmd, addr: addr, exited: make(chan struct{})}
	go func() { w.err = cmd.Wait(); close(w.exited) }()
	go w.watchRSS()
	return w, nil
}

// watchRSS keeps the process's high-water RSS: VmHWM is gone once it is
// killed, so it is read while it runs.
func (w *Worker) watchRSS() {
	pid := strconv.Itoa(w.cmd.Process.Pid)
	for {
		if rss, err := procstat.PeakRSS(pid); err == nil {
			w.mu.Lock()
			w.peakRSS = max(w.peakRSS, rss)
			w.mu.Unlock()
		}
		select {
		case <-w.exited:
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// PeakRSS returns the highest RSS seen.
func (w *Worker) PeakRSS() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.peakRSS
}

// Exited reports whether the process ended, and how.
func (w *Worker) Exited() (bool, error) {
	select {
	case <-w.exited:
		return true, w.err
	default:
		return false, nil
	}
}

// ExitCode returns the exit code of an ended process (-1 when killed).
func (w *Worker) ExitCode() int {
	<-w.exited
	var ee *exec.ExitError
	if errors.As(w.err, &ee) {
		return ee.ExitCode()
	}
	if w.err == nil {
		return 0
	}
	return -1
}

// Kill sends SIGKILL and waits for the process to end.
func (w *Worker) Kill() {
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	<-w.exited
}

// Status reads /status.
func (w *Worker) Status(ctx context.Context) (engine.Status, error) {
	var s engine.Status
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+w.addr+"/status", nil)
	if err != nil {
		return s, err
	}
	resp, err := statusClient.Do(req)
	if err != nil {
		return s, err
	}
	defer func() { _ = resp.Body.Close() }()
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// stage names what the worker does now, as the kill schedule sees it:
// planning (before or while planning the copy), copying, indexes,
// replay, or the phase otherwise.
func stage(s engine.Status) string {
	switch s.Phase {
	case engine.PhasePending:
		return "planning"
	case engine.PhaseFullSync:
		switch st := s.Copy.Stage; {
		case st == "" || len(st) >= 8 && st[:8] == "planning":
			return "planning"
		case st == "copying":
			return "copying"
		case len(st) >= 8 && st[:8] == "building":
			return "indexes"
		default:
			return "copy " + st
		}
	case engine.PhaseStreaming:
		return "replay"
	}
	return string(s.Phase)
}
