package replay

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
)

// TestDDLCollision: a collection created, or renamed, on the source
// during replay onto a target name another selected collection holds
// stops replay with ErrNamespaceCollision before the target is touched
// (the replayer here has no target: any write would panic); a drop frees
// the name.
func TestDDLCollision(t *testing.T) {
	m, err := catalog.NewMapper(config.Namespaces{Rename: []config.Rename{{From: "crm", To: "shop"}}}, "mongoferry")
	if err != nil {
		t.Fatal(err)
	}
	ns := catalog.ParseNamespace
	r := New(Options{Mapper: m, Spec: &config.Spec{}, Selected: []catalog.Namespace{ns("shop.customers"), ns("crm.leads")}})
	err = r.applyDDL(context.Background(), oplog.DDL{Class: oplog.CmdCreate, NS: ns("crm.customers")})
	if !errors.Is(err, catalog.ErrNamespaceCollision) ||
		!strings.Contains(err.Error(), "shop.customers (keeps its name) and crm.customers (by namespaces.rename[0]) would both be written to shop.customers") ||
		!strings.Contains(err.Error(), "replay stopped before creating shop.customers") {
		t.Fatalf("create crm.customers: %v, want ErrNamespaceCollision naming both", err)
	}
	err = r.applyDDL(context.Background(), oplog.DDL{Class: oplog.CmdRenameCollection, NS: ns("crm.leads"), To: ns("crm.customers")})
	if !errors.Is(err, catalog.ErrNamespaceCollision) {
		t.Fatalf("rename crm.leads to crm.customers: %v, want ErrNamespaceCollision", err)
	}
	for _, step := range []struct {
		d    oplog.DDL
		fail bool
	}{
		{oplog.DDL{Class: oplog.CmdCreate, NS: ns("crm.orders")}, false},
		{oplog.DDL{Class: oplog.CmdCreate, NS: ns("shop.orders")}, true},
		{oplog.DDL{Class: oplog.CmdDrop, NS: ns("crm.orders")}, false},
		{oplog.DDL{Class: oplog.CmdCreate, NS: ns("shop.orders")}, false},
		{oplog.DDL{Class: oplog.CmdDropDatabase, NS: catalog.Namespace{DB: "shop"}}, false},
		{oplog.DDL{Class: oplog.CmdCreate, NS: ns("crm.orders")}, false},
		{oplog.DDL{Class: oplog.CmdRenameCollection, NS: ns("crm.orders"), To: ns("crm.archive")}, false},
		{oplog.DDL{Class: oplog.CmdCreate, NS: ns("shop.orders")}, false},
	} {
		err := r.track(step.d)
		if got := errors.Is(err, catalog.ErrNamespaceCollision); got != step.fail {
			t.Fatalf("%s %s: %v, want a collision: %v", step.d.Class, step.d.NS, err, step.fail)
		}
	}
}
