package oplog

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// updateOp builds the o of an update entry from an updateDescription (see
// EventToEntry); full is the event's fullDocument, or nil.
func updateOp(desc, full bsoncore.Document) ([]byte, error) {
	d := event{doc: desc, typ: `"update"`}
	u, err := readUpdateDescription(d)
	if err != nil {
		return nil, err
	}
	if err := u.checkPaths(d, full != nil); err == errReplace {
		return full, nil
	} else if err != nil {
		return nil, err
	}
	if len(u.truncs) > 0 {
		return diffUpdate(u.paths, u.sets, u.unsets, u.truncs)
	}
	idx, o := bsoncore.AppendDocumentStart(nil)
	o = bsoncore.AppendInt32Element(o, "$v", 1)
	if len(u.sets) > 0 {
		o = bsoncore.AppendDocumentElement(o, "$set", u.updated)
	}
	if len(u.unsets) > 0 {
		uIdx, un := bsoncore.AppendDocumentElementStart(o, "$unset")
		for _, p := range u.unsets {
			un = bsoncore.AppendBooleanElement(un, p, true)
		}
		o, _ = bsoncore.AppendDocumentEnd(un, uIdx)
	}
	o, _ = bsoncore.AppendDocumentEnd(o, idx)
	return o, nil
}

// updateDescription is an update event's updateDescription, read: the
// fields set, the paths removed and the arrays truncated.
type updateDescription struct {
	updated bsoncore.Document
	sets    []bsoncore.Element
	unsets  []string
	truncs  []truncation
	paths   pathSplitter
}

func readUpdateDescription(d event) (*updateDescription, error) {
	updated, err := d.document("updatedFields", false)
	if err != nil {
		return nil, err
	}
	var removed, truncated []bsoncore.Value
	for _, f := range []struct {
		key string
		out *[]bsoncore.Value
	}{{"removedFields", &removed}, {"truncatedArrays", &truncated}} {
		if v, ok := d.field(f.key); ok {
			arr, err := asArray(v)
			if err != nil {
				return nil, d.malformed("updateDescription.%s %v", f.key, err)
			}
			*f.out, _ = arr.Values()
		}
	}
	disamb, err := d.document("disambiguatedPaths", false)
	if err != nil {
		return nil, err
	}
	u := &updateDescription{updated: updated, paths: pathSplitter{disamb: disamb}}
	if updated != nil {
		u.sets, _ = updated.Elements()
	}
	for _, v := range removed {
		s, ok := v.StringValueOK()
		if !ok {
			return nil, d.malformed("updateDescription.removedFields holds a %s, not a path", v.Type)
		}
		u.unsets = append(u.unsets, s)
	}
	for _, v := range truncated {
		t, err := readTruncation(v)
		if err != nil {
			return nil, d.malformed("updateDescription.truncatedArrays: %v", err)
		}
		u.truncs = append(u.truncs, t)
	}
	return u, nil
}

// checkPaths returns errReplace when a path cannot be named by an update
// and the event has a full document to replace the document with, and
// ErrUnaddressablePath when it has none.
func (u *updateDescription) checkPaths(d event, hasFull bool) error {
	all := make([]string, 0, len(u.sets)+len(u.unsets)+len(u.truncs))
	for _, el := range u.sets {
		all = append(all, el.Key())
	}
	all = append(all, u.unsets...)
	for _, t := range u.truncs {
		all = append(all, t.path)
	}
	for _, path := range all {
		comps, err := u.paths.split(path)
		if err != nil {
			return d.malformed("%v", err)
		}
		for _, c := range comps {
			if c.index || addressable(c.name) {
				continue
			}
			if hasFull {
				return errReplace
			}
			return fmt.Errorf("%w: %q (field %q); the Change stream gives no full document to replace the document with: "+
				"set the stream's fullDocument (updateLookup or whenAvailable), or use incremental.method oplog",
				ErrUnaddressablePath, path, c.name)
		}
	}
	return nil
}

// errReplace tells updateOp to use the full document.
var errReplace = errors.New("replace by the full document")

// addressable reports whether a field name can be part of an update path.
func addressable(name string) bool {
	return name != "" && !strings.Contains(name, ".") && name[0] != '$'
}

// truncation is one entry of truncatedArrays.
type truncation struct {
	path string
	size int32
}

func readTruncation(v bsoncore.Value) (truncation, error) {
	doc, err := asDocument(v)
	if err != nil {
		return truncation{}, err
	}
	path, ok := doc.Lookup("field").StringValueOK()
	if !ok {
		return truncation{}, fmt.Errorf("field must be a path")
	}
	n, ok := eventInt(doc.Lookup("newSize"))
	if !ok || n < 0 || n > math.MaxInt32 {
		return truncation{}, fmt.Errorf("newSize of %q must be a length between 0 and 2^31-1", path)
	}
	return truncation{path: path, size: int32(n)}, nil
}

// component is one field of a path; index marks an array index.
type component struct {
	name  string
	index bool
}

// pathSplitter splits the dotted paths of an updateDescription into
// fields, from disambiguatedPaths when it lists the path.
type pathSplitter struct {
	disamb bsoncore.Document
}

func (p pathSplitter) split(path string) ([]component, error) {
	if strings.Contains(path, "\x00") {
		return nil, fmt.Errorf("path %q contains a NUL byte", path)
	}
	if p.disamb != nil {
		if v, err := p.disamb.LookupErr(path); err == nil {
			arr, err := asArray(v)
			if err != nil {
				return nil, fmt.Errorf("disambiguatedPaths of %q %v", path, err)
			}
			vals, _ := arr.Values()
			if len(vals) == 0 {
				return nil, fmt.Errorf("disambiguatedPaths of %q is empty", path)
			}
			comps := make([]component, len(vals))
			for i, v := range vals {
				if s, ok := v.StringValueOK(); ok && !strings.Contains(s, "\x00") {
					comps[i] = component{name: s}
				} else if n, ok := eventInt(v); ok && n >= 0 && n <= math.MaxInt32 {
					comps[i] = component{name: strconv.FormatInt(n, 10), index: true}
				} else {
					return nil, fmt.Errorf("disambiguatedPaths of %q holds a %s, not a field name or an index", path, v.Type)
				}
			}
			return comps, nil
		}
	}
	parts := strings.Split(path, ".")
	comps := make([]component, len(parts))
	for i, s := range parts {
		comps[i] = component{name: s}
	}
	return comps, nil
}

// pathNode is a node of the tree a $v:2 diff is built from.
type pathNode struct {
	name     string
	kids     []*pathNode
	byName   map[string]*pathNode
	val      bsoncore.Value
	set      bool // updatedFields: u
	unset    bool // removedFields: d (u<n>: null in an array)
	truncate bool // truncatedArrays: an array diff with l
	size     int32
}

// walk returns the node at path, creating it.
func (n *pathNode) walk(path string, comps []component) (*pathNode, error) {
	for _, c := range comps {
		if n.set || n.unset {
			return nil, fmt.Errorf("%w: update path %q goes through a field the same update sets or removes", ErrMalformedChangeEvent, path)
		}
		if n.truncate && !isIndex(c.name) {
			return nil, fmt.Errorf("%w: update path %q goes through the truncated array %q with %q, not an index", ErrMalformedChangeEvent, path, n.name, c.name)
		}
		kid := n.byName[c.name]
		if kid == nil {
			kid = &pathNode{name: c.name}
			if n.byName == nil {
				n.byName = map[string]*pathNode{}
			}
			n.byName[c.name] = kid
			n.kids = append(n.kids, kid)
		}
		n = kid
	}
	return n, nil
}

// diffUpdate builds {$v: 2, diff} from an updateDescription with
// truncatedArrays.
func diffUpdate(paths pathSplitter, sets []bsoncore.Element, unsets []string, truncs []truncation) ([]byte, error) {
	root := &pathNode{}
	leaf := func(path string) (*pathNode, error) {
		comps, err := paths.split(path)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrMalformedChangeEvent, err)
		}
		n, err := root.walk(path, comps)
		if err != nil {
			return nil, err
		}
		if n.set || n.unset || n.truncate || len(n.kids) > 0 {
			return nil, fmt.Errorf("%w: the update names %q twice, or with a field inside it", ErrMalformedChangeEvent, path)
		}
		return n, nil
	}
	// Arrays first, so that the paths through them are known to be indexes.
	for _, t := range truncs {
		n, err := leaf(t.path)
		if err != nil {
			return nil, err
		}
		n.truncate, n.size = true, t.size
	}
	for _, el := range sets {
		n, err := leaf(el.Key())
		if err != nil {
			return nil, err
		}
		n.set, n.val = true, el.Value()
	}
	for _, p := range unsets {
		n, err := leaf(p)
		if err != nil {
			return nil, err
		}
		n.unset = true
	}
	idx, o := bsoncore.AppendDocumentStart(nil)
	o = bsoncore.AppendInt32Element(o, "$v", 2)
	o = bsoncore.AppendDocumentElement(o, "diff", root.appendDiff(nil))
	o, _ = bsoncore.AppendDocumentEnd(o, idx)
	return o, nil
}

// appendDiff appends the sub-diff of a node: an array diff for a
// truncated array, else a document diff.
func (n *pathNode) appendDiff(dst []byte) []byte {
	idx, dst := bsoncore.AppendDocumentStart(dst)
	if n.truncate {
		dst = bsoncore.AppendBooleanElement(dst, "a", true)
		dst = bsoncore.AppendInt32Element(dst, "l", n.size)
		for _, k := range n.kids {
			switch {
			case k.set:
				dst = bsoncore.AppendValueElement(dst, "u"+k.name, k.val)
			case k.unset:
				// $unset of an element leaves null.
				dst = bsoncore.AppendNullElement(dst, "u"+k.name)
			default:
				dst = bsoncore.AppendDocumentElement(dst, "s"+k.name, k.appendDiff(nil))
			}
		}
	} else {
		dst = n.appendSection(dst, "u", func(k *pathNode) bool { return k.set })
		dst = n.appendSection(dst, "d", func(k *pathNode) bool { return k.unset })
		for _, k := range n.kids {
			if !k.set && !k.unset {
				dst = bsoncore.AppendDocumentElement(dst, "s"+k.name, k.appendDiff(nil))
			}
		}
	}
	dst, _ = bsoncore.AppendDocumentEnd(dst, idx)
	return dst
}

// appendSection appends a u or d section with the kids it selects, if any.
func (n *pathNode) appendSection(dst []byte, name string, sel func(*pathNode) bool) []byte {
	var (
		idx  int32
		open bool
	)
	for _, k := range n.kids {
		if !sel(k) {
			continue
		}
		if !open {
			idx, dst = bsoncore.AppendDocumentElementStart(dst, name)
			open = true
		}
		if name == "u" {
			dst = bsoncore.AppendValueElement(dst, k.name, k.val)
		} else {
			dst = bsoncore.AppendBooleanElement(dst, k.name, false)
		}
	}
	if open {
		dst, _ = bsoncore.AppendDocumentEnd(dst, idx)
	}
	return dst
}
