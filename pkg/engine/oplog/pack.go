package oplog

import (
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// pack groups operators, in order, into as few update documents as
// possible without a conflict inside one update (see diff.go), appending
// them to out; the stage is reused between calls.
func (st *stage) pack(out [][]byte, ops []pathOp) [][]byte {
	if len(ops) == 0 {
		return out
	}
	st.reset()
	for i := 0; i < len(ops); i++ {
		op := ops[i]
		if op.kind == opMove {
			// A run of moved fields is one pipeline update of its own.
			if len(st.ops) > 0 {
				out = append(out, st.build())
				st.reset()
			}
			j := i
			for j < len(ops) && ops[j].kind == opMove {
				j++
			}
			out = append(out, movePipeline(ops[i:j]))
			i = j - 1
			continue
		}
		if st.conflicts(op) {
			out = append(out, st.build())
			st.reset()
		}
		st.add(op)
	}
	if len(st.ops) > 0 {
		out = append(out, st.build())
	}
	st.reset()
	return out
}

// movePipeline is the pipeline update that moves inserted fields to the
// end of their documents with their new values, in one step:
//
//	[{$unset: [p1, p2, ...]}, {$set: {p1: {$literal: v1}, p2: {$literal: v2}, ...}}]
//
// $literal keeps values that look like expressions ("$x" strings,
// documents with $-keys) as they are; the $set stage appends the fields in
// the diff's order.
func movePipeline(ops []pathOp) []byte {
	size := 64
	for _, op := range ops {
		size += 2*len(op.path) + len(op.val.Data) + 32
	}
	idx, arr := bsoncore.AppendArrayStart(make([]byte, 0, size))
	var stage, list int32
	stage, arr = bsoncore.AppendDocumentElementStart(arr, "0")
	list, arr = bsoncore.AppendArrayElementStart(arr, "$unset")
	for i, op := range ops {
		arr = bsoncore.AppendStringElement(arr, strconv.Itoa(i), op.path)
	}
	arr, _ = bsoncore.AppendArrayEnd(arr, list)
	arr, _ = bsoncore.AppendDocumentEnd(arr, stage)
	stage, arr = bsoncore.AppendDocumentElementStart(arr, "1")
	var set int32
	set, arr = bsoncore.AppendDocumentElementStart(arr, "$set")
	for _, op := range ops {
		var lit int32
		lit, arr = bsoncore.AppendDocumentElementStart(arr, op.path)
		arr = bsoncore.AppendValueElement(arr, "$literal", op.val)
		arr, _ = bsoncore.AppendDocumentEnd(arr, lit)
	}
	arr, _ = bsoncore.AppendDocumentEnd(arr, set)
	arr, _ = bsoncore.AppendDocumentEnd(arr, stage)
	arr, _ = bsoncore.AppendArrayEnd(arr, idx)
	return arr
}

// linearLimit is the stage size up to which conflicts are found by a scan;
// larger stages index their paths in maps, so that a diff of many fields
// stays linear.
const linearLimit = 16

// stage is one update document being filled.
type stage struct {
	ops []pathOp
	// Built once the stage outgrows linearLimit:
	paths    map[string]struct{} // paths written
	prefixes map[string]struct{} // proper prefixes of paths written
	lastNew  map[string]string   // parent path -> name of its last new field
}

func (s *stage) reset() {
	s.ops = s.ops[:0]
	s.paths, s.prefixes, s.lastNew = nil, nil, nil
}

// prefixesOf calls fn for every proper prefix of path at a dot.
func prefixesOf(path string, fn func(string) bool) bool {
	for i := 0; i < len(path); i++ {
		if path[i] == '.' && fn(path[:i]) {
			return true
		}
	}
	return false
}

// related reports whether two paths are equal or one is a prefix of the
// other at a dot: MongoDB refuses to update both in one update.
func related(a, b string) bool {
	if len(a) > len(b) {
		a, b = b, a
	}
	return strings.HasPrefix(b, a) && (len(a) == len(b) || b[len(a)] == '.')
}

// ordered reports whether a new field named next may be appended after a
// new field named last by the same update: their names ascend and neither
// is numeric (numeric names are ordered as numbers by MongoDB 5.0+ and as
// strings by FerretDB).
func ordered(last, next string) bool {
	return last < next && !numeric(last) && !numeric(next)
}

func numeric(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// conflicts reports whether op cannot join the stage.
func (s *stage) conflicts(op pathOp) bool {
	if s.paths == nil {
		var lastNew string
		haveNew := false
		for _, o := range s.ops {
			if related(o.path, op.path) {
				return true
			}
			if op.newField && o.newField && o.parent == op.parent {
				lastNew, haveNew = o.name, true
			}
		}
		return haveNew && !ordered(lastNew, op.name)
	}
	if _, ok := s.paths[op.path]; ok {
		return true
	}
	if _, ok := s.prefixes[op.path]; ok {
		return true
	}
	if prefixesOf(op.path, func(p string) bool { _, ok := s.paths[p]; return ok }) {
		return true
	}
	if op.newField {
		if last, ok := s.lastNew[op.parent]; ok && !ordered(last, op.name) {
			return true
		}
	}
	return false
}

// add puts op into the stage.
func (s *stage) add(op pathOp) {
	s.ops = append(s.ops, op)
	if s.paths == nil && len(s.ops) <= linearLimit {
		return
	}
	if s.paths == nil {
		s.paths, s.prefixes, s.lastNew = map[string]struct{}{}, map[string]struct{}{}, map[string]string{}
		for _, o := range s.ops {
			s.index(o)
		}
		return
	}
	s.index(op)
}

func (s *stage) index(op pathOp) {
	s.paths[op.path] = struct{}{}
	prefixesOf(op.path, func(p string) bool { s.prefixes[p] = struct{}{}; return false })
	if op.newField {
		s.lastNew[op.parent] = op.name
	}
}

// build returns the stage's update document: {$set, $unset, $push}.
func (s *stage) build() []byte {
	size := 64
	for _, op := range s.ops {
		size += len(op.path) + len(op.val.Data) + 32
	}
	idx, doc := bsoncore.AppendDocumentStart(make([]byte, 0, size))
	for _, kind := range [...]opKind{opSet, opUnset, opTruncate} {
		var (
			sub  int32
			open bool
		)
		for _, op := range s.ops {
			if op.kind != kind {
				continue
			}
			if !open {
				sub, doc = bsoncore.AppendDocumentElementStart(doc, [...]string{"$set", "$unset", "$push"}[kind])
				open = true
			}
			switch kind {
			case opSet:
				doc = bsoncore.AppendValueElement(doc, op.path, op.val)
			case opUnset:
				doc = bsoncore.AppendStringElement(doc, op.path, "")
			case opTruncate:
				var each int32
				each, doc = bsoncore.AppendDocumentElementStart(doc, op.path)
				var arr int32
				arr, doc = bsoncore.AppendArrayElementStart(doc, "$each")
				doc, _ = bsoncore.AppendArrayEnd(doc, arr)
				doc = bsoncore.AppendInt32Element(doc, "$slice", op.n)
				doc, _ = bsoncore.AppendDocumentEnd(doc, each)
			}
		}
		if open {
			doc, _ = bsoncore.AppendDocumentEnd(doc, sub)
		}
	}
	doc, _ = bsoncore.AppendDocumentEnd(doc, idx)
	return doc
}
