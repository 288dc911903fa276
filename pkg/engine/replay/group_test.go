package replay

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

func TestGrouper(t *testing.T) {
	cases := []struct {
		name  string
		batch string // namespace letter and sequence number per write
		want  string // groups, in order
	}{
		{"one namespace stays one batch", "a1 a2 a3", "[a1 a2 a3]"},
		{"interleaved namespaces keep their order", "a1 b1 a2 c1 b2 a3", "[a1 a2 a3] [b1 b2] [c1]"},
		{"single write", "b1", "[b1]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var batch []item
			for _, w := range strings.Fields(c.batch) {
				batch = append(batch, item{ns: catalog.Namespace{DB: "db", Coll: w[:1]}, kind: w})
			}
			var got []string
			var gr grouper
			gr.group([]item{{ns: catalog.Namespace{DB: "db", Coll: "z"}}, {ns: catalog.Namespace{DB: "db", Coll: "y"}}}) // buffers in use before
			for _, g := range gr.group(batch) {
				var names []string
				for _, it := range g {
					if it.ns != g[0].ns {
						t.Errorf("group mixes %s and %s", g[0].ns, it.ns)
					}
					names = append(names, it.kind)
				}
				got = append(got, fmt.Sprint(names))
			}
			if strings.Join(got, " ") != c.want {
				t.Errorf("groups %s, want %s", strings.Join(got, " "), c.want)
			}
		})
	}
}
