package config

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/connstring"
)

// FieldError is one problem with one field: which field, what is wrong and
// what to do about it.
type FieldError struct {
	Field   string
	Message string
}

func (e FieldError) Error() string { return e.Field + ": " + e.Message }

// ValidationError lists every problem found in a task.
type ValidationError []FieldError

func (v ValidationError) Error() string {
	lines := make([]string, len(v))
	for i, e := range v {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// ErrInvalid is wrapped by every validation failure.
var ErrInvalid = errors.New("invalid task")

// Is lets errors.Is(err, ErrInvalid) match a ValidationError.
func (v ValidationError) Is(target error) bool { return target == ErrInvalid }

// MinMaxBytes is the smallest cache.maxBytes accepted: one 16 MiB document
// (the BSON limit) must fit.
const MinMaxBytes = 16 << 20

// MinPendingBytes is the smallest verify.maxPendingBytes accepted: room
// for a few hundred mismatches.
const MinPendingBytes = 64 << 10

// InternalDatabases are never copied and may not be a rename target.
var InternalDatabases = []string{"admin", "local", "config"}

var namePattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,62}$`)

// Validate checks a CLI task file.
func (t *Task) Validate() error {
	var errs ValidationError
	if !namePattern.MatchString(t.Name) {
		errs = append(errs, FieldError{"name", fmt.Sprintf("%q is not a valid task name: use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit", t.Name)})
	}
	if err := t.Spec.Validate(); err != nil {
		var v ValidationError
		if errors.As(err, &v) {
			errs = append(errs, v...)
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// Validate checks a spec whose defaults have been set. It reports every
// problem, each naming the field and the fix.
func (s *Spec) Validate() error {
	var errs ValidationError
	add := func(field, format string, args ...any) {
		errs = append(errs, FieldError{field, fmt.Sprintf(format, args...)})
	}

	oneOf(add, "mode", string(s.Mode), ModeFull, ModeIncremental, ModeFullAndIncremental)
	src := validateEndpoint(add, "source", &s.Source)
	dst := validateEndpoint(add, "target", &s.Target)
	if src != nil && dst != nil && sameHosts(src.Hosts, dst.Hosts) && src.Database == dst.Database {
		add("target.uri", "names the same deployment as source.uri (%s); a task copies from one deployment to another: point target.uri at the destination",
			strings.Join(src.Hosts, ","))
	}

	validateNamespaces(add, s.Namespaces, s.Checkpoint.Database)

	intRange(add, "threads.readers", s.Threads.Readers, 1, 256)
	intRange(add, "threads.writers", s.Threads.Writers, 1, 256)
	intRange(add, "cache.bucketNum", s.Cache.BucketNum, 1, 1024)
	intRange(add, "cache.bucketSize", s.Cache.BucketSize, 1, 1024)
	intRange(add, "cache.batchSize", s.Cache.BatchSize, 1, 100000)
	if n, err := s.Cache.MaxBytes.Bytes(); err != nil {
		add("cache.maxBytes", "%v", err)
	} else if n < MinMaxBytes {
		add("cache.maxBytes", "must be at least %s, got %s: one document may be 16MiB", FormatBytes(MinMaxBytes), FormatBytes(n))
	}

	oneOf(add, "fullSync.onConflict", string(s.FullSync.OnConflict), ConflictOverwrite, ConflictSkip, ConflictFail)
	oneOf(add, "fullSync.indexBuild", string(s.FullSync.IndexBuild), IndexesBefore, IndexesAfter)
	if s.FullSync.RangeDocuments < 1 {
		add("fullSync.rangeDocuments", "must be at least 1, got %d%s", s.FullSync.RangeDocuments, zeroHint(s.FullSync.RangeDocuments))
	}
	oneOf(add, "fullSync.split", string(s.FullSync.Split), SplitAuto, SplitAlways, SplitNever)
	oneOf(add, "fullSync.shardedCopy", string(s.FullSync.ShardedCopy), ShardedCopyPerShard, ShardedCopyRouter)
	s.validateCopyWorkers(add)
	oneOf(add, "incremental.method", string(s.Incremental.Method), MethodOplog, MethodChangeStream)
	oneOf(add, "incremental.idReuseAcrossShards", string(s.Incremental.IDReuseAcrossShards), IDReuseDetect, IDReuseHold)
	if s.Incremental.StartAt != "" {
		if _, err := ParseStartAt(s.Incremental.StartAt); err != nil {
			add("incremental.startAt", "%v", err)
		} else if s.Mode != ModeIncremental {
			add("incremental.startAt", "only a task in mode incremental starts at a given position (mode %s starts replay where its copy starts): set mode to incremental, or remove startAt", s.Mode)
		}
	}
	oneOf(add, "verify.mode", string(s.Verify.Mode), VerifyNone, VerifyCount, VerifyHash, VerifySample)
	oneOf(add, "cutover.verify", string(s.Cutover.Verify), VerifyNone, VerifyCount, VerifyHash, VerifySample)
	if s.Cutover.MaxLagSeconds < 1 || s.Cutover.MaxLagSeconds > 3600 {
		add("cutover.maxLagSeconds", "must be between 1 and 3600, got %d%s", s.Cutover.MaxLagSeconds, zeroHint(int64(s.Cutover.MaxLagSeconds)))
	}
	if s.Verify.SampleSize < 1 {
		add("verify.sampleSize", "must be at least 1, got %d%s", s.Verify.SampleSize, zeroHint(int64(s.Verify.SampleSize)))
	}
	if s.Verify.IntervalSeconds < 1 {
		add("verify.intervalSeconds", "must be at least 1, got %d%s", s.Verify.IntervalSeconds, zeroHint(int64(s.Verify.IntervalSeconds)))
	}
	intRange(add, "verify.rechecks", s.Verify.Rechecks, 1, 100)
	if n, err := s.Verify.MaxPendingBytes.Bytes(); err != nil {
		add("verify.maxPendingBytes", "%v", err)
	} else if n < MinPendingBytes {
		add("verify.maxPendingBytes", "must be at least %s, got %s", FormatBytes(MinPendingBytes), FormatBytes(n))
	}
	if s.RateLimit < 0 {
		add("rateLimit", "must be 0 (no limit) or a positive number of documents per second, got %d", s.RateLimit)
	}
	if db := s.Checkpoint.Database; db == "" || slices.Contains(InternalDatabases, db) || strings.ContainsAny(db, `/\. "$`) {
		add("checkpoint.database", "%q cannot hold checkpoints: use a plain database name such as %q", db, DefaultDatabase)
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// HasCredentials reports whether the URI embeds a user name or password.
func HasCredentials(uri string) bool {
	cs, err := connstring.Parse(uri)
	return err == nil && (cs.Username != "" || cs.PasswordSet)
}

func validateEndpoint(add func(string, string, ...any), name string, e *Endpoint) *connstring.ConnString {
	oneOf(add, name+".kind", string(e.Kind), KindAuto, KindReplicaSet, KindSharded)
	if e.PasswordFile != "" && e.PasswordEnv != "" {
		add(name+".passwordFile", "set only one of passwordFile and passwordEnv")
	}
	if (e.PasswordFile != "" || e.PasswordEnv != "") && e.Username == "" {
		add(name+".username", "is required when a password is given")
	}
	if len(e.Shards) > 0 && name != "source" {
		add(name+".shards", "lists shard addresses, which only a sharded source reads: remove it (a sharded target is written through mongos)")
	}
	if len(e.Shards) > 0 && e.Kind == KindReplicaSet {
		add(name+".shards", "lists the shards of a sharded source: remove it, or set %s.kind to sharded (or auto)", name)
	}
	validateSharding(add, name, e)
	validateTLS(add, name, e.TLS)
	seen := map[string]int{}
	for i, sh := range e.Shards {
		f := fmt.Sprintf("%s.shards[%d]", name, i)
		if sh.Name == "" {
			add(f+".name", "is required: use the shard's _id from config.shards")
		} else if j, dup := seen[sh.Name]; dup {
			add(f+".name", "%q is listed twice (also %s.shards[%d]): keep one address per shard", sh.Name, name, j)
		} else {
			seen[sh.Name] = i
		}
		if _, err := connstring.ParseAndValidate(sh.URI); err != nil {
			add(f+".uri", "is not a valid MongoDB URI: %s", RedactError(err, sh.URI))
		} else if HasCredentials(sh.URI) {
			add(f+".uri", "contains credentials: shards are reached with %s.username and its password; remove them from the URI", name)
		}
	}
	validateAuth(add, name, e)
	if strings.TrimSpace(e.URI) == "" {
		add(name+".uri", "is required: write it as mongodb://host:port/")
		return nil
	}
	cs, err := connstring.Parse(e.URI)
	if err != nil {
		add(name+".uri", "is not a valid MongoDB URI (%s): %s; write it as mongodb://host:port/?options", Redact(e.URI), RedactError(err, e.URI))
		return nil
	}
	if (cs.Username != "" || cs.PasswordSet) && e.Username != "" {
		add(name+".uri", "contains credentials and %s.username is set too: keep credentials in one place, outside the URI", name)
		return cs
	}
	if m := cs.AuthMechanism; m != "" && cs.Username == "" {
		// The mechanism belongs next to the credentials it reads.
		switch {
		case e.AuthMechanism != "":
			add(name+".uri", "names authMechanism=%s and %s.authMechanism is set too: keep %s.authMechanism and remove the URI option", m, name, name)
		case e.Username != "":
			add(name+".uri", "names authMechanism=%s while the credentials are in %s.username: set %s.authMechanism: %s in the task instead of the URI option", m, name, name, m)
		case strings.EqualFold(m, string(AuthPLAIN)) || strings.HasPrefix(strings.ToUpper(m), "SCRAM"):
			add(name+".uri", "names authMechanism=%s, which needs a username and password: set %s.username with %s.passwordEnv or %s.passwordFile, and %s.authMechanism: %s instead of the URI option",
				m, name, name, name, name, strings.ToUpper(m))
		default:
			if err := cs.Validate(); err != nil {
				add(name+".uri", "is not a valid MongoDB URI (%s): %s; write it as mongodb://host:port/?options", Redact(e.URI), RedactError(err, e.URI))
			}
		}
		return cs
	}
	if err := cs.Validate(); err != nil {
		add(name+".uri", "is not a valid MongoDB URI (%s): %s; write it as mongodb://host:port/?options", Redact(e.URI), RedactError(err, e.URI))
		return nil
	}
	return cs
}

// validateAuth checks an endpoint's authMechanism against its
// credentials: PLAIN and SCRAM need a username and a password,
// MONGODB-X509 a TLS client certificate and no password, MONGODB-AWS a
// secret access key with an access key id; the external mechanisms take
// authSource $external.
func validateAuth(add func(string, string, ...any), name string, e *Endpoint) {
	m := e.AuthMechanism
	if m == "" {
		return
	}
	oneOf(add, name+".authMechanism", string(m), AuthSCRAMSHA1, AuthSCRAMSHA256, AuthPLAIN, AuthX509, AuthAWS)
	password := e.PasswordEnv != "" || e.PasswordFile != ""
	switch m {
	case AuthSCRAMSHA1, AuthSCRAMSHA256, AuthPLAIN:
		if e.Username == "" {
			add(name+".username", "is required with authMechanism %s: set it, with %s.passwordEnv or %s.passwordFile", m, name, name)
		} else if !password {
			add(name+".passwordEnv", "authMechanism %s sends a password: set %s.passwordEnv or %s.passwordFile", m, name, name)
		}
	case AuthX509:
		if password {
			add(name+".authMechanism", "MONGODB-X509 authenticates with the TLS client certificate, not a password: remove %s.passwordEnv and %s.passwordFile", name, name)
		}
		if t := e.TLS; t == nil || !t.Enabled || (t.CertificateKeyFile == "" && t.CertificateFile == "") {
			add(name+".tls", "authMechanism MONGODB-X509 needs a TLS client certificate: set %s.tls.enabled: true and %s.tls.certificateKeyFile (or certificateFile with privateKeyFile)", name, name)
		}
	case AuthAWS:
		if e.Username != "" && !password {
			add(name+".passwordEnv", "MONGODB-AWS with a username (the AWS access key id) needs the secret access key: set %s.passwordEnv or %s.passwordFile, or remove %s.username to take the credentials from the AWS_* environment variables or the pod's AWS role", name, name, name)
		}
	}
	if (m == AuthX509 || m == AuthAWS) && e.AuthSource != "" && e.AuthSource != "$external" {
		add(name+".authSource", "must be $external with authMechanism %s (or left out), got %q", m, e.AuthSource)
	}
}

// validateTLS checks that TLS files are named only with TLS on (the files
// would be ignored and the connection made in plain text), and that an
// endpoint names its client certificate once: certificateKeyFile (one PEM
// with both), or certificateFile with privateKeyFile.
func validateTLS(add func(string, string, ...any), name string, t *TLS) {
	if t == nil {
		return
	}
	files := t.CAFile != "" || t.CertificateKeyFile != "" || t.CertificateFile != "" || t.PrivateKeyFile != ""
	switch {
	case !t.Enabled && files:
		add(name+".tls", "names TLS files while TLS is off, so they would be ignored: set %s.tls.enabled: true", name)
	case t.CertificateKeyFile != "" && (t.CertificateFile != "" || t.PrivateKeyFile != ""):
		add(name+".tls.certificateKeyFile", "names a client certificate and so do certificateFile and privateKeyFile: keep certificateKeyFile (certificate and key in one PEM) or certificateFile with privateKeyFile, not both")
	case t.CertificateFile != "" && t.PrivateKeyFile == "":
		add(name+".tls.privateKeyFile", "is required with certificateFile: name the PEM file of the certificate's private key (a kubernetes.io/tls Secret's tls.key)")
	case t.PrivateKeyFile != "" && t.CertificateFile == "":
		add(name+".tls.certificateFile", "is required with privateKeyFile: name the PEM file of the client certificate (a kubernetes.io/tls Secret's tls.crt)")
	}
}

// validateNamespaces checks the namespaces section: its patterns, renames
// and filters.
func validateNamespaces(add func(string, string, ...any), ns Namespaces, checkpointDB string) {
	for i, expr := range ns.Include {
		if _, err := regexp.Compile(expr); err != nil {
			add(fmt.Sprintf("namespaces.include[%d]", i), "invalid regular expression %q: %v", expr, unwrapRegexp(err))
		}
	}
	for i, expr := range ns.Exclude {
		if _, err := regexp.Compile(expr); err != nil {
			add(fmt.Sprintf("namespaces.exclude[%d]", i), "invalid regular expression %q: %v", expr, unwrapRegexp(err))
		}
	}
	validateRenames(add, ns.Rename, checkpointDB)
	validateFilters(add, ns, checkpointDB)
}

func validateRenames(add func(string, string, ...any), renames []Rename, checkpointDB string) {
	seenFrom := map[string]bool{}
	seenTo := map[string]string{}
	for i, r := range renames {
		f := fmt.Sprintf("namespaces.rename[%d]", i)
		fromColl, toColl := strings.Contains(r.From, "."), strings.Contains(r.To, ".")
		switch {
		case r.From == "" || r.To == "":
			add(f, "from and to are both required, for example {from: sales, to: sales_copy} or {from: sales.orders, to: archive.orders}")
			continue
		case fromColl != toColl:
			add(f, "maps %q to %q: rename a database to a database or db.collection to db.collection", r.From, r.To)
			continue
		}
		db, coll, _ := strings.Cut(r.To, ".")
		if err := CheckDatabaseName(db); err != nil {
			add(f+".to", "%q (the new name of %q) is not a name MongoDB accepts: %v; choose another target name", r.To, r.From, err)
		} else if err := CheckCollectionName(db, coll); toColl && err != nil {
			add(f+".to", "%q (the new name of %q) is not a name MongoDB accepts: %v; choose another target name", r.To, r.From, err)
		} else if slices.Contains(InternalDatabases, db) || db == checkpointDB {
			add(f+".to", "%q is a reserved database: choose another target name", db)
		}
		if seenFrom[r.From] {
			add(f+".from", "%q is renamed twice: keep one rule for it", r.From)
		}
		seenFrom[r.From] = true
		if prev, ok := seenTo[r.To]; ok {
			add(f+".to", "%q is the target of both %q and %q: two sources would be merged into one", r.To, prev, r.From)
		}
		seenTo[r.To] = r.From
	}
}

func oneOf[T ~string](add func(string, string, ...any), field, got string, allowed ...T) {
	for _, a := range allowed {
		if string(a) == got {
			return
		}
	}
	names := make([]string, len(allowed))
	for i, a := range allowed {
		names[i] = string(a)
	}
	add(field, "must be one of %s, got %q", strings.Join(names, ", "), got)
}

// validateCopyWorkers checks fullSync.workers: copy-only workers share a
// copy that one process reads.
func (s *Spec) validateCopyWorkers(add func(string, string, ...any)) {
	intRange(add, "fullSync.workers", s.FullSync.Workers, 1, 64)
	if s.FullSync.Workers <= 1 {
		return
	}
	switch {
	case s.Mode == ModeIncremental:
		add("fullSync.workers", "mode incremental copies nothing, so it has no copy workers: remove fullSync.workers or set it to 1")
	case s.Source.Kind == KindSharded && s.Mode != ModeFull && s.Incremental.Method != MethodChangeStream:
		add("fullSync.workers", "a sharded source replayed shard by shard is copied by one worker per shard (fullSync.shardedCopy), not by copy-only workers: remove fullSync.workers or set it to 1")
	}
}

func intRange(add func(string, string, ...any), field string, v, lo, hi int) {
	if v < lo || v > hi {
		add(field, "must be between %d and %d, got %d%s", lo, hi, v, zeroHint(int64(v)))
	}
}

// zeroHint is added to the message of a number that may not be 0 when it
// is: 0 is refused, not read as "the default" (the SyncTask's schema
// refuses it too).
func zeroHint(v int64) string {
	if v != 0 {
		return ""
	}
	return " (0 is not a default here: leave the field out for its default)"
}

func sameHosts(a, b []string) bool {
	norm := func(hs []string) []string {
		out := make([]string, 0, len(hs))
		for _, h := range hs {
			host, port, err := net.SplitHostPort(h)
			if err != nil {
				host, port = h, "27017"
			}
			host = strings.ToLower(host)
			if host == "localhost" || host == "::1" {
				host = "127.0.0.1"
			}
			out = append(out, net.JoinHostPort(host, port))
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(norm(a), norm(b))
}

// unwrapRegexp drops the "error parsing regexp: " prefix the regexp
// package puts on every message.
func unwrapRegexp(err error) string {
	return strings.TrimPrefix(err.Error(), "error parsing regexp: ")
}

// validateSharding checks target.sharding and target.shardKeys.
func validateSharding(add func(string, string, ...any), name string, e *Endpoint) {
	if name != "target" {
		if e.Sharding != "" {
			add(name+".sharding", "says how a sharded target's collections are sharded: remove it here (set it on target)")
		}
		if len(e.ShardKeys) > 0 {
			add(name+".shardKeys", "gives target collections shard keys: remove it here (set it on target)")
		}
		return
	}
	if e.Sharding != "" {
		oneOf(add, name+".sharding", string(e.Sharding), ShardingMatch, ShardingKeep)
	}
	seen := map[string]int{}
	for i, k := range e.ShardKeys {
		f := fmt.Sprintf("%s.shardKeys[%d]", name, i)
		db, coll, ok := strings.Cut(k.Namespace, ".")
		switch {
		case !ok || db == "" || coll == "":
			add(f+".namespace", "%q is not a collection: write it as db.collection (the name on the target)", k.Namespace)
		default:
			if j, dup := seen[k.Namespace]; dup {
				add(f+".namespace", "%q is listed twice (also %s.shardKeys[%d]): keep one key per collection", k.Namespace, name, j)
			}
			seen[k.Namespace] = i
		}
		if len(k.Fields) == 0 {
			add(f+".fields", "is required: list the key's fields in order, for example [region, userId]")
		}
		fields := map[string]bool{}
		for j, fl := range k.Fields {
			switch {
			case fl == "" || strings.HasPrefix(fl, "$"):
				add(fmt.Sprintf("%s.fields[%d]", f, j), "%q is not a field name a shard key can use", fl)
			case fields[fl]:
				add(fmt.Sprintf("%s.fields[%d]", f, j), "%q appears twice in the key", fl)
			}
			fields[fl] = true
		}
		if k.Hashed != "" && !fields[k.Hashed] {
			add(f+".hashed", "%q is not one of the key's fields %v: name the field to hash", k.Hashed, k.Fields)
		}
		if k.Hashed != "" && k.Unique {
			add(f+".unique", "a hashed shard key cannot be unique: remove unique or hashed")
		}
	}
}
