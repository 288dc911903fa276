package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestReverse(t *testing.T) {
	cases := []struct {
		name    string
		extra   string
		wantNS  Namespaces
		wantErr string
	}{
		{"filters kept", (`namespaces: {include: ['^shop\.'], exclude: ['\.tmp$']}`),
			Namespaces{Include: []string{`^shop\.`}, Exclude: []string{`\.tmp$`, `^mongoferry\.`}}, ""},
		{"renames inverted", ("namespaces: {rename: [{from: shop, to: shop_v2}, {from: hr.people, to: staff.people}]}"),
			Namespaces{Rename: []Rename{{From: "shop_v2", To: "shop"}, {From: "staff.people", To: "hr.people"}}, Exclude: []string{`^mongoferry\.`}}, ""},
		{"own checkpoint database excluded", ("checkpoint: {database: ferry_ck}"),
			Namespaces{Exclude: []string{`^ferry_ck\.`}}, ""},
		{"renames with filters", (`namespaces: {include: ['^shop\.'], rename: [{from: shop, to: shop_v2}]}`),
			Namespaces{}, "namespaces: the task both renames and filters namespaces"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fwd, err := Parse([]byte(endpointsYAML(`uri: "mongodb://10.0.0.1:27017/", kind: replicaSet, username: a, passwordEnv: A`,
				`uri: "mongodb://10.0.0.2:27017/", username: b, passwordFile: /run/b, tls: {enabled: true}`,
				c.extra+"\nfullSync: {dropTarget: true}\ncutover: {requested: true}")))
			if err != nil {
				t.Fatal(err)
			}
			r, err := fwd.Reverse("1764045600,3")
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("Reverse error = %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Name != "orders-move-reverse" || r.Mode != ModeIncremental || r.Incremental.StartAt != "1764045600,3" {
				t.Errorf("name %q, mode %q, startAt %q", r.Name, r.Mode, r.Incremental.StartAt)
			}
			if r.Source.URI != fwd.Target.URI || r.Source.Username != "b" || r.Source.PasswordFile != "/run/b" || r.Source.TLS == nil || !r.Source.TLS.Enabled {
				t.Errorf("source is not the forward target with its credentials and TLS: %+v", r.Source)
			}
			if r.Target.URI != fwd.Source.URI || r.Target.Username != "a" || r.Target.PasswordEnv != "A" || r.Target.Kind != KindAuto {
				t.Errorf("target is not the forward source with its credentials: %+v", r.Target)
			}
			if r.Checkpoint.Database == fwd.Checkpoint.Database {
				t.Errorf("the reverse task shares the forward checkpoint database %q", r.Checkpoint.Database)
			}
			if r.FullSync.DropTarget || r.Cutover.Requested {
				t.Errorf("dropTarget %v, cutover.requested %v carried over", r.FullSync.DropTarget, r.Cutover.Requested)
			}
			if !reflect.DeepEqual(r.Namespaces, c.wantNS) {
				t.Errorf("namespaces = %+v, want %+v", r.Namespaces, c.wantNS)
			}
		})
	}
}

// TestReverseNamespacesFilters keeps a task's document filters in its
// reverse sync (the namespaces keep their names), and refuses them with
// renames, as include and exclude.
func TestReverseNamespacesFilters(t *testing.T) {
	filters := []Filter{{Namespace: "shop.orders", Query: Query(`{"tenant":"acme"}`)}}
	got, err := ReverseNamespaces(Namespaces{Filters: filters}, "mongoferry")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Filters, filters) {
		t.Errorf("filters = %+v, want %+v", got.Filters, filters)
	}
	got.Filters[0].Query[2] = 'X'
	if filters[0].Query[2] == 'X' {
		t.Error("the reverse task's filters share memory with the forward task's")
	}
	if _, err := ReverseNamespaces(Namespaces{Filters: filters, Rename: []Rename{{From: "shop", To: "shop_v2"}}}, "mongoferry"); err == nil {
		t.Error("filters with renames were reversed; their namespaces name the source's collections")
	}
}
