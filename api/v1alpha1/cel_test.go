package v1alpha1_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/envtestutil"
	"github.com/mongoferry/mongoferry/pkg/config"
)

// env is one control plane shared by every test of the package: starting
// kube-apiserver takes seconds, and each test works in its own namespace.
var env *envtestutil.Env

func TestMain(m *testing.M) {
	os.Exit(envtestutil.RunTests(m, func(e *envtestutil.Env) { env = e }))
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// task returns a valid SyncTask between two deployments, credentials in
// Secrets.
func task(ns, name string) *v1alpha1.SyncTask {
	return &v1alpha1.SyncTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.SyncTaskSpec{
			Source: v1alpha1.Source{URI: "mongodb://src-0.mongo:27017,src-1.mongo:27017/?replicaSet=rs0", CredentialsSecret: "src-creds"},
			Target: v1alpha1.Target{URI: "mongodb://dst.mongo:27017/", CredentialsSecret: "dst-creds"},
		},
	}
}

const (
	srcSecret = "put the username and password in the Secret named by source.credentialsSecret (keys username and password)"
	dstSecret = "put the username and password in the Secret named by target.credentialsSecret (keys username and password)"
)

// notChecked is the problem the API server adds when a field fails its
// schema (enum, type) and the CEL rules that read it are therefore skipped.
const notChecked = "<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"

// checkInvalid checks that err is the API server's Invalid error for the
// SyncTask named name with exactly the given problems ("field: message", as
// kubectl prints them). The server lists several problems in an order that
// depends on map iteration, so they are compared as sets.
func checkInvalid(t *testing.T, err error, name string, want ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("accepted, want %q", want)
		return
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || !apierrors.IsInvalid(err) {
		t.Errorf("error %v, want an Invalid error", err)
		return
	}
	var got []string
	if d := status.Status().Details; d != nil {
		for _, c := range d.Causes {
			field := c.Field
			if field == "" {
				field = "<nil>"
			}
			got = append(got, field+": "+c.Message)
		}
	}
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if len(want) == 1 {
		if msg := `SyncTask.sync.mongoferry.io "` + name + `" is invalid: ` + want[0]; err.Error() != msg {
			t.Errorf("error:\n%s\nwant:\n%s", err, msg)
		}
	}
}

func TestCreateValid(t *testing.T) {
	ns := env.Namespace(t)
	yes := true
	cases := []struct {
		name   string
		mutate func(*v1alpha1.SyncTask)
	}{
		{"minimal", func(*v1alpha1.SyncTask) {}},
		{"srv URIs without credentials", func(st *v1alpha1.SyncTask) {
			st.Spec.Source.URI = "mongodb+srv://cluster0.src.example.net/?retryWrites=true"
			st.Spec.Target.URI = "mongodb+srv://cluster0.dst.example.net/"
		}},
		{"@ in the options only", func(st *v1alpha1.SyncTask) {
			st.Spec.Source.URI = "mongodb://src.mongo:27017/?authMechanismProperties=SERVICE_NAME:mongo@REALM"
		}},
		{"same host, other port", func(st *v1alpha1.SyncTask) {
			st.Spec.Source.URI = "mongodb://localhost:27017/"
			st.Spec.Target.URI = "mongodb://localhost:27018/"
		}},
		{"sharded source with shard overrides", func(st *v1alpha1.SyncTask) {
			st.Spec.Source.Kind = config.KindSharded
			st.Spec.Source.Shards = []config.Shard{{Name: "rs0", URI: "mongodb://s0.mongo:27018/"}, {Name: "rs1", URI: "mongodb://s1.mongo:27018/"}}
		}},
		{"TLS from Secrets", func(st *v1alpha1.SyncTask) {
			st.Spec.Source.TLS = &v1alpha1.TLS{Enabled: true, CASecret: &v1alpha1.SecretKeyRef{Name: "mongo-ca", Key: "ca.crt"},
				CertificateKeySecret: &v1alpha1.SecretKeyRef{Name: "ferry-client", Key: "tls.pem"}}
			st.Spec.Target.TLS = &v1alpha1.TLS{Enabled: true, CASecret: &v1alpha1.SecretKeyRef{Name: "mongo-ca", Key: "ca.crt"}}
		}},
		{"client certificate from a kubernetes.io/tls Secret", func(st *v1alpha1.SyncTask) {
			st.Spec.Source.TLS = &v1alpha1.TLS{Enabled: true, CASecret: &v1alpha1.SecretKeyRef{Name: "ferry-client-tls", Key: "ca.crt"}, CertificateSecret: "ferry-client-tls"}
			st.Spec.Target.TLS = &v1alpha1.TLS{Enabled: true, CertificateSecret: "ferry-client-tls"}
		}},
		{"a sharded target with shard keys", func(st *v1alpha1.SyncTask) {
			st.Spec.Target.Sharding = config.ShardingKeep
			st.Spec.Target.ShardKeys = []config.ShardKey{{Namespace: "shop.orders", Fields: []string{"region", "orderId"}, Unique: true}, {Namespace: "shop.carts", Fields: []string{"_id"}, Hashed: "_id"}}
		}},
		{"shard overrides with kind auto", func(st *v1alpha1.SyncTask) {
			st.Spec.Source.Shards = []config.Shard{{Name: "rs0", URI: "mongodb://s0.mongo:27018/"}}
		}},
		{"everything set", func(st *v1alpha1.SyncTask) {
			st.Spec.Mode = config.ModeFull
			st.Spec.Source.Kind = config.KindReplicaSet
			st.Spec.Source.AuthSource = "admin"
			st.Spec.Source.TLS = &v1alpha1.TLS{Enabled: true, CASecret: &v1alpha1.SecretKeyRef{Name: "mongo-ca", Key: "ca.crt"}, InsecureSkipVerify: true}
			st.Spec.Target.AuthSource = "users"
			st.Spec.Target.TLS = &v1alpha1.TLS{Enabled: true, CertificateKeySecret: &v1alpha1.SecretKeyRef{Name: "ferry-client", Key: "tls.pem"}}
			st.Spec.Target.Sharding = config.ShardingMatch
			st.Spec.Target.ShardKeys = []config.ShardKey{{Namespace: "shop_v2.orders", Fields: []string{"region"}}}
			st.Spec.Namespaces = config.Namespaces{Include: []string{`shop\..*`}, Exclude: []string{`\.tmp_`}, Rename: []config.Rename{{From: "shop", To: "shop_v2"}}}
			st.Spec.Threads = config.Threads{Readers: 256, Writers: 1}
			st.Spec.Cache = config.Cache{BucketNum: 8, BucketSize: 2, BatchSize: 100000, MaxBytes: "1GiB"}
			st.Spec.FullSync = config.FullSync{OnConflict: config.ConflictOverwrite, CopyIndexes: &yes, IndexBuild: config.IndexesBefore, DropTarget: true, RangeDocuments: 1}
			st.Spec.Incremental.Method = config.MethodChangeStream
			st.Spec.DDL = &yes
			st.Spec.Verify = config.Verify{Mode: config.VerifySample, SampleSize: 10}
			st.Spec.RateLimit = 5000
			st.Spec.Checkpoint.Database = "ferry_state"
			st.Spec.Suspend = true
			st.Spec.DeletePolicy = v1alpha1.DeleteDelete
			st.Spec.WorkerImage = "registry.example/mongoferry:v0.1.0"
			st.Spec.MetricsPort = 65535
		}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := task(ns, fmt.Sprintf("valid-%d", i))
			c.mutate(st)
			if err := env.Client.Create(ctx(t), st); err != nil {
				t.Fatalf("Create: %v", err)
			}
		})
	}
}

func TestCreateInvalid(t *testing.T) {
	ns := env.Namespace(t)
	cases := []struct {
		name   string
		mutate func(*v1alpha1.SyncTask)
		want   []string // the problems, in the order the API server lists them
	}{
		// Credentials only from Secrets.
		{"password in source URI", func(st *v1alpha1.SyncTask) {
			st.Spec.Source.URI = "mongodb://ferry:s3cret@src.mongo:27017/"
		}, []string{"spec.source.uri: Forbidden: must not contain a password: " + srcSecret}},
		{"password in srv URI", func(st *v1alpha1.SyncTask) {
			st.Spec.Source.URI = "mongodb+srv://ferry:s3cret@cluster0.example.net/"
		}, []string{"spec.source.uri: Forbidden: must not contain a password: " + srcSecret}},
		{"password with an unescaped @", func(st *v1alpha1.SyncTask) {
			st.Spec.Source.URI = "mongodb://ferry:p@ss@src.mongo/"
		}, []string{"spec.source.uri: Forbidden: must not contain a password: " + srcSecret}},
		{"empty password", func(st *v1alpha1.SyncTask) {
			st.Spec.Source.URI = "mongodb://ferry:@src.mongo/"
		}, []string{"spec.source.uri: Forbidden: must not contain a password: " + srcSecret}},
		{"username in source URI", func(st *v1alpha1.SyncTask) {
			st.Spec.Source.URI = "mongodb://ferry@src.mongo:27017/"
		}, []string{"spec.source.uri: Forbidden: must not contain a username: " + srcSecret}},
		{"password in target URI", func(st *v1alpha1.SyncTask) {
			st.Spec.Target.URI = "mongodb://ferry:s3cret@dst.mongo:27017,dst-1.mongo:27017/?replicaSet=rs1"
		}, []string{"spec.target.uri: Forbidden: must not contain a password: " + dstSecret}},
		{"username in target URI", func(st *v1alpha1.SyncTask) {
			st.Spec.Target.URI = "mongodb+srv://ferry@dst.example.net/"
		}, []string{"spec.target.uri: Forbidden: must not contain a username: " + dstSecret}},
		{"credentials in a shard URI", func(st *v1alpha1.SyncTask) {
			st.Spec.Source.Kind = config.KindSharded
			st.Spec.Source.Shards = []config.Shard{{Name: "rs0", URI: "mongodb://s0.mongo:27018/"}, {Name: "rs1", URI: "mongodb://ferry:pw@s1.mongo:27018/"}}
		}, []string{"spec.source.shards: Forbidden: must not contain credentials: shards use the Secret named by source.credentialsSecret (keys username and password)"}},
		// Source and target the same.
		{"target equals source", func(st *v1alpha1.SyncTask) {
			st.Spec.Target.URI = st.Spec.Source.URI
		}, []string{`spec.target.uri: Invalid value: must differ from source.uri: a task copies from one deployment to another, so point target.uri at the destination`}},
		{"target equals source but for case and a slash", func(st *v1alpha1.SyncTask) {
			st.Spec.Source.URI = "mongodb://Mongo.Example:27017"
			st.Spec.Target.URI = "mongodb://mongo.example:27017/"
		}, []string{`spec.target.uri: Invalid value: must differ from source.uri: a task copies from one deployment to another, so point target.uri at the destination`}},

		// Fields that only make sense together.
		{"shard overrides for a replica set", func(st *v1alpha1.SyncTask) {
			st.Spec.Source.Kind = config.KindReplicaSet
			st.Spec.Source.Shards = []config.Shard{{Name: "rs0", URI: "mongodb://s0.mongo:27018/"}}
		}, []string{`spec.source.shards: Invalid value: lists the shards of a sharded source: remove it, or set source.kind to sharded (or auto)`}},
		{"dropTarget with mode incremental", func(st *v1alpha1.SyncTask) {
			st.Spec.Mode = config.ModeIncremental
			st.Spec.FullSync.DropTarget = true
		}, []string{`spec.fullSync.dropTarget: Invalid value: would drop the target's collections, and mode incremental copies nothing back into them: remove dropTarget, or use mode fullAndIncremental`}},

		// Enums, ranges and patterns from the markers on pkg/config.
		{"mode", func(st *v1alpha1.SyncTask) { st.Spec.Mode = "fast" },
			[]string{`spec.mode: Unsupported value: "fast": supported values: "full", "incremental", "fullAndIncremental"`, notChecked}},
		{"source kind", func(st *v1alpha1.SyncTask) { st.Spec.Source.Kind = "standalone" },
			[]string{`spec.source.kind: Unsupported value: "standalone": supported values: "auto", "replicaSet", "sharded"`, notChecked}},
		{"verify mode", func(st *v1alpha1.SyncTask) { st.Spec.Verify.Mode = "full" },
			[]string{`spec.verify.mode: Unsupported value: "full": supported values: "none", "count", "hash", "sample"`, notChecked}},
		{"deletePolicy", func(st *v1alpha1.SyncTask) { st.Spec.DeletePolicy = "Orphan" },
			[]string{`spec.deletePolicy: Unsupported value: "Orphan": supported values: "Retain", "Delete"`, notChecked}},
		{"threads out of range", func(st *v1alpha1.SyncTask) { st.Spec.Threads = config.Threads{Readers: -1, Writers: 257} },
			[]string{
				"spec.threads.readers: Invalid value: -1: spec.threads.readers in body should be greater than or equal to 1",
				"spec.threads.writers: Invalid value: 257: spec.threads.writers in body should be less than or equal to 256",
			}},
		{"batchSize", func(st *v1alpha1.SyncTask) { st.Spec.Cache.BatchSize = 100001 },
			[]string{"spec.cache.batchSize: Invalid value: 100001: spec.cache.batchSize in body should be less than or equal to 100000"}},
		{"maxBytes", func(st *v1alpha1.SyncTask) { st.Spec.Cache.MaxBytes = "lots" },
			[]string{`spec.cache.maxBytes: Invalid value: "lots": spec.cache.maxBytes in body should match '^[0-9]+\s*([KMGT]i?B?|B)?$'`}},
		{"rateLimit", func(st *v1alpha1.SyncTask) { st.Spec.RateLimit = -10 },
			[]string{"spec.rateLimit: Invalid value: -10: spec.rateLimit in body should be greater than or equal to 0"}},
		{"metricsPort", func(st *v1alpha1.SyncTask) { st.Spec.MetricsPort = 80 },
			[]string{"spec.metricsPort: Invalid value: 80: spec.metricsPort in body should be greater than or equal to 1024"}},
		{"empty source URI", func(st *v1alpha1.SyncTask) { st.Spec.Source.URI = "" },
			[]string{`spec.source.uri: Invalid value: "": spec.source.uri in body should be at least 1 chars long`}},
		{"worker template: the operator's labels and variables", func(st *v1alpha1.SyncTask) {
			st.Spec.WorkerTemplate = &v1alpha1.WorkerTemplate{
				Metadata: &v1alpha1.WorkerMetadata{Labels: map[string]string{"app.kubernetes.io/name": "x"}},
				Env:      []corev1.EnvVar{{Name: "MONGOFERRY_TASK", Value: "/tmp/other.yaml"}},
			}
		}, []string{
			"spec.workerTemplate.metadata.labels: Invalid value: labels under app.kubernetes.io/ and sync.mongoferry.io/ are the operator's: use other keys",
			"spec.workerTemplate.env: Invalid value: variables named MONGOFERRY_* are the operator's: use other names",
		}},
		{"TLS Secrets with TLS off", func(st *v1alpha1.SyncTask) {
			st.Spec.Source.TLS = &v1alpha1.TLS{CASecret: &v1alpha1.SecretKeyRef{Name: "ca", Key: "ca.crt"}}
			st.Spec.Target.TLS = &v1alpha1.TLS{CertificateKeySecret: &v1alpha1.SecretKeyRef{Name: "client", Key: "tls.pem"}}
		}, []string{
			"spec.source.tls: Invalid value: names TLS Secrets while TLS is off: set enabled: true",
			"spec.target.tls: Invalid value: names TLS Secrets while TLS is off: set enabled: true",
		}},
		{"a kubernetes.io/tls Secret with TLS off", func(st *v1alpha1.SyncTask) {
			st.Spec.Target.TLS = &v1alpha1.TLS{CertificateSecret: "ferry-client-tls"}
		}, []string{"spec.target.tls: Invalid value: names TLS Secrets while TLS is off: set enabled: true"}},
		{"two client certificates", func(st *v1alpha1.SyncTask) {
			st.Spec.Source.TLS = &v1alpha1.TLS{Enabled: true, CertificateSecret: "ferry-client-tls", CertificateKeySecret: &v1alpha1.SecretKeyRef{Name: "client", Key: "tls.pem"}}
		}, []string{"spec.source.tls.certificateSecret: Invalid value: names two client certificates: keep certificateSecret (a kubernetes.io/tls Secret, such as cert-manager writes) or certificateKeySecret (one key holding the certificate and its key), not both"}},
		{"a certificateSecret longer than a Secret name", func(st *v1alpha1.SyncTask) {
			st.Spec.Target.TLS = &v1alpha1.TLS{Enabled: true, CertificateSecret: strings.Repeat("a", 254)}
		}, []string{"spec.target.tls.certificateSecret: Too long: may not be more than 253 bytes", notChecked}},
		{"a TLS Secret key without a name", func(st *v1alpha1.SyncTask) {
			st.Spec.Source.TLS = &v1alpha1.TLS{Enabled: true, CASecret: &v1alpha1.SecretKeyRef{Key: "ca.crt"}}
		}, []string{`spec.source.tls.caSecret.name: Invalid value: "": spec.source.tls.caSecret.name in body should be at least 1 chars long`}},
		{"target sharding mode", func(st *v1alpha1.SyncTask) { st.Spec.Target.Sharding = "like" },
			[]string{`spec.target.sharding: Unsupported value: "like": supported values: "match", "keep"`, notChecked}},
		{"a hashed field outside the key", func(st *v1alpha1.SyncTask) {
			st.Spec.Target.ShardKeys = []config.ShardKey{{Namespace: "shop.orders", Fields: []string{"region"}, Hashed: "orderId"}}
		}, []string{"spec.target.shardKeys: Invalid value: names a hashed field that is not one of the key's fields: name one of fields"}},
		{"a unique hashed key", func(st *v1alpha1.SyncTask) {
			st.Spec.Target.ShardKeys = []config.ShardKey{{Namespace: "shop.orders", Fields: []string{"region"}, Hashed: "region", Unique: true}}
		}, []string{"spec.target.shardKeys: Invalid value: a hashed shard key cannot be unique: remove unique or hashed"}},
		{"two shards with one name", func(st *v1alpha1.SyncTask) {
			st.Spec.Source.Shards = []config.Shard{{Name: "rs0", URI: "mongodb://s0.mongo:27018/"}, {Name: "rs0", URI: "mongodb://s1.mongo:27018/"}}
		}, []string{`spec.source.shards[1]: Duplicate value: {"name":"rs0"}`}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := task(ns, fmt.Sprintf("invalid-%d", i))
			c.mutate(st)
			checkInvalid(t, env.Client.Create(ctx(t), st), st.Name, c.want...)
		})
	}
}

// TestCredentialsNotEchoed checks that a rejected URI's password does not
// come back in the error, where it would reach logs and terminals.
func TestCredentialsNotEchoed(t *testing.T) {
	st := task(env.Namespace(t), "echo")
	st.Spec.Source.URI = "mongodb://ferry:hunter2-s3cret@src.mongo:27017/"
	st.Spec.Target.URI = "mongodb://ferry:hunter2-s3cret@dst.mongo:27017/"
	err := env.Client.Create(ctx(t), st)
	if err == nil {
		t.Fatal("Create accepted URIs with passwords")
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("the error repeats the password: %v", err)
	}
}

// TestImmutableUnlessSuspended walks a task through the updates the
// transition rules allow and refuse.
func TestImmutableUnlessSuspended(t *testing.T) {
	st := task(env.Namespace(t), "moving")
	if err := env.Client.Create(ctx(t), st); err != nil {
		t.Fatalf("Create: %v", err)
	}
	const running = "cannot change while the task runs: set suspend to true first (or in the same change); "
	steps := []struct {
		name   string
		mutate func(*v1alpha1.SyncTask)
		want   []string // nil: the update is accepted
	}{
		{"running: tuning is allowed", func(st *v1alpha1.SyncTask) {
			st.Spec.Threads.Writers = 16
			st.Spec.RateLimit = 1000
			st.Spec.Source.CredentialsSecret = "src-creds-rotated"
		}, nil},
		{"running: mode", func(st *v1alpha1.SyncTask) { st.Spec.Mode = config.ModeIncremental },
			[]string{"spec.mode: Forbidden: " + running + "the checkpoint belongs to the old mode"}},
		{"running: source and target", func(st *v1alpha1.SyncTask) {
			st.Spec.Source.URI = "mongodb://src-new.mongo:27017/"
			st.Spec.Target.URI = "mongodb://dst-new.mongo:27017/"
		}, []string{
			"spec.source.uri: Forbidden: " + running + "the checkpoint refers to the old source",
			"spec.target.uri: Forbidden: " + running + "the checkpoint is kept on the old target",
		}},
		{"running: checkpoint database", func(st *v1alpha1.SyncTask) { st.Spec.Checkpoint.Database = "elsewhere" },
			[]string{"spec.checkpoint.database: Forbidden: " + running + "the task restarts from nothing in a new checkpoint database"}},
		{"suspending and changing mode in one change", func(st *v1alpha1.SyncTask) {
			st.Spec.Suspend = true
			st.Spec.Mode = config.ModeIncremental
		}, nil},
		{"suspended: source moves", func(st *v1alpha1.SyncTask) { st.Spec.Source.URI = "mongodb://src-new.mongo:27017/" }, nil},
		{"resuming with a new target in the same change", func(st *v1alpha1.SyncTask) {
			st.Spec.Suspend = false
			st.Spec.Target.URI = "mongodb://dst-new.mongo:27017/"
		}, nil},
		{"running again: mode", func(st *v1alpha1.SyncTask) { st.Spec.Mode = config.ModeFullAndIncremental },
			[]string{"spec.mode: Forbidden: " + running + "the checkpoint belongs to the old mode"}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			var cur v1alpha1.SyncTask
			if err := env.Client.Get(ctx(t), client.ObjectKeyFromObject(st), &cur); err != nil {
				t.Fatalf("Get: %v", err)
			}
			s.mutate(&cur)
			err := env.Client.Update(ctx(t), &cur)
			switch {
			case s.want == nil && err != nil:
				t.Errorf("Update: %v", err)
			case s.want != nil:
				checkInvalid(t, err, st.Name, s.want...)
			}
		})
	}
	var got v1alpha1.SyncTask
	if err := env.Client.Get(ctx(t), client.ObjectKeyFromObject(st), &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Mode != config.ModeIncremental || got.Spec.Source.URI != "mongodb://src-new.mongo:27017/" ||
		got.Spec.Target.URI != "mongodb://dst-new.mongo:27017/" || got.Spec.Suspend || got.Spec.Threads.Writers != 16 {
		t.Errorf("stored spec after the updates: %+v", got.Spec)
	}
}

// TestDefaultsStored applies the smallest task a user can write, as kubectl
// would send it (no empty sections), and checks that the stored object shows
// every default.
func TestDefaultsStored(t *testing.T) {
	ns := env.Namespace(t)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "sync.mongoferry.io/v1alpha1",
		"kind":       "SyncTask",
		"metadata":   map[string]any{"namespace": ns, "name": "defaults"},
		"spec": map[string]any{
			"source": map[string]any{"uri": "mongodb://src.mongo:27017/", "credentialsSecret": "src-creds"},
			"target": map[string]any{"uri": "mongodb://dst.mongo:27017/"},
		},
	}}
	if err := env.Client.Create(ctx(t), u); err != nil {
		t.Fatalf("Create: %v", err)
	}
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(u.GroupVersionKind())
	if err := env.Client.Get(ctx(t), client.ObjectKeyFromObject(u), got); err != nil {
		t.Fatalf("Get: %v", err)
	}
	want := map[string]any{
		"mode":         "fullAndIncremental",
		"source":       map[string]any{"uri": "mongodb://src.mongo:27017/", "credentialsSecret": "src-creds", "kind": "auto"},
		"target":       map[string]any{"uri": "mongodb://dst.mongo:27017/"},
		"threads":      map[string]any{"readers": int64(4), "writers": int64(4)},
		"cache":        map[string]any{"bucketNum": int64(4), "bucketSize": int64(4), "batchSize": int64(1000), "maxBytes": "256MiB"},
		"fullSync":     map[string]any{"onConflict": "fail", "copyIndexes": true, "indexBuild": "after", "rangeDocuments": int64(50000), "split": "auto", "shardedCopy": "perShard", "workers": int64(1)},
		"incremental":  map[string]any{"method": "oplog", "idReuseAcrossShards": "detect"},
		"ddl":          true,
		"verify":       map[string]any{"mode": "hash", "sampleSize": int64(1000), "intervalSeconds": int64(300), "rechecks": int64(3), "maxPendingBytes": "16MiB"},
		"checkpoint":   map[string]any{"database": "mongoferry"},
		"cutover":      map[string]any{"verify": "hash", "maxLagSeconds": int64(5)},
		"deletePolicy": "Retain",
		"metricsPort":  int64(9090),
	}
	if spec := got.Object["spec"]; !reflect.DeepEqual(spec, want) {
		gotJSON, _ := json.MarshalIndent(spec, "", "  ")
		wantJSON, _ := json.MarshalIndent(want, "", "  ")
		t.Errorf("stored spec:\n%s\nwant:\n%s", gotJSON, wantJSON)
	}

	// The same defaults reach a typed client, and agree with the CLI's.
	var st v1alpha1.SyncTask
	if err := env.Client.Get(ctx(t), client.ObjectKeyFromObject(u), &st); err != nil {
		t.Fatalf("Get: %v", err)
	}
	// The target has no kind in a SyncTask: the CLI's default (auto, ask
	// the server) is the only one it adds.
	stored := st.Spec.TaskSpec(v1alpha1.Usernames{Source: "ferry"})
	cli := *stored.DeepCopy()
	cli.SetDefaults()
	stored.Target.Kind = config.KindAuto
	if !reflect.DeepEqual(cli, stored) {
		t.Errorf("config.Spec.SetDefaults changes the stored spec:\nstored: %+v\ndefaulted: %+v", stored, cli)
	}
}

// TestStatusAndColumns writes a status through the status subresource and
// reads the table kubectl prints.
func TestStatusAndColumns(t *testing.T) {
	st := task(env.Namespace(t), "columns")
	if err := env.Client.Create(ctx(t), st); err != nil {
		t.Fatalf("Create: %v", err)
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	st.Status = v1alpha1.SyncTaskStatus{
		ObservedGeneration: st.Generation,
		Phase:              v1alpha1.PhaseStreaming,
		StartedAt:          &now,
		Progress:           &v1alpha1.CopyProgress{Documents: 1000, Bytes: 1 << 20, EstimatedDocuments: 1000, Percent: "100%"},
		LagSeconds:         2,
		Lag:                "2s",
		OpsPerSecond:       350,
		BytesPerSecond:     1 << 18,
		CheckpointTime:     &now,
		ShardSummary:       "1/1 streaming",
		Shards: []v1alpha1.ShardStatus{{
			Name: "rs0", Ordinal: 0, Phase: v1alpha1.PhaseStreaming, LagSeconds: 2, OpsPerSecond: 350, HeldWrites: 3, Documents: 1000,
			AppliedTimestamp: "1700000000:7", CheckpointTime: &now, LastReportTime: &now,
		}},
		LastVerification: &v1alpha1.Verification{Mode: config.VerifyHash, Result: v1alpha1.VerificationPassed, Time: now, Namespaces: 3},
	}
	meta.SetStatusCondition(&st.Status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Streaming",
		Message: "1 worker streaming, 2s behind", ObservedGeneration: st.Generation,
	})
	if err := env.Client.Status().Update(ctx(t), st); err != nil {
		t.Fatalf("status update: %v", err)
	}

	// A spec update through the main resource leaves the status alone.
	st.Spec.RateLimit = 10
	if err := env.Client.Update(ctx(t), st); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if st.Status.Phase != v1alpha1.PhaseStreaming || len(st.Status.Shards) != 1 {
		t.Fatalf("status after a spec update: %+v", st.Status)
	}

	rc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	url := strings.TrimSuffix(env.Config.Host, "/") + "/apis/sync.mongoferry.io/v1alpha1/namespaces/" + st.Namespace + "/synctasks?includeObject=None"
	req, err := http.NewRequestWithContext(ctx(t), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := rc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var table metav1.Table
	if err := json.NewDecoder(resp.Body).Decode(&table); err != nil {
		t.Fatalf("decode table: %v", err)
	}
	var cols []string
	for _, c := range table.ColumnDefinitions {
		cols = append(cols, fmt.Sprintf("%s/%d", c.Name, c.Priority))
	}
	if got, want := strings.Join(cols, " "), "Name/0 Phase/0 Progress/0 Shards/0 Lag/0 Ops/s/0 Ready/0 Age/0 Message/1"; got != want {
		t.Errorf("columns %q, want %q", got, want)
	}
	if len(table.Rows) != 1 {
		t.Fatalf("%d rows, want 1", len(table.Rows))
	}
	cells := fmt.Sprintf("%v %v", table.Rows[0].Cells[:7], table.Rows[0].Cells[8])
	if want := "[columns Streaming 100% 1/1 streaming 2s 350 True] 1 worker streaming, 2s behind"; cells != want {
		t.Errorf("row %q, want %q", cells, want)
	}
}
