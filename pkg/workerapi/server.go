package workerapi

import (
	"encoding/json"
	"net/http"
)

// VerifyStart starts a streaming verification pass for POST /verify and
// answers with the HTTP status and message to send: 202 when it started,
// 409 while a pass runs, 503 when the task is not streaming in this
// worker. The worker maps its engine's errors (VerifyAnswer); this package
// knows none of them.
type VerifyStart func() (code int, message string)

// Handler serves a worker's API: GET /status (the document status
// returns, StatusHandler), /healthz, POST /verify when verify is set
// (progress and findings are then read from /status, streamingVerify),
// and /metrics from metrics (the Prometheus handler of the worker's
// registry) when it is set.
func Handler[T any](metrics http.Handler, status func() T, verify VerifyStart) http.Handler {
	mux := http.NewServeMux()
	if verify != nil {
		mux.HandleFunc("POST /verify", func(w http.ResponseWriter, _ *http.Request) {
			code, msg := verify()
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
		})
	}
	if metrics != nil {
		mux.Handle("/metrics", metrics)
	}
	mux.Handle("/status", StatusHandler(status))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	return mux
}
