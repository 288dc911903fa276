package workload

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name  string
		opts  Options
		field string // "" when valid
	}{
		{"zero value takes defaults", Options{}, ""},
		{"full", Options{Database: "db", Collection: "c", RecordCount: 10, FieldCount: 3, FieldLength: 5, KeyType: KeyInt,
			Workload: WorkloadB, Distribution: Uniform, Threads: 2, Operations: 5, Duration: time.Second, BatchSize: 3, Rate: 10, Seed: -1}, ""},
		{"mixed with proportions", Options{Workload: WorkloadMixed, InsertProportion: 1, DeleteProportion: 0.5}, ""},
		{"database with dot", Options{Database: "a.b"}, "Database"},
		{"database too long", Options{Database: strings.Repeat("d", 64)}, "Database"},
		{"system collection", Options{Collection: "system.users"}, "Collection"},
		{"collection with dollar", Options{Collection: "a$b"}, "Collection"},
		{"negative records", Options{RecordCount: -1}, "RecordCount"},
		{"negative fields", Options{FieldCount: -1}, "FieldCount"},
		{"too many fields", Options{FieldCount: maxFieldCount + 1}, "FieldCount"},
		{"negative field length", Options{FieldLength: -3}, "FieldLength"},
		{"document over 16 MiB", Options{FieldCount: 100, FieldLength: 200 << 10}, "FieldLength"},
		{"unknown key type", Options{KeyType: "uuid"}, "KeyType"},
		{"unknown workload", Options{Workload: "d"}, "Workload"},
		{"unknown distribution", Options{Distribution: "latest"}, "Distribution"},
		{"proportion without mixed", Options{Workload: WorkloadA, DeleteProportion: 0.1}, "DeleteProportion"},
		{"negative proportion", Options{Workload: WorkloadMixed, ReadProportion: -1}, "ReadProportion"},
		{"NaN proportion", Options{Workload: WorkloadMixed, UpdateProportion: math.NaN()}, "UpdateProportion"},
		{"infinite proportion", Options{Workload: WorkloadMixed, InsertProportion: math.Inf(1)}, "InsertProportion"},
		{"negative threads", Options{Threads: -1}, "Threads"},
		{"too many threads", Options{Threads: maxThreads + 1}, "Threads"},
		{"negative operations", Options{Operations: -1}, "Operations"},
		{"negative duration", Options{Duration: -time.Second}, "Duration"},
		{"negative batch", Options{BatchSize: -1}, "BatchSize"},
		{"huge batch", Options{BatchSize: maxBatchSize + 1}, "BatchSize"},
		{"negative rate", Options{Rate: -5}, "Rate"},
		{"infinite rate", Options{Rate: math.Inf(1)}, "Rate"},
		{"negative progress interval", Options{ProgressInterval: -time.Second}, "ProgressInterval"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var oe *OptionError
			if !errors.As(err, &oe) {
				t.Fatalf("Validate() = %v, want an *OptionError for %s", err, tc.field)
			}
			if oe.Field != tc.field {
				t.Errorf("Field = %q, want %q (error: %v)", oe.Field, tc.field, err)
			}
			if !errors.Is(err, ErrInvalidOptions) {
				t.Errorf("error does not wrap ErrInvalidOptions: %v", err)
			}
			if !strings.HasPrefix(err.Error(), tc.field+": ") || oe.Fix == "" {
				t.Errorf("message %q should start with the field and say what to do", err)
			}
		})
	}
}

func TestWithDefaults(t *testing.T) {
	o := Options{}.WithDefaults()
	want := Options{Database: DefaultDatabase, Collection: DefaultCollection, FieldCount: 10, FieldLength: 100,
		KeyType: KeyString, Workload: WorkloadA, Distribution: Zipfian, Threads: DefaultThreads,
		BatchSize: DefaultBatchSize, ProgressInterval: DefaultProgressInterval}
	if o.Database != want.Database || o.Collection != want.Collection || o.FieldCount != want.FieldCount ||
		o.FieldLength != want.FieldLength || o.KeyType != want.KeyType || o.Workload != want.Workload ||
		o.Distribution != want.Distribution || o.Threads != want.Threads || o.BatchSize != want.BatchSize ||
		o.ProgressInterval != want.ProgressInterval {
		t.Errorf("WithDefaults() = %+v, want %+v", o, want)
	}
	kept := Options{FieldCount: 3, Threads: 7}.WithDefaults()
	if kept.FieldCount != 3 || kept.Threads != 7 {
		t.Errorf("WithDefaults overwrote set fields: %+v", kept)
	}
}

func TestMix(t *testing.T) {
	tests := []struct {
		opts Options
		want Mix
	}{
		{Options{}, Mix{Read: 0.5, Update: 0.5}},
		{Options{Workload: WorkloadA}, Mix{Read: 0.5, Update: 0.5}},
		{Options{Workload: WorkloadB}, Mix{Read: 0.95, Update: 0.05}},
		{Options{Workload: WorkloadC}, Mix{Read: 1}},
		{Options{Workload: WorkloadInsert}, Mix{Insert: 1}},
		{Options{Workload: WorkloadMixed}, DefaultMixed},
		{Options{Workload: WorkloadMixed, ReadProportion: 1, DeleteProportion: 3}, Mix{Read: 1, Delete: 3}},
	}
	for _, tc := range tests {
		if got := tc.opts.Mix(); got != tc.want {
			t.Errorf("Options{Workload: %q, ...}.Mix() = %+v, want %+v", tc.opts.Workload, got, tc.want)
		}
	}
}

func TestPick(t *testing.T) {
	const draws = 200000
	for _, m := range []Mix{{Read: 0.5, Update: 0.5}, {Read: 0.95, Update: 0.05}, {Insert: 1}, {Read: 1, Update: 2, Insert: 3, Delete: 4}} {
		r := &runner{mix: m}
		rng := newTestRand(1)
		var got [numKinds]int
		for range draws {
			got[r.pick(rng)]++
		}
		want := [numKinds]float64{m.Read, m.Update, m.Insert, m.Delete}
		for k := range numKinds {
			share := float64(got[k]) / draws
			exp := want[k] / m.total()
			if math.Abs(share-exp) > 0.01 {
				t.Errorf("mix %+v: %s share %.3f, want %.3f", m, k, share, exp)
			}
		}
	}
}

func TestValidatePhase(t *testing.T) {
	tests := []struct {
		name      string
		opts      Options
		load, run string // the field each check names; "" when valid
	}{
		{"no records", Options{}, "RecordCount", "RecordCount"},
		{"records", Options{RecordCount: 10}, "", ""},
		{"insert-only run needs no records", Options{Workload: WorkloadInsert}, "RecordCount", ""},
		{"mixed without reads, updates or deletes", Options{Workload: WorkloadMixed, InsertProportion: 1}, "RecordCount", ""},
		{"mixed with deletes needs records", Options{Workload: WorkloadMixed, DeleteProportion: 1}, "RecordCount", "RecordCount"},
		{"general problems come first", Options{RecordCount: 5, Threads: -1}, "Threads", "Threads"},
	}
	field := func(err error) string {
		var oe *OptionError
		if errors.As(err, &oe) {
			return oe.Field
		}
		if err != nil {
			return "unexpected: " + err.Error()
		}
		return ""
	}
	for _, tc := range tests {
		if got := field(tc.opts.ValidateLoad()); got != tc.load {
			t.Errorf("%s: ValidateLoad names %q, want %q", tc.name, got, tc.load)
		}
		if got := field(tc.opts.ValidateRun()); got != tc.run {
			t.Errorf("%s: ValidateRun names %q, want %q", tc.name, got, tc.run)
		}
	}
}
