package config

import (
	"strings"
	"testing"
)

func TestSelectionChanges(t *testing.T) {
	base := Namespaces{Include: []string{`shop\.orders`, `crm\..*`}, Exclude: []string{`crm\.tmp`}, Rename: []Rename{{From: "crm", To: "sales"}}}
	for _, tc := range []struct {
		name string
		now  Namespaces
		want []string // clauses; none when unchanged
	}{
		{"unchanged", base, nil},
		{"reordered", Namespaces{Include: []string{`crm\..*`, `shop\.orders`}, Exclude: []string{`crm\.tmp`}, Rename: []Rename{{From: "crm", To: "sales"}}}, nil},
		{"a namespace added", Namespaces{Include: []string{`shop\.orders`, `shop\.users`, `crm\..*`}, Exclude: []string{`crm\.tmp`}, Rename: base.Rename},
			[]string{"namespaces.include was [crm\\..*, shop\\.orders], now [crm\\..*, shop\\.orders, shop\\.users]"}},
		{"exclude removed, rename changed", Namespaces{Include: base.Include, Rename: []Rename{{From: "crm", To: "crm2"}}},
			[]string{"namespaces.exclude was [crm\\.tmp], now empty", "namespaces.rename was [{from: crm, to: sales}], now [{from: crm, to: crm2}]"}},
		{"a filter added", Namespaces{Include: base.Include, Exclude: base.Exclude, Rename: base.Rename, Filters: []Filter{{Namespace: "shop.orders", Query: Query(`{"tenant":"acme"}`)}}},
			[]string{`namespaces.filters was empty, now [{namespace: shop.orders, query: {"tenant":"acme"}}]`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := SelectionChanges(base, tc.now)
			if len(tc.want) == 0 {
				if got != "" {
					t.Errorf("changes %q, want none", got)
				}
				return
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("changes %q: want %q", got, w)
				}
			}
		})
	}
	if got := SelectionChanges(Namespaces{}, Namespaces{Include: []string{}}); got != "" {
		t.Errorf("nil and empty lists: %q, want no change", got)
	}
}
