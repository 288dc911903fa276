package workerapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestStatusHandler checks that a reader of /status decodes the document
// the worker passed, as JSON.
func TestStatusHandler(t *testing.T) {
	want := Status{Contract: ContractVersion, Task: "t1", Phase: PhaseStreaming}
	rec := httptest.NewRecorder()
	StatusHandler(func() Status { return want }).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status", nil))
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q, want application/json", ct)
	}
	var got Status
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("decode /status: %v", err)
	}
	if got.Task != want.Task || got.Phase != want.Phase || got.Contract != want.Contract {
		t.Fatalf("/status = %+v, want %+v", got, want)
	}
}
