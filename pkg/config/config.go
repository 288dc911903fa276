// Package config is the task model of the `ferry` CLI (YAML task files),
// which is also what the operator renders a SyncTask into for its workers.
// The SyncTask custom resource (api/v1alpha1) has its own source and target
// (credentials and TLS from Secrets) and reuses the other sections of Spec
// as they are: one set of types, defaults and checks, so an option means
// the same thing in both places.
//
// Parts: Task/Spec and their sections (this file), Load (YAML with unknown
// fields rejected), SetDefaults and Validate (defaults.go, validate.go), and
// ByteSize (human byte sizes such as 64MiB).
package config

// Mode says what a task copies.
// +kubebuilder:validation:Enum=full;incremental;fullAndIncremental
type Mode string

// Modes.
const (
	ModeFull               Mode = "full"
	ModeIncremental        Mode = "incremental"
	ModeFullAndIncremental Mode = "fullAndIncremental"
)

// ClusterKind is the topology of a deployment.
// +kubebuilder:validation:Enum=auto;replicaSet;sharded
type ClusterKind string

// Cluster kinds.
const (
	KindAuto       ClusterKind = "auto"
	KindReplicaSet ClusterKind = "replicaSet"
	KindSharded    ClusterKind = "sharded"
)

// ConflictPolicy says what the full copy does with a document whose _id
// already exists on the target.
// +kubebuilder:validation:Enum=overwrite;skip;fail
type ConflictPolicy string

// Conflict policies.
const (
	ConflictOverwrite ConflictPolicy = "overwrite"
	ConflictSkip      ConflictPolicy = "skip"
	ConflictFail      ConflictPolicy = "fail"
)

// IndexBuild says when indexes are created on the target.
// +kubebuilder:validation:Enum=before;after
type IndexBuild string

// Index build times.
const (
	IndexesBefore IndexBuild = "before"
	IndexesAfter  IndexBuild = "after"
)

// RangeSplit says whether a collection is copied in several _id ranges.
// +kubebuilder:validation:Enum=auto;always;never
type RangeSplit string

// Range split modes.
const (
	// SplitAuto splits where the source reads an _id range through its
	// _id index (MongoDB) and copies each collection as one range where
	// every range read scans the whole collection (FerretDB).
	SplitAuto RangeSplit = "auto"
	// SplitAlways splits every collection larger than rangeDocuments.
	SplitAlways RangeSplit = "always"
	// SplitNever copies every collection as one range.
	SplitNever RangeSplit = "never"
)

// ShardedCopy says how a sharded source's full copy reads it.
// +kubebuilder:validation:Enum=perShard;router
type ShardedCopy string

// Sharded copy modes.
const (
	// ShardedCopyPerShard reads each collection sharded on a ranged key
	// from its shards directly, each shard's worker copying the documents
	// its shard owns (docs/sharded.md, "Per-shard copy").
	ShardedCopyPerShard ShardedCopy = "perShard"
	// ShardedCopyRouter reads everything through mongos in one worker.
	ShardedCopyRouter ShardedCopy = "router"
)

// IncrementalMethod is how changes are read from the source.
// +kubebuilder:validation:Enum=oplog;changeStream
type IncrementalMethod string

// Incremental methods.
const (
	MethodOplog        IncrementalMethod = "oplog"
	MethodChangeStream IncrementalMethod = "changeStream"
)

// IDReuse is what replay of a sharded source does about an _id reused
// across shards.
// +kubebuilder:validation:Enum=detect;hold
type IDReuse string

// IDReuse choices.
const (
	IDReuseDetect IDReuse = "detect"
	IDReuseHold   IDReuse = "hold"
)

// VerifyMode is how source and target are compared.
// +kubebuilder:validation:Enum=none;count;hash;sample
type VerifyMode string

// Verify modes.
const (
	VerifyNone   VerifyMode = "none"
	VerifyCount  VerifyMode = "count"
	VerifyHash   VerifyMode = "hash"
	VerifySample VerifyMode = "sample"
)

// Task is a task file for the `ferry` CLI: a name and a Spec.
type Task struct {
	// Name identifies the task; its progress and checkpoint are kept under
	// this name in the target's checkpoint database.
	Name string `json:"name"`
	Spec `json:",inline"`
}

// Spec is what to copy, from where to where, and how hard to push.
type Spec struct {
	// Mode is full (copy once), incremental (replay changes only) or
	// fullAndIncremental (copy, then keep replaying).
	// +kubebuilder:default=fullAndIncremental
	// +optional
	Mode Mode `json:"mode,omitempty"`
	// Source is the deployment data is read from.
	Source Endpoint `json:"source"`
	// Target is the deployment data is written to.
	Target Endpoint `json:"target"`
	// Namespaces selects, filters and renames what is copied.
	// +optional
	Namespaces Namespaces `json:"namespaces,omitempty"`
	// Threads sets read and write concurrency.
	// +kubebuilder:default={}
	// +optional
	Threads Threads `json:"threads,omitempty"`
	// Cache bounds in-flight buffering in documents and bytes.
	// +kubebuilder:default={}
	// +optional
	Cache Cache `json:"cache,omitempty"`
	// FullSync tunes the full copy.
	// +kubebuilder:default={}
	// +optional
	FullSync FullSync `json:"fullSync,omitempty"`
	// Incremental tunes change replay.
	// +kubebuilder:default={}
	// +optional
	Incremental Incremental `json:"incremental,omitempty"`
	// DDL replays collection and index changes (create, drop, rename,
	// createIndexes, ...) when true.
	// +kubebuilder:default=true
	// +optional
	DDL *bool `json:"ddl,omitempty"`
	// Verify compares source and target after the copy.
	// +kubebuilder:default={}
	// +optional
	Verify Verify `json:"verify,omitempty"`
	// RateLimit is a ceiling on documents read from the source per second
	// during the copy; 0 means no limit. It holds for the whole task:
	// processes that copy at once (fullSync.workers, one worker per shard
	// of a sharded source) each take an equal share.
	// +kubebuilder:validation:Minimum=0
	// +optional
	RateLimit int64 `json:"rateLimit,omitempty"`
	// Checkpoint says where progress is kept.
	// +kubebuilder:default={}
	// +optional
	Checkpoint Checkpoint `json:"checkpoint,omitempty"`
	// Cutover ends the sync: once requested, the replay catches up, drains
	// to the source's newest position, verifies and finalizes the target.
	// +kubebuilder:default={}
	// +optional
	Cutover Cutover `json:"cutover,omitempty"`
	// Suspend stops the workers and keeps the checkpoint.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// Endpoint is one MongoDB deployment.
type Endpoint struct {
	// URI is a mongodb:// or mongodb+srv:// URI without credentials.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	URI string `json:"uri"`
	// Kind is the topology; auto asks the server.
	// +kubebuilder:default=auto
	// +optional
	Kind ClusterKind `json:"kind,omitempty"`
	// Shards overrides the shard addresses read from config.shards of a
	// sharded source.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	Shards []Shard `json:"shards,omitempty"`
	// Sharding says what to do with a sharded target's collections
	// (target only): match shards each one like the source's collection
	// (or as shardKeys says) before the copy writes to it and stops on one
	// already sharded on another key; keep uses such a collection as it is.
	// +kubebuilder:validation:Enum=match;keep
	// +optional
	Sharding TargetSharding `json:"sharding,omitempty"`
	// ShardKeys gives target collections a shard key of their own (target
	// only): for a replica-set source, or to change a key.
	// +optional
	// +listType=map
	// +listMapKey=namespace
	// +kubebuilder:validation:MaxItems=1024
	ShardKeys []ShardKey `json:"shardKeys,omitempty"`
	// Username to authenticate as.
	// +optional
	Username string `json:"username,omitempty"`
	// PasswordFile is a file holding the password (for example a mounted
	// Secret key).
	// +optional
	PasswordFile string `json:"passwordFile,omitempty"`
	// PasswordEnv is an environment variable holding the password.
	// +optional
	PasswordEnv string `json:"passwordEnv,omitempty"`
	// AuthSource is the database the user is defined in: admin by
	// default, $external with PLAIN, MONGODB-X509 and MONGODB-AWS.
	// +optional
	AuthSource string `json:"authSource,omitempty"`
	// AuthMechanism is how the user authenticates; the server's choice
	// (SCRAM) when empty. PLAIN sends username and password to an LDAP
	// directory (or FerretDB); MONGODB-X509 authenticates with the TLS
	// client certificate (tls.certificateKeyFile, no password);
	// MONGODB-AWS with an AWS access key id and secret access key as
	// username and password, or without them from the AWS_* environment
	// variables or the pod's AWS role.
	// +optional
	AuthMechanism AuthMechanism `json:"authMechanism,omitempty"`
	// TLS settings.
	// +optional
	TLS *TLS `json:"tls,omitempty"`
}

// AuthMechanism is an authentication mechanism of MongoDB.
// +kubebuilder:validation:Enum=SCRAM-SHA-1;SCRAM-SHA-256;PLAIN;MONGODB-X509;MONGODB-AWS
type AuthMechanism string

// Authentication mechanisms.
const (
	AuthSCRAMSHA1   AuthMechanism = "SCRAM-SHA-1"
	AuthSCRAMSHA256 AuthMechanism = "SCRAM-SHA-256"
	AuthPLAIN       AuthMechanism = "PLAIN"
	AuthX509        AuthMechanism = "MONGODB-X509"
	AuthAWS         AuthMechanism = "MONGODB-AWS"
)

// External reports whether the mechanism's users are defined outside the
// server (an LDAP directory, a certificate, AWS IAM), whose authSource is
// $external.
func (m AuthMechanism) External() bool {
	return m == AuthPLAIN || m == AuthX509 || m == AuthAWS
}

// DefaultAuthSource is the authSource an endpoint with mechanism m and no
// authSource of its own uses: $external for PLAIN, MONGODB-X509 and
// MONGODB-AWS, admin otherwise.
func DefaultAuthSource(m AuthMechanism) string {
	if m.External() {
		return "$external"
	}
	return "admin"
}

// TargetSharding is target.sharding.
type TargetSharding string

// Target sharding modes.
const (
	ShardingMatch TargetSharding = "match"
	ShardingKeep  TargetSharding = "keep"
)

// ShardKey is the shard key one target collection gets.
type ShardKey struct {
	// Namespace is the collection on the target ("db.collection", after
	// renames).
	// +kubebuilder:validation:MinLength=3
	Namespace string `json:"namespace"`
	// Fields are the key's fields in order.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	Fields []string `json:"fields"`
	// Hashed names the one field of Fields that is hashed, if any.
	// +optional
	Hashed string `json:"hashed,omitempty"`
	// Unique makes the shard key's index unique.
	// +optional
	Unique bool `json:"unique,omitempty"`
}

// Shard is the address of one shard's replica set.
type Shard struct {
	// Name is the shard's _id in config.shards.
	Name string `json:"name"`
	// URI reaches the shard's replica set.
	// +kubebuilder:validation:MaxLength=2048
	URI string `json:"uri"`
}

// TLS configures transport security.
type TLS struct {
	// Enabled turns TLS on.
	Enabled bool `json:"enabled,omitempty"`
	// CAFile is a PEM file of trusted certificate authorities.
	// +optional
	CAFile string `json:"caFile,omitempty"`
	// CertificateKeyFile is a PEM file with the client certificate and key.
	// +optional
	CertificateKeyFile string `json:"certificateKeyFile,omitempty"`
	// CertificateFile is a PEM file with the client certificate alone (a
	// kubernetes.io/tls Secret's tls.crt), its key in PrivateKeyFile: set
	// both, or CertificateKeyFile instead.
	// +optional
	CertificateFile string `json:"certificateFile,omitempty"`
	// PrivateKeyFile is a PEM file with the private key of CertificateFile
	// (a kubernetes.io/tls Secret's tls.key).
	// +optional
	PrivateKeyFile string `json:"privateKeyFile,omitempty"`
	// InsecureSkipVerify disables server certificate checks.
	// +optional
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
}

// Namespaces selects and renames namespaces (db.collection) and filters
// their documents.
type Namespaces struct {
	// Include lists regular expressions on db.collection; empty means all.
	// +optional
	Include []string `json:"include,omitempty"`
	// Exclude lists regular expressions on db.collection; exclusion wins.
	// +optional
	Exclude []string `json:"exclude,omitempty"`
	// Rename maps a database (from: db) or a collection (from: db.coll) to
	// a new name on the target.
	// +optional
	Rename []Rename `json:"rename,omitempty"`
	// Filters keep only the documents of a namespace that match a query,
	// one filter per namespace; the other selected namespaces are copied
	// whole.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	Filters []Filter `json:"filters,omitempty"`
}

// Filter selects the documents of one namespace by a MongoDB query.
type Filter struct {
	// Namespace is the db.collection the filter applies to, or a regular
	// expression that must match the whole db.collection, as include and
	// exclude take. It must name namespaces the task selects.
	// +kubebuilder:validation:MinLength=1
	Namespace string `json:"namespace"`
	// Query is a MongoDB query document, as find takes it: {tenant: acme}
	// or {createdAt: {$gte: {$date: "2025-01-01T00:00:00Z"}}} (Extended
	// JSON for the types JSON lacks). Supported: equality, $eq $ne $gt
	// $gte $lt $lte $in $nin $exists $type $regex $not $elemMatch $size
	// $all $mod $and $or $nor; operators that need more than the document
	// ($where, $expr, $text, geo, $jsonSchema) are refused. Keys are read
	// in no set order (YAML and the Kubernetes API sort them), so compare
	// embedded documents by dotted paths ({a.b: 1, a.c: 2}).
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	Query Query `json:"query"`
}

// Rename maps one source name to one target name.
type Rename struct {
	// From is a database name or db.collection on the source.
	From string `json:"from"`
	// To is the database name or db.collection on the target.
	To string `json:"to"`
}

// Threads sets concurrency.
type Threads struct {
	// Readers is the number of parallel source readers.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=256
	// +kubebuilder:default=4
	// +optional
	Readers int `json:"readers,omitempty"`
	// Writers is the number of parallel target writers.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=256
	// +kubebuilder:default=4
	// +optional
	Writers int `json:"writers,omitempty"`
}

// Cache bounds in-flight data: BucketNum queues of BucketSize batches of
// BatchSize documents, and never more than MaxBytes in all.
type Cache struct {
	// BucketNum is the number of queues between readers and writers.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:default=4
	// +optional
	BucketNum int `json:"bucketNum,omitempty"`
	// BucketSize is the number of batches one queue holds.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:default=4
	// +optional
	BucketSize int `json:"bucketSize,omitempty"`
	// BatchSize is the number of documents in one write batch.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	// +kubebuilder:default=1000
	// +optional
	BatchSize int `json:"batchSize,omitempty"`
	// MaxBytes caps the bytes of documents in flight, for example 256MiB.
	// +kubebuilder:default="256MiB"
	// +optional
	MaxBytes ByteSize `json:"maxBytes,omitempty"`
}

// FullSync tunes the full copy.
type FullSync struct {
	// OnConflict says what to do with a document whose _id already exists
	// on the target: overwrite it, skip it, or fail the task.
	// +kubebuilder:default=fail
	// +optional
	OnConflict ConflictPolicy `json:"onConflict,omitempty"`
	// CopyIndexes creates the source's indexes on the target.
	// +kubebuilder:default=true
	// +optional
	CopyIndexes *bool `json:"copyIndexes,omitempty"`
	// IndexBuild is before (create indexes, then copy) or after (copy,
	// then build indexes; faster).
	// +kubebuilder:default=after
	// +optional
	IndexBuild IndexBuild `json:"indexBuild,omitempty"`
	// DropTarget drops each target collection before copying into it.
	// +optional
	DropTarget bool `json:"dropTarget,omitempty"`
	// RangeDocuments is about how many documents one copy range holds;
	// finished ranges are not copied again after a restart.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:default=50000
	// +optional
	RangeDocuments int64 `json:"rangeDocuments,omitempty"`
	// Split says whether collections larger than rangeDocuments are copied
	// in several _id ranges (parallel reads, finer resume): auto splits
	// where the source reads a range through its _id index (MongoDB) and
	// copies a collection as one range where each range read would scan
	// the whole collection (FerretDB); always and never force it.
	// +kubebuilder:default=auto
	// +optional
	Split RangeSplit `json:"split,omitempty"`
	// ShardedCopy says how a sharded source is copied: perShard reads each
	// collection sharded on a ranged key from its shards directly, every
	// shard's worker copying what its shard owns, with chunks moving
	// (docs/sharded.md, "Per-shard copy"); router reads everything through
	// mongos in one worker. Unsharded collections and collections sharded
	// on a hashed key are read through mongos either way, and so is every
	// collection of a task that does not replay each shard's oplog (mode
	// full, or incremental.method changeStream).
	// +kubebuilder:default=perShard
	// +optional
	ShardedCopy ShardedCopy `json:"shardedCopy,omitempty"`
	// Workers is how many processes copy a replica-set source: above 1,
	// the task's run and workers-1 copy-only workers (the operator's
	// <name>-copy pods, or ferry run --copy-only) share the collections'
	// _id ranges through leases on the target, a killed worker's range
	// taken over by another. A collection copied as one range (see
	// split) is copied by one of them. A sharded source replayed shard
	// by shard is copied by its shards' workers instead (shardedCopy), so
	// it takes 1 only; one read through mongos (mode full, or
	// incremental.method changeStream) shares its ranges like a replica
	// set's.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	// +kubebuilder:default=1
	// +optional
	Workers int `json:"workers,omitempty"`
}

// Incremental tunes change replay.
type Incremental struct {
	// Method reads changes from the oplog or from a change stream.
	// +kubebuilder:default=oplog
	// +optional
	Method IncrementalMethod `json:"method,omitempty"`
	// StartAt is where a task in mode incremental with no checkpoint yet
	// starts replaying: an oplog position written "seconds,increment"
	// (entries after it are replayed) or an RFC 3339 time (entries from
	// that second on). Empty starts at the source's newest entry. A reverse
	// sync starts at the position recorded at cut-over. Once the task has
	// a checkpoint it resumes from there and StartAt is not read again. It
	// must still be in the source's oplog (else OplogWindowLost).
	// +kubebuilder:validation:MaxLength=64
	// +optional
	StartAt string `json:"startAt,omitempty"`
	// IDReuseAcrossShards is what replay of a sharded source does about
	// an _id moved to another shard by the application (a document
	// deleted on one shard and another with its _id inserted on a second
	// one, in a collection whose shard key does not start with _id).
	// Every write is filtered on its whole document key, and a write that
	// meets another document with its _id waits for the other shards'
	// subtasks, then goes again or, the other document being newer, is
	// stepped over and logged with the namespace and _id
	// (docs/sharded.md). detect (the default) does that; hold, which held
	// every such insert, is kept as a name for the same and logs that it
	// is no longer needed.
	// +kubebuilder:default=detect
	// +optional
	IDReuseAcrossShards IDReuse `json:"idReuseAcrossShards,omitempty"`
}

// Verify configures the comparison of source and target.
type Verify struct {
	// Mode is none, count, hash (an order-independent hash per collection,
	// with differing documents listed) or sample.
	// +kubebuilder:default=hash
	// +optional
	Mode VerifyMode `json:"mode,omitempty"`
	// SampleSize is the number of documents compared per collection in
	// sample mode.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:default=1000
	// +optional
	SampleSize int `json:"sampleSize,omitempty"`
	// Continuous runs the streaming verifier while the task streams: it
	// compares every document by _id in batches while the source keeps
	// changing, compares a mismatch again once replay has applied the
	// source's position from when it was seen, and reports only those
	// that persist. A pass starts every intervalSeconds after the last
	// one ended. Without it, a pass runs on demand (POST /verify on the
	// worker, or ferry verify --streaming).
	// +optional
	Continuous bool `json:"continuous,omitempty"`
	// IntervalSeconds is the rest between two continuous passes.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:default=300
	// +optional
	IntervalSeconds int `json:"intervalSeconds,omitempty"`
	// Rechecks is how many times the streaming verifier compares a
	// mismatch again, each time after replay has passed the source's
	// position from the previous comparison, before it reports it.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:default=3
	// +optional
	Rechecks int `json:"rechecks,omitempty"`
	// MaxPendingBytes caps the memory of the streaming verifier's set of
	// mismatches waiting for a recheck (each costs its _id's bytes and
	// about 100 bytes more). When it is full the verifier rechecks what it
	// can, then counts further mismatches as not rechecked and says so in
	// its status: none is dropped silently.
	// +kubebuilder:default="16MiB"
	// +optional
	MaxPendingBytes ByteSize `json:"maxPendingBytes,omitempty"`
}

// Cutover is the end of a sync, when the application moves from the source
// to the target. Once Requested, the task waits until its lag is at most
// MaxLagSeconds, optionally blocks user writes on the source
// (setUserWriteBlockMode, MongoDB 6.0 and later), replays up to the
// source's newest oplog position, verifies with Verify, finalizes the
// target (indexes and options held back during the sync are restored) and
// completes. Each step is recorded in the checkpoint database, so a
// restarted worker goes on from the step it reached.
type Cutover struct {
	// Requested starts the cut-over.
	// +optional
	Requested bool `json:"requested,omitempty"`
	// BlockSourceWrites blocks user writes on the source before the final
	// drain (setUserWriteBlockMode; MongoDB 6.0 and later, and a user
	// with the setUserWriteBlockMode privilege). When false the
	// application must stop writing to the source itself: writes made
	// after the drain are not copied.
	// +optional
	BlockSourceWrites bool `json:"blockSourceWrites,omitempty"`
	// Verify is the comparison run after the final drain: none, count,
	// hash or sample.
	// +kubebuilder:default=hash
	// +optional
	Verify VerifyMode `json:"verify,omitempty"`
	// MaxLagSeconds is the lag under which the cut-over proceeds.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	// +kubebuilder:default=5
	// +optional
	MaxLagSeconds int `json:"maxLagSeconds,omitempty"`
}

// Checkpoint says where progress and checkpoints are kept.
type Checkpoint struct {
	// Database on the target that holds copy progress and checkpoints.
	// +kubebuilder:default=mongoferry
	// +optional
	Database string `json:"database,omitempty"`
}

// ReplayDDL reports whether DDL is replayed (true unless set to false).
func (s *Spec) ReplayDDL() bool { return s.DDL == nil || *s.DDL }

// CopyIndexesEnabled reports whether indexes are copied (true unless set to false).
func (f *FullSync) CopyIndexesEnabled() bool { return f.CopyIndexes == nil || *f.CopyIndexes }
