package oplog

import (
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestTranslateViews: mongod logs createView, collMod of a view and the
// drop of a view as an insert, a replacement and a delete of the view's
// document in <db>.system.views (catalog/durable_view_catalog.cpp), never
// as commands. Each becomes the view DDL it stands for.
func TestTranslateViews(t *testing.T) {
	pipeline := bson.A{bson.D{{Key: "$match", Value: bson.D{{Key: "paid", Value: true}}}}}
	viewDoc := bson.D{{Key: "_id", Value: "shop.paid"}, {Key: "viewOn", Value: "orders"}, {Key: "pipeline", Value: pipeline}}
	id := bson.D{{Key: "_id", Value: "shop.paid"}}
	tests := []struct {
		name    string
		entry   bson.D
		class   CommandClass
		command bson.D
		err     error
	}{
		{"create", with(outer(1, "i", "shop.system.views"), "o", viewDoc), CmdCreate,
			bson.D{{Key: "create", Value: "paid"}, {Key: "viewOn", Value: "orders"}, {Key: "pipeline", Value: pipeline}}, nil},
		{"create with a collation", with(outer(1, "i", "shop.system.views"), "o", append(viewDoc, bson.E{Key: "collation", Value: bson.D{{Key: "locale", Value: "fr"}}})), CmdCreate,
			bson.D{{Key: "create", Value: "paid"}, {Key: "viewOn", Value: "orders"}, {Key: "pipeline", Value: pipeline}, {Key: "collation", Value: bson.D{{Key: "locale", Value: "fr"}}}}, nil},
		{"collMod (the catalog replaces the document)", with(outer(1, "u", "shop.system.views"), "o", bson.D{{Key: "_id", Value: "shop.paid"}, {Key: "viewOn", Value: "archive"}, {Key: "pipeline", Value: bson.A{}}}, "o2", id), CmdCollMod,
			bson.D{{Key: "collMod", Value: "paid"}, {Key: "viewOn", Value: "archive"}, {Key: "pipeline", Value: bson.A{}}}, nil},
		{"drop", with(outer(1, "d", "shop.system.views"), "o", id), CmdDrop, bson.D{{Key: "drop", Value: "paid"}}, nil},
		{"a view of another database", with(outer(1, "i", "shop.system.views"), "o", bson.D{{Key: "_id", Value: "other.v"}, {Key: "viewOn", Value: "x"}}), 0, nil, ErrMalformedEntry},
		{"an update that is not a replacement", with(outer(1, "u", "shop.system.views"), "o", bson.D{{Key: "$v", Value: 2}, {Key: "diff", Value: bson.D{}}}, "o2", id), 0, nil, ErrUnsupportedUpdate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws, err := Translate(mustParse(t, tt.entry))
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil || len(ws) != 1 || ws[0].DDL == nil {
				t.Fatalf("Translate = %v, %v; want one DDL", ws, err)
			}
			d := ws[0].DDL
			if d.Class != tt.class || d.NS.String() != "shop.paid" {
				t.Errorf("DDL %s on %s, want %s on shop.paid", d.Class, d.NS, tt.class)
			}
			if got, want := d.Command.String(), marshal(t, tt.command).String(); got != want {
				t.Errorf("command\n got %s\nwant %s", got, want)
			}
		})
	}
}
