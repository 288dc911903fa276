package workload

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Workload names an operation mix.
type Workload string

// The operation mixes. A, B and C are YCSB's core workloads of the same
// letters; Mixed takes its proportions from Options.
const (
	// WorkloadA is 50% reads and 50% updates (update heavy).
	WorkloadA Workload = "a"
	// WorkloadB is 95% reads and 5% updates (read mostly).
	WorkloadB Workload = "b"
	// WorkloadC is 100% reads (read only).
	WorkloadC Workload = "c"
	// WorkloadInsert is 100% inserts of new keys.
	WorkloadInsert Workload = "insert"
	// WorkloadMixed uses Options.ReadProportion, UpdateProportion,
	// InsertProportion and DeleteProportion; with all four at zero it is
	// DefaultMixed.
	WorkloadMixed Workload = "mixed"
)

// Distribution names how the run phase picks existing keys.
type Distribution string

// The key distributions.
const (
	// Uniform picks every existing key with the same probability.
	Uniform Distribution = "uniform"
	// Zipfian picks keys with YCSB's scrambled zipfian distribution
	// (constant 0.99): a few keys are hot, and the hot keys are spread
	// over the key space rather than clustered at its start.
	Zipfian Distribution = "zipfian"
)

// KeyType names the type of generated _id values.
type KeyType string

// The key types.
const (
	// KeyString keys are YCSB's: "user" followed by the record number
	// padded to ten digits (user0000000042), so they sort like numbers.
	KeyString KeyType = "string"
	// KeyInt keys are the record number as a 64-bit integer.
	KeyInt KeyType = "int"
)

// Defaults applied to zero fields.
const (
	DefaultDatabase         = "ycsb"
	DefaultCollection       = "usertable"
	DefaultFieldCount       = 10
	DefaultFieldLength      = 100
	DefaultThreads          = 4
	DefaultBatchSize        = 1000
	DefaultProgressInterval = 2 * time.Second
)

// DefaultMixed is the mix of WorkloadMixed when no proportion is set: live
// inserts, updates and deletes, as a sync under load sees them.
var DefaultMixed = Mix{Insert: 0.4, Update: 0.4, Delete: 0.2}

// Limits on options, chosen so that a typo fails fast rather than a
// document exceeding 16 MiB or a million goroutines.
const (
	maxFieldCount = 1000
	maxDocBytes   = 16<<20 - 64<<10
	maxThreads    = 4096
	maxBatchSize  = 100000
)

// ErrInvalidOptions is wrapped by every *OptionError.
var ErrInvalidOptions = errors.New("invalid workload options")

// OptionError says which option is wrong and how to fix it. Field is the
// name of the Options field.
type OptionError struct {
	Field   string
	Value   any
	Problem string
	Fix     string
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("%s: %s (got %v); %s", e.Field, e.Problem, e.Value, e.Fix)
}

// Unwrap returns ErrInvalidOptions.
func (e *OptionError) Unwrap() error { return ErrInvalidOptions }

// Options configures Load and Run. Zero values take the defaults above.
type Options struct {
	// Database and Collection hold the records; ycsb.usertable by default.
	Database, Collection string
	// RecordCount is the number of records Load inserts, keys 0 to
	// RecordCount-1, and the key space Run starts from.
	RecordCount int64
	// FieldCount is the number of fields besides _id (field0...); 10 by
	// default.
	FieldCount int
	// FieldLength is the length of each field's random string; 100 by
	// default.
	FieldLength int
	// KeyType is the _id type; KeyString by default.
	KeyType KeyType
	// Workload is the run phase's operation mix; WorkloadA by default.
	Workload Workload
	// Distribution picks existing keys in the run phase; Zipfian by
	// default.
	Distribution Distribution
	// ReadProportion, UpdateProportion, InsertProportion and
	// DeleteProportion weigh the operations of WorkloadMixed (they need not
	// add up to one). They must be zero for the other workloads.
	ReadProportion, UpdateProportion, InsertProportion, DeleteProportion float64
	// Threads is the number of concurrent clients; DefaultThreads by
	// default.
	Threads int
	// Operations bounds the run phase; 0 means unbounded.
	Operations int64
	// Duration bounds the run phase; 0 means unbounded. Reaching it is not
	// an error.
	Duration time.Duration
	// BatchSize is the number of documents per insertMany in the load
	// phase; DefaultBatchSize by default (at most RecordCount).
	BatchSize int
	// Rate caps operations per second over all threads (documents per
	// second in the load phase); 0 means no cap.
	Rate float64
	// Seed makes documents and operation streams repeatable. Document n of
	// the load phase (and of a run-phase insert) depends only on Seed, n,
	// KeyType, FieldCount and FieldLength: see Options.Document.
	Seed int64
	// Progress, when set, receives a snapshot every ProgressInterval while
	// a phase runs, from one goroutine at a time.
	Progress func(Stats)
	// ProgressInterval is DefaultProgressInterval by default.
	ProgressInterval time.Duration
}

// Mix is the weight of each operation kind in a workload.
type Mix struct {
	Read, Update, Insert, Delete float64
}

// total is the sum of the weights.
func (m Mix) total() float64 { return m.Read + m.Update + m.Insert + m.Delete }

// onlyInserts reports whether the mix never touches existing keys.
func (m Mix) onlyInserts() bool { return m.Read == 0 && m.Update == 0 && m.Delete == 0 }

// Mix returns the operation mix of the options' workload.
func (o Options) Mix() Mix {
	switch o.Workload {
	case WorkloadA, "":
		return Mix{Read: 0.5, Update: 0.5}
	case WorkloadB:
		return Mix{Read: 0.95, Update: 0.05}
	case WorkloadC:
		return Mix{Read: 1}
	case WorkloadInsert:
		return Mix{Insert: 1}
	case WorkloadMixed:
		m := Mix{Read: o.ReadProportion, Update: o.UpdateProportion, Insert: o.InsertProportion, Delete: o.DeleteProportion}
		if m.total() == 0 {
			return DefaultMixed
		}
		return m
	}
	return Mix{}
}

// WithDefaults returns the options with zero fields set to their defaults.
func (o Options) WithDefaults() Options {
	if o.Database == "" {
		o.Database = DefaultDatabase
	}
	if o.Collection == "" {
		o.Collection = DefaultCollection
	}
	if o.FieldCount == 0 {
		o.FieldCount = DefaultFieldCount
	}
	if o.FieldLength == 0 {
		o.FieldLength = DefaultFieldLength
	}
	if o.KeyType == "" {
		o.KeyType = KeyString
	}
	if o.Workload == "" {
		o.Workload = WorkloadA
	}
	if o.Distribution == "" {
		o.Distribution = Zipfian
	}
	if o.Threads == 0 {
		o.Threads = DefaultThreads
	}
	if o.BatchSize == 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.ProgressInterval == 0 {
		o.ProgressInterval = DefaultProgressInterval
	}
	return o
}

// Validate checks the options after defaults are applied and returns the
// first problem as an *OptionError.
func (o Options) Validate() error {
	o = o.WithDefaults()
	bad := func(field string, v any, problem, fix string) error {
		return &OptionError{Field: field, Value: v, Problem: problem, Fix: fix}
	}
	if strings.ContainsAny(o.Database, "/\\. \"$\x00") {
		return bad("Database", o.Database, "database names cannot contain / \\ . space \" $ or NUL", "choose a plain name such as ycsb")
	}
	if len(o.Database) > 63 {
		return bad("Database", o.Database, "database names are at most 63 bytes", "choose a shorter name")
	}
	if strings.ContainsAny(o.Collection, "$\x00") || strings.HasPrefix(o.Collection, "system.") {
		return bad("Collection", o.Collection, "collection names cannot contain $ or NUL or start with system.", "choose a plain name such as usertable")
	}
	if o.RecordCount < 0 {
		return bad("RecordCount", o.RecordCount, "must not be negative", "set the number of records to load (or already loaded)")
	}
	if o.FieldCount < 0 || o.FieldCount > maxFieldCount {
		return bad("FieldCount", o.FieldCount, fmt.Sprintf("must be between 1 and %d", maxFieldCount), "leave it at 0 for the default of 10")
	}
	if o.FieldLength < 0 {
		return bad("FieldLength", o.FieldLength, "must not be negative", "leave it at 0 for the default of 100")
	}
	if int64(o.FieldCount)*int64(o.FieldLength+16) > maxDocBytes {
		return bad("FieldLength", o.FieldLength, fmt.Sprintf("FieldCount x FieldLength makes documents larger than MongoDB's 16 MiB limit (FieldCount %d)", o.FieldCount), "lower FieldCount or FieldLength")
	}
	switch o.KeyType {
	case KeyString, KeyInt:
	default:
		return bad("KeyType", o.KeyType, "unknown key type", `use "string" (user0000000042) or "int"`)
	}
	switch o.Workload {
	case WorkloadA, WorkloadB, WorkloadC, WorkloadInsert, WorkloadMixed:
	default:
		return bad("Workload", o.Workload, "unknown workload", `use "a" (50% read, 50% update), "b" (95/5), "c" (read only), "insert" or "mixed"`)
	}
	switch o.Distribution {
	case Uniform, Zipfian:
	default:
		return bad("Distribution", o.Distribution, "unknown distribution", `use "uniform" or "zipfian"`)
	}
	props := []struct {
		name string
		v    float64
	}{
		{"ReadProportion", o.ReadProportion}, {"UpdateProportion", o.UpdateProportion},
		{"InsertProportion", o.InsertProportion}, {"DeleteProportion", o.DeleteProportion},
	}
	for _, p := range props {
		if p.v < 0 || math.IsNaN(p.v) || math.IsInf(p.v, 0) {
			return bad(p.name, p.v, "must be a non-negative number", "give each operation kind a weight of 0 or more")
		}
		if p.v != 0 && o.Workload != WorkloadMixed {
			return bad(p.name, p.v, fmt.Sprintf("proportions only apply to workload %q, not %q", WorkloadMixed, o.Workload), "set Workload to mixed, or leave the proportions at 0")
		}
	}
	if o.Threads < 0 || o.Threads > maxThreads {
		return bad("Threads", o.Threads, fmt.Sprintf("must be between 1 and %d", maxThreads), "leave it at 0 for the default of 4")
	}
	if o.Operations < 0 {
		return bad("Operations", o.Operations, "must not be negative", "use 0 for no bound")
	}
	if o.Duration < 0 {
		return bad("Duration", o.Duration, "must not be negative", "use 0 for no bound")
	}
	if o.BatchSize < 0 || o.BatchSize > maxBatchSize {
		return bad("BatchSize", o.BatchSize, fmt.Sprintf("must be between 1 and %d", maxBatchSize), "leave it at 0 for the default of 1000")
	}
	if o.Rate < 0 || math.IsNaN(o.Rate) || math.IsInf(o.Rate, 0) {
		return bad("Rate", o.Rate, "must be a non-negative number of operations per second", "use 0 for no cap")
	}
	if o.ProgressInterval < 0 {
		return bad("ProgressInterval", o.ProgressInterval, "must not be negative", "leave it at 0 for the default of 2s")
	}
	return nil
}

// ValidateLoad is Validate plus what the load phase needs: records to
// insert.
func (o Options) ValidateLoad() error {
	if err := o.Validate(); err != nil {
		return err
	}
	if o.RecordCount == 0 {
		return &OptionError{Field: "RecordCount", Value: 0, Problem: "the load phase needs records to insert",
			Fix: "set RecordCount to the number of documents to load"}
	}
	return nil
}

// ValidateRun is Validate plus what the run phase needs: a key space to
// read, update or delete in, unless the workload only inserts.
func (o Options) ValidateRun() error {
	if err := o.Validate(); err != nil {
		return err
	}
	o = o.WithDefaults()
	if !o.Mix().onlyInserts() && o.RecordCount == 0 {
		return &OptionError{Field: "RecordCount", Value: 0,
			Problem: fmt.Sprintf("workload %q reads, updates or deletes existing records", o.Workload),
			Fix:     "set RecordCount to the number of records loaded (the load phase's RecordCount)"}
	}
	return nil
}
