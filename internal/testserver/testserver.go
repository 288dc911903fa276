// Package testserver starts throwaway FerretDB servers for tests: Start,
// StartCluster and MustCA wrap internal/ferretdb (which the demo and
// benchmarks use without linking testing), stop what they start when the
// test ends, and skip under -short (the unit tier). The types and
// functions without a test are ferretdb's, under their old names here.
package testserver

import (
	"context"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/ferretdb"
	"github.com/mongoferry/mongoferry/internal/testutil"
)

// DefaultOplogBytes is ferretdb.DefaultOplogBytes.
const DefaultOplogBytes = ferretdb.DefaultOplogBytes

// NoopInterval is ferretdb.NoopInterval.
const NoopInterval = ferretdb.NoopInterval

type (
	// Options is ferretdb.Options.
	Options = ferretdb.Options
	// Server is ferretdb.Server.
	Server = ferretdb.Server
	// Cluster is ferretdb.Cluster.
	Cluster = ferretdb.Cluster
	// ClusterLoad is ferretdb.ClusterLoad.
	ClusterLoad = ferretdb.ClusterLoad
	// TLS is ferretdb.TLS.
	TLS = ferretdb.TLS
	// CA is ferretdb.CA.
	CA = ferretdb.CA
	// Files is ferretdb.Files.
	Files = ferretdb.Files
)

// Binary is ferretdb.Binary.
func Binary() (string, error) { return ferretdb.Binary() }

// StartProcess is ferretdb.StartProcess.
func StartProcess(ctx context.Context, o Options) (*Server, error) {
	return ferretdb.StartProcess(ctx, o)
}

// RealBound is ferretdb.RealBound: a chunk bound of the cluster stand-in
// as MongoDB writes it.
func RealBound(b bson.Raw) bson.Raw { return ferretdb.RealBound(b) }

// StartClusterProcess is ferretdb.StartClusterProcess.
func StartClusterProcess(ctx context.Context, n int) (*Cluster, error) {
	return ferretdb.StartClusterProcess(ctx, n)
}

// NewClusterLoad is ferretdb.NewClusterLoad.
func NewClusterLoad(c *Cluster, ns string, keys []int64, next int64, rate float64) *ClusterLoad {
	return ferretdb.NewClusterLoad(c, ns, keys, next, rate)
}

// NewCA is ferretdb.NewCA.
func NewCA(cn string) (*CA, error) { return ferretdb.NewCA(cn) }

// Start starts a server for a test and stops it when the test ends.
func Start(t testing.TB, opts ...Options) *Server {
	t.Helper()
	testutil.SkipInShort(t, "a FerretDB server")
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	s, err := StartProcess(context.Background(), o)
	if err != nil {
		t.Fatalf("start FerretDB: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// StartCluster starts a cluster of n shards for a test and stops it when
// the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	testutil.SkipInShort(t, "a cluster of FerretDB servers")
	c, err := StartClusterProcess(context.Background(), n)
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(c.Stop)
	return c
}

// MustCA makes a CA named cn and writes its files (WriteFiles) into a
// directory of the test's, failing the test on an error.
func MustCA(t testing.TB, cn string) (*CA, Files) {
	t.Helper()
	ca, err := NewCA(cn)
	if err != nil {
		t.Fatal(err)
	}
	files, err := ca.WriteFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return ca, files
}

// Postgres is ferretdb.Postgres.
type Postgres = ferretdb.Postgres

// StartPostgres starts a PostgreSQL server whose only user is username
// with password, for a FerretDB that accepts only PLAIN authentication
// (Options.PostgreSQL), and stops it when the test ends. Without
// PostgreSQL on the machine the test fails, saying how to install it.
func StartPostgres(t testing.TB, username, password string) *Postgres {
	t.Helper()
	testutil.SkipInShort(t, "a PostgreSQL server")
	p, err := ferretdb.StartPostgres(context.Background(), username, password)
	if err != nil {
		t.Fatalf("start PostgreSQL: %v", err)
	}
	t.Cleanup(p.Stop)
	return p
}
