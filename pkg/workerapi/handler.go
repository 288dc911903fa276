package workerapi

import (
	"encoding/json"
	"net/http"
)

// StatusHandler serves GET /status: the document status returns, as
// indented JSON. The worker passes its engine's status (a superset of
// Status); T keeps this package free of the engine's types.
func StatusHandler[T any](status func() T) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(status())
	})
}
