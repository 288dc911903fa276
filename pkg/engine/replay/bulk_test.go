package replay

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// TestPlanner checks how a writer's batch is cut into commands: few
// commands, each of one namespace and kind, every document's writes in
// queue order.
func TestPlanner(t *testing.T) {
	cases := []struct {
		name   string
		unique string // namespaces with a unique secondary index
		batch  string // per write: namespace letter, kind (i, u, d, r: re-read), document number
		want   string // commands, in order
	}{
		{"one kind stays one command", "", "ai1 ai2 ai3", "[ai1 ai2 ai3]"},
		{"kinds interleaved over documents become one command each", "", "ai1 au2 ad3 ai4 au5 ad6",
			"[ai1 ai4] [au2 au5] [ad3 ad6]"},
		{"namespaces interleaved", "", "ai1 bi1 ai2 bu2 ai3", "[ai1 ai2 ai3] [bi1] [bu2]"},
		{"a document's update follows its insert", "", "ai1 au1 ai2 au2", "[ai1 ai2] [au1 au2]"},
		{"an update before an insert of another document", "", "au1 ai2 au2", "[au1] [ai2] [au2]"},
		{"updates of one document share an ordered command", "", "au1 au1 au2 au1", "[au1 au1 au2 au1]"},
		{"insert, delete, insert of one document", "", "ai1 ai2 ad1 ai1", "[ai1 ai2] [ad1] [ai1]"},
		{"a document inserted twice (a user's applyOps)", "", "ai1 ai1", "[ai1] [ai1]"},
		{"a re-read is a command of its own", "", "au1 ar1 au2 au1", "[au1 au2] [ar1] [au1]"},
		{"unique index: order kept across documents", "a", "ad1 ai2 ai3 ad4 ai5", "[ad1] [ai2 ai3] [ad4] [ai5]"},
		{"unique index on one namespace only", "a", "ad1 bi1 ai2 bi2", "[ad1] [bi1 bi2] [ai2]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var p planner
			// Buffers in use before.
			p.plan([]item{{ns: catalog.Namespace{DB: "db", Coll: "z"}, cmd: cmdDelete, hash: 1}, {ns: catalog.Namespace{DB: "db", Coll: "y"}, hash: 1}})
			var batch []item
			for _, w := range strings.Fields(c.batch) {
				it := item{ns: catalog.Namespace{DB: "db", Coll: w[:1]}, kind: w}
				it.cmd = map[byte]cmdKind{'i': cmdInsert, 'u': cmdUpdate, 'd': cmdDelete, 'r': cmdRefetch}[w[1]]
				it.serial = strings.Contains(c.unique, w[:1])
				it.hash = uint64(w[0])<<32 | uint64(w[2])
				if it.serial {
					it.hash = uint64(w[0]) << 32
				}
				batch = append(batch, it)
			}
			var got []string
			for _, rn := range p.plan(batch) {
				var names []string
				for _, it := range rn.items {
					if it.ns != rn.ns || it.cmd != rn.cmd {
						t.Errorf("command %s %s holds %s", rn.ns, rn.cmd, it.kind)
					}
					names = append(names, it.kind)
				}
				got = append(got, fmt.Sprint(names))
			}
			if strings.Join(got, " ") != c.want {
				t.Errorf("commands %s, want %s", strings.Join(got, " "), c.want)
			}
		})
	}
}
