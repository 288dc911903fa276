package oplog

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// D, A and E keep the diff tables short.
type (
	D = bson.D
	A = bson.A
)

func kv(k string, v any) bson.E { return bson.E{Key: k, Value: v} }

// push is the truncation operator for one path.
func push(path string, n int32) bson.E {
	return kv("$push", D{kv(path, D{kv("$each", A{}), kv("$slice", n)})})
}

func TestTranslateDiff(t *testing.T) {
	tests := []struct {
		name string
		diff D
		want []D // update documents, in order
	}{
		{"empty", D{}, nil},
		{"update and delete", D{kv("d", D{kv("old", false)}), kv("u", D{kv("x", 1), kv("y", "s")})},
			[]D{{kv("$set", D{kv("x", 1), kv("y", "s")}), kv("$unset", D{kv("old", "")})}}},
		{"insert: unset, then set (moves an existing field to the end)", D{kv("i", D{kv("n", 1)})},
			[]D{{kv("$unset", D{kv("n", "")})}, {kv("$set", D{kv("n", 1)})}}},
		{"inserts in ascending order share an update", D{kv("u", D{kv("a", 0)}), kv("i", D{kv("b", 1), kv("c", 2)})},
			[]D{{kv("$set", D{kv("a", 0)}), kv("$unset", D{kv("b", ""), kv("c", "")})}, {kv("$set", D{kv("b", 1), kv("c", 2)})}}},
		{"inserts out of order are split to keep their order", D{kv("i", D{kv("z", 1), kv("m", 2)})},
			[]D{{kv("$unset", D{kv("z", ""), kv("m", "")})}, {kv("$set", D{kv("z", 1)})}, {kv("$set", D{kv("m", 2)})}}},
		{"numeric inserts are split", D{kv("i", D{kv("9", 1), kv("10", 2)})},
			[]D{{kv("$unset", D{kv("9", ""), kv("10", "")})}, {kv("$set", D{kv("9", 1)})}, {kv("$set", D{kv("10", 2)})}}},
		{"inserted _id is not unset", D{kv("i", D{kv("_id", 1)})}, []D{{kv("$set", D{kv("_id", 1)})}}},
		{"nested sub-diffs", D{kv("u", D{kv("top", 1)}), kv("sa", D{kv("d", D{kv("x", false)}), kv("sb", D{kv("u", D{kv("c", 3)})})})},
			[]D{{kv("$set", D{kv("top", 1), kv("a.b.c", 3)}), kv("$unset", D{kv("a.x", "")})}}},
		{"array element updates", D{kv("sarr", D{kv("a", true), kv("u0", 9), kv("s1", D{kv("u", D{kv("k", 2)})}), kv("u5", "new")})},
			[]D{{kv("$set", D{kv("arr.0", 9), kv("arr.1.k", 2), kv("arr.5", "new")})}}},
		{"array resize with element updates", D{kv("sarr", D{kv("a", true), kv("l", 3), kv("u1", 9)})},
			[]D{{push("arr", 3)}, {kv("$set", D{kv("arr.1", 9)})}}},
		{"resize written after the updates still truncates first", D{kv("sarr", D{kv("a", true), kv("u1", 9), kv("l", int64(2))})},
			[]D{{push("arr", 2)}, {kv("$set", D{kv("arr.1", 9)})}}},
		{"resize alone", D{kv("sarr", D{kv("a", true), kv("l", 0)}), kv("u", D{kv("x", 1)})},
			[]D{{kv("$set", D{kv("x", 1)}), push("arr", 0)}}},
		{"resize of a nested array and of its parent", D{kv("so", D{kv("sarr", D{kv("a", true), kv("l", 1), kv("s0", D{kv("a", true), kv("l", 2)})})})},
			[]D{{push("o.arr", 1)}, {push("o.arr.0", 2)}}},
		{"deletes inside an array element", D{kv("sarr", D{kv("a", true), kv("s2", D{kv("d", D{kv("k", false)}), kv("i", D{kv("q", 1)})})})},
			[]D{{kv("$unset", D{kv("arr.2.k", ""), kv("arr.2.q", "")})}, {kv("$set", D{kv("arr.2.q", 1)})}}},
		{"a field named diff, u, d or a in a document", D{kv("u", D{kv("diff", 1), kv("d", 2)}), kv("sa", D{kv("u", D{kv("a", 3)})})},
			[]D{{kv("$set", D{kv("diff", 1), kv("d", 2), kv("a.a", 3)})}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := translateDiff(marshal(t, tt.diff))
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, d := range tt.want {
				want = append(want, marshal(t, d).String())
			}
			if g := docs(got...); !slices.Equal(g, want) {
				t.Errorf("updates\n got %q\nwant %q", g, want)
			}
		})
	}
}

func TestTranslateDiffErrors(t *testing.T) {
	deep := D{kv("u", D{kv("x", 1)})}
	for range maxDepth + 2 {
		deep = D{kv("sx", deep)}
	}
	tests := []struct {
		name string
		diff D
		want error
		text string
	}{
		{"unknown top-level section", D{kv("x", D{})}, ErrUnknownDiffSection, `"x" at the top of the diff`},
		{"binary section (8.0 compressed bucket columns)", D{kv("sdata", D{kv("b", D{kv("t", D{kv("o", 10), kv("d", bson.Binary{Data: []byte{1}})})})})}, ErrBinaryDiff, `binary diff of a compressed column at "data"`},
		{"unknown nested section", D{kv("sa", D{kv("sb", D{kv("q", 1)})})}, ErrUnknownDiffSection, `"q" at "a.b"`},
		{"delete section in an array", D{kv("sarr", D{kv("a", true), kv("d", D{kv("0", false)})})}, ErrUnknownDiffSection, `"d" in array "arr"`},
		{"array index not a number", D{kv("sarr", D{kv("a", true), kv("ux", 1)})}, ErrUnknownDiffSection, `"ux"`},
		{"array index with a leading zero", D{kv("sarr", D{kv("a", true), kv("u01", 1)})}, ErrUnknownDiffSection, `"u01"`},
		{"array index too large", D{kv("sarr", D{kv("a", true), kv("u99999999999", 1)})}, ErrUnknownDiffSection, "u99999999999"},
		{"negative length", D{kv("sarr", D{kv("a", true), kv("l", -1)})}, ErrMalformedDiff, "l must be a length"},
		{"length not a number", D{kv("sarr", D{kv("a", true), kv("l", "3")})}, ErrMalformedDiff, "l must be a length"},
		{"fractional length", D{kv("sarr", D{kv("a", true), kv("l", 2.5)})}, ErrMalformedDiff, "l must be a length"},
		{"a: false", D{kv("sarr", D{kv("a", false)})}, ErrMalformedDiff, "a must be true"},
		{"top-level array diff", D{kv("a", true)}, ErrMalformedDiff, "not an array"},
		{"section not a document", D{kv("u", 1)}, ErrMalformedDiff, `section "u"`},
		{"sub-diff not a document", D{kv("sa", A{})}, ErrMalformedDiff, `section "sa"`},
		{"section twice", D{kv("u", D{}), kv("u", D{})}, ErrMalformedDiff, "twice"},
		{"length twice", D{kv("sarr", D{kv("a", true), kv("l", 1), kv("l", 1)})}, ErrMalformedDiff, "twice"},
		{"dotted field name", D{kv("u", D{kv("a.b", 1)})}, ErrUnaddressablePath, `"a.b"`},
		{"dollar field name", D{kv("sx", D{kv("d", D{kv("$x", false)})})}, ErrUnaddressablePath, `"$x" under "x"`},
		{"empty field name", D{kv("s", D{})}, ErrUnaddressablePath, "empty field name"},
		{"too deep", deep, ErrMalformedDiff, "deeper than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := translateDiff(marshal(t, tt.diff))
			if !errors.Is(err, tt.want) || got != nil {
				t.Fatalf("translateDiff = %v, %v; want %v", got, err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.text) {
				t.Errorf("err = %q, want it to mention %q", err, tt.text)
			}
		})
	}
	// Truncated bytes inside a section.
	raw := marshal(t, D{kv("u", D{kv("x", "long enough string")})})
	raw[7]-- // the nested document's length no longer matches its bytes
	if _, err := translateDiff(raw); !errors.Is(err, ErrMalformedDiff) {
		t.Errorf("corrupt nested length: %v", err)
	}
}

// TestTranslateDiffLarge checks that a diff of many fields is packed into
// one update in linear time (the conflict check switches to maps).
func TestTranslateDiffLarge(t *testing.T) {
	u, s := D{}, D{}
	for i := range 20000 {
		u = append(u, kv(fmt.Sprintf("f%05d", i), i))
		s = append(s, kv(fmt.Sprintf("s%05d", i), D{kv("u", D{kv("x", i)})}))
	}
	diff := append(D{kv("u", u)}, s...)
	got, err := translateDiff(marshal(t, diff))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("%d updates, want 1", len(got))
	}
	n, _ := bson.Raw(got[0]).Lookup("$set").Document().Elements()
	if len(n) != 40000 {
		t.Errorf("%d fields set, want 40000", len(n))
	}
	// A conflict past the linear limit still starts a new update.
	u = append(u, kv("f00001", "again"))
	if got, err = translateDiff(marshal(t, D{kv("u", u)})); err != nil || len(got) != 2 {
		t.Errorf("duplicate path: %d updates, %v", len(got), err)
	}
}

func BenchmarkTranslateDiff(b *testing.B) {
	raw := marshal(b, D{
		kv("u", D{kv("status", "shipped"), kv("n", 5)}),
		kv("i", D{kv("shippedAt", bson.DateTime(1))}),
		kv("sitems", D{kv("a", true), kv("l", 2), kv("s1", D{kv("u", D{kv("qty", 3)})})}),
	})
	e := mustParse(b, with(outer(1, "u", "shop.orders"), "o", D{kv("$v", 2), kv("diff", bson.Raw(raw))}, "o2", D{kv("_id", 1)}))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Translate(e); err != nil {
			b.Fatal(err)
		}
	}
}

// TestTranslateDiffPipelines: on a target that takes pipeline updates, an
// i section outside arrays moves its fields in one update, so a unique
// index on a moved field never sees it missing (mongod's applier moves it
// in one step too: doc_diff_applier.cpp).
func TestTranslateDiffPipelines(t *testing.T) {
	move := func(fields ...bson.E) A {
		var paths A
		set := D{}
		for _, f := range fields {
			paths = append(paths, f.Key)
			set = append(set, kv(f.Key, D{kv("$literal", f.Value)}))
		}
		return A{D{kv("$unset", paths)}, D{kv("$set", set)}}
	}
	tests := []struct {
		name string
		diff D
		want []any // update documents (D) or pipelines (A), in order
	}{
		{"a moved field is one pipeline", D{kv("i", D{kv("email", "x@y")})}, []any{move(kv("email", "x@y"))}},
		{"several fields keep the diff's order, numeric names too", D{kv("i", D{kv("z", 1), kv("10", 2), kv("m", "$notAPath")})},
			[]any{move(kv("z", 1), kv("10", 2), kv("m", "$notAPath"))}},
		{"with other sections, in the diff's order", D{kv("u", D{kv("a", 0)}), kv("i", D{kv("b", 1)}), kv("sc", D{kv("d", D{kv("x", false)})})},
			[]any{D{kv("$set", D{kv("a", 0)})}, move(kv("b", 1)), D{kv("$unset", D{kv("c.x", "")})}}},
		{"nested documents", D{kv("sa", D{kv("i", D{kv("k", D{kv("$x", 1)})})})}, []any{move(kv("a.k", D{kv("$x", 1)}))}},
		{"_id is left alone", D{kv("i", D{kv("_id", 1), kv("n", 2)})}, []any{move(kv("n", 2))}},
		{"inside an array element: unset, then set", D{kv("sarr", D{kv("a", true), kv("s2", D{kv("i", D{kv("q", 1)})})})},
			[]any{D{kv("$unset", D{kv("arr.2.q", "")})}, D{kv("$set", D{kv("arr.2.q", 1)})}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := getDiffScratch()
			defer putDiffScratch(sc)
			got, err := sc.appendDiff(nil, marshal(t, tt.diff), true)
			if err != nil {
				t.Fatal(err)
			}
			var g, w []string
			for _, u := range got {
				if isPipeline(u) {
					g = append(g, bson.RawArray(u).String())
				} else {
					g = append(g, bson.Raw(u).String())
				}
			}
			for _, u := range tt.want {
				switch u := u.(type) {
				case A:
					_, data, err := bson.MarshalValue(u)
					if err != nil {
						t.Fatal(err)
					}
					w = append(w, bson.RawArray(data).String())
				default:
					w = append(w, marshal(t, u).String())
				}
			}
			if !slices.Equal(g, w) {
				t.Errorf("updates\n got %v\nwant %v", g, w)
			}
		})
	}

	// Through Translate: the pipeline reaches the driver as an array.
	e := mustParse(t, with(outer(1, "u", "a.b"), "o", D{kv("$v", 2), kv("diff", D{kv("i", D{kv("n", 1)})})}, "o2", D{kv("_id", 1)}))
	ws, err := Translator{PipelineUpdates: true}.Append(nil, e)
	if err != nil || len(ws) != 1 {
		t.Fatalf("Translate: %v %v", ws, err)
	}
	vm, ok := ws[0].Model.(*mongo.UpdateOneModel).Update.(bson.ValueMarshaler)
	if !ok {
		t.Fatalf("update %T is not a pipeline", ws[0].Model.(*mongo.UpdateOneModel).Update)
	}
	if typ, _, _ := vm.MarshalBSONValue(); typ != byte(bson.TypeArray) {
		t.Errorf("pipeline marshals as %v, want an array", typ)
	}
	if ws, _ := Translate(e); len(ws) != 2 {
		t.Errorf("without PipelineUpdates: %d updates, want $unset then $set", len(ws))
	}
}
