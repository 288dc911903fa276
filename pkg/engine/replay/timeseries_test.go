package replay

import (
	"errors"
	"strings"
	"testing"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// TestCheckReplayable: a task that copies a selected time-series
// collection is refused before the copy, with the namespace and the
// workaround; a task in mode: incremental replays it.
func TestCheckReplayable(t *testing.T) {
	colls := []catalog.Collection{
		{Source: catalog.Namespace{DB: "shop", Coll: "orders"}, Type: "collection"},
		{Source: catalog.Namespace{DB: "shop", Coll: "weather"}, Type: "timeseries"},
	}
	err := CheckReplayable(colls, true)
	if !errors.Is(err, ErrTimeSeriesReplay) {
		t.Fatalf("a copy of shop.weather: %v, want ErrTimeSeriesReplay", err)
	}
	for _, want := range []string{"shop.weather is a time-series collection", `namespaces.exclude: ['shop\.weather']`, "mongodump/mongorestore"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "orders") {
		t.Errorf("error %q names a plain collection", err)
	}
	if err := CheckReplayable(colls, false); err != nil {
		t.Errorf("mode: incremental: %v, want the time-series collection replayed", err)
	}

	// A filter on the time-series collection: refused in every mode, a
	// filter on a plain collection is not.
	_, m := filteredMapper(t, `shop\.weather`, `{"station": "s1"}`, `shop\.orders`, `{"tenant": "a"}`)
	for i := range colls {
		f, err := m.Filter(colls[i].Source)
		if err != nil || f == nil {
			t.Fatalf("filter of %s: %v %v", colls[i].Source, f, err)
		}
		colls[i].Filter = f
	}
	for _, copies := range []bool{true, false} {
		err := CheckReplayable(colls, copies)
		if !errors.Is(err, ErrTimeSeriesFilter) {
			t.Fatalf("copies %v, a filtered shop.weather: %v, want ErrTimeSeriesFilter", copies, err)
		}
		for _, want := range []string{"shop.weather is a time-series collection and has a filter", "remove the filter for shop.weather"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		if strings.Contains(err.Error(), "orders") {
			t.Errorf("error %q names a plain collection", err)
		}
	}
}
