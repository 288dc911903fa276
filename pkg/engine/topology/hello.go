package topology

import (
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/config"
)

// Kind is what hello says a server is.
type Kind int

// Kinds.
const (
	// KindStandalone answered hello without a set name and is not mongos.
	KindStandalone Kind = iota
	// KindReplicaSet is a replica set member (setName present).
	KindReplicaSet
	// KindMongos is a router of a sharded cluster (msg: isdbgrid).
	KindMongos
)

func (k Kind) String() string {
	switch k {
	case KindReplicaSet:
		return "replica set member"
	case KindMongos:
		return "mongos router"
	}
	return "standalone server"
}

// ParseHello reads the server kind from a hello (or isMaster) reply.
func ParseHello(reply bson.Raw) Kind {
	if msg, ok := reply.Lookup("msg").StringValueOK(); ok && msg == "isdbgrid" {
		return KindMongos
	}
	if name, ok := reply.Lookup("setName").StringValueOK(); ok && name != "" {
		return KindReplicaSet
	}
	return KindStandalone
}

// IsSharded decides whether a source is read shard by shard, from the
// configured kind and what hello said. A mongos router with kind
// replicaSet is refused: it has no oplog to read.
func IsSharded(kind config.ClusterKind, server Kind) (bool, error) {
	switch kind {
	case config.KindSharded:
		return true, nil
	case config.KindReplicaSet:
		if server == KindMongos {
			return false, fmt.Errorf("source.kind: replicaSet, but the source is a mongos router (hello says isdbgrid) with no oplog to read: set source.kind to sharded or auto")
		}
		return false, nil
	}
	return server == KindMongos, nil
}
