package catalog

import (
	"strings"
	"testing"

	"github.com/mongoferry/mongoferry/pkg/config"
)

func TestUnmatchedIncludes(t *testing.T) {
	source := []Namespace{{"shop", "orders"}, {"shop", "users"}, {"crm", "leads"}}
	for _, tc := range []struct {
		name     string
		include  []string
		selected []string // namespaces Selected keeps
		warn     []string // the patterns warned about
	}{
		{"no include: everything", nil, []string{"shop.orders", "shop.users", "crm.leads"}, nil},
		{"a database", []string{`shop\..*`}, []string{"shop.orders", "shop.users"}, nil},
		{"anchors are implied and harmless", []string{`^shop\..*$`}, []string{"shop.orders", "shop.users"}, nil},
		{"written as unanchored: selects nothing", []string{`^shop\.`}, nil, []string{`^shop\.`}},
		{"one of two patterns matches nothing", []string{`crm\.leads`, `billing\..*`}, []string{"crm.leads"}, []string{`billing\..*`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewMapper(config.Namespaces{Include: tc.include}, "mongoferry")
			if err != nil {
				t.Fatal(err)
			}
			var selected []Namespace
			var got []string
			for _, n := range source {
				if m.Selected(n) {
					selected = append(selected, n)
					got = append(got, n.String())
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.selected, ",") {
				t.Errorf("selected %v, want %v", got, tc.selected)
			}
			warnings := m.UnmatchedIncludes(selected)
			if len(warnings) != len(tc.warn) {
				t.Fatalf("warnings %q, want one for each of %q", warnings, tc.warn)
			}
			for i, w := range warnings {
				if !strings.Contains(w, tc.warn[i]) || !strings.Contains(w, `shop\..*`) {
					t.Errorf("warning %q: want the pattern %q and the fix", w, tc.warn[i])
				}
			}
		})
	}
}
