// Package exit is how ferry's commands end: the signals that interrupt
// them, the exit codes they end with, and the message a benchmark prints
// when it is interrupted.
package exit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// Error ends the command with Code after the command has already told the
// user what happened.
type Error struct{ Code int }

func (e Error) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// Interrupted is the error of a command stopped by Ctrl-C or SIGTERM: exit
// status 130, like a shell.
var Interrupted = Error{Code: workerapi.ExitInterrupted}

// OnSignal returns a context that ends on Ctrl-C (SIGINT) or SIGTERM, and
// the func that stops listening for them.
func OnSignal(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
}

// Code is the process's exit status for a command's error, and whether the
// error still has to be printed (an Error has been told already).
func Code(err error) (code int, print bool) {
	var ee Error
	switch {
	case err == nil:
		return 0, false
	case errors.As(err, &ee):
		return ee.Code, false
	}
	return 1, true
}

// LogFormatJSON is the --log-format under which a command's stderr holds
// JSON records only, one object per line (an operator's workers).
const LogFormatJSON = "json"

// Print tells the user about err, the command's last word, in the format
// its --log-format gives: the line "ferry: <err>", or under LogFormatJSON
// one record at level ERROR with msg "ferry" and err "<err>", so that a
// log collector reads it like every other line and `msg: err` reads as
// the text line does.
func Print(w io.Writer, logFormat string, err error) {
	if logFormat == LogFormatJSON {
		slog.New(slog.NewJSONHandler(w, nil)).Error("ferry", "err", err.Error())
		return
	}
	fmt.Fprintln(w, "ferry:", err)
}

// Bench turns a benchmark's error into the command's result: after Ctrl-C
// (the servers are stopped by then) it says so and exits 130.
func Bench(ctx context.Context, out io.Writer, err error) error {
	if err != nil && ctx.Err() != nil {
		fmt.Fprintln(out, "\nbench: interrupted; the servers are stopped")
		return Interrupted
	}
	return err
}
