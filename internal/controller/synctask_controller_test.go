package controller

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
	"github.com/mongoferry/mongoferry/pkg/workertls"
)

const (
	srcPassword = "s3cr3t-Source:@/?pw"
	dstPassword = "t4rget-Password%#"
)

// setup creates a namespace with the src-creds and dst-creds Secrets and
// a task named name; it returns the namespace.
func setup(t *testing.T, name string, edit func(*syncv1alpha1.SyncTask)) string {
	t.Helper()
	ns := env.Namespace(t)
	createSecret(t, ns, "src-creds", "ferry-src", srcPassword)
	createSecret(t, ns, "dst-creds", "ferry-dst", dstPassword)
	task := newTask(ns, name)
	if edit != nil {
		edit(task)
	}
	createTask(t, task)
	return ns
}

func get[T client.Object](t *testing.T, ns, name string, obj T) T {
	t.Helper()
	if err := env.Client.Get(testCtx(t), types.NamespacedName{Namespace: ns, Name: name}, obj); err != nil {
		t.Fatalf("get %T %s: %v", obj, name, err)
	}
	return obj
}

// checkOwned fails unless obj's only owner reference is the task, as its
// controller.
func checkOwned(t *testing.T, obj metav1.Object, task *syncv1alpha1.SyncTask) {
	t.Helper()
	refs := obj.GetOwnerReferences()
	if len(refs) != 1 {
		t.Fatalf("%s: owner references %+v, want the SyncTask only", obj.GetName(), refs)
	}
	r := refs[0]
	if r.APIVersion != "sync.mongoferry.io/v1alpha1" || r.Kind != "SyncTask" || r.Name != task.Name || r.UID != task.UID ||
		r.Controller == nil || !*r.Controller || r.BlockOwnerDeletion == nil || !*r.BlockOwnerDeletion {
		t.Errorf("%s: owner reference %+v, want controller SyncTask %s (%s)", obj.GetName(), r, task.Name, task.UID)
	}
}

func TestRenderedSecret(t *testing.T) {
	ns := setup(t, "orders", func(st *syncv1alpha1.SyncTask) {
		st.Spec.Namespaces.Include = []string{`shop\..*`}
		st.Spec.Target.AuthSource = "admin"
	})
	r, _ := newReconciler()
	reconcile(t, r, ns, "orders")
	task := getTask(t, ns, "orders")
	s := get(t, ns, "orders-worker", &corev1.Secret{})
	checkOwned(t, s, task)
	if s.Labels[TaskLabel] != "orders" || s.Labels[ManagedByLabel] != ManagedBy {
		t.Errorf("labels %v", s.Labels)
	}
	for k, v := range s.Data {
		for _, pw := range []string{srcPassword, dstPassword} {
			if strings.Contains(string(v), pw) {
				t.Errorf("key %s of the worker Secret contains a password", k)
			}
		}
	}
	rendered, err := config.Parse(s.Data[TaskKey])
	if err != nil {
		t.Fatalf("the rendered task does not parse: %v\n%s", err, s.Data[TaskKey])
	}
	checks := []struct {
		field     string
		got, want any
	}{
		{"name", rendered.Name, "orders"},
		{"mode", rendered.Mode, config.ModeFullAndIncremental},
		{"source.uri", rendered.Source.URI, "mongodb://src-0.mongo:27017/?replicaSet=rs0"},
		{"source.username", rendered.Source.Username, "ferry-src"},
		{"source.passwordEnv", rendered.Source.PasswordEnv, SourcePasswordEnv},
		{"target.username", rendered.Target.Username, "ferry-dst"},
		{"target.passwordEnv", rendered.Target.PasswordEnv, TargetPasswordEnv},
		{"target.authSource", rendered.Target.AuthSource, "admin"},
		{"namespaces.include", strings.Join(rendered.Namespaces.Include, ","), `shop\..*`},
		{"suspend", rendered.Suspend, false},
		{"checkpoint.database", rendered.Checkpoint.Database, "mongoferry"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.field, c.got, c.want)
		}
	}
	if strings.Contains(string(s.Data[TaskKey]), "password:") || strings.Contains(string(s.Data[TaskKey]), "passwordFile") {
		t.Errorf("rendered task names a password field:\n%s", s.Data[TaskKey])
	}
}

func TestStatefulSetShape(t *testing.T) {
	ns := setup(t, "orders", func(st *syncv1alpha1.SyncTask) {
		st.Spec.MetricsPort = 9300
		st.Spec.Resources = &corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
		}
	})
	r, rec := newReconciler()
	res := reconcile(t, r, ns, "orders")
	if res.RequeueAfter != StatusPollInterval {
		t.Errorf("requeue after %s, want %s while workers run", res.RequeueAfter, StatusPollInterval)
	}
	task := getTask(t, ns, "orders")
	sts := get(t, ns, "orders-worker", &appsv1.StatefulSet{})
	checkOwned(t, sts, task)
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 1 {
		t.Errorf("replicas %v, want 1", sts.Spec.Replicas)
	}
	if sts.Spec.ServiceName != "orders-worker" {
		t.Errorf("serviceName %q", sts.Spec.ServiceName)
	}
	tpl := sts.Spec.Template
	if h := tpl.Annotations[ConfigHashAnnotation]; len(h) != 64 || func() bool { _, err := hex.DecodeString(h); return err != nil }() {
		t.Errorf("config hash %q, want 64 hex digits", h)
	}
	pod := tpl.Spec
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the service account token is mounted; workers never call the API")
	}
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v", psc)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image != testImage {
		t.Errorf("image %q, want the reconciler's default %q", c.Image, testImage)
	}
	// The source may be sharded (source.kind auto, oplog replay): the
	// one worker discovers it and waits for a mapping if it is.
	wantCmd := []string{"/ferry", "run", "--task-env", TaskEnv, "--listen", "0.0.0.0:9300", "--progress", "log",
		"--log-format", "json", "--discover-interval", "30s", "--await-shard-map"}
	if got := append(append([]string{}, c.Command...), c.Args...); !slices.Equal(got, wantCmd) {
		t.Errorf("command %q, want %q", got, wantCmd)
	}
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("no container securityContext")
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
		t.Error("runAsNonRoot not set")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("root filesystem writable")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("privilege escalation allowed")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("capabilities %+v, want drop ALL", sc.Capabilities)
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Error("seccomp profile not RuntimeDefault")
	}
	wantEnv := map[string][2]string{
		TaskEnv:           {"orders-worker", TaskKey},
		SourcePasswordEnv: {"src-creds", PasswordKey},
		TargetPasswordEnv: {"dst-creds", PasswordKey},
	}
	if len(c.Env) != len(wantEnv) {
		t.Errorf("env %+v, want %d variables", c.Env, len(wantEnv))
	}
	for _, e := range c.Env {
		w, ok := wantEnv[e.Name]
		if !ok {
			t.Errorf("unexpected env %s", e.Name)
			continue
		}
		if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
			e.ValueFrom.SecretKeyRef.Name != w[0] || e.ValueFrom.SecretKeyRef.Key != w[1] {
			t.Errorf("env %s = %+v, want secretKeyRef %s/%s", e.Name, e, w[0], w[1])
		}
	}
	all := strings.Join(append(append(c.Command, c.Args...), tpl.Annotations[ConfigHashAnnotation]), " ")
	for _, pw := range []string{srcPassword, dstPassword, "ferry-src"} {
		if strings.Contains(all, pw) {
			t.Errorf("a credential appears in the command, args or annotations: %s", all)
		}
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != MetricsPortName || c.Ports[0].ContainerPort != 9300 {
		t.Errorf("ports %+v", c.Ports)
	}
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.StrVal != MetricsPortName {
			t.Errorf("%s probe %+v, want GET /healthz on the metrics port", name, p)
		}
	}
	if c.Resources.Requests.Cpu().String() != "250m" || c.Resources.Limits.Memory().String() != "1Gi" {
		t.Errorf("resources %+v", c.Resources)
	}

	svc := get(t, ns, "orders-worker", &corev1.Service{})
	checkOwned(t, svc, task)
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 9300 ||
		svc.Spec.Selector[TaskLabel] != "orders" {
		t.Errorf("service spec %+v, want headless on port 9300 selecting the workers", svc.Spec)
	}
	for k, v := range svc.Spec.Selector {
		if tpl.Labels[k] != v {
			t.Errorf("service selector %s=%s does not match the pod template labels %v", k, v, tpl.Labels)
		}
	}
	evs := drainEvents(rec)
	if !hasEvent(evs, "Normal", "WorkersCreated") {
		t.Errorf("events %q, want WorkersCreated", evs)
	}

	// A second reconcile changes nothing and tells nothing new.
	rv := sts.ResourceVersion
	reconcile(t, r, ns, "orders")
	if sts2 := get(t, ns, "orders-worker", &appsv1.StatefulSet{}); sts2.ResourceVersion != rv {
		t.Errorf("StatefulSet rewritten by an idle reconcile (resourceVersion %s -> %s)", rv, sts2.ResourceVersion)
	}
	if evs := drainEvents(rec); hasEvent(evs, "Normal", "WorkersCreated") || hasEvent(evs, "Normal", "WorkersRolled") {
		t.Errorf("idle reconcile emitted %q", evs)
	}

	// No workers report yet: Pending, with conditions for this generation.
	task = getTask(t, ns, "orders")
	if task.Status.Phase != syncv1alpha1.PhasePending {
		t.Errorf("phase %q, want Pending", task.Status.Phase)
	}
	for _, ct := range []string{syncv1alpha1.ConditionReady, syncv1alpha1.ConditionProgressing, syncv1alpha1.ConditionDegraded} {
		c := meta.FindStatusCondition(task.Status.Conditions, ct)
		if c == nil || c.ObservedGeneration != task.Generation {
			t.Errorf("condition %s = %+v, want one for generation %d", ct, c, task.Generation)
		}
	}
}

func TestSuspendScalesToZero(t *testing.T) {
	ns := setup(t, "orders", nil)
	r, rec := newReconciler()
	reconcile(t, r, ns, "orders")
	hash := get(t, ns, "orders-worker", &appsv1.StatefulSet{}).Spec.Template.Annotations[ConfigHashAnnotation]
	drainEvents(rec)

	updateTask(t, ns, "orders", func(st *syncv1alpha1.SyncTask) { st.Spec.Suspend = true })
	if res := reconcile(t, r, ns, "orders"); res.RequeueAfter != 0 {
		t.Errorf("a suspended task without pods is requeued after %s", res.RequeueAfter)
	}
	sts := get(t, ns, "orders-worker", &appsv1.StatefulSet{})
	if *sts.Spec.Replicas != 0 {
		t.Errorf("suspended: replicas %d, want 0", *sts.Spec.Replicas)
	}
	if h := sts.Spec.Template.Annotations[ConfigHashAnnotation]; h != hash {
		t.Error("suspending changed the config hash: resuming would roll the workers")
	}
	task := getTask(t, ns, "orders")
	ready := meta.FindStatusCondition(task.Status.Conditions, syncv1alpha1.ConditionReady)
	if task.Status.Phase != syncv1alpha1.PhasePaused || ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != syncv1alpha1.ReasonSuspended {
		t.Errorf("suspended: phase %q, Ready %+v; want Paused, False/Suspended", task.Status.Phase, ready)
	}
	if evs := drainEvents(rec); !hasEvent(evs, "Normal", "Suspended") || !hasEvent(evs, "Normal", "PhaseChanged") {
		t.Errorf("events %q, want Suspended and PhaseChanged", evs)
	}

	updateTask(t, ns, "orders", func(st *syncv1alpha1.SyncTask) { st.Spec.Suspend = false })
	reconcile(t, r, ns, "orders")
	sts = get(t, ns, "orders-worker", &appsv1.StatefulSet{})
	if *sts.Spec.Replicas != 1 || sts.Spec.Template.Annotations[ConfigHashAnnotation] != hash {
		t.Errorf("resumed: replicas %d, hash changed %v", *sts.Spec.Replicas, sts.Spec.Template.Annotations[ConfigHashAnnotation] != hash)
	}
	if evs := drainEvents(rec); !hasEvent(evs, "Normal", "Resumed") || hasEvent(evs, "Normal", "WorkersRolled") {
		t.Errorf("events %q, want Resumed and no WorkersRolled", evs)
	}
	if p := getTask(t, ns, "orders").Status.Phase; p != syncv1alpha1.PhasePending {
		t.Errorf("resumed: phase %q, want Pending until the worker reports", p)
	}
}

func TestSecretNotFound(t *testing.T) {
	ns := env.Namespace(t)
	createSecret(t, ns, "dst-creds", "ferry-dst", dstPassword)
	createTask(t, newTask(ns, "orders"))
	r, rec := newReconciler()
	res := reconcile(t, r, ns, "orders")
	if res.RequeueAfter == 0 {
		t.Error("not requeued")
	}
	task := getTask(t, ns, "orders")
	const msg = `source.credentialsSecret: Secret "src-creds" not found in namespace ` // + ns + ": create it..."
	for _, want := range []struct {
		typ    string
		status metav1.ConditionStatus
	}{{syncv1alpha1.ConditionReady, metav1.ConditionFalse}, {syncv1alpha1.ConditionDegraded, metav1.ConditionTrue}} {
		c := meta.FindStatusCondition(task.Status.Conditions, want.typ)
		if c == nil || c.Status != want.status || c.Reason != syncv1alpha1.ReasonSecretNotFound || !strings.HasPrefix(c.Message, msg) ||
			c.ObservedGeneration != task.Generation {
			t.Errorf("%s = %+v, want %s/SecretNotFound", want.typ, c, want.status)
		}
	}
	if task.Status.Phase != syncv1alpha1.PhasePending {
		t.Errorf("phase %q", task.Status.Phase)
	}
	if err := env.Client.Get(testCtx(t), types.NamespacedName{Namespace: ns, Name: "orders-worker"}, &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Errorf("StatefulSet created without credentials: %v", err)
	}
	if evs := drainEvents(rec); !hasEvent(evs, "Warning", syncv1alpha1.ReasonSecretNotFound) {
		t.Errorf("events %q, want Warning SecretNotFound", evs)
	}

	// Creating the Secret unblocks the task.
	createSecret(t, ns, "src-creds", "ferry-src", srcPassword)
	reconcile(t, r, ns, "orders")
	get(t, ns, "orders-worker", &appsv1.StatefulSet{})
	task = getTask(t, ns, "orders")
	if c := meta.FindStatusCondition(task.Status.Conditions, syncv1alpha1.ConditionDegraded); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Degraded = %+v after the Secret was created", c)
	}

	// A Secret without a password key is reported too.
	createTask(t, func() *syncv1alpha1.SyncTask {
		st := newTask(ns, "bad")
		st.Spec.Source.CredentialsSecret = "half"
		return st
	}())
	half := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "half"}, Data: map[string][]byte{UsernameKey: []byte("x")}}
	if err := env.Client.Create(testCtx(t), half); err != nil {
		t.Fatal(err)
	}
	reconcile(t, r, ns, "bad")
	c := meta.FindStatusCondition(getTask(t, ns, "bad").Status.Conditions, syncv1alpha1.ConditionReady)
	if want := `source.credentialsSecret: Secret "half" must have the keys username and password (password is empty or missing)`; c == nil || c.Reason != syncv1alpha1.ReasonSecretInvalid || c.Message != want {
		t.Errorf("Ready = %+v, want SecretInvalid: %s", c, want)
	}
}

func TestCredentialChangeRollsWorkers(t *testing.T) {
	ns := setup(t, "orders", nil)
	r, rec := newReconciler()
	reconcile(t, r, ns, "orders")
	hashOf := func() string {
		return get(t, ns, "orders-worker", &appsv1.StatefulSet{}).Spec.Template.Annotations[ConfigHashAnnotation]
	}
	h0 := hashOf()
	drainEvents(rec)

	// Any write to a credentials Secret rolls the workers: a new password,
	// but also an annotation (the hash is made from the Secrets'
	// resourceVersions, never from their data).
	s := get(t, ns, "src-creds", &corev1.Secret{})
	s.Data[PasswordKey] = []byte("rotated")
	if err := env.Client.Update(testCtx(t), s); err != nil {
		t.Fatal(err)
	}
	reconcile(t, r, ns, "orders")
	h1 := hashOf()
	if h1 == h0 {
		t.Fatal("a password change did not change the config hash")
	}
	if evs := drainEvents(rec); !hasEvent(evs, "Normal", "WorkersRolled") {
		t.Errorf("events %q, want WorkersRolled", evs)
	}
	s = get(t, ns, "dst-creds", &corev1.Secret{})
	s.Annotations = map[string]string{"rotated-by": "vault"}
	if err := env.Client.Update(testCtx(t), s); err != nil {
		t.Fatal(err)
	}
	reconcile(t, r, ns, "orders")
	h2 := hashOf()
	if h2 == h1 {
		t.Error("a write to the target's credentials Secret did not change the config hash")
	}
	reconcile(t, r, ns, "orders")
	if hashOf() != h2 {
		t.Error("the config hash changed without a change")
	}

	// A spec change: roll.
	updateTask(t, ns, "orders", func(st *syncv1alpha1.SyncTask) { st.Spec.Threads.Writers = 2 })
	reconcile(t, r, ns, "orders")
	if hashOf() == h2 {
		t.Error("a spec change did not change the config hash")
	}
}

// TestInvalidSpec: what the API server accepts but the engine refuses
// stops the task with the engine's words, before any worker starts.
func TestInvalidSpec(t *testing.T) {
	long := strings.Repeat("x", MaxTaskNameLength+1)
	for _, c := range []struct {
		name, want string
		edit       func(*syncv1alpha1.SyncTask)
	}{
		{"regexp", `spec.namespaces.include[0]: invalid regular expression "shop\\.(orders": missing closing ): ` + "`shop\\.(orders`",
			func(st *syncv1alpha1.SyncTask) { st.Spec.Namespaces.Include = []string{`shop\.(orders`} }},
		{"badvolume", `spec.workerTemplate.volumeMounts[0]: mounts "certs", which volumes does not list: add it to volumes`,
			func(st *syncv1alpha1.SyncTask) {
				st.Spec.WorkerTemplate = &syncv1alpha1.WorkerTemplate{VolumeMounts: []corev1.VolumeMount{{Name: "certs", MountPath: "/etc/certs"}}}
			}},
		{"badfilter", "spec.namespaces.filters[0].query: $where: operator cannot be evaluated on a document: it runs JavaScript on the server; " +
			"express the condition with query operators such as $eq, $in and $regex",
			func(st *syncv1alpha1.SyncTask) {
				st.Spec.Namespaces.Filters = []config.Filter{{Namespace: "shop.orders", Query: config.Query(`{"$where": "this.tenant == 'acme'"}`)}}
			}},
		{long, `metadata.name: "` + long + `" is 46 characters: the workers' StatefulSet ` + long +
			"-worker and its pods need a name of at most 45 characters; recreate the task under a shorter name", nil},
	} {
		ns := setup(t, c.name, c.edit)
		r, rec := newReconciler()
		reconcile(t, r, ns, c.name)
		cond := meta.FindStatusCondition(getTask(t, ns, c.name).Status.Conditions, syncv1alpha1.ConditionReady)
		if cond == nil || cond.Reason != syncv1alpha1.ReasonInvalidSpec || cond.Message != c.want {
			t.Errorf("Ready = %+v, want InvalidSpec: %s", cond, c.want)
		}
		if err := env.Client.Get(testCtx(t), types.NamespacedName{Namespace: ns, Name: c.name + "-worker"}, &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
			t.Errorf("StatefulSet created for an invalid task: %v", err)
		}
		if evs := drainEvents(rec); !hasEvent(evs, "Warning", syncv1alpha1.ReasonInvalidSpec) {
			t.Errorf("events %q", evs)
		}
	}
}

// TestShardedSource: one worker per shard, the pod ordinal of each shard
// kept in status.shards; before any worker reports the source, one worker
// that waits for a mapping if the source is sharded; a reordered
// config.shards changes nothing, an added shard adds a worker without
// restarting the others, a removed one keeps its worker (it drains its
// oplog), a failed discovery keeps the mapping and says so. The workers'
// /status reports are stood in for by ReadTopology.
func TestShardedSource(t *testing.T) {
	ns := setup(t, "sharded", func(st *syncv1alpha1.SyncTask) {
		st.Spec.Source.Kind = config.KindSharded
		st.Spec.Source.URI = "mongodb://mongos.src:27017/"
		st.Spec.Source.Shards = []config.Shard{{Name: "rs0", URI: "mongodb://s0:27018/"}}
	})
	r, rec := newReconciler()
	listed := []string{"rs1", "rs0", "rs2"}
	reported := false
	var discoverErr string
	r.ShardRefreshInterval = 7 * time.Second
	r.ReadTopology = func(*syncv1alpha1.SyncTask, []*workerapi.Status) (workerapi.Topology, bool) {
		now := time.Now()
		return workerapi.Topology{Sharded: true, Shards: listed, DiscoveredAt: now, AttemptedAt: now, Error: discoverErr}, reported
	}
	args := func(sts *appsv1.StatefulSet) string {
		return strings.Join(sts.Spec.Template.Spec.Containers[0].Args, " ")
	}

	// No worker has reported: one worker, told to discover and to wait
	// for a mapping should the source be sharded.
	reconcile(t, r, ns, "sharded")
	boot := get(t, ns, "sharded-worker", &appsv1.StatefulSet{})
	if *boot.Spec.Replicas != 1 || !strings.HasSuffix(args(boot), "--discover-interval 7s --await-shard-map") || boot.Spec.Template.Annotations[ShardedAnnotation] != "" {
		t.Errorf("before discovery: replicas %d, args %q, annotations %v", *boot.Spec.Replicas, args(boot), boot.Spec.Template.Annotations)
	}
	if _, ok := get(t, ns, "sharded-worker", &corev1.Secret{}).Data[ShardMapKey]; ok {
		t.Errorf("a shard mapping before any discovery")
	}
	reported = true
	type mapping struct {
		name    string
		ordinal int32
		removed bool
	}
	check := func(step string, replicas int32, want []mapping) *appsv1.StatefulSet {
		t.Helper()
		reconcile(t, r, ns, "sharded")
		sts := get(t, ns, "sharded-worker", &appsv1.StatefulSet{})
		if *sts.Spec.Replicas != replicas {
			t.Errorf("%s: replicas %d, want %d", step, *sts.Spec.Replicas, replicas)
		}
		var got []mapping
		for _, s := range getTask(t, ns, "sharded").Status.Shards {
			got = append(got, mapping{s.Name, s.Ordinal, s.Removed})
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: status.shards %+v, want %+v", step, got, want)
		}
		var slots []shardSlot
		for _, m := range want {
			slots = append(slots, shardSlot{Name: m.name})
		}
		sec := get(t, ns, "sharded-worker", &corev1.Secret{})
		if b, _ := json.Marshal(slots); string(sec.Data[ShardMapKey]) != string(b) {
			t.Errorf("%s: worker Secret %s = %s, want %s", step, ShardMapKey, sec.Data[ShardMapKey], b)
		}
		return sts
	}

	sts := check("first discovery", 3, []mapping{{"rs0", 0, false}, {"rs1", 1, false}, {"rs2", 2, false}})
	if got := args(sts); !strings.HasSuffix(got, "--discover-interval 7s") {
		t.Errorf("args %q: want the workers to discover every 7s, and no longer to wait", got)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e
	}
	if e := env[PodNameEnv]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("%s = %+v, want the pod name", PodNameEnv, e)
	}
	if e := env[ShardMapEnv]; e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != "sharded-worker" || e.ValueFrom.SecretKeyRef.Key != ShardMapKey {
		t.Errorf("%s = %+v, want the worker Secret's %s", ShardMapEnv, e, ShardMapKey)
	}
	if sts.Spec.Template.Annotations[ShardedAnnotation] != "true" || sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("template annotations %v, policy %s", sts.Spec.Template.Annotations, sts.Spec.PodManagementPolicy)
	}
	task := getTask(t, ns, "sharded")
	if task.Status.ShardSummary != "3/3 pending" {
		t.Errorf("shardSummary %q, want 3/3 pending", task.Status.ShardSummary)
	}
	if c := meta.FindStatusCondition(task.Status.Conditions, syncv1alpha1.ConditionDegraded); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Degraded = %+v, want False", c)
	}
	if evs := drainEvents(rec); !hasEvent(evs, "Normal", syncv1alpha1.ReasonShardsDiscovered) {
		t.Errorf("events %q, want %s", evs, syncv1alpha1.ReasonShardsDiscovered)
	}

	// config.shards in another order, and a shard whose name sorts first
	// joins: nobody's ordinal moves, the new shard gets the next one, and
	// the running workers are not restarted (same pod template).
	listed = []string{"rs2", "rs00", "rs0", "rs1"}
	sts2 := check("a shard added", 4, []mapping{{"rs0", 0, false}, {"rs1", 1, false}, {"rs2", 2, false}, {"rs00", 3, false}})
	if !equality.Semantic.DeepEqual(sts.Spec.Template, sts2.Spec.Template) {
		t.Errorf("adding a shard changed the pod template: the workers would restart")
	}
	if evs := drainEvents(rec); !hasEvent(evs, "Normal", syncv1alpha1.ReasonShardAdded) || hasEvent(evs, "Normal", syncv1alpha1.ReasonShardsDiscovered) {
		t.Errorf("events %q, want %s only", evs, syncv1alpha1.ReasonShardAdded)
	}

	// A shard leaves: its worker stays to drain the shard's oplog.
	listed = []string{"rs2", "rs00", "rs0"}
	check("a shard removed", 4, []mapping{{"rs0", 0, false}, {"rs1", 1, true}, {"rs2", 2, false}, {"rs00", 3, false}})
	if evs := drainEvents(rec); !hasEvent(evs, "Normal", syncv1alpha1.ReasonShardRemoved) {
		t.Errorf("events %q, want %s", evs, syncv1alpha1.ReasonShardRemoved)
	}
	check("nothing changed", 4, []mapping{{"rs0", 0, false}, {"rs1", 1, true}, {"rs2", 2, false}, {"rs00", 3, false}})
	if evs := drainEvents(rec); hasEvent(evs, "Normal", syncv1alpha1.ReasonShardRemoved) || hasEvent(evs, "Normal", syncv1alpha1.ReasonShardAdded) {
		t.Errorf("events %q repeated", evs)
	}

	// The source cannot be asked: the mapping stays, Degraded says why.
	discoverErr = "source: deployment unreachable: nothing answered at mongodb://mongos.src:27017/"
	check("discovery failed", 4, []mapping{{"rs0", 0, false}, {"rs1", 1, true}, {"rs2", 2, false}, {"rs00", 3, false}})
	c := meta.FindStatusCondition(getTask(t, ns, "sharded").Status.Conditions, syncv1alpha1.ConditionDegraded)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != syncv1alpha1.ReasonShardDiscoveryFailed || !strings.Contains(c.Message, "unreachable") {
		t.Errorf("Degraded = %+v, want %s", c, syncv1alpha1.ReasonShardDiscoveryFailed)
	}
}

func TestPodMonitorOnlyWhenInstalled(t *testing.T) {
	ns := setup(t, "orders", nil)
	r, _ := newReconciler()
	reconcile(t, r, ns, "orders") // no PodMonitor CRD: nothing, no error

	// The prometheus-operator's own CRD, so that the PodMonitor is checked
	// against the real schema.
	crd := filepath.Join("..", "..", "test", "testdata", "prometheus-operator-crds", "monitoring.coreos.com_podmonitors.yaml")
	if _, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{Paths: []string{crd}}); err != nil {
		t.Fatal(err)
	}
	r, _ = newReconciler() // a fresh manager: no remembered absence
	pm := &unstructured.Unstructured{}
	pm.SetGroupVersionKind(PodMonitorGVK)
	deadline := time.Now().Add(30 * time.Second)
	for {
		reconcile(t, r, ns, "orders")
		err := env.Client.Get(testCtx(t), types.NamespacedName{Namespace: ns, Name: "orders-worker"}, pm)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no PodMonitor after the CRD was installed: %v", err)
		}
		r.podMonitor = crdPresence{}
		time.Sleep(500 * time.Millisecond)
	}
	task := getTask(t, ns, "orders")
	checkOwned(t, pm, task)
	eps, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	if len(eps) != 1 || eps[0].(map[string]any)["port"] != MetricsPortName {
		t.Errorf("podMetricsEndpoints %v", eps)
	}
	sel, _, _ := unstructured.NestedStringMap(pm.Object, "spec", "selector", "matchLabels")
	if sel[TaskLabel] != "orders" {
		t.Errorf("selector %v", sel)
	}

	// With worker TLS the PodMonitor scrapes over HTTPS with the CA from
	// the task's worker TLS Secret (accepted by the real schema).
	ca, err := workertls.NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if r.WorkerTLS, err = NewWorkerTLS(ca); err != nil {
		t.Fatal(err)
	}
	reconcile(t, r, ns, "orders")
	pm = get(t, ns, "orders-worker", pm)
	eps, _, _ = unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	caRef, _, _ := unstructured.NestedStringMap(eps[0].(map[string]any), "tlsConfig", "ca", "secret")
	if eps[0].(map[string]any)["scheme"] != "https" || caRef["name"] != WorkerTLSName("orders") || caRef["key"] != WorkerTLSCAKey {
		t.Errorf("podMetricsEndpoints with worker TLS %v", eps)
	}

	// With NoPodMonitors (one PodMonitor for every worker, the Helm
	// chart's) a task gets none.
	createTask(t, newTask(ns, "users"))
	r, _ = newReconciler()
	r.NoPodMonitors = true
	reconcile(t, r, ns, "users")
	if err := env.Client.Get(testCtx(t), types.NamespacedName{Namespace: ns, Name: "users-worker"}, pm); !apierrors.IsNotFound(err) {
		t.Errorf("PodMonitor users-worker with NoPodMonitors: %v, want not found", err)
	}
}

// TestStatusFromWorker: a worker pod's /status becomes the task's status.
func TestStatusFromWorker(t *testing.T) {
	body := `{"task":"orders","mode":"fullAndIncremental","phase":"Streaming",
	  "copy":{"stage":"done","estimatedDocuments":1000,"documents":1000,"bytes":51200,"ranges":2,"rangesDone":2,"percent":100},
	  "replay":{"appliedTS":{"T":1700000000,"I":3},"appliedTime":"2023-11-14T22:13:20Z","newestTS":{"T":1700000002,"I":1},
	            "lagSeconds":2,"opsPerSecond":21.4,"inFlight":0,"holds":{"heldWrites":4,"heldNow":1}},
	  "startedAt":"2023-11-14T22:00:00Z"}`
	var hits int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/status" {
			http.NotFound(w, r)
			return
		}
		hits++
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	_, portStr, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(portStr)

	ns := setup(t, "orders", func(st *syncv1alpha1.SyncTask) { st.Spec.MetricsPort = int32(port) })
	r, rec := newReconciler()
	reconcile(t, r, ns, "orders")
	runWorkerPod(t, ns, "orders")
	reconcile(t, r, ns, "orders")
	if hits == 0 {
		t.Fatal("the worker's /status was not read")
	}
	st := getTask(t, ns, "orders").Status
	if st.Phase != syncv1alpha1.PhaseStreaming || st.LagSeconds != 2 || st.OpsPerSecond != 21 ||
		st.Progress == nil || st.Progress.Percent != "100%" || st.Progress.Documents != 1000 {
		t.Errorf("status %+v", st)
	}
	if len(st.Shards) != 1 || st.Shards[0].Name != "orders-worker-0" || st.Shards[0].AppliedTimestamp != "1700000000:3" || st.Shards[0].HeldWrites != 4 ||
		st.CheckpointTime == nil || !st.CheckpointTime.Equal(&metav1.Time{Time: time.Unix(1700000000, 0)}) {
		t.Errorf("shards %+v, checkpoint %v", st.Shards, st.CheckpointTime)
	}
	if st.StartedAt == nil || !st.StartedAt.Equal(&metav1.Time{Time: time.Date(2023, 11, 14, 22, 0, 0, 0, time.UTC)}) {
		t.Errorf("startedAt %v", st.StartedAt)
	}
	if c := meta.FindStatusCondition(st.Conditions, syncv1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue || c.Reason != syncv1alpha1.ReasonStreaming {
		t.Errorf("Ready = %+v", c)
	}
	if evs := drainEvents(rec); !slices.ContainsFunc(evs, func(e string) bool { return strings.Contains(e, "phase Pending -> Streaming") }) {
		t.Errorf("events %q, want PhaseChanged Pending -> Streaming", evs)
	}
}

func TestFinalizerFollowsDeletePolicy(t *testing.T) {
	ns := setup(t, "keep", nil)
	r, _ := newReconciler()
	reconcile(t, r, ns, "keep")
	if f := getTask(t, ns, "keep").Finalizers; len(f) != 0 {
		t.Errorf("Retain: finalizers %v, want none", f)
	}
	updateTask(t, ns, "keep", func(st *syncv1alpha1.SyncTask) { st.Spec.DeletePolicy = syncv1alpha1.DeleteDelete })
	reconcile(t, r, ns, "keep")
	if f := getTask(t, ns, "keep").Finalizers; !slices.Equal(f, []string{CheckpointFinalizer}) {
		t.Errorf("Delete: finalizers %v, want %s", f, CheckpointFinalizer)
	}
	updateTask(t, ns, "keep", func(st *syncv1alpha1.SyncTask) { st.Spec.DeletePolicy = syncv1alpha1.DeleteRetain })
	reconcile(t, r, ns, "keep")
	if f := getTask(t, ns, "keep").Finalizers; len(f) != 0 {
		t.Errorf("back to Retain: finalizers %v", f)
	}
}

// TestFailedTaskStops: a worker whose verification failed (exit code 2)
// fails the task; the next reconcile scales the workers to 0 and nothing
// more runs (no requeue, no further failure counted); a new value of the
// retry annotation starts them again from the checkpoint.
func TestFailedTaskStops(t *testing.T) {
	ns := setup(t, "orders", func(st *syncv1alpha1.SyncTask) { st.Spec.Mode = config.ModeFull })
	r, rec := newReconciler()
	reconcile(t, r, ns, "orders")
	sts := get(t, ns, "orders-worker", &appsv1.StatefulSet{})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-worker-0", Labels: sts.Spec.Template.Labels}, Spec: sts.Spec.Template.Spec}
	if err := env.Client.Create(testCtx(t), pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: WorkerContainer, RestartCount: 1,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: workerapi.ExitVerificationFailed,
			Message: "ferry: verification found differences", FinishedAt: metav1.Now()}}}}}
	if err := env.Client.Status().Update(testCtx(t), pod); err != nil {
		t.Fatal(err)
	}
	reconcile(t, r, ns, "orders")
	if st := getTask(t, ns, "orders").Status; st.Phase != syncv1alpha1.PhaseFailed || st.Failures != 1 || st.LastFailure == nil || st.LastFailure.Reason != syncv1alpha1.ReasonVerificationFailed {
		t.Fatalf("after the failure: phase %s, failures %d, last %+v", st.Phase, st.Failures, st.LastFailure)
	}
	drainEvents(rec)

	reconcile(t, r, ns, "orders")
	if n := *get(t, ns, "orders-worker", &appsv1.StatefulSet{}).Spec.Replicas; n != 0 {
		t.Fatalf("failed: replicas %d, want 0", n)
	}
	if evs := drainEvents(rec); !hasEvent(evs, "Warning", "WorkersStopped") {
		t.Errorf("events %q, want WorkersStopped", evs)
	}
	// The StatefulSet controller would delete the pod.
	if err := env.Client.Delete(testCtx(t), pod); err != nil {
		t.Fatal(err)
	}
	if res := reconcile(t, r, ns, "orders"); res.RequeueAfter != 0 {
		t.Errorf("a stopped failed task is requeued after %s", res.RequeueAfter)
	}
	st := getTask(t, ns, "orders").Status
	if st.Phase != syncv1alpha1.PhaseFailed || st.Failures != 1 || *get(t, ns, "orders-worker", &appsv1.StatefulSet{}).Spec.Replicas != 0 {
		t.Errorf("still stopped: phase %s, failures %d", st.Phase, st.Failures)
	}
	if c := meta.FindStatusCondition(st.Conditions, syncv1alpha1.ConditionDegraded); c == nil || c.Reason != syncv1alpha1.ReasonVerificationFailed || !strings.Contains(c.Message, syncv1alpha1.RetryAnnotation) {
		t.Errorf("Degraded = %+v, want VerificationFailed naming the retry annotation", c)
	}

	updateTask(t, ns, "orders", func(st *syncv1alpha1.SyncTask) {
		st.Annotations = map[string]string{syncv1alpha1.RetryAnnotation: "1"}
	})
	reconcile(t, r, ns, "orders")
	if n := *get(t, ns, "orders-worker", &appsv1.StatefulSet{}).Spec.Replicas; n != 1 {
		t.Errorf("retried: replicas %d, want 1", n)
	}
	st = getTask(t, ns, "orders").Status
	if st.Phase != syncv1alpha1.PhasePending || st.LastRetry != "1" || st.Failures != 1 {
		t.Errorf("retried: phase %s, lastRetry %q, failures %d", st.Phase, st.LastRetry, st.Failures)
	}
	if evs := drainEvents(rec); !hasEvent(evs, "Normal", "Retrying") {
		t.Errorf("events %q, want Retrying", evs)
	}
}

// TestWorkerTemplate: spec.workerTemplate reaches the worker pods
// (labels, annotations, scheduling, pull Secrets, service account,
// variables, volumes and mounts) without displacing what the operator
// sets itself.
func TestWorkerTemplate(t *testing.T) {
	ns := setup(t, "orders", func(st *syncv1alpha1.SyncTask) {
		st.Spec.WorkerTemplate = &syncv1alpha1.WorkerTemplate{
			Metadata:           &syncv1alpha1.WorkerMetadata{Labels: map[string]string{"team": "data"}, Annotations: map[string]string{"example.com/owner": "dba"}},
			NodeSelector:       map[string]string{"pool": "migration"},
			Tolerations:        []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "migration", Effect: corev1.TaintEffectNoSchedule}},
			Affinity:           &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 10, PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname"}}}}},
			PriorityClassName:  "migration-high",
			ServiceAccountName: "ferry-worker",
			ImagePullSecrets:   []corev1.LocalObjectReference{{Name: "registry"}},
			Env: []corev1.EnvVar{{Name: "HTTPS_PROXY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "proxy"}, Key: "url"}}}},
			Volumes:      []runtime.RawExtension{{Raw: []byte(`{"name":"certs","secret":{"secretName":"mongo-tls","defaultMode":256}}`)}},
			VolumeMounts: []corev1.VolumeMount{{Name: "certs", MountPath: "/etc/mongoferry/tls", ReadOnly: true}},
		}
	})
	r, _ := newReconciler()
	reconcile(t, r, ns, "orders")
	sts := get(t, ns, "orders-worker", &appsv1.StatefulSet{})
	tpl := sts.Spec.Template
	pod := tpl.Spec
	if tpl.Labels["team"] != "data" || tpl.Labels[ManagedByLabel] != ManagedBy || tpl.Annotations["example.com/owner"] != "dba" || tpl.Annotations[ConfigHashAnnotation] == "" {
		t.Errorf("labels %v, annotations %v", tpl.Labels, tpl.Annotations)
	}
	if pod.NodeSelector["pool"] != "migration" || len(pod.Tolerations) != 1 || pod.Tolerations[0].Key != "dedicated" ||
		pod.Affinity == nil || pod.Affinity.PodAntiAffinity == nil || pod.PriorityClassName != "migration-high" ||
		pod.ServiceAccountName != "ferry-worker" || len(pod.ImagePullSecrets) != 1 || pod.ImagePullSecrets[0].Name != "registry" {
		t.Errorf("scheduling fields not applied: %+v", pod)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("a service account from the template mounts its token")
	}
	if len(pod.Volumes) != 1 || pod.Volumes[0].Secret == nil || pod.Volumes[0].Secret.SecretName != "mongo-tls" {
		t.Errorf("volumes %+v", pod.Volumes)
	}
	c := pod.Containers[0]
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/etc/mongoferry/tls" {
		t.Errorf("mounts %+v", c.VolumeMounts)
	}
	names := []string{}
	for _, e := range c.Env {
		names = append(names, e.Name)
	}
	if !slices.Contains(names, "HTTPS_PROXY") || !slices.Contains(names, TaskEnv) {
		t.Errorf("env %v, want the task's and HTTPS_PROXY", names)
	}
}

// TestTLSSecrets: tls.caSecret and tls.certificateKeySecret are mounted
// into the workers (one projected volume, files readable by the worker's
// group only) and the task file names the mounted files, never the PEM; a
// rotated Secret rolls the workers; a missing key blocks the task with
// SecretInvalid.
func TestTLSSecrets(t *testing.T) {
	ns := setup(t, "orders", func(st *syncv1alpha1.SyncTask) {
		st.Spec.Source.TLS = &syncv1alpha1.TLS{Enabled: true, CASecret: &syncv1alpha1.SecretKeyRef{Name: "mongo-ca", Key: "ca.crt"},
			CertificateKeySecret: &syncv1alpha1.SecretKeyRef{Name: "ferry-client", Key: "tls.pem"}}
		st.Spec.Target.TLS = &syncv1alpha1.TLS{Enabled: true, CASecret: &syncv1alpha1.SecretKeyRef{Name: "mongo-ca", Key: "ca.crt"}}
	})
	const caPEM, clientPEM = "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n", "-----BEGIN PRIVATE KEY-----\nKEY\n-----END PRIVATE KEY-----\n"
	for name, data := range map[string]map[string]string{"mongo-ca": {"ca.crt": caPEM}, "ferry-client": {"tls.pem": clientPEM}} {
		if err := env.Client.Create(testCtx(t), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: data}); err != nil {
			t.Fatal(err)
		}
	}
	r, rec := newReconciler()
	reconcile(t, r, ns, "orders")
	s := get(t, ns, "orders-worker", &corev1.Secret{})
	task := string(s.Data[TaskKey])
	if strings.Contains(task, "BEGIN") || strings.Contains(task, "caSecret") {
		t.Errorf("the task file holds PEM or Secret references:\n%s", task)
	}
	rendered, err := config.Parse(s.Data[TaskKey])
	if err != nil {
		t.Fatal(err)
	}
	if rendered.Source.TLS.CAFile != TLSMountPath+"/source/ca.pem" || rendered.Source.TLS.CertificateKeyFile != TLSMountPath+"/source/client.pem" ||
		rendered.Target.TLS.CAFile != TLSMountPath+"/target/ca.pem" || rendered.Target.TLS.CertificateKeyFile != "" {
		t.Errorf("rendered TLS: source %+v, target %+v", rendered.Source.TLS, rendered.Target.TLS)
	}
	sts := get(t, ns, "orders-worker", &appsv1.StatefulSet{})
	pod := sts.Spec.Template.Spec
	var paths []string
	for _, v := range pod.Volumes {
		if v.Name == "tls" && v.Projected != nil {
			for _, src := range v.Projected.Sources {
				for _, it := range src.Secret.Items {
					paths = append(paths, fmt.Sprintf("%s:%s->%s:%o", src.Secret.Name, it.Key, it.Path, *it.Mode))
				}
			}
		}
	}
	want := []string{"ferry-client:tls.pem->source/client.pem:440", "mongo-ca:ca.crt->source/ca.pem:440", "mongo-ca:ca.crt->target/ca.pem:440"}
	slices.Sort(paths)
	if !slices.Equal(paths, want) {
		t.Errorf("projected files %v, want %v", paths, want)
	}
	if m := pod.Containers[0].VolumeMounts; len(m) != 1 || m[0].MountPath != TLSMountPath || !m[0].ReadOnly {
		t.Errorf("mounts %+v", m)
	}
	if sc := pod.SecurityContext; sc == nil || sc.FSGroup == nil || *sc.FSGroup != workerUID {
		t.Errorf("pod security context %+v: want fsGroup %d so the worker reads the files", sc, workerUID)
	}
	hash := sts.Spec.Template.Annotations[ConfigHashAnnotation]

	// A rotated CA rolls the workers.
	ca := get(t, ns, "mongo-ca", &corev1.Secret{})
	ca.Data["ca.crt"] = []byte(strings.Replace(caPEM, "CA", "CA2", 1))
	if err := env.Client.Update(testCtx(t), ca); err != nil {
		t.Fatal(err)
	}
	drainEvents(rec)
	reconcile(t, r, ns, "orders")
	if h := get(t, ns, "orders-worker", &appsv1.StatefulSet{}).Spec.Template.Annotations[ConfigHashAnnotation]; h == hash {
		t.Error("rotating the CA Secret did not change the config hash")
	}

	// A key the Secret lacks blocks the task.
	updateTask(t, ns, "orders", func(st *syncv1alpha1.SyncTask) { st.Spec.Target.TLS.CASecret.Key = "missing.crt" })
	reconcile(t, r, ns, "orders")
	c := meta.FindStatusCondition(getTask(t, ns, "orders").Status.Conditions, syncv1alpha1.ConditionReady)
	if c == nil || c.Reason != syncv1alpha1.ReasonSecretInvalid || !strings.Contains(c.Message, `target.tls.caSecret: Secret "mongo-ca" has no key missing.crt`) {
		t.Errorf("Ready = %+v, want SecretInvalid naming the key", c)
	}
}
