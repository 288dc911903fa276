package run

import (
	"bufio"
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/verify"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// records parses every line of out as one JSON record.
func records(t *testing.T, out string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("line %q is not one JSON record: %v", sc.Text(), err)
		}
		recs = append(recs, rec)
	}
	return recs
}

// TestSummariesAsRecords: under --log-format json the verification report
// and the cut-over summary, which text mode prints as a table on stdout,
// are log records: what the table says, one namespace a record, the one
// that differs at WARN with its counts and example _ids.
func TestSummariesAsRecords(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	orders, moved := catalog.Namespace{DB: "shop", Coll: "orders"}, catalog.Namespace{DB: "shop2", Coll: "orders"}
	logVerifyReport(log, &verify.Report{Mode: config.VerifyHash, Namespaces: []verify.NamespaceResult{
		{Source: orders, Target: orders, SourceCount: 10, TargetCount: 10, SourceHash: "ab", TargetHash: "ab", OK: true},
		{Source: orders, Target: moved, SourceCount: 10, TargetCount: 9, SourceHash: "ab", TargetHash: "cd",
			Missing: []string{`{"$numberInt":"7"}`}, MissingCount: 1},
		{Source: catalog.Namespace{DB: "shop", Coll: "v"}, Target: catalog.Namespace{DB: "shop", Coll: "v"}, Skipped: true, OK: true, Note: "a view"},
	}})
	start := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	end := start.Add(3 * time.Second)
	logCutoverSummary(log, engine.Status{Cutover: &workerapi.Cutover{Step: workerapi.CutoverComplete,
		SourcePosition: &workerapi.Timestamp{T: 100, I: 2}, Verify: &workerapi.Verify{Mode: "count", OK: true},
		StartedAt: start, FinishedAt: &end}})
	recs := records(t, buf.String())
	if len(recs) != 4 {
		t.Fatalf("%d records, want 4:\n%s", len(recs), buf.String())
	}
	for i, want := range []map[string]any{
		{"level": "INFO", "msg": "verification: the namespace matches", "ns": "shop.orders", "sourceDocuments": 10.0, "targetDocuments": 10.0},
		{"level": "WARN", "msg": "verification: the namespace differs", "ns": "shop.orders", "targetNs": "shop2.orders", "targetDocuments": 9.0,
			"missing": 1.0, "targetHash": "cd"},
		{"level": "INFO", "msg": "verification: skipped", "ns": "shop.v", "note": "a view"},
		{"level": "INFO", "msg": "cut-over summary", "step": workerapi.CutoverComplete, "sourcePosition": "100,2", "verifyOK": true, "took": "3s"},
	} {
		for k, v := range want {
			if recs[i][k] != v {
				t.Errorf("record %d: %s = %v, want %v\n%v", i, k, recs[i][k], v, recs[i])
			}
		}
	}
	if ids, _ := recs[1]["missingIds"].([]any); len(ids) != 1 {
		t.Errorf("missingIds %v, want the one example", recs[1]["missingIds"])
	}
}
