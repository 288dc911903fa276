package workertls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	stdlog "log"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
)

// Files are the worker's TLS files: its serving certificate and key and
// the CA whose client certificates it accepts (mounted from the task's
// worker TLS Secret).
type Files struct {
	Cert, Key, ClientCA string
}

// ServerConfig serves TLS with the files' certificate and asks every
// client for a certificate without requiring one: a client that presents
// one must present one the CA signed (else the handshake fails), and
// /status then checks whose it is (StatusGuard). /metrics and /healthz
// need TLS only, so that Prometheus scrapes with the CA alone and the
// kubelet's probes, which present no certificate, pass.
func ServerConfig(f Files) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("serving certificate %s and key %s: %w", f.Cert, f.Key, errors.Unwrap(err))
	}
	caPEM, err := os.ReadFile(f.ClientCA)
	if err != nil {
		return nil, fmt.Errorf("client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("client CA %s: no PEM certificate", f.ClientCA)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientCAs:    pool,
		ClientAuth:   tls.VerifyClientCertIfGiven,
		MinVersion:   tls.VersionTLS12,
	}, nil
}

// StatusGuard serves /status (and POST /verify, which starts a
// streaming verification pass) only to a client that presented a
// certificate the CA signed for the name client (the manager); others get
// 403 Forbidden, and the first refusal is logged (once: a scraper
// pointed at /status by mistake would fill the log otherwise). Every
// other path goes to next as it is.
func StatusGuard(next http.Handler, client string, log *slog.Logger) http.Handler {
	var once sync.Once
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/status" && r.URL.Path != "/verify" {
			next.ServeHTTP(w, r)
			return
		}
		who, ok := peerName(r)
		if ok && who == client {
			next.ServeHTTP(w, r)
			return
		}
		once.Do(func() {
			if !ok {
				who = "(no client certificate)"
			}
			log.Warn("refused /status: only the manager's client certificate may read it; further refusals are not logged",
				"remote", r.RemoteAddr, "client", who, "want", client)
		})
		http.Error(w, "forbidden: /status is served to the manager's client certificate only", http.StatusForbidden)
	})
}

// peerName is the common name of the verified client certificate.
func peerName(r *http.Request) (string, bool) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return "", false
	}
	return r.TLS.VerifiedChains[0][0].Subject.CommonName, true
}

// ErrorLog is an http.Server's ErrorLog that passes the first error (a
// refused handshake: no TLS, or a client certificate another CA signed)
// to log as a warning and drops the rest, which would repeat it at every
// scrape.
func ErrorLog(log *slog.Logger) *stdlog.Logger {
	return stdlog.New(&onceWriter{log: log}, "", 0)
}

type onceWriter struct {
	once sync.Once
	log  *slog.Logger
}

func (w *onceWriter) Write(p []byte) (int, error) {
	w.once.Do(func() {
		w.log.Warn("refused a connection to the TLS endpoint; further refusals are not logged",
			"err", strings.TrimSpace(string(p)))
	})
	return len(p), nil
}
