package config

// Defaults, also written as kubebuilder markers on the fields.
const (
	DefaultReaders        = 4
	DefaultWriters        = 4
	DefaultBucketNum      = 4
	DefaultBucketSize     = 4
	DefaultBatchSize      = 1000
	DefaultMaxBytes       = ByteSize("256MiB")
	DefaultRangeDocuments = 50000
	DefaultSampleSize     = 1000
	DefaultDatabase       = "mongoferry"
	// DefaultCutoverMaxLagSeconds is the lag under which a cut-over
	// proceeds.
	DefaultCutoverMaxLagSeconds = 5
)

// Defaults of the streaming verifier (verify.continuous).
const (
	// DefaultVerifyInterval is the rest between continuous streaming
	// verification passes, in seconds.
	DefaultVerifyInterval = 300
	// DefaultRechecks is how often a streaming mismatch is compared again
	// before it is reported.
	DefaultRechecks = 3
	// DefaultMaxPendingBytes is the streaming verifier's recheck budget.
	DefaultMaxPendingBytes = ByteSize("16MiB")
)

// SetDefaults fills every unset field with its default.
func (s *Spec) SetDefaults() {
	if s.Mode == "" {
		s.Mode = ModeFullAndIncremental
	}
	for _, e := range []*Endpoint{&s.Source, &s.Target} {
		if e.Kind == "" {
			e.Kind = KindAuto
		}
	}
	setInt(&s.Threads.Readers, DefaultReaders)
	setInt(&s.Threads.Writers, DefaultWriters)
	setInt(&s.Cache.BucketNum, DefaultBucketNum)
	setInt(&s.Cache.BucketSize, DefaultBucketSize)
	setInt(&s.Cache.BatchSize, DefaultBatchSize)
	if s.Cache.MaxBytes == "" {
		s.Cache.MaxBytes = DefaultMaxBytes
	}
	if s.FullSync.OnConflict == "" {
		s.FullSync.OnConflict = ConflictFail
	}
	if s.FullSync.CopyIndexes == nil {
		t := true
		s.FullSync.CopyIndexes = &t
	}
	if s.FullSync.IndexBuild == "" {
		s.FullSync.IndexBuild = IndexesAfter
	}
	if s.FullSync.Split == "" {
		s.FullSync.Split = SplitAuto
	}
	if s.FullSync.ShardedCopy == "" {
		s.FullSync.ShardedCopy = ShardedCopyPerShard
	}
	if s.FullSync.Workers == 0 {
		s.FullSync.Workers = 1
	}
	if s.FullSync.RangeDocuments == 0 {
		s.FullSync.RangeDocuments = DefaultRangeDocuments
	}
	if s.Incremental.Method == "" {
		s.Incremental.Method = MethodOplog
	}
	if s.Incremental.IDReuseAcrossShards == "" {
		s.Incremental.IDReuseAcrossShards = IDReuseDetect
	}
	if s.DDL == nil {
		t := true
		s.DDL = &t
	}
	if s.Verify.Mode == "" {
		s.Verify.Mode = VerifyHash
	}
	setInt(&s.Verify.SampleSize, DefaultSampleSize)
	setInt(&s.Verify.IntervalSeconds, DefaultVerifyInterval)
	setInt(&s.Verify.Rechecks, DefaultRechecks)
	if s.Verify.MaxPendingBytes == "" {
		s.Verify.MaxPendingBytes = DefaultMaxPendingBytes
	}
	if s.Checkpoint.Database == "" {
		s.Checkpoint.Database = DefaultDatabase
	}
	if s.Cutover.Verify == "" {
		s.Cutover.Verify = VerifyHash
	}
	setInt(&s.Cutover.MaxLagSeconds, DefaultCutoverMaxLagSeconds)
}

func setInt(p *int, v int) {
	if *p == 0 {
		*p = v
	}
}
