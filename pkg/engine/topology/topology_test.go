package topology

import (
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/config"
)

func raw(t *testing.T, d bson.D) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Replies recorded from MongoDB 7.0 (trimmed to the fields read).
func TestParseHello(t *testing.T) {
	tests := []struct {
		name  string
		reply bson.D
		want  Kind
	}{
		{"mongos", bson.D{{Key: "isWritablePrimary", Value: true}, {Key: "msg", Value: "isdbgrid"}, {Key: "maxWireVersion", Value: int32(21)}, {Key: "ok", Value: 1.0}}, KindMongos},
		{"replica set primary", bson.D{{Key: "topologyVersion", Value: bson.D{}}, {Key: "hosts", Value: bson.A{"a:27017", "b:27017"}}, {Key: "setName", Value: "rs0"}, {Key: "isWritablePrimary", Value: true}, {Key: "ok", Value: 1.0}}, KindReplicaSet},
		{"standalone (FerretDB)", bson.D{{Key: "isWritablePrimary", Value: true}, {Key: "maxWireVersion", Value: int32(21)}, {Key: "ok", Value: 1.0}}, KindStandalone},
		{"other msg", bson.D{{Key: "msg", Value: "hello"}, {Key: "ok", Value: 1.0}}, KindStandalone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ParseHello(raw(t, tc.reply)); got != tc.want {
				t.Errorf("ParseHello = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestIsSharded(t *testing.T) {
	tests := []struct {
		kind    config.ClusterKind
		server  Kind
		want    bool
		wantErr string
	}{
		{config.KindAuto, KindMongos, true, ""},
		{config.KindAuto, KindReplicaSet, false, ""},
		{config.KindAuto, KindStandalone, false, ""},
		{config.KindSharded, KindStandalone, true, ""},
		{config.KindSharded, KindMongos, true, ""},
		{config.KindReplicaSet, KindReplicaSet, false, ""},
		{config.KindReplicaSet, KindMongos, false, "set source.kind to sharded"},
	}
	for _, tc := range tests {
		got, err := IsSharded(tc.kind, tc.server)
		if got != tc.want || (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("IsSharded(%s, %v) = %v, %v; want %v, %q", tc.kind, tc.server, got, err, tc.want, tc.wantErr)
		}
	}
}

// config.shards documents as MongoDB 7.0 stores them.
func TestParseShards(t *testing.T) {
	shard := func(id, host string, extra ...bson.E) bson.D {
		return append(bson.D{{Key: "_id", Value: id}, {Key: "host", Value: host}, {Key: "state", Value: int32(1)}, {Key: "topologyTime", Value: bson.Timestamp{T: 1700000000, I: 1}}}, extra...)
	}
	tests := []struct {
		name      string
		docs      []bson.D
		overrides []config.Shard
		want      []Shard
		wantErr   string
	}{
		{
			name: "replica sets, sorted by name",
			docs: []bson.D{shard("shard02", "shard02/h4:27018,h5:27018"), shard("shard01", "shard01/h1:27018,h2:27018,h3:27018")},
			want: []Shard{
				{Name: "shard01", Host: "shard01/h1:27018,h2:27018,h3:27018", ReplicaSet: "shard01", URI: "mongodb://h1:27018,h2:27018,h3:27018/?replicaSet=shard01"},
				{Name: "shard02", Host: "shard02/h4:27018,h5:27018", ReplicaSet: "shard02", URI: "mongodb://h4:27018,h5:27018/?replicaSet=shard02"},
			},
		},
		{
			name: "draining shard",
			docs: []bson.D{shard("s1", "rsA/a:1", bson.E{Key: "draining", Value: true})},
			want: []Shard{{Name: "s1", Host: "rsA/a:1", ReplicaSet: "rsA", URI: "mongodb://a:1/?replicaSet=rsA", Draining: true}},
		},
		{
			name: "a host without a set name is one server",
			docs: []bson.D{shard("s1", "a:27018")},
			want: []Shard{{Name: "s1", Host: "a:27018", URI: "mongodb://a:27018/?directConnection=true"}},
		},
		{
			name:      "override replaces the address; an override for a shard not listed yet is kept aside",
			docs:      []bson.D{shard("s1", "rsA/internal-a:27018")},
			overrides: []config.Shard{{Name: "s1", URI: "mongodb://10.0.0.1:27018/?replicaSet=rsA"}, {Name: "s9", URI: "mongodb://x:1/"}},
			want:      []Shard{{Name: "s1", Host: "rsA/internal-a:27018", ReplicaSet: "rsA", URI: "mongodb://10.0.0.1:27018/?replicaSet=rsA", Overridden: true}},
		},
		{
			name:    "empty host",
			docs:    []bson.D{shard("s1", "rsA/")},
			wantErr: "shard s1: host \"rsA/\" names no server; or give its address in source.shards[]",
		},
		{
			name:      "empty host with an override is fine",
			docs:      []bson.D{shard("s1", "rsA/")},
			overrides: []config.Shard{{Name: "s1", URI: "mongodb://a:1/"}},
			want:      []Shard{{Name: "s1", Host: "rsA/", ReplicaSet: "rsA", URI: "mongodb://a:1/", Overridden: true}},
		},
		{
			name:    "no _id",
			docs:    []bson.D{{{Key: "host", Value: "rs/a:1"}}},
			wantErr: "document without _id",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var docs []bson.Raw
			for _, d := range tc.docs {
				docs = append(docs, raw(t, d))
			}
			got, err := ParseShards(docs, tc.overrides)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("shard %d = %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestEndpointKeepsCredentialsAndTLS(t *testing.T) {
	src := config.Endpoint{URI: "mongodb://mongos:27017/", Kind: config.KindSharded, Username: "ferry", PasswordEnv: "P",
		AuthSource: "admin", TLS: &config.TLS{Enabled: true, CAFile: "/ca.pem"}, Shards: []config.Shard{{Name: "s1", URI: "mongodb://a/"}}}
	e := Endpoint(src, Shard{Name: "s1", URI: "mongodb://a:1/?replicaSet=rsA"})
	if e.URI != "mongodb://a:1/?replicaSet=rsA" || e.Username != "ferry" || e.PasswordEnv != "P" || e.TLS == nil || e.TLS.CAFile != "/ca.pem" || e.Shards != nil || e.Kind != config.KindReplicaSet {
		t.Errorf("Endpoint = %+v", e)
	}
}

func TestDiff(t *testing.T) {
	a, b, c := Shard{Name: "a"}, Shard{Name: "b"}, Shard{Name: "c"}
	added, removed := Diff([]Shard{a, b}, []Shard{b, c})
	if len(added) != 1 || added[0].Name != "c" || len(removed) != 1 || removed[0].Name != "a" {
		t.Errorf("Diff = %v, %v", added, removed)
	}
}
