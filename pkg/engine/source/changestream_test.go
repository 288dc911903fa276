package source

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
)

// The reader's own parts: resume tokens, positions next to a ts, the
// no-op entry that marks a postBatchResumeToken, and what a server
// without change streams answers. The conversion of events into entries
// is tested with package oplog (event_test.go).

// tsN is the clusterTime of the n-th recorded event.
func tsN(n uint32) bson.Timestamp { return bson.Timestamp{T: 1718000000, I: n} }

// resumeToken is a resume token as MongoDB 6+ writes it: a hex KeyString
// that starts with the clusterTime (type byte 0x82 and 8 bytes).
func resumeToken(ts bson.Timestamp, n uint32) bson.D {
	return bson.D{{Key: "_data", Value: fmt.Sprintf("82%08X%08X2B042C0100296E5A1004%032X463C5F6964002B%02X0004", ts.T, ts.I, n, n%100)}}
}

func mustMarshal(t testing.TB, v any) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(v)
	if err != nil {
		t.Fatalf("marshal %v: %v", v, err)
	}
	return b
}

func TestTokenTS(t *testing.T) {
	ts := bson.Timestamp{T: 1718000000, I: 42}
	if got, ok := tokenTS(mustMarshal(t, resumeToken(ts, 1))); !ok || !got.Equal(ts) {
		t.Errorf("tokenTS = %v %v, want %v", got, ok, ts)
	}
	// A postBatchResumeToken (high-water mark) as a server sends it.
	pbrt := mustMarshal(t, bson.D{{Key: "_data", Value: "8266F1A2B3000000052B0229296E04"}})
	if got, ok := tokenTS(pbrt); !ok || !got.Equal(bson.Timestamp{T: 0x66F1A2B3, I: 5}) {
		t.Errorf("tokenTS(pbrt) = %v %v", got, ok)
	}
	for _, bad := range []bson.D{
		{{Key: "_data", Value: "83" + strings.Repeat("0", 20)}},
		{{Key: "_data", Value: "82zz"}},
		{{Key: "_data", Value: "82" + strings.Repeat("g", 16)}},
		{{Key: "_data", Value: bson.Binary{Data: []byte{130}}}},
		{},
	} {
		if got, ok := tokenTS(mustMarshal(t, bad)); ok {
			t.Errorf("tokenTS(%v) = %v, want not ok", bad, got)
		}
	}
}

func TestTSNeighbours(t *testing.T) {
	tests := []struct{ ts, after, before bson.Timestamp }{
		{bson.Timestamp{T: 5, I: 7}, bson.Timestamp{T: 5, I: 8}, bson.Timestamp{T: 5, I: 6}},
		{bson.Timestamp{T: 5, I: math.MaxUint32}, bson.Timestamp{T: 6}, bson.Timestamp{T: 5, I: math.MaxUint32 - 1}},
		{bson.Timestamp{T: 5}, bson.Timestamp{T: 5, I: 1}, bson.Timestamp{T: 4, I: math.MaxUint32}},
		{bson.Timestamp{}, bson.Timestamp{I: 1}, bson.Timestamp{}},
	}
	for _, tt := range tests {
		if got := tsAfter(tt.ts); !got.Equal(tt.after) {
			t.Errorf("tsAfter(%v) = %v, want %v", tt.ts, got, tt.after)
		}
		if got := tsBefore(tt.ts); !got.Equal(tt.before) {
			t.Errorf("tsBefore(%v) = %v, want %v", tt.ts, got, tt.before)
		}
	}
}

func TestNoopEntry(t *testing.T) {
	entry, err := oplog.Parse(noopEntry(tsN(9)))
	if err != nil {
		t.Fatal(err)
	}
	if skip, reason := (&oplog.Filter{}).Skip(entry); !skip || reason != oplog.ReasonNoop || !entry.TS().Equal(tsN(9)) {
		t.Errorf("no-op entry %s: Skip = %v %q", entry, skip, reason)
	}
}

// TestChangeStreamReaderWithoutChangeStreams checks what a user of a
// server without change streams (FerretDB, the only server here) sees: an
// error that says what incremental.method changeStream needs, no entries,
// and the reader still at its start.
func TestChangeStreamReaderWithoutChangeStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("starts FerretDB")
	}
	if _, err := testserver.Binary(); err != nil {
		t.Skip(err)
	}
	client := testserver.Start(t).MustClient(t)
	from := bson.Timestamp{T: 1718000000, I: 3}
	r := NewChangeStreamReader(client, from, ChangeStreamOptions{MaxAwait: 100 * time.Millisecond})
	defer func() { _ = r.Close(t.Context()) }()
	entries, err := r.Next(t.Context())
	if err == nil || len(entries) != 0 {
		t.Fatalf("Next = %d entries, %v; want an error", len(entries), err)
	}
	if !strings.Contains(err.Error(), "incremental.method changeStream needs a replica set") || !strings.Contains(err.Error(), "(ts 1718000000,3)") {
		t.Errorf("error %q does not say where it started and what it needs", err)
	}
	t.Logf("the error a user sees: %v", err)
	if newest, _ := r.Newest(t.Context()); !newest.Equal(from) || !r.Position().Equal(from) || r.ResumeToken() != nil {
		t.Errorf("after a failed open: newest %v position %v token %v, want %v, %v, nil", newest, r.Position(), r.ResumeToken(), from, from)
	}
}
