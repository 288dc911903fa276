package holdback

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// model stands in for a MongoDB target of one version where none runs
// here (FerretDB has no TTL index, collMod or convertToCapped): it keeps
// collections' options and indexes, answers listCollections and
// listIndexes with cursor.firstBatch as mongod does, and takes or refuses
// collMod, convertToCapped, dropIndexes and createIndexes as that version
// does (the error codes are mongod's). It logs every command as extended
// JSON so a test can check the exact shape Restore sends.
type model struct {
	// version is major*10+minor; ferret models FerretDB v1 (no collMod,
	// convertToCapped or TTL index).
	version int
	ferret  bool
	colls   map[string]*mcoll
	log     []string
}

type mcoll struct {
	opts    bson.D
	indexes []bson.D
}

func cmdErr(code int32, msg string) error { return mongo.CommandError{Code: code, Message: msg} }

func get(d bson.D, k string) any {
	for _, e := range d {
		if e.Key == k {
			return e.Value
		}
	}
	return nil
}

func set(d bson.D, k string, v any) bson.D {
	for i, e := range d {
		if e.Key == k {
			d[i].Value = v
			return d
		}
	}
	return append(d, bson.E{Key: k, Value: v})
}

func toD(t any) bson.D {
	switch v := t.(type) {
	case bson.D:
		return v
	case bson.Raw:
		var d bson.D
		_ = bson.Unmarshal(v, &d)
		return d
	}
	b, _ := bson.Marshal(t)
	var d bson.D
	_ = bson.Unmarshal(b, &d)
	return d
}

func (m *model) run(_ context.Context, db string, cmd bson.D) (bson.Raw, error) {
	m.log = append(m.log, extJSON(cmd))
	name, _ := cmd[0].Value.(string)
	c := m.colls[db+"."+name]
	reply := func(kv ...bson.E) (bson.Raw, error) {
		return bson.Marshal(append(bson.D{{Key: "ok", Value: 1.0}}, kv...))
	}
	batch := func(docs []any) (bson.Raw, error) {
		return reply(bson.E{Key: "cursor", Value: bson.D{{Key: "id", Value: int64(0)}, {Key: "firstBatch", Value: docs}}})
	}
	switch cmd[0].Key {
	case "listCollections":
		want := get(toD(get(cmd, "filter")), "name").(string)
		if c := m.colls[db+"."+want]; c != nil {
			return batch([]any{bson.D{{Key: "name", Value: want}, {Key: "type", Value: "collection"}, {Key: "options", Value: c.opts}}})
		}
		return batch([]any{})
	case "listIndexes":
		if c == nil {
			return nil, cmdErr(26, "ns does not exist")
		}
		docs := []any{bson.D{{Key: "v", Value: 2}, {Key: "key", Value: bson.D{{Key: "_id", Value: 1}}}, {Key: "name", Value: "_id_"}}}
		for _, ix := range c.indexes {
			docs = append(docs, append(bson.D{{Key: "v", Value: 2}}, ix...))
		}
		return batch(docs)
	case "collMod":
		if m.ferret {
			return nil, cmdErr(238, "`collMod` command is not implemented yet")
		}
		for _, e := range cmd[1:] {
			switch e.Key {
			case "index":
				ix := toD(e.Value)
				i := slices.IndexFunc(c.indexes, func(d bson.D) bool { return get(d, "name") == get(ix, "name") })
				if i < 0 {
					return nil, cmdErr(27, "cannot find index")
				}
				for _, f := range ix[1:] {
					switch {
					case f.Key == "expireAfterSeconds" && get(c.indexes[i], "expireAfterSeconds") == nil && m.version < 51:
						return nil, cmdErr(72, "no expireAfterSeconds field to update")
					case (f.Key == "prepareUnique" || f.Key == "unique") && m.version < 60:
						return nil, cmdErr(72, "unknown option to collMod: "+f.Key)
					case f.Key == "prepareUnique":
					default:
						c.indexes[i] = set(c.indexes[i], f.Key, f.Value)
					}
				}
			case "cappedMax":
				if m.version < 60 {
					return nil, cmdErr(72, "unknown option to collMod: cappedMax")
				}
				c.opts = set(c.opts, "max", e.Value)
			default:
				c.opts = set(c.opts, e.Key, e.Value)
			}
		}
		return reply()
	case "convertToCapped":
		if m.ferret {
			return nil, cmdErr(59, "no such command: 'convertToCapped'")
		}
		c.opts = set(set(c.opts, "capped", true), "size", get(cmd, "size"))
		c.indexes = nil // only _id's survives
		return reply()
	case "dropIndexes":
		i := slices.IndexFunc(c.indexes, func(d bson.D) bool { return get(d, "name") == get(cmd, "index") })
		if i < 0 {
			return nil, cmdErr(27, "index not found")
		}
		c.indexes = slices.Delete(c.indexes, i, i+1)
		return reply()
	case "createIndexes":
		for _, s := range get(cmd, "indexes").(bson.A) {
			spec := toD(s)
			if m.ferret && get(spec, "expireAfterSeconds") != nil {
				return nil, cmdErr(238, `Index option "expireAfterSeconds" is not implemented yet`)
			}
			if !slices.ContainsFunc(c.indexes, func(d bson.D) bool { return get(d, "name") == get(spec, "name") }) {
				c.indexes = append(c.indexes, spec)
			}
		}
		return reply()
	}
	return nil, cmdErr(59, "no such command: "+cmd[0].Key)
}

// memRecords keeps records in memory and logs saves and removals.
type memRecords struct {
	saved   []Held
	removed []string
}

func (m *memRecords) save(_ context.Context, h Held) error { m.saved = append(m.saved, h); return nil }
func (m *memRecords) remove(_ context.Context, h Held) error {
	m.removed = append(m.removed, h.ID)
	return nil
}

// TestRestoreModel restores each kind of held option on model targets of
// the versions that matter (7.0, 5.0 before collMod could make an index a
// TTL or unique one, FerretDB v1) and checks the target's state after,
// the exact commands sent and what the report says; a second run changes
// nothing.
func TestRestoreModel(t *testing.T) {
	ttlSpec := raw(t, `{"key": {"lastSeen": 1}, "name": "lastSeen_1"}`)
	ttl := Held{ID: "t/app.sessions/ttlIndex/lastSeen_1", NS: "app.sessions", Kind: KindTTLIndex, Index: "lastSeen_1",
		Key: raw(t, `{"lastSeen": 1}`), Spec: ttlSpec, ExpireAfterSeconds: 3600}
	plain := func() []bson.D {
		return []bson.D{{{Key: "key", Value: bson.D{{Key: "lastSeen", Value: 1}}}, {Key: "name", Value: "lastSeen_1"}}}
	}
	uniq := Held{ID: "t/app.users/unique/email_1", NS: "app.users", Kind: KindUnique, Index: "email_1", Spec: raw(t, `{"key": {"email": 1}, "name": "email_1"}`)}
	capped := Held{ID: "t/app.events/capped", NS: "app.events", Kind: KindCapped, CappedSize: 1 << 20, CappedMax: 500}
	ttlColl := Held{ID: "t/app.metrics/ttlCollection", NS: "app.metrics", Kind: KindTTLCollection, ExpireAfterSeconds: 86400}
	rebuilding := ttl
	rebuilding.Rebuilding = true

	cases := []struct {
		name    string
		version int
		ferret  bool
		held    Held
		colls   map[string]*mcoll
		state   state
		wantCmd string // a command Restore must send, as extended JSON
		want    string // the collection after, "opts | indexes" as extended JSON
	}{
		{"TTL index on 7.0: collMod", 70, false, ttl, map[string]*mcoll{"app.sessions": {indexes: plain()}}, stateRestored,
			`{"collMod":"sessions","index":{"name":"lastSeen_1","expireAfterSeconds":3600}}`,
			`null | [{"key":{"lastSeen":1},"name":"lastSeen_1","expireAfterSeconds":3600}]`},
		{"TTL index on 5.0: built again", 50, false, ttl, map[string]*mcoll{"app.sessions": {indexes: plain()}}, stateRestored,
			`{"createIndexes":"sessions","indexes":[{"key":{"lastSeen":1},"name":"lastSeen_1","expireAfterSeconds":3600}]}`,
			`null | [{"key":{"lastSeen":1},"name":"lastSeen_1","expireAfterSeconds":3600}]`},
		{"TTL index on FerretDB: a note, index kept", 0, true, ttl, map[string]*mcoll{"app.sessions": {indexes: plain()}}, stateManual,
			`{"collMod":"sessions","index":{"name":"lastSeen_1","expireAfterSeconds":3600}}`,
			`null | [{"key":{"lastSeen":1},"name":"lastSeen_1"}]`},
		{"restart after the drop of a rebuild", 50, false, rebuilding, map[string]*mcoll{"app.sessions": {}}, stateRestored,
			`{"createIndexes":"sessions","indexes":[{"key":{"lastSeen":1},"name":"lastSeen_1","expireAfterSeconds":3600}]}`,
			`null | [{"key":{"lastSeen":1},"name":"lastSeen_1","expireAfterSeconds":3600}]`},
		{"index dropped on the target by hand", 70, false, ttl, map[string]*mcoll{"app.sessions": {}}, stateGone, ``, `null | null`},
		{"collection gone", 70, false, ttl, map[string]*mcoll{}, stateGone, ``, ``},
		{"capped on 7.0: converted, indexes and max back", 70, false, capped,
			map[string]*mcoll{"app.events": {indexes: []bson.D{{{Key: "key", Value: bson.D{{Key: "at", Value: 1}}}, {Key: "name", Value: "at_1"}}}}}, stateRestored,
			`{"convertToCapped":"events","size":1048576}`,
			`{"capped":true,"size":1048576,"max":500} | [{"key":{"at":1},"name":"at_1"}]`},
		{"capped on 5.0: converted, max by hand", 50, false, capped, map[string]*mcoll{"app.events": {}}, stateManual,
			`{"collMod":"events","cappedMax":500}`, `{"capped":true,"size":1048576} | null`},
		{"capped on FerretDB: by hand", 0, true, capped, map[string]*mcoll{"app.events": {}}, stateManual,
			`{"convertToCapped":"events","size":1048576}`, `null | null`},
		{"unique on 7.0: collMod prepareUnique then unique", 70, false, uniq,
			map[string]*mcoll{"app.users": {indexes: []bson.D{{{Key: "key", Value: bson.D{{Key: "email", Value: 1}}}, {Key: "name", Value: "email_1"}}}}}, stateRestored,
			`{"collMod":"users","index":{"name":"email_1","prepareUnique":true}}`,
			`null | [{"key":{"email":1},"name":"email_1","unique":true}]`},
		{"unique on FerretDB: built again", 0, true, uniq,
			map[string]*mcoll{"app.users": {indexes: []bson.D{{{Key: "key", Value: bson.D{{Key: "email", Value: 1}}}, {Key: "name", Value: "email_1"}}}}}, stateRestored,
			`{"createIndexes":"users","indexes":[{"key":{"email":1},"name":"email_1","unique":true}]}`,
			`null | [{"key":{"email":1},"name":"email_1","unique":true}]`},
		{"collection TTL on 7.0", 70, false, ttlColl,
			map[string]*mcoll{"app.metrics": {opts: bson.D{{Key: "clusteredIndex", Value: true}}}}, stateRestored,
			`{"collMod":"metrics","expireAfterSeconds":86400}`, `{"clusteredIndex":true,"expireAfterSeconds":86400} | null`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := &model{version: c.version, ferret: c.ferret, colls: c.colls}
			recs := &memRecords{}
			rep, err := restore(context.Background(), m, recs, []Held{c.held})
			if err != nil {
				t.Fatal(err)
			}
			got := map[state]int{stateRestored: len(rep.Restored), stateGone: len(rep.Gone), stateManual: len(rep.Manual)}
			if got[c.state] != 1 {
				t.Fatalf("report %+v, want the option in state %d", rep, c.state)
			}
			if c.state == stateManual {
				if n := rep.Manual[0].Note; !strings.Contains(n, c.held.NS) || !strings.Contains(n, "db.runCommand(") {
					t.Errorf("note names neither the collection nor the fix: %s", n)
				}
				if len(recs.removed) != 0 {
					t.Errorf("the record of an option still held was removed")
				}
			} else if len(recs.removed) != 1 {
				t.Errorf("records removed %v, want the option's", recs.removed)
			}
			if c.wantCmd != "" && !slices.Contains(m.log, c.wantCmd) {
				t.Errorf("commands sent:\n%s\nwant among them %s", strings.Join(m.log, "\n"), c.wantCmd)
			}
			if mc := m.colls[c.held.NS]; mc != nil {
				if s := describe(mc); s != c.want {
					t.Errorf("target after\n got %s\nwant %s", s, c.want)
				}
			}
			if c.held.Rebuilding || c.state == stateGone || c.state == stateManual {
				return
			}
			// Run again, as after a crash before the record was removed:
			// nothing changes and nothing but listings is sent.
			before := len(m.log)
			if rep, err := restore(context.Background(), m, recs, []Held{c.held}); err != nil || len(rep.Restored) != 1 {
				t.Fatalf("second run: %+v, %v", rep, err)
			}
			for _, cmd := range m.log[before:] {
				if !strings.HasPrefix(cmd, `{"list`) && !strings.HasPrefix(cmd, `{"createIndexes`) {
					t.Errorf("second run sent %s", cmd)
				}
			}
			if s := describe(m.colls[c.held.NS]); s != c.want {
				t.Errorf("target after a second run\n got %s\nwant %s", s, c.want)
			}
		})
	}
}

func describe(c *mcoll) string {
	j := func(v any) string {
		if v == nil || fmt.Sprint(v) == "[]" {
			return "null"
		}
		b, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: v}}, false, false)
		if err != nil {
			return err.Error()
		}
		return strings.TrimSuffix(strings.TrimPrefix(string(b), `{"v":`), "}")
	}
	var ix any
	if len(c.indexes) > 0 {
		ix = c.indexes
	}
	var opts any
	if len(c.opts) > 0 {
		opts = c.opts
	}
	return j(opts) + " | " + j(ix)
}
