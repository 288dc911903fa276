package controller

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// maxTerminationMessageLen bounds the exit message shown from a worker.
const maxTerminationMessageLen = 512

// exitText describes a container exit in one line: the code and the last
// line of its termination message (the worker's last log line), read as a
// record when it is one (workers log JSON).
func exitText(e *corev1.ContainerStateTerminated) string {
	msg := strings.TrimSpace(e.Message)
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
		msg = strings.TrimSpace(msg[i+1:])
	}
	msg = specTerms(recordText(msg))
	if len(msg) > maxTerminationMessageLen {
		msg = msg[:maxTerminationMessageLen] + "..."
	}
	if msg == "" {
		msg = e.Reason
	}
	return fmt.Sprintf("exit code %d: %s", e.ExitCode, msg)
}

// recordText is what a JSON log line says, "msg: err" (the worker's last
// record, ferry's final error: msg "ferry"), or "msg"; a line that is no
// JSON record comes back as it is.
func recordText(line string) string {
	if !strings.HasPrefix(line, "{") {
		return line
	}
	var rec struct {
		Msg *string `json:"msg"`
		Err any     `json:"err"`
	}
	if json.Unmarshal([]byte(line), &rec) != nil || rec.Msg == nil {
		return line
	}
	if s, ok := rec.Err.(string); ok && s != "" {
		return *rec.Msg + ": " + s
	}
	return *rec.Msg
}
