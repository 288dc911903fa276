package oplog

import (
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// Changes says what an update entry changes of its document, for a
// filter on documents (namespaces.filters), as the Translator applies
// the entry:
//   - doc is the whole new document when the entry replaces the
//     document (a replacement, or the whole-document $set of
//     WholeDocumentUpdates);
//   - otherwise touches reports whether the update may change a
//     top-level field for which reads is true: the first name of each
//     $set and $unset path ($v:1), each field of a $v:2 diff's d, u and
//     i sections and of its s<field> sub-diffs. A field name is cut at
//     its first '.', which can only make touches true more often.
//
// A replacement without _id (which the Translator writes under o2) is
// reported as touching: the filter may read _id. Entries that are not
// updates, and updates Translate refuses, return an error; a diff
// section Changes does not know counts as touching, so that the caller
// re-reads the document rather than guess.
func (t Translator) Changes(e Entry, reads func(field string) bool) (doc bson.Raw, touches bool, err error) {
	if e.op != OpUpdate {
		return nil, false, fmt.Errorf("%w: %s is not an update", ErrMalformedEntry, e)
	}
	if t.WholeDocumentUpdates {
		if doc, ok := wholeDocumentSet(e.o, e.o2); ok {
			return doc, false, nil
		}
	}
	form, diff, err := classifyUpdate(e.o)
	if err != nil {
		return nil, false, err
	}
	topLevel := func(path string) bool {
		name, _, _ := strings.Cut(path, ".")
		return reads(name)
	}
	switch form {
	case formReplacement:
		if _, found, err := lookup(e.o, "_id"); err != nil || !found {
			return nil, true, err
		}
		return e.o, false, nil
	case formOperators:
		err := forEach(e.o, func(k []byte, v bsoncore.Value) error {
			if string(k) == "$v" || touches {
				return nil
			}
			paths, ok := document(v)
			if !ok {
				return fmt.Errorf("%w: %s is a %s, not a document", ErrUnsupportedUpdate, k, v.Type)
			}
			return forEach(paths, func(p []byte, _ bsoncore.Value) error {
				touches = touches || topLevel(string(p))
				return nil
			})
		})
		return nil, touches, err
	}
	err = forEach(diff, func(k []byte, v bsoncore.Value) error {
		if touches {
			return nil
		}
		switch key := string(k); {
		case key == "d" || key == "u" || key == "i":
			fields, ok := document(v)
			if !ok {
				return fmt.Errorf("%w: section %q is a %s, not a document", ErrMalformedDiff, key, v.Type)
			}
			return forEach(fields, func(f []byte, _ bsoncore.Value) error {
				touches = touches || topLevel(string(f))
				return nil
			})
		case strings.HasPrefix(key, "s"):
			touches = topLevel(key[1:])
		default:
			touches = true
		}
		return nil
	})
	return nil, touches, err
}
