package conn

import (
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Replies as servers give them (trimmed to the fields identity reads and a
// few around them). FerretDB v1.24.0 started with --repl-set-name=rs0
// lists its listen address as the set's only host, has no setVersion,
// topologyVersion or replSetGetConfig, and reports the machine's name and
// its pid in serverStatus.
const (
	ferretA      = `{"isWritablePrimary": true, "setName": "rs0", "hosts": ["127.0.0.1:40001"], "maxWireVersion": 21, "ok": 1.0}`
	ferretB      = `{"isWritablePrimary": true, "setName": "rs0", "hosts": ["127.0.0.1:40002"], "maxWireVersion": 21, "ok": 1.0}`
	ferretNoSet  = `{"isWritablePrimary": true, "maxWireVersion": 21, "ok": 1.0}`
	ferretStatA  = `{"host": "build-7", "version": "7.0.77", "process": "ferretdb", "pid": {"$numberLong": "4101"}, "ferretdbVersion": "v1.24.0", "ok": 1.0}`
	ferretStatB  = `{"host": "build-7", "version": "7.0.77", "process": "ferretdb", "pid": {"$numberLong": "4102"}, "ferretdbVersion": "v1.24.0", "ok": 1.0}`
	mongoHello0  = `{"topologyVersion": {"processId": {"$oid": "6742f0a1c3d4e5f601020301"}, "counter": {"$numberLong": "6"}}, "hosts": ["db-0.old:27017", "db-1.old:27017", "db-2.old:27017"], "setName": "rs0", "setVersion": 1, "isWritablePrimary": true, "primary": "db-0.old:27017", "me": "db-0.old:27017", "electionId": {"$oid": "7fffffff0000000000000001"}, "ok": 1.0}`
	mongoHello1  = `{"topologyVersion": {"processId": {"$oid": "6742f0a1c3d4e5f601020302"}, "counter": {"$numberLong": "4"}}, "hosts": ["db-0.old:27017", "db-1.old:27017", "db-2.old:27017"], "setName": "rs0", "setVersion": 1, "isWritablePrimary": false, "secondary": true, "primary": "db-0.old:27017", "me": "db-1.old:27017", "ok": 1.0}`
	mongoOther   = `{"topologyVersion": {"processId": {"$oid": "6742f0a1c3d4e5f601020399"}, "counter": {"$numberLong": "6"}}, "hosts": ["db-0.new:27017", "db-1.new:27017"], "setName": "rs0", "setVersion": 3, "isWritablePrimary": true, "primary": "db-0.new:27017", "me": "db-0.new:27017", "ok": 1.0}`
	mongoConfOld = `{"config": {"_id": "rs0", "version": 1, "term": {"$numberLong": "1"}, "members": [{"_id": 0, "host": "db-0.old:27017"}, {"_id": 1, "host": "db-1.old:27017"}, {"_id": 2, "host": "db-2.old:27017"}], "protocolVersion": {"$numberLong": "1"}, "settings": {"chainingAllowed": true, "replicaSetId": {"$oid": "6742f0a1aa00000000000001"}}}, "ok": 1.0}`
	mongoConfNew = `{"config": {"_id": "rs0", "version": 3, "term": {"$numberLong": "2"}, "members": [{"_id": 0, "host": "db-0.new:27017"}, {"_id": 1, "host": "db-1.new:27017"}], "protocolVersion": {"$numberLong": "1"}, "settings": {"chainingAllowed": true, "replicaSetId": {"$oid": "6742f0a1bb00000000000002"}}}, "ok": 1.0}`
	mongoStat0   = `{"host": "db-0:27017", "version": "7.0.14", "process": "mongod", "pid": {"$numberLong": "1"}, "ok": 1.0}`
	mongoStat1   = `{"host": "db-1:27017", "version": "7.0.14", "process": "mongod", "pid": {"$numberLong": "1"}, "ok": 1.0}`
	standalone1  = `{"topologyVersion": {"processId": {"$oid": "6742f0a1c3d4e5f6010203a1"}, "counter": {"$numberLong": "0"}}, "isWritablePrimary": true, "ok": 1.0}`
	standalone2  = `{"topologyVersion": {"processId": {"$oid": "6742f0a1c3d4e5f6010203a2"}, "counter": {"$numberLong": "0"}}, "isWritablePrimary": true, "ok": 1.0}`
	standStat1   = `{"host": "box:27017", "process": "mongod", "pid": {"$numberLong": "900"}, "ok": 1.0}`
	standStat2   = `{"host": "box:27018", "process": "mongod", "pid": {"$numberLong": "901"}, "ok": 1.0}`
)

// replies is what one server answered: hello, replSetGetConfig and
// serverStatus ("" for a command it refused).
type replies struct{ hello, config, status string }

func (r replies) identity(t *testing.T) Identity {
	t.Helper()
	parse := func(js string) bson.Raw {
		if js == "" {
			return nil
		}
		var raw bson.Raw
		if err := bson.UnmarshalExtJSON([]byte(js), false, &raw); err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return raw
	}
	return identityFrom(parse(r.hello), parse(r.config), parse(r.status))
}

func TestSameDeployment(t *testing.T) {
	tests := []struct {
		name           string
		source, target replies
		same           bool
		why            string
	}{
		{"two FerretDB servers named rs0 on one host", replies{ferretA, "", ferretStatA}, replies{ferretB, "", ferretStatB}, false, ""},
		{"one FerretDB server under two URIs", replies{ferretA, "", ferretStatA}, replies{ferretA, "", ferretStatA}, true, "pid 4101"},
		{"one FerretDB server without a set name, two URIs", replies{ferretNoSet, "", ferretStatA}, replies{ferretNoSet, "", ferretStatA}, true, "pid 4101"},
		{"two FerretDB servers without a set name", replies{ferretNoSet, "", ferretStatA}, replies{ferretNoSet, "", ferretStatB}, false, ""},
		{"two members of one MongoDB replica set", replies{mongoHello0, mongoConfOld, mongoStat0}, replies{mongoHello1, mongoConfOld, mongoStat1}, true, "replicaSetId 6742f0a1aa00000000000001"},
		{"two members of one set, replSetGetConfig not permitted", replies{mongoHello0, "", ""}, replies{mongoHello1, "", ""}, true, "member db-0.old:27017"},
		{"one MongoDB member under two URIs", replies{mongoHello0, mongoConfOld, mongoStat0}, replies{mongoHello0, mongoConfOld, mongoStat0}, true, "replicaSetId"},
		{"one member, nothing but hello", replies{mongoHello0, "", ""}, replies{mongoHello0, "", ""}, true, "replica set rs0"},
		{"two MongoDB replica sets both named rs0", replies{mongoHello0, mongoConfOld, mongoStat0}, replies{mongoOther, mongoConfNew, mongoStat1}, false, ""},
		{"two sets named rs0, replSetGetConfig not permitted", replies{mongoHello0, "", mongoStat0}, replies{mongoOther, "", mongoStat1}, false, ""},
		{"a FerretDB rs0 and a MongoDB rs0", replies{ferretA, "", ferretStatA}, replies{mongoHello0, mongoConfOld, mongoStat0}, false, ""},
		{"two standalone mongod on one host", replies{standalone1, "", standStat1}, replies{standalone2, "", standStat2}, false, ""},
		{"one standalone mongod under two URIs", replies{standalone1, "", standStat1}, replies{standalone1, "", standStat1}, true, "process 6742f0a1c3d4e5f6010203a1"},
		{"nothing but hello from two FerretDB servers", replies{ferretNoSet, "", ""}, replies{ferretNoSet, "", ""}, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			same, why := sameDeployment(tt.source.identity(t), tt.target.identity(t))
			if same != tt.same {
				t.Fatalf("same = %v (%s), want %v", same, why, tt.same)
			}
			if same && !strings.Contains(why, tt.why) {
				t.Errorf("reason %q does not name %q", why, tt.why)
			}
		})
	}
}
