package run

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/verify"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
	"github.com/mongoferry/mongoferry/pkg/workertls"
)

// serve serves h on --listen, over HTTPS with /status for the
// --status-client only when --tls-cert-file is set, and returns the
// function that stops it.
func serve(f Flags, h http.Handler, log *slog.Logger) (func(), error) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	if f.tls.Cert != "" {
		cfg, err := workertls.ServerConfig(f.tls)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert-file: %w", err)
		}
		srv.TLSConfig = cfg
		srv.Handler = workertls.StatusGuard(h, f.statusClient, log)
		srv.ErrorLog = workertls.ErrorLog(log)
	}
	ln, err := listen(f, log)
	if err != nil {
		return nil, err
	}
	useTLS := srv.TLSConfig != nil
	if useTLS {
		ln = tls.NewListener(ln, srv.TLSConfig)
	}
	// Serve writes srv's fields (its HTTP/2 set-up), so nothing here reads
	// srv once it runs.
	go func() { _ = srv.Serve(ln) }()
	log.Info("serving /metrics and /status", "addr", ln.Addr().String(), "tls", useTLS)
	return func() { _ = srv.Close() }, nil
}

// verifyAnswer answers POST /verify from the engine's start of a
// streaming verification pass: 202 Accepted when it started, 409 Conflict
// while a pass runs, 503 Service Unavailable when the task is not
// streaming in this worker.
func verifyAnswer(start func() error) workerapi.VerifyStart {
	return func() (int, string) {
		switch err := start(); {
		case err == nil:
			return http.StatusAccepted, "started a streaming verification pass; follow it in /status (streamingVerify)"
		case errors.Is(err, verify.ErrPassRunning):
			return http.StatusConflict, err.Error()
		case errors.Is(err, engine.ErrNotStreaming):
			return http.StatusServiceUnavailable, err.Error()
		default:
			return http.StatusInternalServerError, err.Error()
		}
	}
}
