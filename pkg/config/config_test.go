package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// taskYAML returns a task file between two distinct deployments with extra
// top-level YAML appended.
func taskYAML(extra string) string {
	return endpointsYAML(`uri: "mongodb://10.0.0.1:27017/"`, `uri: "mongodb://10.0.0.2:27017/"`, extra)
}

// endpointsYAML returns a task file with the given source and target
// mappings (without braces) and extra top-level YAML appended.
func endpointsYAML(source, target, extra string) string {
	return "name: orders-move\nsource: {" + source + "}\ntarget: {" + target + "}\n" + extra
}

func TestParseDefaults(t *testing.T) {
	task, err := Parse([]byte(taskYAML("")))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	checks := []struct {
		field     string
		got, want any
	}{
		{"name", task.Name, "orders-move"},
		{"mode", task.Mode, ModeFullAndIncremental},
		{"source.kind", task.Source.Kind, KindAuto},
		{"target.kind", task.Target.Kind, KindAuto},
		{"threads.readers", task.Threads.Readers, 4},
		{"threads.writers", task.Threads.Writers, 4},
		{"cache.bucketNum", task.Cache.BucketNum, 4},
		{"cache.bucketSize", task.Cache.BucketSize, 4},
		{"cache.batchSize", task.Cache.BatchSize, 1000},
		{"cache.maxBytes", task.Cache.MaxBytes, ByteSize("256MiB")},
		{"fullSync.onConflict", task.FullSync.OnConflict, ConflictFail},
		{"fullSync.copyIndexes", task.FullSync.CopyIndexesEnabled(), true},
		{"fullSync.indexBuild", task.FullSync.IndexBuild, IndexesAfter},
		{"fullSync.dropTarget", task.FullSync.DropTarget, false},
		{"fullSync.rangeDocuments", task.FullSync.RangeDocuments, int64(50000)},
		{"fullSync.split", task.FullSync.Split, SplitAuto},
		{"fullSync.workers", task.FullSync.Workers, 1},
		{"incremental.method", task.Incremental.Method, MethodOplog},
		{"ddl", task.ReplayDDL(), true},
		{"verify.mode", task.Verify.Mode, VerifyHash},
		{"verify.sampleSize", task.Verify.SampleSize, 1000},
		{"verify.continuous", task.Verify.Continuous, false},
		{"verify.intervalSeconds", task.Verify.IntervalSeconds, 300},
		{"verify.rechecks", task.Verify.Rechecks, 3},
		{"verify.maxPendingBytes", task.Verify.MaxPendingBytes, ByteSize("16MiB")},
		{"rateLimit", task.RateLimit, int64(0)},
		{"checkpoint.database", task.Checkpoint.Database, "mongoferry"},
		{"suspend", task.Suspend, false},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v (%T), want %v (%T)", c.field, c.got, c.got, c.want, c.want)
		}
	}
	if n, err := task.Cache.MaxBytes.Bytes(); err != nil || n != 256<<20 {
		t.Errorf("cache.maxBytes = %d, %v; want %d", n, err, 256<<20)
	}
}

// TestParseKeepsExplicitValues checks that defaults never override a value
// that was written, false and zero-like values included.
func TestParseKeepsExplicitValues(t *testing.T) {
	task, err := Parse([]byte(taskYAML(`mode: full
ddl: false
fullSync: {copyIndexes: false, indexBuild: before, onConflict: skip, dropTarget: true, rangeDocuments: 10}
threads: {readers: 256, writers: 1}
cache: {maxBytes: 16MiB, batchSize: 100000}
verify: {mode: none}
checkpoint: {database: ferry_state}
`)))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if task.Mode != ModeFull || task.ReplayDDL() || task.FullSync.CopyIndexesEnabled() ||
		task.FullSync.IndexBuild != IndexesBefore || task.FullSync.OnConflict != ConflictSkip ||
		!task.FullSync.DropTarget || task.FullSync.RangeDocuments != 10 ||
		task.Threads.Readers != 256 || task.Threads.Writers != 1 ||
		task.Cache.MaxBytes != "16MiB" || task.Cache.BatchSize != 100000 ||
		task.Verify.Mode != VerifyNone || task.Checkpoint.Database != "ferry_state" {
		t.Fatalf("explicit values changed by defaults: %+v", task.Spec)
	}
}

func TestParseAccepts(t *testing.T) {
	for name, y := range map[string]string{
		"database and collection renames": taskYAML(`namespaces:
  include: ['shop\..*', '^hr\.people$']
  exclude: ['\.tmp_']
  rename: [{from: shop, to: shop_v2}, {from: hr.people, to: staff.people}]`),
		"smallest cache":          taskYAML("cache: {maxBytes: 16MiB}"),
		"credentials outside URI": endpointsYAML(`uri: "mongodb://10.0.0.1/", username: ferry, passwordEnv: SRC_PASSWORD`, `uri: "mongodb://10.0.0.2/", username: ferry, passwordFile: /run/secrets/pw`, ""),
		"credentials in URI":      endpointsYAML(`uri: "mongodb://ferry:pw@10.0.0.1/"`, `uri: "mongodb://10.0.0.2/"`, ""),
		"same host, other port":   endpointsYAML(`uri: "mongodb://localhost:27017/"`, `uri: "mongodb://localhost:27018/"`, ""),
		"startAt position":        taskYAML("mode: incremental\nincremental: {startAt: '1764045600,3'}"),
		"startAt time":            taskYAML("mode: incremental\nincremental: {startAt: '2026-11-25T05:00:00Z'}"),

		"client certificate in two files": endpointsYAML(`uri: "mongodb://10.0.0.1/", tls: {enabled: true, caFile: /tls/ca.crt, certificateFile: /tls/tls.crt, privateKeyFile: /tls/tls.key}`, `uri: "mongodb://10.0.0.2/", tls: {enabled: true, certificateKeyFile: /tls/client.pem}`, ""),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse([]byte(y)); err != nil {
				t.Fatalf("Parse:\n%s\nerror: %v", y, err)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	const (
		unknown = ": unknown field: check its spelling and indentation against `ferry explain task` (every field of a task file, its type, default and meaning) or docs/cli.md"
		sameAs  = "; a task copies from one deployment to another: point target.uri at the destination"
	)
	cases := []struct {
		name string
		yaml string
		want string // the whole message
	}{
		// Sizes.
		{"maxBytes too small", taskYAML("cache: {maxBytes: 1MiB}"),
			"cache.maxBytes: must be at least 16MiB, got 1MiB: one document may be 16MiB"},
		{"maxBytes in bytes too small", taskYAML(`cache: {maxBytes: "512"}`),
			"cache.maxBytes: must be at least 16MiB, got 512B: one document may be 16MiB"},
		{"maxBytes unknown unit", taskYAML("cache: {maxBytes: 10XB}"),
			`cache.maxBytes: "10XB" has an unknown unit "XB": use B, KiB, MiB, GiB or TiB`},
		{"maxBytes not a size", taskYAML("cache: {maxBytes: lots}"),
			`cache.maxBytes: "lots" is not a size: write a whole number with an optional unit, such as 256MiB or 1GiB`},
		{"maxBytes unquoted number", taskYAML("cache: {maxBytes: 536870912}"),
			"cache.maxBytes: expected a string, got a number: put the value in quotes"},

		// Namespaces.
		{"include regexp", taskYAML(`namespaces: {include: ['shop\.(orders']}`),
			`namespaces.include[0]: invalid regular expression "shop\\.(orders": missing closing ): ` + "`shop\\.(orders`"},
		{"exclude regexp", taskYAML(`namespaces: {exclude: ['ok', '*tmp']}`),
			`namespaces.exclude[1]: invalid regular expression "*tmp": missing argument to repetition operator: ` + "`*`"},
		{"include not a list", taskYAML(`namespaces: {include: 'shop\..*'}`),
			"namespaces.include: expected a list, got a string"},
		{"rename two sources to one target", taskYAML("namespaces: {rename: [{from: a, to: c}, {from: b, to: c}]}"),
			`namespaces.rename[1].to: "c" is the target of both "a" and "b": two sources would be merged into one`},
		{"rename one source twice", taskYAML("namespaces: {rename: [{from: a.x, to: c.x}, {from: a.x, to: d.x}]}"),
			`namespaces.rename[1].from: "a.x" is renamed twice: keep one rule for it`},
		{"rename database to collection", taskYAML("namespaces: {rename: [{from: shop, to: archive.orders}]}"),
			`namespaces.rename[0]: maps "shop" to "archive.orders": rename a database to a database or db.collection to db.collection`},
		{"rename collection to database", taskYAML("namespaces: {rename: [{from: shop.orders, to: archive}]}"),
			`namespaces.rename[0]: maps "shop.orders" to "archive": rename a database to a database or db.collection to db.collection`},
		{"rename to admin", taskYAML("namespaces: {rename: [{from: shop, to: admin}]}"),
			`namespaces.rename[0].to: "admin" is a reserved database: choose another target name`},
		{"rename to local collection", taskYAML("namespaces: {rename: [{from: shop.orders, to: local.orders}]}"),
			`namespaces.rename[0].to: "local" is a reserved database: choose another target name`},
		{"rename to checkpoint database", taskYAML("namespaces: {rename: [{from: shop, to: mongoferry}]}"),
			`namespaces.rename[0].to: "mongoferry" is a reserved database: choose another target name`},
		{"rename to custom checkpoint database", taskYAML("checkpoint: {database: state}\nnamespaces: {rename: [{from: shop, to: state}]}"),
			`namespaces.rename[0].to: "state" is a reserved database: choose another target name`},
		{"rename onto a collection name with $", taskYAML("namespaces: {rename: [{from: shop.orders, to: shop.or$ders}]}"),
			`namespaces.rename[0].to: "shop.or$ders" (the new name of "shop.orders") is not a name MongoDB accepts: collection name "or$ders" contains "$", which MongoDB refuses in collection names; choose another target name`},
		{"rename onto database names MongoDB refuses", taskYAML("namespaces: {rename: [{from: shop, to: sh$op}, {from: crm, to: a/b}, {from: web.logs, to: a b.logs}]}"),
			`namespaces.rename[0].to: "sh$op" (the new name of "shop") is not a name MongoDB accepts: database name "sh$op" contains "$", which MongoDB refuses in database names (any of / \ . space " $ * < > : | ? and NUL); choose another target name` + "\n" +
				`namespaces.rename[1].to: "a/b" (the new name of "crm") is not a name MongoDB accepts: database name "a/b" contains "/", which MongoDB refuses in database names (any of / \ . space " $ * < > : | ? and NUL); choose another target name` + "\n" +
				`namespaces.rename[2].to: "a b.logs" (the new name of "web.logs") is not a name MongoDB accepts: database name "a b" contains " ", which MongoDB refuses in database names (any of / \ . space " $ * < > : | ? and NUL); choose another target name`},
		{"rename onto a long database name", taskYAML("namespaces: {rename: [{from: shop, to: " + strings.Repeat("d", 64) + "}]}"),
			`namespaces.rename[0].to: "` + strings.Repeat("d", 64) + `" (the new name of "shop") is not a name MongoDB accepts: database name "` + strings.Repeat("d", 64) + `" is 64 bytes long; MongoDB allows at most 63; choose another target name`},
		{"rename onto a system collection", taskYAML("namespaces: {rename: [{from: shop.orders, to: shop.system.orders}]}"),
			`namespaces.rename[0].to: "shop.system.orders" (the new name of "shop.orders") is not a name MongoDB accepts: collection name "system.orders" starts with "system.", which MongoDB reserves for its own collections; choose another target name`},
		{"rename without to", taskYAML("namespaces: {rename: [{from: shop}]}"),
			"namespaces.rename[0]: from and to are both required, for example {from: sales, to: sales_copy} or {from: sales.orders, to: archive.orders}"},

		// Unknown fields and wrong types.
		{"unknown top-level field", taskYAML("threds: {readers: 2}"), "threds" + unknown},
		{"unknown nested field", taskYAML("threads: {reader: 2}"), "threads.reader" + unknown},
		{"unknown endpoint field", endpointsYAML(`uri: "mongodb://10.0.0.1/", pasword: x`, `uri: "mongodb://10.0.0.2/"`, ""), "source.pasword" + unknown},
		{"unknown field in a list", taskYAML("namespaces: {rename: [{from: a, to: b}, {from: c, too: d}]}"), "namespaces.rename[1].too" + unknown},
		{"unknown field two levels down", endpointsYAML(`uri: "mongodb://10.0.0.1/"`, `uri: "mongodb://10.0.0.2/", tls: {enabled: true, caFle: x}`, ""), "target.tls.caFle" + unknown},
		{"number for a whole number", taskYAML("threads: {readers: four}"),
			"threads.readers: expected a whole number, got a string"},
		{"fraction for a whole number", taskYAML("threads: {readers: 1.5}"),
			"threads.readers: expected a whole number, got a number"},
		{"YAML boolean for a string", endpointsYAML(`uri: "mongodb://10.0.0.1/", username: ferry, passwordEnv: yes`, `uri: "mongodb://10.0.0.2/"`, ""),
			"source.passwordEnv: expected a string, got true or false: put the value in quotes"},
		{"scalar for a section", taskYAML("verify: hash"), "verify: expected a mapping of fields, got a string"},
		{"list for a task", "- name: x\n", "task: expected a mapping of fields, got a list"},

		// Enums and ranges.
		{"mode", taskYAML("mode: fast"), `mode: must be one of full, incremental, fullAndIncremental, got "fast"`},
		{"onConflict", taskYAML("fullSync: {onConflict: replace}"), `fullSync.onConflict: must be one of overwrite, skip, fail, got "replace"`},
		{"indexBuild", taskYAML("fullSync: {indexBuild: during}"), `fullSync.indexBuild: must be one of before, after, got "during"`},
		{"split", taskYAML("fullSync: {split: sometimes}"), `fullSync.split: must be one of auto, always, never, got "sometimes"`},
		{"verify mode", taskYAML("verify: {mode: full}"), `verify.mode: must be one of none, count, hash, sample, got "full"`},
		{"incremental method", taskYAML("incremental: {method: tail}"), `incremental.method: must be one of oplog, changeStream, got "tail"`},
		{"endpoint kind", endpointsYAML(`uri: "mongodb://10.0.0.1/", kind: standalone`, `uri: "mongodb://10.0.0.2/"`, ""),
			`source.kind: must be one of auto, replicaSet, sharded, got "standalone"`},
		{"threads out of range", taskYAML("threads: {readers: -1, writers: 257}"),
			"threads.readers: must be between 1 and 256, got -1\nthreads.writers: must be between 1 and 256, got 257"},
		{"threads 0 and negative, both named", taskYAML("threads: {readers: 0, writers: -2}"),
			"threads.readers: must be between 1 and 256, got 0 (0 is not a default here: leave the field out for its default)\nthreads.writers: must be between 1 and 256, got -2"},
		{"workers 0", taskYAML("fullSync: {workers: 0}"),
			"fullSync.workers: must be between 1 and 64, got 0 (0 is not a default here: leave the field out for its default)"},
		{"every number written as 0", taskYAML("cache: {bucketNum: 0, bucketSize: 0, batchSize: 0}\nfullSync: {rangeDocuments: 0}\nverify: {sampleSize: 0, intervalSeconds: 0, rechecks: 0}\ncutover: {maxLagSeconds: 0}"),
			"cache.bucketNum: must be between 1 and 1024, got 0 (0 is not a default here: leave the field out for its default)\n" +
				"cache.bucketSize: must be between 1 and 1024, got 0 (0 is not a default here: leave the field out for its default)\n" +
				"cache.batchSize: must be between 1 and 100000, got 0 (0 is not a default here: leave the field out for its default)\n" +
				"fullSync.rangeDocuments: must be at least 1, got 0 (0 is not a default here: leave the field out for its default)\n" +
				"cutover.maxLagSeconds: must be between 1 and 3600, got 0 (0 is not a default here: leave the field out for its default)\n" +
				"verify.sampleSize: must be at least 1, got 0 (0 is not a default here: leave the field out for its default)\n" +
				"verify.intervalSeconds: must be at least 1, got 0 (0 is not a default here: leave the field out for its default)\n" +
				"verify.rechecks: must be between 1 and 100, got 0 (0 is not a default here: leave the field out for its default)"},
		{"batchSize out of range", taskYAML("cache: {batchSize: 100001}"), "cache.batchSize: must be between 1 and 100000, got 100001"},
		{"rangeDocuments", taskYAML("fullSync: {rangeDocuments: -5}"), "fullSync.rangeDocuments: must be at least 1, got -5"},
		{"workers out of range", taskYAML("fullSync: {workers: 65}"), "fullSync.workers: must be between 1 and 64, got 65"},
		{"workers without a copy", taskYAML("mode: incremental\nfullSync: {workers: 3}"),
			"fullSync.workers: mode incremental copies nothing, so it has no copy workers: remove fullSync.workers or set it to 1"},
		{"workers of a sharded source", endpointsYAML(`uri: "mongodb://10.0.0.1/", kind: sharded`, `uri: "mongodb://10.0.0.2/"`, "fullSync: {workers: 2}"),
			"fullSync.workers: a sharded source replayed shard by shard is copied by one worker per shard (fullSync.shardedCopy), not by copy-only workers: remove fullSync.workers or set it to 1"},
		{"sampleSize", taskYAML("verify: {sampleSize: -1}"), "verify.sampleSize: must be at least 1, got -1"},
		{"verify intervalSeconds", taskYAML("verify: {intervalSeconds: -1}"), "verify.intervalSeconds: must be at least 1, got -1"},
		{"verify rechecks", taskYAML("verify: {rechecks: 101}"), "verify.rechecks: must be between 1 and 100, got 101"},
		{"verify maxPendingBytes", taskYAML("verify: {maxPendingBytes: 1KiB}"), "verify.maxPendingBytes: must be at least 64KiB, got 1KiB"},
		{"rateLimit", taskYAML("rateLimit: -10"), "rateLimit: must be 0 (no limit) or a positive number of documents per second, got -10"},
		{"checkpoint database", taskYAML("checkpoint: {database: admin}"),
			`checkpoint.database: "admin" cannot hold checkpoints: use a plain database name such as "mongoferry"`},
		{"checkpoint database with a dot", taskYAML("checkpoint: {database: a.b}"),
			`checkpoint.database: "a.b" cannot hold checkpoints: use a plain database name such as "mongoferry"`},
		{"task name", strings.Replace(taskYAML(""), "orders-move", `"orders move"`, 1),
			`name: "orders move" is not a valid task name: use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit`},

		// URIs and credentials.
		{"empty file", "", `name: "" is not a valid task name: use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit` +
			"\nsource.uri: is required: write it as mongodb://host:port/\ntarget.uri: is required: write it as mongodb://host:port/"},
		{"URI scheme", endpointsYAML(`uri: "http://10.0.0.1:27017/"`, `uri: "mongodb://10.0.0.2/"`, ""),
			`source.uri: is not a valid MongoDB URI (http://10.0.0.1:27017/): error parsing uri: scheme must be "mongodb" or "mongodb+srv"; write it as mongodb://host:port/?options`},
		{"URI without scheme", endpointsYAML(`uri: "mongodb://10.0.0.1/"`, `uri: "10.0.0.2:27017"`, ""),
			`target.uri: is not a valid MongoDB URI (10.0.0.2:27017): error parsing uri: scheme must be "mongodb" or "mongodb+srv"; write it as mongodb://host:port/?options`},
		{"URI port", endpointsYAML(`uri: "mongodb://10.0.0.1:27o17/"`, `uri: "mongodb://10.0.0.2/"`, ""),
			`source.uri: is not a valid MongoDB URI (mongodb://10.0.0.1:27o17/): error parsing uri: invalid host "": port must be an integer: strconv.Atoi: parsing "27o17": invalid syntax; write it as mongodb://host:port/?options`},
		{"URI option", endpointsYAML(`uri: "mongodb://10.0.0.1/"`, `uri: "mongodb://10.0.0.2/?connectTimeoutMS=soon"`, ""),
			`target.uri: is not a valid MongoDB URI (mongodb://10.0.0.2/?connectTimeoutMS=soon): error parsing uri: invalid value for "connectTimeoutMS": "soon"; write it as mongodb://host:port/?options`},
		{"URI with password and unescaped @", endpointsYAML(`uri: "mongodb://ferry:p@ss@10.0.0.1/"`, `uri: "mongodb://10.0.0.2/"`, ""),
			`source.uri: is not a valid MongoDB URI (mongodb://***@10.0.0.1/): error parsing uri: unescaped @ sign in user info; write it as mongodb://host:port/?options`},
		{"credentials twice", endpointsYAML(`uri: "mongodb://ferry:pw@10.0.0.1/", username: ferry`, `uri: "mongodb://10.0.0.2/"`, ""),
			"source.uri: contains credentials and source.username is set too: keep credentials in one place, outside the URI"},
		{"passwordFile and passwordEnv", endpointsYAML(`uri: "mongodb://10.0.0.1/", username: ferry, passwordFile: /run/pw, passwordEnv: SRC_PASSWORD`, `uri: "mongodb://10.0.0.2/"`, ""),
			"source.passwordFile: set only one of passwordFile and passwordEnv"},
		{"password without username", endpointsYAML(`uri: "mongodb://10.0.0.1/"`, `uri: "mongodb://10.0.0.2/", passwordEnv: DST_PASSWORD`, ""),
			"target.username: is required when a password is given"},
		{"shard URI", endpointsYAML(`uri: "mongodb://10.0.0.1/", shards: [{name: rs0, uri: "mongodb://ferry:p@ss@10.0.0.5/"}, {uri: "mongodb://10.0.0.6/"}]`, `uri: "mongodb://10.0.0.2/"`, ""),
			"source.shards[0].uri: is not a valid MongoDB URI: error parsing uri: unescaped @ sign in user info\n" +
				"source.shards[1].name: is required: use the shard's _id from config.shards"},
		{"shard URI with credentials, a shard twice", endpointsYAML(`uri: "mongodb://10.0.0.1/", shards: [{name: rs0, uri: "mongodb://ferry:pw@10.0.0.5/"}, {name: rs0, uri: "mongodb://10.0.0.6/"}]`, `uri: "mongodb://10.0.0.2/"`, ""),
			"source.shards[0].uri: contains credentials: shards are reached with source.username and its password; remove them from the URI\n" +
				`source.shards[1].name: "rs0" is listed twice (also source.shards[0]): keep one address per shard`},
		{"shards of a replica set", endpointsYAML(`uri: "mongodb://10.0.0.1/", kind: replicaSet, shards: [{name: rs0, uri: "mongodb://10.0.0.5/"}]`, `uri: "mongodb://10.0.0.2/"`, ""),
			"source.shards: lists the shards of a sharded source: remove it, or set source.kind to sharded (or auto)"},
		{"shards on the target", endpointsYAML(`uri: "mongodb://10.0.0.1/"`, `uri: "mongodb://10.0.0.2/", shards: [{name: rs0, uri: "mongodb://10.0.0.5/"}]`, ""),
			"target.shards: lists shard addresses, which only a sharded source reads: remove it (a sharded target is written through mongos)"},

		// Authentication mechanisms.
		{"PLAIN in the URI without a username", endpointsYAML(`uri: "mongodb://10.0.0.1/?authMechanism=PLAIN"`, `uri: "mongodb://10.0.0.2/"`, ""),
			"source.uri: names authMechanism=PLAIN, which needs a username and password: set source.username with source.passwordEnv or source.passwordFile, and source.authMechanism: PLAIN instead of the URI option"},
		{"PLAIN in the URI, username in the task", endpointsYAML(`uri: "mongodb://10.0.0.1/?authMechanism=PLAIN", username: ferry, passwordEnv: SRC_PASSWORD`, `uri: "mongodb://10.0.0.2/"`, ""),
			"source.uri: names authMechanism=PLAIN while the credentials are in source.username: set source.authMechanism: PLAIN in the task instead of the URI option"},
		{"a mechanism in both places", endpointsYAML(`uri: "mongodb://10.0.0.1/?authMechanism=PLAIN", authMechanism: PLAIN, username: ferry, passwordEnv: SRC_PASSWORD`, `uri: "mongodb://10.0.0.2/"`, ""),
			"source.uri: names authMechanism=PLAIN and source.authMechanism is set too: keep source.authMechanism and remove the URI option"},
		{"an unknown mechanism", endpointsYAML(`uri: "mongodb://10.0.0.1/", authMechanism: GSSAPI, username: ferry, passwordEnv: SRC_PASSWORD`, `uri: "mongodb://10.0.0.2/"`, ""),
			`source.authMechanism: must be one of SCRAM-SHA-1, SCRAM-SHA-256, PLAIN, MONGODB-X509, MONGODB-AWS, got "GSSAPI"`},
		{"PLAIN without credentials", endpointsYAML(`uri: "mongodb://10.0.0.1/", authMechanism: PLAIN`, `uri: "mongodb://10.0.0.2/", authMechanism: PLAIN, username: ferry`, ""),
			"source.username: is required with authMechanism PLAIN: set it, with source.passwordEnv or source.passwordFile\n" +
				"target.passwordEnv: authMechanism PLAIN sends a password: set target.passwordEnv or target.passwordFile"},
		{"X.509 with a password and no certificate", endpointsYAML(`uri: "mongodb://10.0.0.1/", authMechanism: MONGODB-X509, username: ferry, passwordEnv: SRC_PASSWORD, authSource: admin`, `uri: "mongodb://10.0.0.2/"`, ""),
			"source.authMechanism: MONGODB-X509 authenticates with the TLS client certificate, not a password: remove source.passwordEnv and source.passwordFile\n" +
				"source.tls: authMechanism MONGODB-X509 needs a TLS client certificate: set source.tls.enabled: true and source.tls.certificateKeyFile (or certificateFile with privateKeyFile)\n" +
				`source.authSource: must be $external with authMechanism MONGODB-X509 (or left out), got "admin"`},
		{"AWS with a key id and no secret", endpointsYAML(`uri: "mongodb://10.0.0.1/"`, `uri: "mongodb://10.0.0.2/", authMechanism: MONGODB-AWS, username: AKIAEXAMPLE`, ""),
			"target.passwordEnv: MONGODB-AWS with a username (the AWS access key id) needs the secret access key: set target.passwordEnv or target.passwordFile, or remove target.username to take the credentials from the AWS_* environment variables or the pod's AWS role"},

		{"TLS Secrets in a task file", endpointsYAML(`uri: "mongodb://10.0.0.1/", tls: {enabled: true, caSecret: {name: ca, key: ca.crt}}`, `uri: "mongodb://10.0.0.2/"`, ""),
			"source.tls.caSecret: names a Kubernetes Secret, which only a SyncTask mounts: in a task file, use source.tls.caFile"},
		{"a TLS client certificate Secret in a task file", endpointsYAML(`uri: "mongodb://10.0.0.1/"`, `uri: "mongodb://10.0.0.2/", tls: {enabled: true, certificateKeySecret: {name: c, key: tls.pem}}`, ""),
			"target.tls.certificateKeySecret: names a Kubernetes Secret, which only a SyncTask mounts: in a task file, use target.tls.certificateKeyFile"},
		{"a kubernetes.io/tls Secret in a task file", endpointsYAML(`uri: "mongodb://10.0.0.1/", tls: {enabled: true, certificateSecret: ferry-tls}`, `uri: "mongodb://10.0.0.2/"`, ""),
			"source.tls.certificateSecret: names a Kubernetes Secret, which only a SyncTask mounts: in a task file, use source.tls.certificateFile with source.tls.privateKeyFile"},
		// Client certificates: one PEM, or a certificate and its key.
		{"a certificate without its key", endpointsYAML(`uri: "mongodb://10.0.0.1/", tls: {enabled: true, certificateFile: /tls/tls.crt}`, `uri: "mongodb://10.0.0.2/"`, ""),
			"source.tls.privateKeyFile: is required with certificateFile: name the PEM file of the certificate's private key (a kubernetes.io/tls Secret's tls.key)"},
		{"TLS files with TLS off", endpointsYAML(`uri: "mongodb://10.0.0.1/", tls: {caFile: /tls/ca.crt}`, `uri: "mongodb://10.0.0.2/"`, ""),
			"source.tls: names TLS files while TLS is off, so they would be ignored: set source.tls.enabled: true"},
		{"a client certificate with TLS off", endpointsYAML(`uri: "mongodb://10.0.0.1/"`, `uri: "mongodb://10.0.0.2/", tls: {certificateFile: /tls/tls.crt, privateKeyFile: /tls/tls.key}`, ""),
			"target.tls: names TLS files while TLS is off, so they would be ignored: set target.tls.enabled: true"},
		{"a key without its certificate", endpointsYAML(`uri: "mongodb://10.0.0.1/"`, `uri: "mongodb://10.0.0.2/", tls: {enabled: true, privateKeyFile: /tls/tls.key}`, ""),
			"target.tls.certificateFile: is required with privateKeyFile: name the PEM file of the client certificate (a kubernetes.io/tls Secret's tls.crt)"},
		{"one PEM and a pair", endpointsYAML(`uri: "mongodb://10.0.0.1/", tls: {enabled: true, certificateKeyFile: /tls/client.pem, certificateFile: /tls/tls.crt, privateKeyFile: /tls/tls.key}`, `uri: "mongodb://10.0.0.2/"`, ""),
			"source.tls.certificateKeyFile: names a client certificate and so do certificateFile and privateKeyFile: keep certificateKeyFile (certificate and key in one PEM) or certificateFile with privateKeyFile, not both"},
		{"one PEM and a key", endpointsYAML(`uri: "mongodb://10.0.0.1/"`, `uri: "mongodb://10.0.0.2/", tls: {enabled: true, certificateKeyFile: /tls/client.pem, privateKeyFile: /tls/tls.key}`, ""),
			"target.tls.certificateKeyFile: names a client certificate and so do certificateFile and privateKeyFile: keep certificateKeyFile (certificate and key in one PEM) or certificateFile with privateKeyFile, not both"},
		{"a credentials Secret in a task file", endpointsYAML(`uri: "mongodb://10.0.0.1/", credentialsSecret: src-creds`, `uri: "mongodb://10.0.0.2/"`, ""),
			"source.credentialsSecret: names a Kubernetes Secret, which only a SyncTask reads: in a task file, use source.username with source.passwordFile or source.passwordEnv"},
		{"sharding on the source", endpointsYAML(`uri: "mongodb://10.0.0.1/", sharding: keep`, `uri: "mongodb://10.0.0.2/"`, ""),
			"source.sharding: says how a sharded target's collections are sharded: remove it here (set it on target)"},
		{"target sharding mode", endpointsYAML(`uri: "mongodb://10.0.0.1/"`, `uri: "mongodb://10.0.0.2/", sharding: like`, ""),
			`target.sharding: must be one of match, keep, got "like"`},
		{"shard keys", endpointsYAML(`uri: "mongodb://10.0.0.1/"`, `uri: "mongodb://10.0.0.2/", shardKeys: [{namespace: shop, fields: [a]}, {namespace: shop.orders, fields: [a, a, $b], hashed: c}, {namespace: shop.orders, fields: [a], hashed: a, unique: true}]`, ""),
			`target.shardKeys[0].namespace: "shop" is not a collection: write it as db.collection (the name on the target)` + "\n" +
				`target.shardKeys[1].fields[1]: "a" appears twice in the key` + "\n" +
				`target.shardKeys[1].fields[2]: "$b" is not a field name a shard key can use` + "\n" +
				`target.shardKeys[1].hashed: "c" is not one of the key's fields [a a $b]: name the field to hash` + "\n" +
				`target.shardKeys[2].namespace: "shop.orders" is listed twice (also target.shardKeys[1]): keep one key per collection` + "\n" +
				"target.shardKeys[2].unique: a hashed shard key cannot be unique: remove unique or hashed"},

		// Source and target the same.
		{"same URI", endpointsYAML(`uri: "mongodb://10.0.0.1:27017/"`, `uri: "mongodb://10.0.0.1:27017/"`, ""),
			"target.uri: names the same deployment as source.uri (10.0.0.1:27017)" + sameAs},
		{"localhost and 127.0.0.1", endpointsYAML(`uri: "mongodb://localhost:27017/"`, `uri: "mongodb://127.0.0.1:27017/?directConnection=true"`, ""),
			"target.uri: names the same deployment as source.uri (localhost:27017)" + sameAs},
		{"implied default port", endpointsYAML(`uri: "mongodb://127.0.0.1/"`, `uri: "mongodb://LocalHost:27017"`, ""),
			"target.uri: names the same deployment as source.uri (127.0.0.1)" + sameAs},
		{"IPv6 loopback", endpointsYAML(`uri: "mongodb://[::1]:27018/"`, `uri: "mongodb://localhost:27018/"`, ""),
			"target.uri: names the same deployment as source.uri ([::1]:27018)" + sameAs},
		// Start positions.
		{"startAt not a position", taskYAML("mode: incremental\nincremental: {startAt: 'yesterday'}"),
			`incremental.startAt: "yesterday" is neither an oplog position (seconds,increment, such as 1764045600,3) nor an RFC 3339 time (such as 2026-11-25T05:00:00Z)`},
		{"startAt bad increment", taskYAML("mode: incremental\nincremental: {startAt: '1764045600,x'}"),
			`incremental.startAt: "1764045600,x" is not an oplog position: write it as seconds,increment (such as 1764045600,3), both whole numbers and seconds above 0`},
		{"startAt with a copy", taskYAML("incremental: {startAt: '1764045600,3'}"),
			"incremental.startAt: only a task in mode incremental starts at a given position (mode fullAndIncremental starts replay where its copy starts): set mode to incremental, or remove startAt"},
		{"replica set members in another order", endpointsYAML(`uri: "mongodb://a:1,b:2/?replicaSet=rs"`, `uri: "mongodb://b:2,a:1/?replicaSet=rs"`, ""),
			"target.uri: names the same deployment as source.uri (a:1,b:2)" + sameAs},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			task, err := Parse([]byte(c.yaml))
			if err == nil {
				t.Fatalf("Parse accepted:\n%s\nas %+v", c.yaml, task)
			}
			if got := err.Error(); got != c.want {
				t.Errorf("Parse:\n%s\nerror:\n%s\nwant:\n%s", c.yaml, got, c.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
			}
		})
	}
}

// TestParseAcceptsMechanisms checks the credentials each mechanism takes.
func TestParseAcceptsMechanisms(t *testing.T) {
	for _, src := range []string{
		`uri: "mongodb://10.0.0.1/", authMechanism: PLAIN, username: ferry, passwordEnv: SRC_PASSWORD`,
		`uri: "mongodb://10.0.0.1/", authMechanism: SCRAM-SHA-256, username: ferry, passwordFile: /run/pw, authSource: users`,
		`uri: "mongodb://10.0.0.1/", authMechanism: MONGODB-X509, tls: {enabled: true, certificateKeyFile: /tls/client.pem}`,
		`uri: "mongodb://10.0.0.1/", authMechanism: MONGODB-X509, authSource: $external, tls: {enabled: true, certificateFile: /tls/tls.crt, privateKeyFile: /tls/tls.key}`,
		`uri: "mongodb://10.0.0.1/", authMechanism: MONGODB-AWS`,
		`uri: "mongodb://10.0.0.1/", authMechanism: MONGODB-AWS, username: AKIAEXAMPLE, passwordEnv: AWS_SECRET`,
		`uri: "mongodb://10.0.0.1/?authMechanism=MONGODB-X509&tls=true&tlsCertificateKeyFile=/tls/c.pem"`,
		`uri: "mongodb://ferry:pw@10.0.0.1/?authMechanism=PLAIN"`,
	} {
		if _, err := Parse([]byte(endpointsYAML(src, `uri: "mongodb://10.0.0.2/"`, ""))); err != nil {
			t.Errorf("source {%s}: %v", src, err)
		}
	}
}

func TestParseRejectsBadYAML(t *testing.T) {
	_, err := Parse([]byte("name: x\nsource: [\n"))
	if err == nil || !strings.HasPrefix(err.Error(), "not valid YAML: ") || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("Parse: got %v, want a YAML error naming line 2", err)
	}
}

// TestParseReportsEveryProblem checks that one run lists all problems, in
// the order of the file's sections.
func TestParseReportsEveryProblem(t *testing.T) {
	_, err := Parse([]byte(taskYAML(`mode: fast
namespaces: {include: ['(']}
cache: {maxBytes: 1MiB}
verify: {mode: full}`)))
	var v ValidationError
	if !errors.As(err, &v) {
		t.Fatalf("Parse: %v, want a ValidationError", err)
	}
	var fields []string
	for _, fe := range v {
		fields = append(fields, fe.Field)
	}
	if got, want := strings.Join(fields, " "), "mode namespaces.include[0] cache.maxBytes verify.mode"; got != want {
		t.Fatalf("fields %q, want %q\n%v", got, want, err)
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "task.yaml")
	if err := os.WriteFile(p, []byte(taskYAML("threds: 4")), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	if want := p + ": threds: unknown field"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Load: %v, want a message starting %q", err, want)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.HasPrefix(err.Error(), "read task file: ") {
		t.Fatalf("Load of a missing file: %v", err)
	}
}

func TestByteSize(t *testing.T) {
	cases := []struct {
		in      ByteSize
		want    int64
		wantErr string
	}{
		{"64MiB", 64 << 20, ""},
		{"1Gi", 1 << 30, ""},
		{"512", 512, ""},
		{"512B", 512, ""},
		{"16M", 16 << 20, ""},
		{"2KB", 2 << 10, ""},
		{"1TiB", 1 << 40, ""},
		{"10mib", 10 << 20, ""},
		{" 1 GiB ", 1 << 30, ""},
		{"0", 0, ""},
		{"1.5GiB", 0, `"1.5GiB" has an unknown unit ".5GiB": use B, KiB, MiB, GiB or TiB`},
		{"5PB", 0, `"5PB" has an unknown unit "PB": use B, KiB, MiB, GiB or TiB`},
		{"1KiBB", 0, `"1KiBB" has an unknown unit "KiBB": use B, KiB, MiB, GiB or TiB`},
		{"-1MiB", 0, `"-1MiB" is not a size: write a whole number with an optional unit, such as 256MiB or 1GiB`},
		{"MiB", 0, `"MiB" is not a size: write a whole number with an optional unit, such as 256MiB or 1GiB`},
		{"", 0, `"" is not a size: write a whole number with an optional unit, such as 256MiB or 1GiB`},
		{"9999999TiB", 0, `"9999999TiB" is too large`},
		{"99999999999999999999", 0, `"99999999999999999999" is not a size: strconv.ParseInt: parsing "99999999999999999999": value out of range`},
	}
	for _, c := range cases {
		got, err := c.in.Bytes()
		switch {
		case c.wantErr == "" && (err != nil || got != c.want):
			t.Errorf("ByteSize(%q).Bytes() = %d, %v; want %d", c.in, got, err, c.want)
		case c.wantErr != "" && (err == nil || err.Error() != c.wantErr):
			t.Errorf("ByteSize(%q).Bytes() = %d, %v; want error %q", c.in, got, err, c.wantErr)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{
		512: "512B", 1 << 10: "1KiB", 16 << 20: "16MiB", 3 << 30: "3GiB", 1<<20 + 1: "1.0MiB", 1<<20 + 1<<19: "1536KiB",
	} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// redactCases are URIs whose password is made of the words Hunter and
// Zebra; neither may survive redaction.
var redactCases = []struct {
	uri      string
	host     string // must survive Redact, when set
	password string // as a driver might echo it: raw or decoded
}{
	{"mongodb://ferry:HunterZebra@db1:27017/", "db1:27017", "HunterZebra"},
	{"mongodb://ferry:Hunter%40Zebra@db1:27017/", "db1:27017", "Hunter@Zebra"},
	{"mongodb://ferry:Hunter%20Zebra@db1:27017/", "db1:27017", "Hunter Zebra"},
	{"mongodb://ferry:Hunter%2FZebra@db1:27017/", "db1:27017", "Hunter/Zebra"},
	{"mongodb://ferry:Hunter+Zebra@db1:27017/", "db1:27017", "Hunter+Zebra"},
	{"mongodb://ferry:HunterZebra@db1:27017,db2:27017/?replicaSet=rs", "db1:27017,db2:27017", "HunterZebra"},
	{"mongodb://ferry:HunterZebra@db1:27017/?appName=a@b", "", "HunterZebra"},
	{"mongodb+srv://ferry:HunterZebra@cluster0.example.com/", "cluster0.example.com", "HunterZebra"},
	{"MONGODB://ferry:HunterZebra@db1:27017/", "db1:27017", "HunterZebra"},
	// Malformed: unescaped @, /, ?, #, space; bad escapes; bad options.
	{"mongodb://ferry:Hunter@Zebra@db1:27017/", "db1:27017", "Hunter@Zebra"},
	{"mongodb://ferry:Hunter@Zebra@db1:27017/%zz", "db1:27017", "Hunter@Zebra"},
	{"mongodb://ferry:Hunter/Zebra@db1:27017/", "db1:27017", "Hunter/Zebra"},
	{"mongodb://ferry:12/HunterZebra@db1/", "db1", "12/HunterZebra"},
	{"mongodb://ferry:Hunter@x/Zebra@db1:27017/", "db1:27017", "Hunter@x/Zebra"},
	{"mongodb://ferry:Hunter?Zebra@db1:27017/", "db1:27017", "Hunter?Zebra"},
	{"mongodb://ferry:Hunter#Zebra@db1:27017/", "db1:27017", "Hunter#Zebra"},
	{"mongodb://ferry:Hunter Zebra@db1:27017/", "db1:27017", "Hunter Zebra"},
	{"mongodb://ferry:Hunter%zzZebra@db1:27017/", "db1:27017", "Hunter%zzZebra"},
	{"mongodb://ferry:HunterZebra@db1:27017/?connectTimeoutMS=abc", "db1:27017", "HunterZebra"},
	{"mongodb://ferry:HunterZebra@db1:notaport/", "db1:notaport", "HunterZebra"},
	{"mongodb:/ferry:HunterZebra@db1:27017/", "db1:27017", "HunterZebra"},
	{"ferry:HunterZebra@db1:27017", "db1:27017", "HunterZebra"},
	{" mongodb://ferry:HunterZebra@db1:27017/", "db1:27017", "HunterZebra"},
}

func leaks(s string) bool { return strings.Contains(s, "Hunter") || strings.Contains(s, "Zebra") }

func TestRedact(t *testing.T) {
	for _, c := range redactCases {
		got := Redact(c.uri)
		if leaks(got) {
			t.Errorf("Redact(%q) = %q: leaks the password", c.uri, got)
		}
		if c.host != "" && !strings.Contains(got, c.host) {
			t.Errorf("Redact(%q) = %q: lost the host %s", c.uri, got, c.host)
		}
	}
	for _, uri := range []string{"mongodb://db1:27017/?directConnection=true", "mongodb+srv://cluster0.example.com/", "not a uri", ""} {
		if got := Redact(uri); got != uri {
			t.Errorf("Redact(%q) = %q: changed a URI without credentials", uri, got)
		}
	}
}

func TestRedactError(t *testing.T) {
	for _, c := range redactCases {
		for _, err := range []error{
			fmt.Errorf("connect %s: refused", c.uri),
			fmt.Errorf("connect %q: refused", c.uri),
			fmt.Errorf("auth for %s with %s failed", c.password, c.uri),
			fmt.Errorf("raw %s, escaped %s, query-escaped %s", c.password, url.PathEscape(c.password), url.QueryEscape(c.password)),
			fmt.Errorf("other uri mongodb://ferry:%s@elsewhere/ failed", c.password),
		} {
			if got := RedactError(err, c.uri); leaks(got) {
				t.Errorf("RedactError(%q, %q) = %q: leaks the password", err, c.uri, got)
			}
		}
	}
	if got := RedactError(errors.New("no route to host db1"), "mongodb://ferry:HunterZebra@db1/"); got != "no route to host db1" {
		t.Errorf("RedactError changed a message without credentials: %q", got)
	}
}

// TestParseNeverEchoesPasswords checks the messages of a whole task
// file, where URIs are echoed to say what is wrong with them.
func TestParseNeverEchoesPasswords(t *testing.T) {
	for _, c := range redactCases {
		if strings.Contains(c.uri, "+srv") {
			continue // validating an SRV URI looks it up in DNS
		}
		for _, y := range []string{
			endpointsYAML(fmt.Sprintf("uri: %q", c.uri), `uri: "mongodb://10.0.0.2/"`, ""),
			endpointsYAML(`uri: "mongodb://10.0.0.2/"`, fmt.Sprintf("uri: %q", c.uri), ""),
			endpointsYAML(fmt.Sprintf(`uri: "mongodb://10.0.0.2/", shards: [{name: rs0, uri: %q}]`, c.uri), `uri: "mongodb://10.0.0.3/"`, ""),
		} {
			if _, err := Parse([]byte(y)); err != nil && leaks(err.Error()) {
				t.Errorf("Parse of\n%s\nleaks the password: %v", y, err)
			}
		}
	}
}

func TestRedactErrorKeepsUserNames(t *testing.T) {
	err := errors.New("server selection for appName mongoferry failed")
	if got := RedactError(err, "mongodb://ferry@db1/"); got != err.Error() {
		t.Errorf("RedactError removed a user name that is no secret: %q", got)
	}
}

// TestSamplesParse keeps the shipped examples valid.
func TestSamplesParse(t *testing.T) {
	for _, p := range []string{"../../config/samples/ferry-task.yaml", "../../config/samples/ferry-tenant-split.yaml"} {
		if _, err := Load(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

func TestParseStartAt(t *testing.T) {
	cases := []struct {
		in   string
		t, i uint32
	}{
		{"1764045600,3", 1764045600, 3},
		{"1764045600:3", 1764045600, 3},
		{" 1764045600, 0 ", 1764045600, 0},
		{"2026-11-25T05:00:00Z", 1795582800, 0},
		{"2026-11-25T06:00:00.750+01:00", 1795582800, 0},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			ts, err := ParseStartAt(c.in)
			if err != nil {
				t.Fatal(err)
			}
			if ts.T != c.t || ts.I != c.i {
				t.Errorf("ParseStartAt(%q) = %d,%d, want %d,%d", c.in, ts.T, ts.I, c.t, c.i)
			}
			if back, _ := ParseStartAt(FormatPosition(ts)); back != ts {
				t.Errorf("FormatPosition(%v) = %q does not read back", ts, FormatPosition(ts))
			}
		})
	}
}
