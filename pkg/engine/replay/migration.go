package replay

import (
	"encoding/hex"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
)

// Migrations into a shard, as its oplog records them (4.4 and later).
// The recipient writes, before it clones anything, a pending range
// deletion task into config.rangeDeletions ({nss, range, donorShardId,
// pending: true}; donorShardId names the donor, so a task whose donor is
// this shard is the donor's own and no migration into it), and from 5.0
// a config.migrationRecipients document, from 6.0 a
// config.collection_critical_sections one (_id: the namespace). These
// are its start markers. After the migration commits the recipient's
// task is deleted; after an abort it loses pending (the range deleter
// then removes the copies): these, and the deletion of the other two
// documents, are its end markers. The commit follows every donor write
// to the range (the donor's critical section), and the end marker
// follows the commit (the cluster time the commit carries), so every
// donor write of the migrated documents is logged before the end marker
// on the donor's oplog. An empty migration, or one that skipped a
// document the donor deleted during the clone, logs its markers too.
//
// A marker is recognised by its collection and its fields nss (or, for a
// critical section, a namespace _id), donorShardId and pending; other
// fields are ignored. config.* entries are never applied.

// markerColls are the collections of config whose writes mark
// migrations.
var markerColls = map[string]bool{"rangeDeletions": true, "migrationRecipients": true, "collection_critical_sections": true}

// migration is one migration into the shard: its namespace, the ts of
// its start marker and, once read, of its end marker.
type migration struct {
	key        string
	ns         catalog.Namespace
	start, end bson.Timestamp
}

// marker notes a config.* entry that starts or ends a migration into
// shard self (see above), or carries a commit decision of a transaction
// the shard coordinates (participants.go).
func (h *holds) marker(e oplog.Entry, ts bson.Timestamp, self string) {
	ns := e.Namespace()
	if ns.DB == "config" && ns.Coll == collCoordinators {
		h.coordinator(e, ts)
		return
	}
	if ns.DB != "config" || !markerColls[ns.Coll] {
		return
	}
	switch e.Kind() {
	case oplog.Insert:
		target, ok := markedNS(e.O())
		if !ok {
			return
		}
		if donor, ok := e.O().Lookup("donorShardId").StringValueOK(); ok && donor == self && ns.Coll == "rangeDeletions" {
			return // the donor's own task
		}
		if key, ok := markerKey(ns.Coll, e.O()); ok {
			h.started(key, target, ts)
		}
	case oplog.Update:
		if ns.Coll == "rangeDeletions" && clearsPending(e.O()) {
			if key, ok := markerKey(ns.Coll, e.O2()); ok {
				h.ended(key, ts)
			}
		}
	case oplog.Delete:
		if key, ok := markerKey(ns.Coll, e.O()); ok {
			h.ended(key, ts)
		}
	}
}

// markedNS returns the namespace a marker document names: its nss, or a
// critical section's _id.
func markedNS(doc bson.Raw) (catalog.Namespace, bool) {
	s, ok := doc.Lookup("nss").StringValueOK()
	if !ok {
		s, ok = doc.Lookup("_id").StringValueOK()
	}
	if !ok || !strings.Contains(s, ".") {
		return catalog.Namespace{}, false
	}
	return catalog.ParseNamespace(s), true
}

// markerKey identifies a marker document: its collection and _id.
func markerKey(coll string, doc bson.Raw) (string, bool) {
	id, err := doc.LookupErr("_id")
	if err != nil {
		return "", false
	}
	return coll + "/" + string(rune(id.Type)) + hex.EncodeToString(id.Value), true
}

// clearsPending reports whether an update of a range deletion task takes
// its pending flag away (an abort on the recipient): $unset or a $v:2
// diff's d of pending, pending set to false, or a replacement without it.
func clearsPending(o bson.Raw) bool {
	if v, err := o.LookupErr("diff", "d", "pending"); err == nil && v.Type != 0 {
		return true
	}
	if b, ok := o.Lookup("diff", "u", "pending").BooleanOK(); ok && !b {
		return true
	}
	if v, err := o.LookupErr("$unset", "pending"); err == nil && v.Type != 0 {
		return true
	}
	if b, ok := o.Lookup("$set", "pending").BooleanOK(); ok && !b {
		return true
	}
	first, err := o.IndexErr(0)
	if err != nil || strings.HasPrefix(first.Key(), "$") || first.Key() == "diff" {
		return false
	}
	b, ok := o.Lookup("pending").BooleanOK()
	return !ok || !b
}

// started records a migration's start marker (once: a marker read again
// after a restart changes nothing).
func (h *holds) started(key string, ns catalog.Namespace, ts bson.Timestamp) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.migrations[key]; ok {
		return
	}
	if h.migrations == nil {
		h.migrations, h.byNS = map[string]*migration{}, map[catalog.Namespace][]*migration{}
	}
	m := &migration{key: key, ns: ns, start: ts}
	h.migrations[key] = m
	h.byNS[ns] = append(h.byNS[ns], m)
}

// ended records a migration's end marker.
func (h *holds) ended(key string, ts bson.Timestamp) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if m, ok := h.migrations[key]; ok && m.end.IsZero() && m.start.Before(ts) {
		m.end = ts
	}
}

// drop forgets a released migration, with h.mu held.
func (h *holds) drop(key string) {
	m := h.migrations[key]
	delete(h.migrations, key)
	ms := h.byNS[m.ns]
	for i, x := range ms {
		if x == m {
			ms = append(ms[:i], ms[i+1:]...)
			break
		}
	}
	if len(ms) == 0 {
		delete(h.byNS, m.ns)
	} else {
		h.byNS[m.ns] = ms
	}
}

// The holds' state is saved with a subtask's checkpoint (Options.
// SaveState) as entries beside the open transactions' ones: op "n" with
// o.mongoferryHold naming what they carry, so that a checkpoint may pass
// a migration's start marker while the migration still holds writes, or
// a commit decision whose participants have not all passed it.
const (
	holdField     = "mongoferryHold"
	holdMigration = "migration"
	holdFrom      = "fromMigrate"
	holdRead      = "read" // the highest ts read before (reapplied)
	holdDecided   = "decided"
	holdRecheck   = "recheck"
)

// stateEntries returns the holds' state as entries, with readTS the
// highest ts the subtask may have applied.
func (h *holds) stateEntries(readTS bson.Timestamp) []bson.Raw {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []bson.Raw
	for _, m := range h.migrations {
		out = append(out, holdEntry(m.start, m.ns.String(), holdMigration, m.key, m.end))
	}
	for ns, b := range h.fromMigrate {
		ts := b[len(b)-1]
		name := ""
		if ns != (catalog.Namespace{}) {
			name = ns.String()
		}
		out = append(out, holdEntry(ts, name, holdFrom, "", bson.Timestamp{}))
	}
	for _, d := range h.decided {
		out = append(out, decidedEntry(d))
	}
	for _, c := range h.rechecks {
		out = append(out, recheckEntry(c))
	}
	if !readTS.IsZero() {
		out = append(out, holdEntry(readTS, "", holdRead, "", bson.Timestamp{}))
	}
	return out
}

func holdEntry(ts bson.Timestamp, ns, kind, key string, end bson.Timestamp) bson.Raw {
	o := bsoncore.NewDocumentBuilder().AppendString(holdField, kind)
	if key != "" {
		o.AppendString("key", key).AppendTimestamp("end", end.T, end.I)
	}
	return bson.Raw(bsoncore.NewDocumentBuilder().AppendTimestamp("ts", ts.T, ts.I).AppendString("op", "n").
		AppendString("ns", ns).AppendDocument("o", o.Build()).Build())
}

// recoverState takes back the holds' entries of a saved state and returns
// the others (the transactions') and the highest ts read before.
func (h *holds) recoverState(entries []bson.Raw) (rest []bson.Raw, read bson.Timestamp, err error) {
	for _, raw := range entries {
		kind, ok := raw.Lookup("o", holdField).StringValueOK()
		if !ok {
			rest = append(rest, raw)
			continue
		}
		t, i, _ := raw.Lookup("ts").TimestampOK()
		ts := bson.Timestamp{T: t, I: i}
		ns, _ := raw.Lookup("ns").StringValueOK()
		switch kind {
		case holdMigration:
			key, _ := raw.Lookup("o", "key").StringValueOK()
			et, ei, _ := raw.Lookup("o", "end").TimestampOK()
			h.started(key, catalog.ParseNamespace(ns), ts)
			if end := (bson.Timestamp{T: et, I: ei}); !end.IsZero() {
				h.ended(key, end)
			}
		case holdFrom:
			var n catalog.Namespace
			if ns != "" {
				n = catalog.ParseNamespace(ns)
			}
			h.migrated(n, ts)
		case holdRead:
			read = maxTS(read, ts)
		case holdDecided:
			h.recoverDecided(raw, ts)
		case holdRecheck:
			if rerr := h.recoverRecheck(raw, ts); rerr != nil {
				err = rerr
			}
		}
	}
	return rest, read, err
}
