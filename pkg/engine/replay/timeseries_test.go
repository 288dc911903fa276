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
}
