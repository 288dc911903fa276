package replaybench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/sink"
)

// Sink is a replay.Options.Apply that writes nothing but does the work the
// engine does before it sends a write command to a real target: it
// builds each command from the models' raw documents with
// sink.AppendWriteCommand, as the replayer does; for models that builder
// leaves to the driver it does what the driver does (checks each
// insert's document for an _id, marshals each other model's filter with
// the BSON encoder, checks the update or replacement document, builds the
// statement and copies the statements into a command message). What it
// leaves out: the driver's copy of the command into the wire message,
// the socket, and the server. The replayer sends one command per Apply
// (one kind, one namespace); a call that mixes kinds is counted as the
// commands a BulkWrite would split it into. It counts what it saw and
// closes Done once it has seen Want writes.
type Sink struct {
	// Want is the number of writes after which Done is closed.
	Want int64

	writes, batches, commands, encoded  atomic.Int64
	inserts, replaces, updates, deletes atomic.Int64

	once sync.Once
	done chan struct{}
	pool sync.Pool
}

// NewSink returns a sink that closes Done after want writes.
func NewSink(want int64) *Sink {
	return &Sink{Want: want, done: make(chan struct{})}
}

// Done is closed once Want writes were applied.
func (s *Sink) Done() <-chan struct{} { return s.done }

// SinkCounts are what a Sink saw.
type SinkCounts struct {
	// Writes are the write models, Batches the Apply calls, Commands the
	// insert/update/delete commands a bulk write would have sent.
	Writes, Batches, Commands int64
	// Inserts, Replaces, Updates, Deletes count the models by type.
	Inserts, Replaces, Updates, Deletes int64
	// EncodedBytes is the size of the encoded statements.
	EncodedBytes int64
}

// Counts returns what the sink saw so far.
func (s *Sink) Counts() SinkCounts {
	return SinkCounts{Writes: s.writes.Load(), Batches: s.batches.Load(), Commands: s.commands.Load(),
		Inserts: s.inserts.Load(), Replaces: s.replaces.Load(), Updates: s.updates.Load(), Deletes: s.deletes.Load(), EncodedBytes: s.encoded.Load()}
}

// commandKind is the command an ordered bulk write sends a model in.
type commandKind uint8

const (
	cmdUpdate commandKind = iota
	cmdDelete
	cmdInsert
)

// Apply encodes and discards one ordered batch of writes to ns.
func (s *Sink) Apply(_ context.Context, ns catalog.Namespace, models []mongo.WriteModel) error {
	bp, _ := s.pool.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	msg := (*bp)[:0]
	var (
		encoded  int64
		commands int64
		runKind  commandKind
		docs     []bsoncore.Document
	)
	flush := func() {
		if len(docs) == 0 {
			return
		}
		var n int64
		msg, n = appendSequence(msg, ns, runKind, docs)
		encoded += n
		commands++
		docs = docs[:0]
	}
	var counts modelCounts
	for start := 0; start < len(models); {
		kind := kindOf(models[start])
		end := start + 1
		for end < len(models) && kindOf(models[end]) == kind {
			end++
		}
		run := models[start:end]
		counts.add(run)
		start = end
		before := len(msg)
		var ok bool
		if msg, ok = sink.AppendWriteCommand(msg, ns.Coll, rawKind(kind), run, kind != cmdInsert, nil); ok {
			encoded += int64(len(msg) - before)
			commands++
			continue
		}
		runKind = kind
		for _, m := range run {
			doc, err := statement(m)
			if err != nil {
				return fmt.Errorf("encode a write to %s: %w", ns, err)
			}
			docs = append(docs, doc)
		}
		flush()
	}
	flush()
	*bp = msg
	s.pool.Put(bp)

	s.batches.Add(1)
	s.commands.Add(commands)
	s.encoded.Add(encoded)
	s.inserts.Add(counts.inserts)
	s.replaces.Add(counts.replaces)
	s.updates.Add(counts.updates)
	s.deletes.Add(counts.deletes)
	if s.writes.Add(int64(len(models))) >= s.Want {
		s.once.Do(func() { close(s.done) })
	}
	return nil
}

// modelCounts counts write models by kind.
type modelCounts struct{ inserts, replaces, updates, deletes int64 }

func (c *modelCounts) add(run []mongo.WriteModel) {
	for _, m := range run {
		switch m.(type) {
		case *mongo.InsertOneModel:
			c.inserts++
		case *mongo.ReplaceOneModel:
			c.replaces++
		case *mongo.UpdateOneModel:
			c.updates++
		case *mongo.DeleteOneModel:
			c.deletes++
		}
	}
}

// appendSequence appends to msg the command of kind on ns and its
// document sequence docs, as an OP_MSG holds them, and returns the bytes
// of docs.
func appendSequence(msg []byte, ns catalog.Namespace, kind commandKind, docs []bsoncore.Document) ([]byte, int64) {
	name := "update"
	switch kind {
	case cmdDelete:
		name = "delete"
	case cmdInsert:
		name = "insert"
	}
	idx, cmd := bsoncore.AppendDocumentStart(msg)
	cmd = bsoncore.AppendStringElement(cmd, name, ns.Coll)
	cmd = bsoncore.AppendBooleanElement(cmd, "ordered", true)
	cmd = bsoncore.AppendBooleanElement(cmd, "bypassDocumentValidation", true)
	cmd = bsoncore.AppendStringElement(cmd, "$db", ns.DB)
	msg, _ = bsoncore.AppendDocumentEnd(cmd, idx)
	var encoded int64
	for _, d := range docs {
		msg = append(msg, d...)
		encoded += int64(len(d))
	}
	return msg, encoded
}

// statement encodes one write model as its command's statement.
func statement(m mongo.WriteModel) (bsoncore.Document, error) {
	switch m := m.(type) {
	case *mongo.InsertOneModel:
		return insertStatement(m.Document)
	case *mongo.ReplaceOneModel:
		return updateStatement(m.Filter, m.Replacement, m.Upsert, false)
	case *mongo.UpdateOneModel:
		return updateStatement(m.Filter, m.Update, m.Upsert, true)
	case *mongo.DeleteOneModel:
		return deleteStatement(m.Filter)
	}
	return nil, fmt.Errorf("unexpected write model %T", m)
}

// kindOf is the command a model travels in.
func kindOf(m mongo.WriteModel) commandKind {
	switch m.(type) {
	case *mongo.InsertOneModel:
		return cmdInsert
	case *mongo.DeleteOneModel, *mongo.DeleteManyModel:
		return cmdDelete
	}
	return cmdUpdate
}

// rawKind is k as sink.AppendWriteCommand names it.
func rawKind(k commandKind) sink.CommandKind {
	switch k {
	case cmdInsert:
		return sink.InsertCommand
	case cmdDelete:
		return sink.DeleteCommand
	}
	return sink.UpdateCommand
}

// marshal encodes a filter as the driver does: through a bson.Encoder into
// a new buffer.
func marshal(v any) (bsoncore.Document, error) {
	if v == nil {
		return nil, errors.New("nil document")
	}
	if b, ok := v.([]byte); ok {
		v = bson.Raw(b)
	}
	buf := new(bytes.Buffer)
	if err := bson.NewEncoder(bson.NewDocumentWriter(buf)).Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// asDocument returns an update or replacement given as raw bytes.
func asDocument(v any) (bsoncore.Document, error) {
	switch d := v.(type) {
	case bson.Raw:
		return bsoncore.Document(d), nil
	case []byte:
		return d, nil
	case bsoncore.Document:
		return d, nil
	case nil:
		return nil, errors.New("nil document")
	}
	return marshal(v)
}

// updateStatement is {q: filter, u: update, upsert} for the update
// command; operators says whether u must start with a $-operator (an
// update) or must not (a replacement).
func updateStatement(filter, update any, upsert *bool, operators bool) (bsoncore.Document, error) {
	f, err := marshal(filter)
	if err != nil {
		return nil, fmt.Errorf("filter: %w", err)
	}
	u, err := asDocument(update)
	if err != nil {
		return nil, fmt.Errorf("update: %w", err)
	}
	first, err := u.IndexErr(0)
	switch {
	case operators && (err != nil || !strings.HasPrefix(first.Key(), "$")):
		return nil, errors.New("update document must start with a $-operator")
	case !operators && err == nil && strings.HasPrefix(first.Key(), "$"):
		return nil, errors.New("replacement document cannot start with a $-operator")
	}
	idx, doc := bsoncore.AppendDocumentStart(nil)
	doc = bsoncore.AppendDocumentElement(doc, "q", f)
	doc = bsoncore.AppendDocumentElement(doc, "u", u)
	if upsert != nil {
		doc = bsoncore.AppendBooleanElement(doc, "upsert", *upsert)
	}
	doc, _ = bsoncore.AppendDocumentEnd(doc, idx)
	return doc, nil
}

// insertStatement is the document itself, checked for an _id (the
// driver adds one to a document without).
func insertStatement(v any) (bsoncore.Document, error) {
	d, err := asDocument(v)
	if err != nil {
		return nil, err
	}
	if _, err := d.LookupErr("_id"); err != nil {
		return nil, errors.New("insert without _id")
	}
	return d, nil
}

// deleteStatement is {q: filter, limit: 1} for the delete command.
func deleteStatement(filter any) (bsoncore.Document, error) {
	f, err := marshal(filter)
	if err != nil {
		return nil, fmt.Errorf("filter: %w", err)
	}
	idx, doc := bsoncore.AppendDocumentStart(nil)
	doc = bsoncore.AppendDocumentElement(doc, "q", f)
	doc = bsoncore.AppendInt32Element(doc, "limit", 1)
	doc, _ = bsoncore.AppendDocumentEnd(doc, idx)
	return doc, nil
}
