package replay

import (
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
)

// TestRefuseTimeSeries: every entry a time-series collection writes
// (timeseries/*.cpp: the buckets create, the view over the buckets,
// bucket inserts and updates) stops replay with ErrTimeSeriesReplay when
// the collection is selected, and passes when it is not.
func TestRefuseTimeSeries(t *testing.T) {
	entry := func(op, ns string, o bson.D) oplog.Entry {
		raw, err := bson.Marshal(bson.D{{Key: "ts", Value: bson.Timestamp{T: 9, I: 1}}, {Key: "t", Value: int64(1)}, {Key: "op", Value: op}, {Key: "ns", Value: ns}, {Key: "o", Value: o}, {Key: "o2", Value: bson.D{{Key: "_id", Value: 1}}}})
		if err != nil {
			t.Fatal(err)
		}
		e, err := oplog.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	entries := map[string]oplog.Entry{
		"buckets create":        entry("c", "shop.$cmd", bson.D{{Key: "create", Value: "system.buckets.weather"}, {Key: "timeseries", Value: bson.D{{Key: "timeField", Value: "t"}}}}),
		"view over the buckets": entry("i", "shop.system.views", bson.D{{Key: "_id", Value: "shop.weather"}, {Key: "viewOn", Value: "system.buckets.weather"}, {Key: "pipeline", Value: bson.A{}}}),
		"bucket insert":         entry("i", "shop.system.buckets.weather", bson.D{{Key: "_id", Value: 1}}),
		"bucket update":         entry("u", "shop.system.buckets.weather", bson.D{{Key: "$v", Value: 2}, {Key: "diff", Value: bson.D{}}}),
	}
	for _, tt := range []struct {
		include string
		refused bool
	}{{`shop\..*`, true}, {`shop\.orders`, false}} {
		m, err := catalog.NewMapper(config.Namespaces{Include: []string{tt.include}}, "mongoferry")
		if err != nil {
			t.Fatal(err)
		}
		r := &Replayer{o: Options{Mapper: m}}
		for name, e := range entries {
			if err := r.refuseTimeSeries(e); errors.Is(err, ErrTimeSeriesReplay) != tt.refused {
				t.Errorf("include %s, %s: %v, refused want %v", tt.include, name, err, tt.refused)
			}
		}
	}
	// A plain view is not refused.
	m, _ := catalog.NewMapper(config.Namespaces{}, "mongoferry")
	r := &Replayer{o: Options{Mapper: m}}
	if err := r.refuseTimeSeries(entry("i", "shop.system.views", bson.D{{Key: "_id", Value: "shop.paid"}, {Key: "viewOn", Value: "orders"}})); err != nil {
		t.Errorf("a view of a collection: %v", err)
	}
}
