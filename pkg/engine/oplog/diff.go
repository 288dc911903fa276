package oplog

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"

	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// A $v:2 update entry is {$v: 2, diff: D}, where D is MongoDB's doc_diff
// of one document. translateDiff turns D into $set, $unset and $push/$slice
// operators on dotted paths, packed in the diff's order into as few updates
// as do not conflict; the updates of one entry are applied in order on one
// document, and each writes an absolute value, so replay stays idempotent.
// The sections, inserted fields, truncation and what updates cannot say:
// docs/oplog-shapes.md, "How a $v: 2 diff becomes updates".

// opKind is the update operator of one pathOp.
type opKind uint8

const (
	opSet opKind = iota
	opUnset
	opTruncate
	// opMove is an inserted field written by a pipeline update that
	// removes it and appends it in one step (see movePipeline).
	opMove
)

// pathOp is one operator on one dotted path.
type pathOp struct {
	kind opKind
	path string
	val  bsoncore.Value // opSet
	n    int32          // opTruncate
	// newField marks the $set of an inserted field (from an i section):
	// it is appended at the end of its parent document.
	newField bool
	parent   string // for newField: the parent's path
	name     string // for newField: the field's name
}

// translateDiff returns the update documents, in order, that apply the
// $v:2 diff. An empty diff returns none.
func translateDiff(diff []byte) ([][]byte, error) {
	sc := getDiffScratch()
	defer putDiffScratch(sc)
	return sc.appendDiff(nil, diff, false)
}

// diffScratch is the reusable state of translating one diff: the
// operators found and the stage of pack. Only the update documents it
// returns are new memory.
type diffScratch struct {
	w    diffWalker
	st   stage
	docs [][]byte
}

var diffScratchPool = sync.Pool{New: func() any { return &diffScratch{w: diffWalker{ops: make([]pathOp, 0, 8)}} }}

func getDiffScratch() *diffScratch { return diffScratchPool.Get().(*diffScratch) }

// putDiffScratch keeps sc for reuse unless it grew large, dropping its
// references to the entries' bytes.
func putDiffScratch(sc *diffScratch) {
	if cap(sc.w.ops) > 1024 || cap(sc.docs) > 1024 {
		return
	}
	clear(sc.w.ops[:cap(sc.w.ops)])
	clear(sc.docs[:cap(sc.docs)])
	sc.w.ops, sc.docs = sc.w.ops[:0], sc.docs[:0]
	sc.st.ops = sc.st.ops[:0]
	clear(sc.st.ops[:cap(sc.st.ops)])
	sc.st.reset()
	diffScratchPool.Put(sc)
}

// appendDiff appends the update documents of diff to dst; with pipelines,
// inserted fields outside arrays are moved by pipeline updates (arrays of
// stages, told apart from update documents by their first key, "0").
func (sc *diffScratch) appendDiff(dst [][]byte, diff []byte, pipelines bool) ([][]byte, error) {
	sc.w.ops = sc.w.ops[:0]
	sc.w.pipelines, sc.w.inArray = pipelines, 0
	if err := sc.w.document(diff, "", 0); err != nil {
		return dst, err
	}
	return sc.st.pack(dst, sc.w.ops), nil
}

// diffWalker collects the operators of a diff in order.
type diffWalker struct {
	ops []pathOp
	// pipelines: the target takes pipeline-style updates, so an i
	// section outside arrays becomes opMove operators.
	pipelines bool
	// inArray counts the array diffs the walk is inside: a pipeline's
	// $set stage cannot address an array element by index.
	inArray int
}

// join returns prefix.name (name alone at the top).
func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// where names a path in messages.
func where(path string) string {
	if path == "" {
		return "the top of the diff"
	}
	return fmt.Sprintf("%q", path)
}

// checkName refuses field names a dotted path cannot address.
func checkName(name, prefix string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: an empty field name under %s", ErrUnaddressablePath, where(prefix))
	case strings.Contains(name, "."):
		return fmt.Errorf("%w: field %q under %s contains '.'", ErrUnaddressablePath, name, where(prefix))
	case name[0] == '$':
		return fmt.Errorf("%w: field %q under %s starts with '$'", ErrUnaddressablePath, name, where(prefix))
	}
	return nil
}

// section returns v as a document, or an error naming the section.
func section(v bsoncore.Value, name, prefix string) ([]byte, error) {
	if v.Type != bsoncore.TypeEmbeddedDocument {
		return nil, fmt.Errorf("%w: section %q at %s is a %s, not a document", ErrMalformedDiff, name, where(prefix), v.Type)
	}
	if _, err := docBytes(v.Data); err != nil {
		return nil, fmt.Errorf("%w: section %q at %s: %v", ErrMalformedDiff, name, where(prefix), err)
	}
	return v.Data, nil
}

// isArrayDiff reports whether a sub-diff is an array diff (a: true).
func isArrayDiff(sub []byte, path string) (bool, error) {
	v, found, err := lookup(sub, "a")
	if err != nil {
		return false, fmt.Errorf("%w: sub-diff of %s: %v", ErrMalformedDiff, where(path), err)
	}
	if !found {
		return false, nil
	}
	if b, ok := v.BooleanOK(); !ok || !b {
		return false, fmt.Errorf("%w: sub-diff of %s: a must be true", ErrMalformedDiff, where(path))
	}
	return true, nil
}

// sub applies a sub-diff (document or array) at path.
func (w *diffWalker) sub(v bsoncore.Value, name, path string, depth int) error {
	doc, err := section(v, name, path)
	if err != nil {
		return err
	}
	isArray, err := isArrayDiff(doc, path)
	if err != nil {
		return err
	}
	if isArray {
		return w.array(doc, path, depth+1)
	}
	return w.document(doc, path, depth+1)
}

// document walks a document diff at prefix.
func (w *diffWalker) document(diff []byte, prefix string, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%w: nested deeper than %d levels at %s", ErrMalformedDiff, maxDepth, where(prefix))
	}
	var seen [3]bool // d, u, i
	err := forEach(diff, func(k []byte, v bsoncore.Value) error {
		switch key := string(k); {
		case key == "d" || key == "u" || key == "i":
			idx := strings.Index("dui", key)
			if seen[idx] {
				return fmt.Errorf("%w: section %q appears twice at %s", ErrMalformedDiff, key, where(prefix))
			}
			seen[idx] = true
			fields, err := section(v, key, prefix)
			if err != nil {
				return err
			}
			return w.fields(key, fields, prefix)
		case strings.HasPrefix(key, "s"):
			name := key[1:]
			if err := checkName(name, prefix); err != nil {
				return err
			}
			return w.sub(v, key, join(prefix, name), depth)
		case key == "b":
			return fmt.Errorf("%w at %s", ErrBinaryDiff, where(prefix))
		case key == "a" && prefix == "":
			return fmt.Errorf("%w: the top of a diff is a document, not an array (a: true)", ErrMalformedDiff)
		default:
			return fmt.Errorf("%w: %q at %s", ErrUnknownDiffSection, key, where(prefix))
		}
	})
	if err != nil && !isDiffError(err) {
		err = fmt.Errorf("%w: at %s: %v", ErrMalformedDiff, where(prefix), err)
	}
	return err
}

// isDiffError reports whether err already says what was wrong with a diff.
func isDiffError(err error) bool {
	return errors.Is(err, ErrMalformedDiff) || errors.Is(err, ErrUnknownDiffSection) || errors.Is(err, ErrUnaddressablePath) || errors.Is(err, ErrBinaryDiff)
}

// NeedsRefetch reports whether an update's translation failed because no
// update can write what it changed (ErrUnaddressablePath, ErrBinaryDiff):
// the document is then re-read from the source and replaced.
func NeedsRefetch(err error) bool {
	return errors.Is(err, ErrUnaddressablePath) || errors.Is(err, ErrBinaryDiff)
}

// fields handles a d, u or i section. An i section is walked twice: its
// fields are unset first (an inserted field that exists moves to the end,
// as MongoDB's applier does), then set. _id cannot be unset, and MongoDB
// keeps it first anyway.
//
// On a target that takes pipeline-style updates, an i section outside
// arrays is one pipeline update instead ($unset stage, then $set stage):
// between two separate updates the document would lack the field, and a
// non-sparse unique index on it would see a null that can collide with
// another document's.
func (w *diffWalker) fields(sec string, fields []byte, prefix string) error {
	passes := []string{sec}
	if sec == "i" {
		passes = []string{"i-unset", "i"}
		if w.pipelines && w.inArray == 0 {
			passes = []string{"i-move"}
		}
	}
	for _, pass := range passes {
		err := forEach(fields, func(k []byte, v bsoncore.Value) error {
			name := string(k)
			if err := checkName(name, prefix); err != nil {
				return err
			}
			path := join(prefix, name)
			switch pass {
			case "d":
				w.ops = append(w.ops, pathOp{kind: opUnset, path: path})
			case "u":
				w.ops = append(w.ops, pathOp{kind: opSet, path: path, val: v})
			case "i-unset":
				if path != "_id" {
					w.ops = append(w.ops, pathOp{kind: opUnset, path: path})
				}
			case "i":
				w.ops = append(w.ops, pathOp{kind: opSet, path: path, val: v, newField: true, parent: prefix, name: name})
			case "i-move":
				if path != "_id" {
					w.ops = append(w.ops, pathOp{kind: opMove, path: path, val: v})
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// array walks an array diff at path.
func (w *diffWalker) array(diff []byte, path string, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%w: nested deeper than %d levels at %s", ErrMalformedDiff, maxDepth, where(path))
	}
	w.inArray++
	defer func() { w.inArray-- }()
	mark := len(w.ops)
	var (
		resize    int64
		hasResize bool
	)
	err := forEach(diff, func(k []byte, v bsoncore.Value) error {
		key := string(k)
		switch {
		case key == "a":
			return nil // checked by isArrayDiff
		case key == "l":
			n, ok := integer(v)
			if !ok || n < 0 || n > math.MaxInt32 {
				return fmt.Errorf("%w: array %s: l must be a length between 0 and 2^31-1, not %s", ErrMalformedDiff, where(path), v)
			}
			if hasResize {
				return fmt.Errorf("%w: array %s: l appears twice", ErrMalformedDiff, where(path))
			}
			resize, hasResize = n, true
			return nil
		case len(key) > 1 && (key[0] == 'u' || key[0] == 's'):
			idx := key[1:]
			if !isIndex(idx) {
				return fmt.Errorf("%w: %q in array %s (u<n> and s<n> need an index)", ErrUnknownDiffSection, key, where(path))
			}
			elem := join(path, idx)
			if key[0] == 'u' {
				w.ops = append(w.ops, pathOp{kind: opSet, path: elem, val: v})
				return nil
			}
			return w.sub(v, key, elem, depth)
		default:
			return fmt.Errorf("%w: %q in array %s", ErrUnknownDiffSection, key, where(path))
		}
	})
	if err != nil {
		if !isDiffError(err) {
			err = fmt.Errorf("%w: array %s: %v", ErrMalformedDiff, where(path), err)
		}
		return err
	}
	if hasResize {
		// Truncate before the element updates, as MongoDB's applier does;
		// pack puts them in separate updates ($push on the array and $set
		// on one of its elements conflict).
		w.ops = append(w.ops, pathOp{})
		copy(w.ops[mark+1:], w.ops[mark:])
		w.ops[mark] = pathOp{kind: opTruncate, path: path, n: int32(resize)}
	}
	return nil
}

// isIndex reports whether s is an array index as MongoDB writes it: decimal
// digits, no leading zero, at most 2^31-1.
func isIndex(s string) bool {
	if s == "" || len(s) > 10 || (s[0] == '0' && len(s) > 1) {
		return false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n <= math.MaxInt32
}
