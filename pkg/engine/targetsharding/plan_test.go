package targetsharding

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The config documents below are recorded in the shapes each server
// version writes them (MongoDB's s/catalog/type_collection.idl,
// type_chunk.cpp, type_tags.cpp and type_shard.cpp; 4.4 names chunks by
// ns and keeps dropped collections, 5.0 names them by collection UUID
// and gives tags ObjectId _ids, 7.0 adds onCurrentShardSince, 8.0 lists
// unsharded collections it tracks as unsplittable). No sharded cluster
// runs here: these tests check the exact commands a plan sends.

var (
	epoch   = bson.ObjectID{0x65, 0x1f, 0x0a, 0x01}
	uuid    = bson.Binary{Subtype: 4, Data: []byte{0x3b, 0x24, 0x1f, 0x10, 0x6a, 0x2e, 0x4c, 0x33, 0x9b, 0x1a, 0x5d, 0x3e, 0x7f, 0x90, 0x12, 0x44}}
	when    = bson.DateTime(time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC).UnixMilli())
	version = bson.Timestamp{T: 1709373600, I: 12}
)

func raw(t *testing.T, d bson.D) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// chunk70 is a config.chunks document as 7.0 and 8.0 write it.
func chunk70(min, max bson.D, shard string) bson.D {
	return bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "uuid", Value: uuid}, {Key: "min", Value: min}, {Key: "max", Value: max},
		{Key: "shard", Value: shard}, {Key: "lastmod", Value: bson.Timestamp{T: 3, I: 1}}, {Key: "onCurrentShardSince", Value: version},
		{Key: "history", Value: bson.A{bson.D{{Key: "validAfter", Value: version}, {Key: "shard", Value: shard}}}}}
}

// chunk44 is a config.chunks document as 4.4 writes it.
func chunk44(ns string, min, max bson.D, shard string) bson.D {
	return bson.D{{Key: "_id", Value: ns + "-" + fmt.Sprint(min)}, {Key: "ns", Value: ns}, {Key: "min", Value: min}, {Key: "max", Value: max},
		{Key: "shard", Value: shard}, {Key: "lastmod", Value: bson.Timestamp{T: 2, I: 0}}, {Key: "lastmodEpoch", Value: epoch},
		{Key: "history", Value: bson.A{bson.D{{Key: "validAfter", Value: version}, {Key: "shard", Value: shard}}}}}
}

func k2(region any, id any) bson.D {
	return bson.D{{Key: "region", Value: region}, {Key: "orderId", Value: id}}
}

// layout reads recorded config.collections, config.chunks and config.tags
// documents as ReadLayout does.
func layout(t *testing.T, coll bson.D, chunks, tags []bson.D) *Layout {
	t.Helper()
	l, ok, err := ParseCollection(raw(t, coll))
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return nil
	}
	for _, c := range chunks {
		ch, err := ParseChunk(raw(t, c))
		if err != nil {
			t.Fatal(err)
		}
		l.Chunks = append(l.Chunks, ch)
	}
	for _, d := range tags {
		_, z, err := ParseZoneRange(raw(t, d))
		if err != nil {
			t.Fatal(err)
		}
		l.Zones = append(l.Zones, z)
	}
	sortByMin(l)
	return &l
}

func cluster(major int, shards ...Shard) Cluster { return Cluster{Major: major, Shards: shards} }

func TestMakePlan(t *testing.T) {
	min, max := bson.MinKey{}, bson.MaxKey{}
	ranged70, hashed50 := testRanged70(t), testHashed50(t)
	// Zones on 6.0: EU and NA ranges of a {region, _id} key.
	zoneKey := func(r any) bson.D { return bson.D{{Key: "region", Value: r}, {Key: "_id", Value: min}} }
	zoned60 := layout(t, bson.D{{Key: "_id", Value: "shop.users"}, {Key: "lastmodEpoch", Value: epoch}, {Key: "lastmod", Value: when},
		{Key: "timestamp", Value: version}, {Key: "uuid", Value: uuid}, {Key: "key", Value: bson.D{{Key: "region", Value: 1.0}, {Key: "_id", Value: 1.0}}}, {Key: "unique", Value: false}},
		[]bson.D{chunk70(zoneKey(min), zoneKey("EU"), "rs0"), chunk70(zoneKey("EU"), zoneKey("EV"), "rs0"), chunk70(zoneKey("EV"), zoneKey(max), "rs1")},
		[]bson.D{
			{{Key: "_id", Value: bson.NewObjectID()}, {Key: "ns", Value: "shop.users"}, {Key: "min", Value: zoneKey("NA")}, {Key: "max", Value: zoneKey("NB")}, {Key: "tag", Value: "NA"}},
			{{Key: "_id", Value: bson.NewObjectID()}, {Key: "ns", Value: "shop.users"}, {Key: "min", Value: zoneKey("EU")}, {Key: "max", Value: zoneKey("EV")}, {Key: "tag", Value: "EU"}},
		})
	// Ranged on 4.4: chunks by ns, a unique key, a default collation.
	ranged44 := layout(t, bson.D{{Key: "_id", Value: "shop.skus"}, {Key: "lastmodEpoch", Value: epoch}, {Key: "lastmod", Value: when}, {Key: "dropped", Value: false},
		{Key: "key", Value: bson.D{{Key: "sku", Value: 1.0}}}, {Key: "unique", Value: true}, {Key: "uuid", Value: uuid},
		{Key: "defaultCollation", Value: bson.D{{Key: "locale", Value: "fr"}}}, {Key: "distributionMode", Value: "sharded"}}, []bson.D{
		chunk44("shop.skus", bson.D{{Key: "sku", Value: min}}, bson.D{{Key: "sku", Value: "M"}}, "rs0"),
		chunk44("shop.skus", bson.D{{Key: "sku", Value: "M"}}, bson.D{{Key: "sku", Value: max}}, "rs1"),
	}, nil)
	ranged44.SimpleCollation = true
	// 8.0 tracks an unsharded collection moved by moveCollection.
	unsplittable80 := layout(t, bson.D{{Key: "_id", Value: "shop.audit"}, {Key: "lastmodEpoch", Value: epoch}, {Key: "lastmod", Value: when},
		{Key: "timestamp", Value: version}, {Key: "uuid", Value: uuid}, {Key: "key", Value: bson.D{{Key: "_id", Value: int32(1)}}}, {Key: "unique", Value: false}, {Key: "unsplittable", Value: true}}, nil, nil)
	dropped44 := layout(t, bson.D{{Key: "_id", Value: "shop.old"}, {Key: "lastmodEpoch", Value: epoch}, {Key: "dropped", Value: true}, {Key: "key", Value: bson.D{{Key: "a", Value: 1.0}}}}, nil, nil)
	if unsplittable80 != nil || dropped44 != nil {
		t.Fatal("an unsplittable (8.0) or dropped (4.4) collection read as sharded")
	}

	two := testTwoShards()
	tests := []struct {
		name      string
		req       Request
		placement Placement
		want      []string // relaxed extended JSON of each command
		notes     []string // substrings of the notes, in order
		err       error
	}{
		{
			name: "ranged (7.0): pre-split at three of the source's five boundaries, two chunks moved off the primary",
			req:  Request{TargetNS: "shop.orders", Source: ranged70, Target: two, Primary: "shard-b"},
			want: []string{
				`{"shardCollection":"shop.orders","key":{"region":1,"orderId":1}}`,
				`{"split":"shop.orders","middle":{"region":"AP","orderId":{"$minKey":1}}}`,
				`{"split":"shop.orders","middle":{"region":"EU","orderId":5000}}`,
				`{"split":"shop.orders","middle":{"region":"NA","orderId":{"$minKey":1}}}`,
				`{"moveRange":"shop.orders","min":{"region":"EU","orderId":5000},"max":{"region":"NA","orderId":{"$minKey":1}},"toShard":"shard-a"}`,
				`{"moveRange":"shop.orders","min":{"region":"NA","orderId":{"$minKey":1}},"max":{"region":{"$maxKey":1},"orderId":{"$maxKey":1}},"toShard":"shard-a"}`,
			},
			placement: PlaceMoves,
		},
		{
			name: "ranged on a 4.4 target: moveChunk, a unique key, collation simple",
			req:  Request{TargetNS: "shop.skus", Source: ranged44, Collation: true, Target: cluster(4, Shard{Name: "rs0"}, Shard{Name: "rs1"}), Primary: "rs0"},
			want: []string{
				`{"shardCollection":"shop.skus","key":{"sku":1},"unique":true,"collation":{"locale":"simple"}}`,
				`{"split":"shop.skus","middle":{"sku":"M"}}`,
				`{"moveChunk":"shop.skus","bounds":[{"sku":"M"},{"sku":{"$maxKey":1}}],"to":"rs1"}`,
			},
			placement: PlaceMoves,
		},
		{
			name:      "hashed (5.0): two initial chunks per target shard",
			req:       Request{TargetNS: "shop.carts", Source: hashed50, Target: cluster(7, Shard{Name: "a"}, Shard{Name: "b"}, Shard{Name: "c"}), Primary: "a"},
			want:      []string{`{"shardCollection":"shop.carts","key":{"_id":"hashed"},"numInitialChunks":6}`},
			placement: PlaceHashed,
		},
		{
			name: "zones (6.0): the zone the target has is applied before sharding, the other is explained",
			req: Request{TargetNS: "shop.users", Source: zoned60,
				Target: cluster(6, Shard{Name: "eu1", Zones: []string{"EU"}}, Shard{Name: "ap1", Zones: []string{"AP"}}), Primary: "ap1"},
			want: []string{
				`{"updateZoneKeyRange":"shop.users","min":{"region":"EU","_id":{"$minKey":1}},"max":{"region":"EV","_id":{"$minKey":1}},"zone":"EU"}`,
				`{"shardCollection":"shop.users","key":{"region":1,"_id":1}}`,
			},
			placement: PlaceZones,
			notes:     []string{"no target shard is in zone NA"},
		},
		{
			name:      "unsharded on the source: left unsharded",
			req:       Request{TargetNS: "shop.audit", Target: two},
			placement: PlaceNone,
		},
		{
			name:  "a key of the user's for a replica-set source: sharded, the balancer places it",
			req:   Request{TargetNS: "app.events", Key: Key{{Name: "tenant"}, {Name: "ts"}}, Target: two},
			want:  []string{`{"shardCollection":"app.events","key":{"tenant":1,"ts":1}}`},
			notes: []string{"no chunk boundaries to pre-split at"}, placement: PlaceBalancer,
		},
		{
			name:  "a key of the user's that changes the source's: the source's zones are not applied",
			req:   Request{TargetNS: "shop.users", Source: zoned60, Key: Key{{Name: "_id", Hashed: true}}, Target: two},
			want:  []string{`{"shardCollection":"shop.users","key":{"_id":"hashed"},"numInitialChunks":4}`},
			notes: []string{"zones not applied"}, placement: PlaceHashed,
		},
		{
			name:      "already sharded on the same key: nothing to do",
			req:       Request{TargetNS: "shop.orders", Source: ranged70, Existing: &Layout{Key: ranged70.Key}, Target: two},
			placement: PlaceKept,
		},
		{
			name: "already sharded on another key: stops",
			req:  Request{TargetNS: "shop.orders", Source: ranged70, Existing: &Layout{Key: Key{{Name: "_id", Hashed: true}}}, Target: two},
			err:  ErrShardedDifferently,
		},
		{
			name:      "already sharded on another key, target.sharding keep: used as it is",
			req:       Request{TargetNS: "shop.orders", Source: ranged70, Existing: &Layout{Key: Key{{Name: "_id", Hashed: true}}}, Keep: true, Target: two},
			placement: PlaceKept, notes: []string{"used as it is (target.sharding: keep)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := MakePlan(tt.req)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				for _, s := range []string{"target.sharding: keep", "target.shardKeys"} {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range p.Commands {
				b, err := bson.MarshalExtJSON(c.Cmd, false, false)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, string(b))
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("commands:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if p.Placement != tt.placement {
				t.Errorf("placement %s, want %s", p.Placement, tt.placement)
			}
			if len(p.Notes) != len(tt.notes) {
				t.Fatalf("notes %q, want %d", p.Notes, len(tt.notes))
			}
			for i, n := range tt.notes {
				if !strings.Contains(p.Notes[i], n) {
					t.Errorf("note %q does not say %q", p.Notes[i], n)
				}
			}
		})
	}
}

// testRanged70 is a ranged collection on 7.0: six chunks over three
// source shards, recorded out of order.
func testRanged70(t *testing.T) *Layout {
	min, max := bson.MinKey{}, bson.MaxKey{}
	return layout(t, bson.D{{Key: "_id", Value: "shop.orders"}, {Key: "lastmodEpoch", Value: epoch}, {Key: "lastmod", Value: when},
		{Key: "timestamp", Value: version}, {Key: "uuid", Value: uuid}, {Key: "key", Value: bson.D{{Key: "region", Value: int32(1)}, {Key: "orderId", Value: int32(1)}}},
		{Key: "unique", Value: false}, {Key: "noBalance", Value: false}}, []bson.D{
		chunk70(k2("EU", min), k2("EU", int64(5000)), "rs1"),
		chunk70(k2(min, min), k2("AP", min), "rs0"),
		chunk70(k2("AP", min), k2("EU", min), "rs2"),
		chunk70(k2("EU", int64(5000)), k2("NA", min), "rs0"),
		chunk70(k2("NA", min), k2("NA", int64(90000)), "rs1"),
		chunk70(k2("NA", int64(90000)), k2(max, max), "rs2"),
	}, nil)
}

// testHashed50 is a hashed collection on 5.0.
func testHashed50(t *testing.T) *Layout {
	min, max := bson.MinKey{}, bson.MaxKey{}
	return layout(t, bson.D{{Key: "_id", Value: "shop.carts"}, {Key: "lastmodEpoch", Value: epoch}, {Key: "lastmod", Value: when},
		{Key: "timestamp", Value: version}, {Key: "uuid", Value: uuid}, {Key: "key", Value: bson.D{{Key: "_id", Value: "hashed"}}}, {Key: "unique", Value: false}}, []bson.D{
		chunk70(bson.D{{Key: "_id", Value: min}}, bson.D{{Key: "_id", Value: int64(-4611686018427387902)}}, "rs0"),
		chunk70(bson.D{{Key: "_id", Value: int64(-4611686018427387902)}}, bson.D{{Key: "_id", Value: int64(0)}}, "rs0"),
		chunk70(bson.D{{Key: "_id", Value: int64(0)}}, bson.D{{Key: "_id", Value: max}}, "rs1"),
	}, nil)
}

// testTwoShards is a 7.0 target of two shards.
func testTwoShards() Cluster { return cluster(7, Shard{Name: "shard-a"}, Shard{Name: "shard-b"}) }
