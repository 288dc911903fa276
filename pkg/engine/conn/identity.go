package conn

import (
	"context"
	"fmt"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Identity is what tells one deployment from another: the replica set's
// id, its name and members, and the server process answering.
type Identity struct {
	// SetName is hello's setName (a FerretDB server started with
	// --repl-set-name reports one too, without being part of a set).
	SetName string
	// ReplicaSetID is replSetGetConfig's settings.replicaSetId: the same
	// on every member of one replica set, different for two sets that
	// share a name. Zero when the server has none or refuses the command.
	ReplicaSetID bson.ObjectID
	// Member is set when hello describes a replica set member (it carries
	// setVersion); Hosts then lists the set's members as configured.
	Member bool
	Hosts  []string
	// Me is the server's host:port as hello reports it (me, or the one
	// host a FerretDB server lists).
	Me string
	// ProcessID is hello's topologyVersion.processId: new at every start
	// of a server process.
	ProcessID bson.ObjectID
	// Host and PID are serverStatus's host (machine name, with the port on
	// MongoDB) and pid.
	Host string
	PID  int64
}

// Identify asks the server who it is: hello, and when it answers them,
// replSetGetConfig and serverStatus.
func Identify(ctx context.Context, c *mongo.Client) (Identity, error) {
	admin := c.Database("admin")
	hello, err := admin.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Raw()
	if err != nil {
		return Identity{}, fmt.Errorf("hello: %w", err)
	}
	// Both are optional: a standalone server or FerretDB has no replica
	// set config, and a user may lack the privilege for either.
	config, _ := admin.RunCommand(ctx, bson.D{{Key: "replSetGetConfig", Value: 1}}).Raw()
	status, _ := admin.RunCommand(ctx, bson.D{{Key: "serverStatus", Value: 1}}).Raw()
	return identityFrom(hello, config, status), nil
}

// identityFrom reads the replies of hello, replSetGetConfig and
// serverStatus (the last two may be nil).
func identityFrom(hello, config, status bson.Raw) Identity {
	var id Identity
	id.SetName, _ = hello.Lookup("setName").StringValueOK()
	if _, err := hello.LookupErr("setVersion"); err == nil && id.SetName != "" {
		id.Member = true
	}
	for _, list := range []string{"hosts", "passives", "arbiters"} {
		arr, ok := hello.Lookup(list).ArrayOK()
		if !ok {
			continue
		}
		vals, _ := arr.Values()
		for _, v := range vals {
			if h, ok := v.StringValueOK(); ok {
				id.Hosts = append(id.Hosts, h)
			}
		}
	}
	id.Me, _ = hello.Lookup("me").StringValueOK()
	if id.Me == "" && len(id.Hosts) == 1 {
		id.Me = id.Hosts[0]
	}
	id.ProcessID, _ = hello.Lookup("topologyVersion", "processId").ObjectIDOK()
	if config != nil {
		id.ReplicaSetID, _ = config.Lookup("config", "settings", "replicaSetId").ObjectIDOK()
	}
	if status != nil {
		id.Host, _ = status.Lookup("host").StringValueOK()
		if pid, ok := status.Lookup("pid").AsInt64OK(); ok {
			id.PID = pid
		}
	}
	return id
}

// sameDeployment reports whether two identities are one deployment, and
// says why.
func sameDeployment(a, b Identity) (bool, string) {
	if !a.ReplicaSetID.IsZero() && !b.ReplicaSetID.IsZero() {
		// Decisive either way: two sets may share a name, never an id.
		return a.ReplicaSetID == b.ReplicaSetID, fmt.Sprintf("replica set %s, replicaSetId %s", a.SetName, a.ReplicaSetID.Hex())
	}
	if a.Member && b.Member && a.SetName == b.SetName {
		// A hidden member lists the others but not itself: me counts too.
		theirs := append(slices.Clip(b.Hosts), b.Me)
		for _, h := range append(slices.Clip(a.Hosts), a.Me) {
			if h != "" && slices.Contains(theirs, h) {
				return true, fmt.Sprintf("replica set %s, member %s", a.SetName, h)
			}
		}
	}
	if !a.ProcessID.IsZero() && !b.ProcessID.IsZero() {
		return a.ProcessID == b.ProcessID, fmt.Sprintf("server process %s", a.ProcessID.Hex())
	}
	same := a.PID != 0 && a.PID == b.PID && a.Host != "" && a.Host == b.Host &&
		(a.Me == "" || b.Me == "" || a.Me == b.Me)
	return same, fmt.Sprintf("server %s, pid %d", a.Host, a.PID)
}

// CheckDistinct fails with ErrSameDeployment when source and target are
// one server or members of one replica set, even when their URIs differ
// (localhost and 127.0.0.1, a DNS alias, another member). Two deployments
// that only share a replica set name (rs0) are distinct.
func CheckDistinct(ctx context.Context, source, target *mongo.Client) error {
	a, err := Identify(ctx, source)
	if err != nil {
		return fmt.Errorf("source: %w", err)
	}
	b, err := Identify(ctx, target)
	if err != nil {
		return fmt.Errorf("target: %w", err)
	}
	if same, why := sameDeployment(a, b); same {
		return fmt.Errorf("target.uri: %w (%s): point target.uri at the destination deployment", ErrSameDeployment, why)
	}
	return nil
}
