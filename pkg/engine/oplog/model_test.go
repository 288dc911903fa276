package oplog

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// A model of both sides of the $v:2 translation, to check it on many
// random documents and diffs without a server:
//
//   - refApply applies a diff the way MongoDB's doc_diff applier does
//     (in-place deletes, updates and sub-diffs; updates of missing fields,
//     then inserts, appended at the end; arrays truncated or padded with
//     null);
//   - modelUpdate applies one update document the way MongoDB 5.0+ (and
//     FerretDB) applies $set, $unset and $push with $slice (new fields of
//     one update appended in sorted order, $set past an array's end pads
//     with null, $unset of an array element leaves null);
//   - genCase makes a random document and a valid diff for it, shaped like
//     the diffs MongoDB writes (l only to shrink, growth as u<n>).
//
// The property: applying translateDiff's updates in order gives what the
// applier gives, and applying them a second time changes nothing.

// refApply applies a document diff to pre.
func refApply(pre bson.D, diff bson.D) bson.D {
	sec := func(name string) bson.D {
		for _, e := range diff {
			if e.Key == name {
				return e.Value.(bson.D)
			}
		}
		return nil
	}
	dels, upds, ins := sec("d"), sec("u"), sec("i")
	find := func(d bson.D, k string) (any, bool) {
		for _, e := range d {
			if e.Key == k {
				return e.Value, true
			}
		}
		return nil, false
	}
	out := bson.D{}
	updated := map[string]bool{}
	for _, e := range pre {
		if _, ok := find(dels, e.Key); ok {
			continue
		}
		if v, ok := find(upds, e.Key); ok {
			out = append(out, bson.E{Key: e.Key, Value: v})
			updated[e.Key] = true
			continue
		}
		if _, ok := find(ins, e.Key); ok {
			continue
		}
		if sub, ok := find(diff, "s"+e.Key); ok {
			sd := sub.(bson.D)
			_, isArr := find(sd, "a")
			switch v := e.Value.(type) {
			case bson.A:
				if isArr {
					out = append(out, bson.E{Key: e.Key, Value: refArray(v, sd)})
					continue
				}
			case bson.D:
				if !isArr {
					out = append(out, bson.E{Key: e.Key, Value: refApply(v, sd)})
					continue
				}
			}
			out = append(out, bson.E{Key: e.Key, Value: nil})
			continue
		}
		out = append(out, e)
	}
	for _, u := range upds {
		if !updated[u.Key] {
			out = append(out, u)
		}
	}
	return append(out, ins...)
}

// refArray applies an array diff to pre.
func refArray(pre bson.A, diff bson.D) bson.A {
	resize := -1
	mods := map[int]bson.E{}
	last := -1
	for _, e := range diff {
		switch e.Key {
		case "a":
		case "l":
			resize = int(e.Value.(int32))
		default:
			i, _ := strconv.Atoi(e.Key[1:])
			mods[i] = e
			last = max(last, i)
		}
	}
	apply := func(i int, cur any, have bool) any {
		m := mods[i]
		if m.Key[0] == 'u' {
			return m.Value
		}
		sd := m.Value.(bson.D)
		if slices.ContainsFunc(sd, func(e bson.E) bool { return e.Key == "a" }) {
			if a, ok := cur.(bson.A); ok && have {
				return refArray(a, sd)
			}
		} else if d, ok := cur.(bson.D); ok && have {
			return refApply(d, sd)
		}
		return nil
	}
	out := bson.A{}
	i := 0
	for ; i < len(pre) && (resize < 0 || i < resize); i++ {
		if _, ok := mods[i]; ok {
			out = append(out, apply(i, pre[i], true))
		} else {
			out = append(out, pre[i])
		}
	}
	for ; (resize >= 0 && i < resize) || i <= last; i++ {
		if _, ok := mods[i]; ok {
			out = append(out, apply(i, nil, false))
		} else {
			out = append(out, nil)
		}
	}
	return out
}

// modelUpdate applies one update document ($set, $unset, $push/$slice).
func modelUpdate(doc bson.D, upd bson.D) bson.D {
	v := any(clone(doc))
	for _, op := range upd {
		fields := op.Value.(bson.D)
		if op.Key == "$set" {
			// Paths are processed in sorted order, so new fields are
			// appended in that order.
			fields = slices.Clone(fields)
			slices.SortStableFunc(fields, func(a, b bson.E) int { return strings.Compare(a.Key, b.Key) })
		}
		for _, f := range fields {
			path := strings.Split(f.Key, ".")
			switch op.Key {
			case "$set":
				v = setPath(v, path, f.Value)
			case "$unset":
				v = unsetPath(v, path)
			case "$push":
				n := int(f.Value.(bson.D)[1].Value.(int32))
				v = truncPath(v, path, n)
			}
		}
	}
	return v.(bson.D)
}

func clone(v any) any {
	switch v := v.(type) {
	case bson.D:
		out := make(bson.D, len(v))
		for i, e := range v {
			out[i] = bson.E{Key: e.Key, Value: clone(e.Value)}
		}
		return out
	case bson.A:
		out := make(bson.A, len(v))
		for i, e := range v {
			out[i] = clone(e)
		}
		return out
	}
	return v
}

// child returns the element named c of a document or array.
func child(v any, c string) (any, bool) {
	switch v := v.(type) {
	case bson.D:
		for _, e := range v {
			if e.Key == c {
				return e.Value, true
			}
		}
	case bson.A:
		if i, err := strconv.Atoi(c); err == nil && i < len(v) {
			return v[i], true
		}
	}
	return nil, false
}

// put sets the element named c of a document (appending) or array
// (padding with null).
func put(v any, c string, x any) any {
	switch v := v.(type) {
	case bson.D:
		for i := range v {
			if v[i].Key == c {
				v[i].Value = x
				return v
			}
		}
		return append(v, bson.E{Key: c, Value: x})
	case bson.A:
		i, _ := strconv.Atoi(c)
		for len(v) <= i {
			v = append(v, nil)
		}
		v[i] = x
		return v
	}
	panic(fmt.Sprintf("model: put %q into %T", c, v))
}

func setPath(v any, path []string, x any) any {
	if len(path) == 1 {
		return put(v, path[0], x)
	}
	c, ok := child(v, path[0])
	if !ok || c == nil {
		c = bson.D{}
	}
	return put(v, path[0], setPath(c, path[1:], x))
}

func unsetPath(v any, path []string) any {
	c, ok := child(v, path[0])
	if !ok {
		return v
	}
	if len(path) > 1 {
		if _, isDoc := c.(bson.D); !isDoc {
			if _, isArr := c.(bson.A); !isArr {
				return v
			}
		}
		return put(v, path[0], unsetPath(c, path[1:]))
	}
	switch v := v.(type) {
	case bson.D:
		return slices.DeleteFunc(v, func(e bson.E) bool { return e.Key == path[0] })
	case bson.A:
		return put(v, path[0], nil) // MongoDB leaves a null in an array
	}
	return v
}

func truncPath(v any, path []string, n int) any {
	c, ok := child(v, path[0])
	if !ok {
		return v
	}
	if len(path) > 1 {
		return put(v, path[0], truncPath(c, path[1:], n))
	}
	if a, ok := c.(bson.A); ok && len(a) > n {
		return put(v, path[0], a[:n])
	}
	return v
}

// gen makes random documents and diffs from a random source.
type gen struct{ r *rand.Rand }

var names = []string{"a", "b", "c", "d", "l", "u", "x", "y", "z", "9", "10"}

func (g gen) value(depth int) any {
	switch n := g.r.IntN(8); {
	case depth >= 3 || n < 3:
		return int32(g.r.IntN(100))
	case n == 3:
		return "s" + strconv.Itoa(g.r.IntN(10))
	case n == 4:
		return nil
	case n == 5:
		return g.doc(depth + 1)
	default:
		a := bson.A{}
		for range g.r.IntN(5) {
			a = append(a, g.value(depth+1))
		}
		return a
	}
}

func (g gen) doc(depth int) bson.D {
	d := bson.D{}
	for _, i := range g.r.Perm(len(names))[:g.r.IntN(4)] {
		d = append(d, bson.E{Key: names[i], Value: g.value(depth)})
	}
	return d
}

// docDiff makes a valid diff of pre.
func (g gen) docDiff(pre bson.D, depth int, top bool) bson.D {
	var d, u, i, s bson.D
	have := map[string]bool{}
	for _, e := range pre {
		have[e.Key] = true
		if top && e.Key == "_id" {
			continue
		}
		switch g.r.IntN(6) {
		case 1:
			d = append(d, bson.E{Key: e.Key, Value: false})
		case 2:
			u = append(u, bson.E{Key: e.Key, Value: g.value(depth + 1)})
		case 3: // reinserted: moves to the end
			i = append(i, bson.E{Key: e.Key, Value: e.Value})
		case 4, 5:
			switch v := e.Value.(type) {
			case bson.D:
				if sub := g.docDiff(v, depth+1, false); len(sub) > 0 {
					s = append(s, bson.E{Key: "s" + e.Key, Value: sub})
				}
			case bson.A:
				if sub := g.arrayDiff(v, depth+1); len(sub) > 1 {
					s = append(s, bson.E{Key: "s" + e.Key, Value: sub})
				}
			}
		}
	}
	for _, k := range g.r.Perm(len(names))[:g.r.IntN(3)] {
		if !have[names[k]] {
			i = append(i, bson.E{Key: names[k], Value: g.value(depth + 1)})
		}
	}
	diff := bson.D{}
	for _, sec := range []struct {
		k string
		v bson.D
	}{{"d", d}, {"u", u}, {"i", i}} {
		if len(sec.v) > 0 {
			diff = append(diff, bson.E{Key: sec.k, Value: sec.v})
		}
	}
	return append(diff, s...)
}

// arrayDiff makes a valid array diff of pre: l only to shrink, growth as
// updates of the new last index (the applier pads the gap with null).
func (g gen) arrayDiff(pre bson.A, depth int) bson.D {
	diff := bson.D{{Key: "a", Value: true}}
	n := len(pre)
	switch g.r.IntN(3) {
	case 0:
		if n > 0 {
			n = g.r.IntN(n)
			diff = append(diff, bson.E{Key: "l", Value: int32(n)})
		}
	case 1:
		n += 1 + g.r.IntN(3)
	}
	for idx := range n {
		k := strconv.Itoa(idx)
		if idx >= len(pre) {
			if idx == n-1 || g.r.IntN(2) == 0 {
				diff = append(diff, bson.E{Key: "u" + k, Value: g.value(depth + 1)})
			}
			continue
		}
		switch g.r.IntN(4) {
		case 1:
			diff = append(diff, bson.E{Key: "u" + k, Value: g.value(depth + 1)})
		case 2:
			switch v := pre[idx].(type) {
			case bson.D:
				if sub := g.docDiff(v, depth+1, false); len(sub) > 0 {
					diff = append(diff, bson.E{Key: "s" + k, Value: sub})
				}
			case bson.A:
				if sub := g.arrayDiff(v, depth+1); len(sub) > 1 {
					diff = append(diff, bson.E{Key: "s" + k, Value: sub})
				}
			}
		}
	}
	return diff
}

// checkRoundTrip applies a random diff both ways and compares.
func checkRoundTrip(t *testing.T, seed1, seed2 uint64) {
	t.Helper()
	g := gen{rand.New(rand.NewPCG(seed1, seed2))}
	pre := append(bson.D{{Key: "_id", Value: int32(1)}}, g.doc(0)...)
	diff := g.docDiff(pre, 0, true)
	want := refApply(clone(pre).(bson.D), diff)

	updates, err := translateDiff(marshal(t, diff))
	if err != nil {
		t.Fatalf("translateDiff(%s): %v", marshal(t, diff), err)
	}
	for _, u := range updates {
		checkUpdate(t, u) // a server refuses conflicting paths in one update
	}
	got := clone(pre).(bson.D)
	apply := func(doc bson.D) bson.D {
		for _, u := range updates {
			var ud bson.D
			if err := bson.Unmarshal(u, &ud); err != nil {
				t.Fatal(err)
			}
			doc = modelUpdate(doc, normalize(ud).(bson.D))
		}
		return doc
	}
	got = apply(got)
	if w, g := marshal(t, want), marshal(t, got); !bytes.Equal(w, g) {
		t.Fatalf("seed %d,%d\n  pre %s\n diff %s\n  ups %q\n  got %s\n want %s", seed1, seed2,
			marshal(t, pre), marshal(t, diff), docs(updates...), g, w)
	}
	if again := apply(got); !bytes.Equal(marshal(t, again), marshal(t, got)) {
		t.Fatalf("seed %d,%d: applying the updates again changed the document\n first %s\nagain %s\n  ups %q",
			seed1, seed2, marshal(t, got), marshal(t, again), docs(updates...))
	}
}

// normalize turns the decoder's types back into the model's (bson.D,
// bson.A, int32, string, nil).
func normalize(v any) any {
	switch v := v.(type) {
	case bson.D:
		for i := range v {
			v[i].Value = normalize(v[i].Value)
		}
		return v
	case bson.A:
		for i := range v {
			v[i] = normalize(v[i])
		}
		return v
	}
	return v
}

func TestDiffRoundTrip(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for i := range n {
		checkRoundTrip(t, uint64(i), 42)
	}
}
