package holdback

import (
	"bytes"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func raw(t *testing.T, ext string) bson.Raw {
	t.Helper()
	var r bson.Raw
	if err := bson.UnmarshalExtJSON([]byte(ext), false, &r); err != nil {
		t.Fatalf("%s: %v", ext, err)
	}
	return r
}

// TestHoldIndex feeds index specifications in the shapes MongoDB's
// listIndexes and createIndexes oplog entries give them and checks the
// index built on the target and the record kept.
func TestHoldIndex(t *testing.T) {
	cases := []struct {
		name, spec, want string
		held             bool
		secs             int64
	}{
		{"plain index untouched", `{"v": 2, "key": {"email": 1}, "name": "email_1", "unique": true}`,
			`{"v": 2, "key": {"email": 1}, "name": "email_1", "unique": true}`, false, 0},
		{"TTL as int32", `{"v": 2, "key": {"lastSeen": 1}, "name": "lastSeen_1", "expireAfterSeconds": 3600}`,
			`{"v": 2, "key": {"lastSeen": 1}, "name": "lastSeen_1"}`, true, 3600},
		{"TTL as int64, other options kept", `{"v": 2, "key": {"at": -1}, "name": "at_ttl", "expireAfterSeconds": {"$numberLong": "86400"}, "sparse": true}`,
			`{"v": 2, "key": {"at": -1}, "name": "at_ttl", "sparse": true}`, true, 86400},
		{"TTL as a double", `{"v": 2, "key": {"at": 1}, "name": "at_1", "expireAfterSeconds": 30.0}`,
			`{"v": 2, "key": {"at": 1}, "name": "at_1"}`, true, 30},
		{"TTL of zero (expire at the date itself)", `{"key": {"expireAt": 1}, "name": "expireAt_1", "expireAfterSeconds": 0}`,
			`{"key": {"expireAt": 1}, "name": "expireAt_1"}`, true, 0},
		{"partial TTL", `{"key": {"at": 1}, "name": "at_1", "expireAfterSeconds": 60, "partialFilterExpression": {"kind": "temp"}}`,
			`{"key": {"at": 1}, "name": "at_1", "partialFilterExpression": {"kind": "temp"}}`, true, 60},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, held, err := HoldIndex(raw(t, c.spec))
			if err != nil {
				t.Fatal(err)
			}
			if want := raw(t, c.want); !bytes.Equal(got, want) {
				t.Errorf("target index\n got %s\nwant %s", got, want)
			}
			if (held != nil) != c.held {
				t.Fatalf("held %v, want %v", held, c.held)
			}
			if held == nil {
				return
			}
			spec := raw(t, c.spec)
			if held.Kind != KindTTLIndex || held.ExpireAfterSeconds != c.secs ||
				held.Index != spec.Lookup("name").StringValue() || !bytes.Equal(held.Key, spec.Lookup("key").Document()) || !bytes.Equal(held.Spec, got) {
				t.Errorf("record %+v", held)
			}
			// Restore builds the source's index back from the record.
			back, err := held.wantSpec()
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := back.Lookup("expireAfterSeconds").AsInt64OK(); n != c.secs || back.Lookup("name").StringValue() != held.Index {
				t.Errorf("rebuilt spec %s", back)
			}
		})
	}
	if _, _, err := HoldIndex(raw(t, `{"key": {"at": 1}, "name": "at_1", "expireAfterSeconds": "soon"}`)); err == nil {
		t.Error("a non-numeric expireAfterSeconds was accepted")
	}
}

// TestHoldOptions feeds listCollections options (and create entries') in
// MongoDB's shapes and checks the create options used on the target and
// what is held back.
func TestHoldOptions(t *testing.T) {
	cases := []struct {
		name, opts, want string
		held             []Held
	}{
		{"no options", `{}`, `{}`, nil},
		{"validator untouched", `{"validator": {"a": {"$exists": true}}, "validationLevel": "strict"}`,
			`{"validator": {"a": {"$exists": true}}, "validationLevel": "strict"}`, nil},
		{"capped with size and max", `{"capped": true, "size": 1048576, "max": 1000}`, `{}`,
			[]Held{{Kind: KindCapped, CappedSize: 1048576, CappedMax: 1000}}},
		{"capped with a long size, other options kept", `{"capped": true, "size": {"$numberLong": "4294967296"}, "validationLevel": "off"}`, `{"validationLevel": "off"}`,
			[]Held{{Kind: KindCapped, CappedSize: 4294967296}}},
		{"capped false keeps size", `{"capped": false, "size": 10}`, `{"capped": false, "size": 10}`, nil},
		{"clustered with a TTL", `{"clusteredIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_", "unique": true}, "expireAfterSeconds": {"$numberLong": "3600"}}`,
			`{"clusteredIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_", "unique": true}}`,
			[]Held{{Kind: KindTTLCollection, ExpireAfterSeconds: 3600}}},
		{"time series with a TTL", `{"timeseries": {"timeField": "ts", "granularity": "seconds"}, "expireAfterSeconds": 86400}`,
			`{"timeseries": {"timeField": "ts", "granularity": "seconds"}}`,
			[]Held{{Kind: KindTTLCollection, ExpireAfterSeconds: 86400}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, held, err := HoldOptions(raw(t, c.opts))
			if err != nil {
				t.Fatal(err)
			}
			if want := raw(t, c.want); !bytes.Equal(got, want) {
				t.Errorf("target options\n got %s\nwant %s", got, want)
			}
			if len(held) != len(c.held) {
				t.Fatalf("held %+v, want %+v", held, c.held)
			}
			for i := range held {
				h, w := held[i], c.held[i]
				if h.Kind != w.Kind || h.ExpireAfterSeconds != w.ExpireAfterSeconds || h.CappedSize != w.CappedSize || h.CappedMax != w.CappedMax {
					t.Errorf("held %+v, want %+v", h, w)
				}
			}
		})
	}
}
