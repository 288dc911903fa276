package catalog

import (
	"errors"
	"strings"
	"testing"

	"github.com/mongoferry/mongoferry/pkg/config"
)

func TestSelect(t *testing.T) {
	source := []Namespace{{"shop", "orders"}, {"shop", "users"}, {"crm", "leads"}}
	for _, tc := range []struct {
		name             string
		include, exclude []string
		selected         []string // namespaces Select keeps
		warn             []string // in the warnings, in order
		notWarn          []string // in no warning
		excluded         bool
		err              []string // in Err's message; none when Err is nil
	}{
		{name: "no include: everything", selected: []string{"shop.orders", "shop.users", "crm.leads"}},
		{name: "a database", include: []string{`shop\..*`}, selected: []string{"shop.orders", "shop.users"}},
		{name: "anchors are implied and harmless", include: []string{`^shop\..*$`}, selected: []string{"shop.orders", "shop.users"}},
		{name: "written as unanchored: selects nothing", include: []string{`^shop\.`},
			warn: []string{"namespaces.include[0] `^shop\\.` selects no collection on the source", `shop\..*`},
			err:  []string{"selects no collection", "namespaces.include[0] `^shop\\.` selects no collection", "change namespaces.include or namespaces.exclude"}},
		{name: "a database that does not exist: no hint of another one", include: []string{`nosuch\..*`},
			warn: []string{"namespaces.include[0] `nosuch\\..*` selects no collection on the source (its databases are shop and crm): " +
				"no database or collection of that name exists on the source yet, or the pattern has a typo"},
			notWarn: []string{"shop\\..*", "write `"}, err: []string{"its databases are shop and crm"}},
		{name: "a database's name alone", include: []string{`shop`},
			warn: []string{"(its databases are shop and crm): a pattern matches the whole db.collection (^ and $ are implied); for every collection of that database write `shop\\..*`, which selects shop.orders and shop.users"}, err: []string{"write `shop\\..*`"}},
		{name: "part of a collection's name", include: []string{`leads`},
			warn: []string{"for the names that contain it write `.*(?:leads).*`, which selects crm.leads"}, err: []string{"crm.leads"}},
		{name: "one of two patterns matches nothing", include: []string{`crm\.leads`, `billing\..*`}, selected: []string{"crm.leads"},
			warn: []string{"namespaces.include[1] `billing\\..*` selects no collection"}},
		{name: "included, then excluded: the exclude is named", include: []string{`shop\.orders`}, exclude: []string{`shop\..*`}, excluded: true,
			warn: []string{"namespaces.include[0] `shop\\.orders` selects shop.orders, but namespaces.exclude[0] `shop\\..*` removes shop.orders"},
			err:  []string{"namespaces: the task selects no collection: namespaces.include[0] `shop\\.orders` selects shop.orders, but namespaces.exclude[0] `shop\\..*` removes shop.orders"}},
		{name: "no include, everything excluded", exclude: []string{`shop\..*`, `crm\..*`}, excluded: true,
			err: []string{"with no namespaces.include every collection is selected, but namespaces.exclude[0] `shop\\..*` removes shop.orders and shop.users, " +
				"and namespaces.exclude[1] `crm\\..*` removes crm.leads"}},
		{name: "some excluded, some kept", exclude: []string{`shop\.users`}, selected: []string{"shop.orders", "crm.leads"}, excluded: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewMapper(config.Namespaces{Include: tc.include, Exclude: tc.exclude}, "mongoferry")
			if err != nil {
				t.Fatal(err)
			}
			s := m.Select(source)
			var got []string
			for _, n := range s.Selected {
				got = append(got, n.String())
			}
			if strings.Join(got, ",") != strings.Join(tc.selected, ",") {
				t.Errorf("selected %v, want %v", got, tc.selected)
			}
			warnings := strings.Join(s.Warnings, "\n")
			for _, w := range tc.warn {
				if !strings.Contains(warnings, w) {
					t.Errorf("warnings %q: want %q", warnings, w)
				}
			}
			for _, w := range tc.notWarn {
				if strings.Contains(warnings, w) {
					t.Errorf("warnings %q: want no %q", warnings, w)
				}
			}
			if len(tc.warn) == 0 && len(s.Warnings) > 0 {
				t.Errorf("warnings %q, want none", s.Warnings)
			}
			if len(tc.warn) > 0 && strings.Contains(warnings, "selects no collection") && tc.excluded {
				t.Errorf("warning %q blames the include for what the exclude removed", warnings)
			}
			if s.Excluded != tc.excluded {
				t.Errorf("Excluded %v, want %v", s.Excluded, tc.excluded)
			}
			err = s.Err()
			if len(tc.err) == 0 {
				if err != nil {
					t.Errorf("Err: %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrEmptySelection) {
				t.Fatalf("Err: %v, want ErrEmptySelection", err)
			}
			for _, w := range tc.err {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Err %q: want %q", err, w)
				}
			}
		})
	}
	m, _ := NewMapper(config.Namespaces{}, "mongoferry")
	if err := m.Select(nil).Err(); !errors.Is(err, ErrEmptySelection) || !strings.Contains(err.Error(), "the source holds no collection") {
		t.Errorf("empty source: %v, want ErrEmptySelection saying the source holds no collection", err)
	}
}

func TestCollisions(t *testing.T) {
	source := []Namespace{{"crm", "customers"}, {"crm", "leads"}, {"shop", "customers"}, {"shop", "orders"}}
	for _, tc := range []struct {
		name    string
		ns      config.Namespaces
		want    []string // in the error; none when it is nil
		notWant string
	}{
		{name: "no renames"},
		{name: "a database renamed onto a free name", ns: config.Namespaces{Rename: []config.Rename{{From: "crm", To: "sales"}}}},
		{name: "a database renamed onto a selected one", ns: config.Namespaces{Rename: []config.Rename{{From: "crm", To: "shop"}}},
			want: []string{"crm.customers (by namespaces.rename[0]) and shop.customers (keeps its name) would both be written to shop.customers",
				"exclude one of them", "rename one elsewhere", "nothing was written"},
			notWant: "leads"},
		{name: "the same, with the clash excluded", ns: config.Namespaces{Rename: []config.Rename{{From: "crm", To: "shop"}}, Exclude: []string{`shop\.customers`}}},
		{name: "a collection renamed onto a selected one",
			ns:   config.Namespaces{Rename: []config.Rename{{From: "crm", To: "archive"}, {From: "crm.leads", To: "shop.orders"}}},
			want: []string{"crm.leads (by namespaces.rename[1]) and shop.orders (keeps its name) would both be written to shop.orders"}},
		{name: "two renames onto one name from different rules",
			ns:   config.Namespaces{Rename: []config.Rename{{From: "crm.leads", To: "x.y"}, {From: "shop.orders", To: "x.y"}}},
			want: []string{"crm.leads (by namespaces.rename[0]) and shop.orders (by namespaces.rename[1]) would both be written to x.y"}},
		{name: "a swap is fine",
			ns: config.Namespaces{Rename: []config.Rename{{From: "crm", To: "shop"}, {From: "shop", To: "crm"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewMapper(tc.ns, "mongoferry")
			if err != nil {
				t.Fatal(err)
			}
			err = m.Collisions(m.Select(source).Selected)
			if len(tc.want) == 0 {
				if err != nil {
					t.Errorf("Collisions: %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrNamespaceCollision) {
				t.Fatalf("Collisions: %v, want ErrNamespaceCollision", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Collisions %q: want %q", err, w)
				}
			}
			if tc.notWant != "" && strings.Contains(err.Error(), tc.notWant) {
				t.Errorf("Collisions %q names %q, which does not collide", err, tc.notWant)
			}
		})
	}
}

// TestClaims: replay's record of which source collection each target
// collection receives refuses a collection created (or renamed) on the
// source onto a target name another one holds, and frees names on drop.
func TestClaims(t *testing.T) {
	m, err := NewMapper(config.Namespaces{Rename: []config.Rename{{From: "crm", To: "shop"}}}, "mongoferry")
	if err != nil {
		t.Fatal(err)
	}
	orders, crmOrders, crmLeads := Namespace{"shop", "orders"}, Namespace{"crm", "orders"}, Namespace{"crm", "leads"}
	c := NewClaims(m, []Namespace{orders})
	if err := c.Claim(orders); err != nil {
		t.Fatalf("claiming its own name again: %v", err)
	}
	if err := c.Claim(crmLeads); err != nil {
		t.Fatalf("a free target name: %v", err)
	}
	err = c.Claim(crmOrders)
	if !errors.Is(err, ErrNamespaceCollision) || !strings.Contains(err.Error(), "shop.orders (keeps its name) and crm.orders (by namespaces.rename[0]) would both be written to shop.orders") {
		t.Fatalf("crm.orders onto shop.orders: %v, want ErrNamespaceCollision naming both", err)
	}
	c.Release(orders)
	if err := c.Claim(crmOrders); err != nil {
		t.Fatalf("after shop.orders was dropped: %v", err)
	}
	if err := c.Claim(orders); !errors.Is(err, ErrNamespaceCollision) {
		t.Fatalf("shop.orders recreated onto crm.orders's target: %v, want ErrNamespaceCollision", err)
	}
	c.ReleaseDB("crm")
	if err := c.Claim(orders); err != nil {
		t.Fatalf("after crm was dropped: %v", err)
	}
}

// TestSelectionWaiting checks the message of a replaying task whose
// include selects nothing yet: it says so plainly, names the patterns and
// the source's databases, and that later collections will be replayed.
func TestSelectionWaiting(t *testing.T) {
	source := []Namespace{{"shop", "orders"}, {"crm", "leads"}}
	m, err := NewMapper(config.Namespaces{Include: []string{`nosuch\..*`, `other\.x`}}, "mongoferry")
	if err != nil {
		t.Fatal(err)
	}
	got := m.Select(source).Waiting([]string{`nosuch\..*`, `other\.x`})
	for _, want := range []string{
		"nothing is selected yet, so the copy is empty; collections created later that match namespaces.include `nosuch\\..*`, `other\\.x` will be replayed.",
		"namespaces.include[0] `nosuch\\..*` selects no collection on the source (its databases are shop and crm)",
		"namespaces.include[1] `other\\.x`",
		"If this is not intended, stop the task and change namespaces.include",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Waiting:\n%s\nwant %q", got, want)
		}
	}
	if got := m.Select(append(source, Namespace{"nosuch", "a"})).Waiting(nil); got != "" {
		t.Errorf("Waiting with a selected collection = %q, want empty", got)
	}
}
