package v1alpha1_test

import (
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// TestTaskSpec converts SyncTasks into the CLI's task (what a worker reads
// from its task file) and checks every field arrives: credentials as a
// username from the Secret and the password's variable, TLS Secrets as the
// files the controller mounts, the source's shards, the target's sharding,
// and every shared option. Each task also goes through YAML and the CLI's
// parser (defaults and checks), as the worker reads it.
func TestTaskSpec(t *testing.T) {
	const (
		srcURI = "mongodb://src-0.mongo:27017,src-1.mongo:27017/?replicaSet=rs0"
		dstURI = "mongodb://dst.mongo:27017/"
	)
	yes, no := true, false
	ca := &v1alpha1.SecretKeyRef{Name: "mongo-ca", Key: "ca.crt"}
	client := &v1alpha1.SecretKeyRef{Name: "ferry-client", Key: "tls.pem"}
	cases := []struct {
		name  string
		spec  v1alpha1.SyncTaskSpec
		users v1alpha1.Usernames
		want  config.Spec
	}{
		{
			name: "no credentials, no TLS",
			spec: v1alpha1.SyncTaskSpec{Source: v1alpha1.Source{URI: srcURI}, Target: v1alpha1.Target{URI: dstURI}},
			want: config.Spec{Source: config.Endpoint{URI: srcURI}, Target: config.Endpoint{URI: dstURI}},
		},
		{
			name: "credentials from Secrets",
			spec: v1alpha1.SyncTaskSpec{
				Source: v1alpha1.Source{URI: srcURI, CredentialsSecret: "src-creds", AuthSource: "admin"},
				Target: v1alpha1.Target{URI: dstURI, CredentialsSecret: "dst-creds", AuthSource: "users"},
			},
			users: v1alpha1.Usernames{Source: "reader", Target: "writer"},
			want: config.Spec{
				Source: config.Endpoint{URI: srcURI, Username: "reader", PasswordEnv: workerapi.EnvSourcePassword, AuthSource: "admin"},
				Target: config.Endpoint{URI: dstURI, Username: "writer", PasswordEnv: workerapi.EnvTargetPassword, AuthSource: "users"},
			},
		},
		{
			name: "credentials for the target only",
			spec: v1alpha1.SyncTaskSpec{
				Source: v1alpha1.Source{URI: srcURI},
				Target: v1alpha1.Target{URI: dstURI, CredentialsSecret: "dst-creds"},
			},
			users: v1alpha1.Usernames{Target: "writer"},
			want: config.Spec{
				Source: config.Endpoint{URI: srcURI},
				Target: config.Endpoint{URI: dstURI, Username: "writer", PasswordEnv: workerapi.EnvTargetPassword},
			},
		},
		{
			name: "TLS from Secrets",
			spec: v1alpha1.SyncTaskSpec{
				Source: v1alpha1.Source{URI: srcURI, TLS: &v1alpha1.TLS{Enabled: true, CASecret: ca, CertificateKeySecret: client}},
				Target: v1alpha1.Target{URI: dstURI, TLS: &v1alpha1.TLS{Enabled: true, CASecret: ca}},
			},
			want: config.Spec{
				Source: config.Endpoint{URI: srcURI, TLS: &config.TLS{Enabled: true,
					CAFile: "/etc/mongoferry/tls/source/ca.pem", CertificateKeyFile: "/etc/mongoferry/tls/source/client.pem"}},
				Target: config.Endpoint{URI: dstURI, TLS: &config.TLS{Enabled: true, CAFile: "/etc/mongoferry/tls/target/ca.pem"}},
			},
		},
		{
			name: "a client certificate from a kubernetes.io/tls Secret, its ca.crt as the CA",
			spec: v1alpha1.SyncTaskSpec{
				Source: v1alpha1.Source{URI: srcURI, TLS: &v1alpha1.TLS{Enabled: true, CASecret: &v1alpha1.SecretKeyRef{Name: "ferry-tls", Key: "ca.crt"}, CertificateSecret: "ferry-tls"}},
				Target: v1alpha1.Target{URI: dstURI, TLS: &v1alpha1.TLS{Enabled: true, CertificateSecret: "ferry-tls"}},
			},
			want: config.Spec{
				Source: config.Endpoint{URI: srcURI, TLS: &config.TLS{Enabled: true, CAFile: "/etc/mongoferry/tls/source/ca.pem",
					CertificateFile: "/etc/mongoferry/tls/source/client.crt", PrivateKeyFile: "/etc/mongoferry/tls/source/client.key"}},
				Target: config.Endpoint{URI: dstURI, TLS: &config.TLS{Enabled: true,
					CertificateFile: "/etc/mongoferry/tls/target/client.crt", PrivateKeyFile: "/etc/mongoferry/tls/target/client.key"}},
			},
		},
		{
			name: "TLS with the system's roots, TLS without verification",
			spec: v1alpha1.SyncTaskSpec{
				Source: v1alpha1.Source{URI: srcURI, TLS: &v1alpha1.TLS{Enabled: true}},
				Target: v1alpha1.Target{URI: dstURI, TLS: &v1alpha1.TLS{Enabled: true, CertificateKeySecret: client, InsecureSkipVerify: true}},
			},
			want: config.Spec{
				Source: config.Endpoint{URI: srcURI, TLS: &config.TLS{Enabled: true}},
				Target: config.Endpoint{URI: dstURI, TLS: &config.TLS{Enabled: true, InsecureSkipVerify: true,
					CertificateKeyFile: "/etc/mongoferry/tls/target/client.pem"}},
			},
		},
		{
			name: "a sharded source with shard overrides",
			spec: v1alpha1.SyncTaskSpec{
				Source: v1alpha1.Source{URI: "mongodb://mongos.src:27017/", Kind: config.KindSharded, CredentialsSecret: "src-creds",
					Shards: []config.Shard{{Name: "rs0", URI: "mongodb://s0.src:27018/"}, {Name: "rs1", URI: "mongodb://s1.src:27018/"}}},
				Target: v1alpha1.Target{URI: dstURI},
			},
			users: v1alpha1.Usernames{Source: "reader"},
			want: config.Spec{
				Source: config.Endpoint{URI: "mongodb://mongos.src:27017/", Kind: config.KindSharded, Username: "reader", PasswordEnv: workerapi.EnvSourcePassword,
					Shards: []config.Shard{{Name: "rs0", URI: "mongodb://s0.src:27018/"}, {Name: "rs1", URI: "mongodb://s1.src:27018/"}}},
				Target: config.Endpoint{URI: dstURI},
			},
		},
		{
			name: "a sharded target: sharding and shard keys",
			spec: v1alpha1.SyncTaskSpec{
				Source: v1alpha1.Source{URI: srcURI, Kind: config.KindReplicaSet},
				Target: v1alpha1.Target{URI: "mongodb://mongos.dst:27017/", Sharding: config.ShardingKeep, ShardKeys: []config.ShardKey{
					{Namespace: "shop.orders", Fields: []string{"region", "orderId"}, Unique: true},
					{Namespace: "shop.carts", Fields: []string{"_id"}, Hashed: "_id"},
				}},
			},
			want: config.Spec{
				Source: config.Endpoint{URI: srcURI, Kind: config.KindReplicaSet},
				Target: config.Endpoint{URI: "mongodb://mongos.dst:27017/", Sharding: config.ShardingKeep, ShardKeys: []config.ShardKey{
					{Namespace: "shop.orders", Fields: []string{"region", "orderId"}, Unique: true},
					{Namespace: "shop.carts", Fields: []string{"_id"}, Hashed: "_id"},
				}},
			},
		},
		{
			name: "every shared option; suspend stays with the controller",
			spec: v1alpha1.SyncTaskSpec{
				Mode:   config.ModeFull,
				Source: v1alpha1.Source{URI: srcURI},
				Target: v1alpha1.Target{URI: dstURI},
				Namespaces: config.Namespaces{Include: []string{`shop\..*`}, Exclude: []string{`\.tmp_`},
					Rename: []config.Rename{{From: "shop", To: "shop_v2"}}},
				Threads: config.Threads{Readers: 8, Writers: 16},
				Cache:   config.Cache{BucketNum: 8, BucketSize: 2, BatchSize: 500, MaxBytes: "1GiB"},
				FullSync: config.FullSync{OnConflict: config.ConflictOverwrite, CopyIndexes: &no, IndexBuild: config.IndexesBefore,
					DropTarget: true, RangeDocuments: 10000, Split: config.SplitAlways},
				Incremental:  config.Incremental{Method: config.MethodChangeStream},
				DDL:          &no,
				Verify:       config.Verify{Mode: config.VerifySample, SampleSize: 10},
				RateLimit:    5000,
				Checkpoint:   config.Checkpoint{Database: "ferry_state"},
				Suspend:      true,
				DeletePolicy: v1alpha1.DeleteDelete,
				MetricsPort:  9100,
			},
			want: config.Spec{
				Mode:   config.ModeFull,
				Source: config.Endpoint{URI: srcURI},
				Target: config.Endpoint{URI: dstURI},
				Namespaces: config.Namespaces{Include: []string{`shop\..*`}, Exclude: []string{`\.tmp_`},
					Rename: []config.Rename{{From: "shop", To: "shop_v2"}}},
				Threads: config.Threads{Readers: 8, Writers: 16},
				Cache:   config.Cache{BucketNum: 8, BucketSize: 2, BatchSize: 500, MaxBytes: "1GiB"},
				FullSync: config.FullSync{OnConflict: config.ConflictOverwrite, CopyIndexes: &no, IndexBuild: config.IndexesBefore,
					DropTarget: true, RangeDocuments: 10000, Split: config.SplitAlways},
				Incremental: config.Incremental{Method: config.MethodChangeStream},
				DDL:         &no,
				Verify:      config.Verify{Mode: config.VerifySample, SampleSize: 10},
				RateLimit:   5000,
				Checkpoint:  config.Checkpoint{Database: "ferry_state"},
			},
		},
		{
			name: "DDL on, indexes copied",
			spec: v1alpha1.SyncTaskSpec{Source: v1alpha1.Source{URI: srcURI}, Target: v1alpha1.Target{URI: dstURI},
				DDL: &yes, FullSync: config.FullSync{CopyIndexes: &yes}},
			want: config.Spec{Source: config.Endpoint{URI: srcURI}, Target: config.Endpoint{URI: dstURI},
				DDL: &yes, FullSync: config.FullSync{CopyIndexes: &yes}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := c.spec.DeepCopy()
			got := c.spec.TaskSpec(c.users)
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("task:\n%s\nwant:\n%s", yamlOf(t, got), yamlOf(t, c.want))
			}
			// The task shares nothing with the SyncTask it came from.
			mutate(reflect.ValueOf(&got).Elem())
			if !reflect.DeepEqual(&c.spec, before) {
				t.Errorf("changing the task changed the SyncTask:\n%s", yamlOf(t, c.spec))
			}

			// As the worker reads it: YAML, then the CLI's parser.
			got = c.spec.TaskSpec(c.users)
			data := yamlOf(t, config.Task{Name: "orders", Spec: got})
			parsed, err := config.Parse([]byte(data))
			if err != nil {
				t.Fatalf("the worker refuses its task file: %v\n%s", err, data)
			}
			want := config.Task{Name: "orders", Spec: *c.want.DeepCopy()}
			want.SetDefaults()
			if !reflect.DeepEqual(*parsed, want) {
				t.Errorf("the worker reads:\n%s\nwant:\n%s", yamlOf(t, parsed), yamlOf(t, want))
			}
		})
	}
}

// TestSharedOptions checks that every option of the CLI's task other than
// its source and target is a field of SyncTaskSpec with the same name and
// type, so that an option added to pkg/config is noticed here, and that the
// conversion carries each one (all but suspend, the controller's).
func TestSharedOptions(t *testing.T) {
	spec := reflect.TypeFor[v1alpha1.SyncTaskSpec]()
	var full v1alpha1.SyncTaskSpec
	cli := reflect.TypeFor[config.Spec]()
	for i := range cli.NumField() {
		f := cli.Field(i)
		if f.Name == "Source" || f.Name == "Target" {
			continue
		}
		g, ok := spec.FieldByName(f.Name)
		if !ok || g.Type != f.Type || g.Tag.Get("json") != f.Tag.Get("json") {
			t.Errorf("config.Spec.%s (%s, json %q) has no counterpart in SyncTaskSpec: add it, with its markers", f.Name, f.Type, f.Tag.Get("json"))
			continue
		}
		mutate(reflect.ValueOf(&full).Elem().FieldByIndex(g.Index))
	}
	got := reflect.ValueOf(full.TaskSpec(v1alpha1.Usernames{}))
	for i := range got.NumField() {
		name := got.Type().Field(i).Name
		if name == "Source" || name == "Target" || name == "Suspend" {
			continue
		}
		if got.Field(i).IsZero() {
			t.Errorf("TaskSpec drops %s", name)
		}
	}
}

// TestSecretNames lists the Secrets a spec names, which the controller
// watches (a new or changed one wakes the task): credentials and TLS, each
// once.
func TestSecretNames(t *testing.T) {
	ref := func(name string) *v1alpha1.SecretKeyRef { return &v1alpha1.SecretKeyRef{Name: name, Key: "k"} }
	cases := []struct {
		name string
		spec v1alpha1.SyncTaskSpec
		want []string
	}{
		{"none", v1alpha1.SyncTaskSpec{}, nil},
		{"credentials", v1alpha1.SyncTaskSpec{Source: v1alpha1.Source{CredentialsSecret: "src"}, Target: v1alpha1.Target{CredentialsSecret: "dst"}},
			[]string{"src", "dst"}},
		{"TLS, one Secret for both CAs", v1alpha1.SyncTaskSpec{
			Source: v1alpha1.Source{CredentialsSecret: "creds", TLS: &v1alpha1.TLS{CASecret: ref("ca"), CertificateKeySecret: ref("client")}},
			Target: v1alpha1.Target{CredentialsSecret: "creds", TLS: &v1alpha1.TLS{CASecret: ref("ca")}},
		}, []string{"creds", "ca", "client"}},
		{"a kubernetes.io/tls Secret for the client certificate and the CA", v1alpha1.SyncTaskSpec{
			Source: v1alpha1.Source{TLS: &v1alpha1.TLS{CASecret: ref("ferry-tls"), CertificateSecret: "ferry-tls"}},
			Target: v1alpha1.Target{TLS: &v1alpha1.TLS{CertificateSecret: "dst-tls"}},
		}, []string{"ferry-tls", "dst-tls"}},
	}
	for _, c := range cases {
		if got := c.spec.SecretNames(); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// mutate sets every settable scalar under v to a non-zero value different
// from the one it had, allocating pointers and one element for empty
// slices.
func mutate(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		mutate(v.Elem())
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				mutate(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.Len() == 0 {
			v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		}
		for i := range v.Len() {
			mutate(v.Index(i))
		}
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(v.Int() + 1)
	}
}

func yamlOf(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
