package chart

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// TestLint runs helm lint --strict on the chart with its defaults and with
// each values file under ci/.
func TestLint(t *testing.T) {
	if out, err := helm(t, "lint", "--strict", chartDir(t)); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, f := range ciValues(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if out, err := helm(t, "lint", "--strict", chartDir(t), "--values", f); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

// TestTemplateCIValues renders the chart with each values file under ci/
// and checks what every rendering must hold.
func TestTemplateCIValues(t *testing.T) {
	for _, f := range ciValues(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			objs := renderMonitoring(t, "--values", f)
			seen := map[string]bool{}
			for _, o := range objs {
				id := o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
				if seen[id] {
					t.Errorf("%s rendered twice", id)
				}
				seen[id] = true
				if l := o.GetLabels(); l["app.kubernetes.io/managed-by"] != "Helm" || l["app.kubernetes.io/instance"] != releaseName {
					t.Errorf("%s: labels %v lack the release's", id, l)
				}
			}
			findOne(t, objs, "Deployment", "")
		})
	}
}

// TestValuesSchema: values.schema.json refuses values the chart cannot
// work with, with a message that names them.
func TestValuesSchema(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"replicaCount=-1", "/replicaCount"},
		{"watchNamespaces={Shop}", "/watchNamespaces/0"},
		{"logFormat=yaml", "/logFormat"},
		{"monitoring.prometheusRule.alerts.lagHigh.for=ten", "/monitoring/prometheusRule/alerts/lagHigh/for"},
		{"monitoring.serviceMonitor.enable=true", "enable"},
		{"extraArgs={leader-elect}", "/extraArgs/0"},
	} {
		_, err := helm(t, renderArgs(t, "--set", tc.set)...)
		if err == nil || !strings.Contains(err.Error(), "values don't meet the specifications of the schema") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--set %s: %v; want a schema error at %s", tc.set, err, tc.want)
		}
	}
}

// TestCRDTemplate: the chart's CRDs are config/crd/bases (generated from
// the API types) with the chart's labels, the keep annotation under
// crds.keep, and nothing under crds.enabled=false.
func TestCRDTemplate(t *testing.T) {
	root := repoRoot(t)
	bases, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
	if err != nil || len(bases) == 0 {
		t.Fatalf("config/crd/bases: %v %v", bases, err)
	}
	var want []*unstructured.Unstructured
	for _, f := range bases {
		want = append(want, readObjects(t, f)...)
	}

	for _, keep := range []bool{true, false} {
		flag := "crds.keep=false"
		if keep {
			flag = "crds.keep=true"
		}
		got := find(render(t, "--set", flag), "CustomResourceDefinition")
		if len(got) != len(want) {
			t.Fatalf("%s: %d CRDs rendered, config/crd/bases has %d", flag, len(got), len(want))
		}
		for i, crd := range got {
			anns := crd.GetAnnotations()
			if keep != (anns["helm.sh/resource-policy"] == "keep") {
				t.Errorf("%s: CRD %s annotations %v", flag, crd.GetName(), anns)
			}
			if crd.GetLabels()["app.kubernetes.io/managed-by"] != "Helm" {
				t.Errorf("CRD %s labels %v", crd.GetName(), crd.GetLabels())
			}
			c := crd.DeepCopy()
			delete(anns, "helm.sh/resource-policy")
			c.SetAnnotations(anns)
			c.SetLabels(nil)
			if !reflect.DeepEqual(c.Object, want[i].Object) {
				t.Errorf("CRD %s differs from config/crd/bases beyond the chart's labels and annotation: run make manifests (hack/chart-manifests.sh)", crd.GetName())
			}
		}
	}
	if crds := find(render(t, "--set", "crds.enabled=false"), "CustomResourceDefinition"); len(crds) > 0 {
		t.Errorf("crds.enabled=false renders %d CRDs", len(crds))
	}
}

// rulesOf reads the rules of a (Cluster)Role object.
func rulesOf(t *testing.T, o *unstructured.Unstructured) []rbacv1.PolicyRule {
	t.Helper()
	var r rbacv1.ClusterRole
	convert(t, o, &r)
	return r.Rules
}

// normalRules sorts each rule's lists and the rules, so that rule sets
// written differently compare equal.
func normalRules(rules []rbacv1.PolicyRule) []string {
	var out []string
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					out = append(out, g+"/"+res+":"+v)
				}
			}
		}
		for _, u := range r.NonResourceURLs {
			for _, v := range r.Verbs {
				out = append(out, u+":"+v)
			}
		}
		if len(r.ResourceNames) > 0 {
			out = append(out, "names:"+strings.Join(r.ResourceNames, ","))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestRBAC: the chart grants the manager exactly the rules controller-gen
// generates from the +kubebuilder:rbac markers (config/rbac/role.yaml),
// cluster-wide or in each watched namespace only; leader election and the
// user-facing roles are those of config/rbac.
func TestRBAC(t *testing.T) {
	root := repoRoot(t)
	rbacDir := filepath.Join(root, "config", "rbac")
	generated := normalRules(rulesOf(t, readObjects(t, filepath.Join(rbacDir, "role.yaml"))[0]))

	t.Run("cluster-wide", func(t *testing.T) {
		objs := render(t)
		cr := findOne(t, objs, "ClusterRole", releaseName+"-manager")
		if got := normalRules(rulesOf(t, cr)); !slices.Equal(got, generated) {
			t.Errorf("ClusterRole rules\n%v\nwant config/rbac/role.yaml's\n%v", got, generated)
		}
		var crb rbacv1.ClusterRoleBinding
		convert(t, findOne(t, objs, "ClusterRoleBinding", releaseName+"-manager"), &crb)
		checkBinding(t, crb.RoleRef, crb.Subjects, "ClusterRole", releaseName+"-manager")
		if roles := find(objs, "Role"); len(roles) != 1 || roles[0].GetName() != releaseName+"-leader-election" {
			t.Errorf("Roles %v, want the leader election Role only", names(roles))
		}
		for _, name := range []string{"synctask-editor", "synctask-viewer"} {
			want := readObjects(t, filepath.Join(rbacDir, strings.ReplaceAll(name, "-", "_")+"_role.yaml"))[0]
			got := findOne(t, objs, "ClusterRole", releaseName+"-"+name)
			if !slices.Equal(normalRules(rulesOf(t, got)), normalRules(rulesOf(t, want))) {
				t.Errorf("ClusterRole %s rules differ from config/rbac's", got.GetName())
			}
			for k, v := range want.GetLabels() {
				if strings.HasPrefix(k, "rbac.authorization.k8s.io/") && got.GetLabels()[k] != v {
					t.Errorf("ClusterRole %s lacks the aggregation label %s=%s", got.GetName(), k, v)
				}
			}
		}
	})

	t.Run("watched namespaces", func(t *testing.T) {
		objs := render(t, "--set", "watchNamespaces={shop,billing}", "--set", "rbac.aggregateToDefaultRoles=false")
		for _, cr := range find(objs, "ClusterRole") {
			t.Errorf("ClusterRole %s rendered with watchNamespaces", cr.GetName())
		}
		if crbs := find(objs, "ClusterRoleBinding"); len(crbs) > 0 {
			t.Errorf("ClusterRoleBindings %v rendered with watchNamespaces", names(crbs))
		}
		var inNS []string
		for _, r := range find(objs, "Role") {
			if r.GetName() != releaseName+"-manager" {
				continue
			}
			inNS = append(inNS, r.GetNamespace())
			if got := normalRules(rulesOf(t, r)); !slices.Equal(got, generated) {
				t.Errorf("Role in %s: rules\n%v\nwant config/rbac/role.yaml's\n%v", r.GetNamespace(), got, generated)
			}
		}
		if !slices.Equal(inNS, []string{"shop", "billing"}) {
			t.Errorf("manager Roles in %v, want shop and billing", inNS)
		}
		var bound []string
		for _, b := range find(objs, "RoleBinding") {
			var rb rbacv1.RoleBinding
			convert(t, b, &rb)
			if rb.Name == releaseName+"-manager" {
				bound = append(bound, rb.Namespace)
				checkBinding(t, rb.RoleRef, rb.Subjects, "Role", releaseName+"-manager")
			}
		}
		if !slices.Equal(bound, []string{"shop", "billing"}) {
			t.Errorf("manager RoleBindings in %v, want shop and billing", bound)
		}
	})

	t.Run("leader election", func(t *testing.T) {
		want := normalRules(rulesOf(t, readObjects(t, filepath.Join(rbacDir, "leader_election_role.yaml"))[0]))
		objs := render(t)
		r := findOne(t, objs, "Role", releaseName+"-leader-election")
		if r.GetNamespace() != releaseNamespace || !slices.Equal(normalRules(rulesOf(t, r)), want) {
			t.Errorf("leader election Role in %s with rules %v, want config/rbac's %v in %s", r.GetNamespace(), normalRules(rulesOf(t, r)), want, releaseNamespace)
		}
		var rb rbacv1.RoleBinding
		convert(t, findOne(t, objs, "RoleBinding", releaseName+"-leader-election"), &rb)
		checkBinding(t, rb.RoleRef, rb.Subjects, "Role", releaseName+"-leader-election")
		if roles := find(render(t, "--set", "leaderElection.enabled=false"), "Role"); len(roles) > 0 {
			t.Errorf("leaderElection.enabled=false renders Roles %v", names(roles))
		}
	})
}

func checkBinding(t *testing.T, ref rbacv1.RoleRef, subjects []rbacv1.Subject, kind, name string) {
	t.Helper()
	if ref.Kind != kind || ref.Name != name || ref.APIGroup != rbacv1.GroupName {
		t.Errorf("roleRef %+v, want %s %s", ref, kind, name)
	}
	if len(subjects) != 1 || subjects[0].Kind != rbacv1.ServiceAccountKind || subjects[0].Name != releaseName || subjects[0].Namespace != releaseNamespace {
		t.Errorf("subjects %+v, want the ServiceAccount %s/%s", subjects, releaseNamespace, releaseName)
	}
}

func names(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetNamespace()+"/"+o.GetName())
	}
	return out
}

// managerArgs returns the manager container's arguments as flag name ->
// value (the last one wins, as with the flag package).
func managerArgs(t *testing.T, d *appsv1.Deployment) map[string]string {
	t.Helper()
	args := map[string]string{}
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok || !strings.HasPrefix(a, "--") {
			t.Fatalf("argument %q is not --flag=value", a)
		}
		args[name] = value
	}
	return args
}

// TestDeployment checks the manager's Deployment: restricted security
// context, the ServiceAccount, image, probes and ports the manager's flags
// name, and the flags the values turn into.
func TestDeployment(t *testing.T) {
	var d appsv1.Deployment
	convert(t, findOne(t, render(t), "Deployment", releaseName), &d)
	pod := d.Spec.Template.Spec
	if pod.ServiceAccountName != releaseName {
		t.Errorf("serviceAccountName %q, want %s", pod.ServiceAccountName, releaseName)
	}
	if psc := pod.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and the RuntimeDefault seccomp profile", psc)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want the manager only", len(pod.Containers))
	}
	c := pod.Containers[0]
	if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container securityContext %+v: want no privilege escalation, a read-only root filesystem, all capabilities dropped", sc)
	}
	if len(pod.Volumes) > 0 || len(c.VolumeMounts) > 0 {
		t.Errorf("volumes %v: the manager writes nothing", pod.Volumes)
	}
	if c.Image != "ghcr.io/mongoferry/mongoferry:"+appVersion(t) || !slices.Equal(c.Command, []string{"/manager"}) {
		t.Errorf("image %s, command %v; want ghcr.io/mongoferry/mongoferry:<appVersion>, /manager", c.Image, c.Command)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want requests and a memory limit", c.Resources)
	}
	args := managerArgs(t, &d)
	want := map[string]string{
		"metrics-bind-address": ":8080", "metrics-secure": "false", "health-probe-bind-address": ":8081", "leader-elect": "true",
		"worker-image": c.Image, "worker-status-timeout": "5s", "log-format": "json", "log-level": "info",
	}
	if !reflect.DeepEqual(args, want) {
		t.Errorf("args %v, want %v", args, want)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["metrics"] != 8080 || ports["health"] != 8081 {
		t.Errorf("ports %v, want metrics 8080 and health 8081", ports)
	}
	for _, p := range []struct {
		probe *corev1.Probe
		path  string
	}{{c.LivenessProbe, "/healthz"}, {c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "health" {
			t.Errorf("probe %+v, want GET %s on port health", p.probe, p.path)
		}
	}

	// What the values change.
	convert(t, findOne(t, renderMonitoring(t, "--set", "watchNamespaces={shop,billing}", "--set", "monitoring.podMonitor.enabled=true",
		"--set", "workerImage=registry.example.com/ferry:v1", "--set", "leaderElection.enabled=false", "--set", "image.tag=v0.2.0"),
		"Deployment", releaseName), &d)
	args = managerArgs(t, &d)
	for k, v := range map[string]string{"watch-namespaces": "shop,billing", "worker-podmonitors": "false",
		"worker-image": "registry.example.com/ferry:v1", "leader-elect": "false"} {
		if args[k] != v {
			t.Errorf("--%s=%q, want %q", k, args[k], v)
		}
	}
	if img := d.Spec.Template.Spec.Containers[0].Image; img != "ghcr.io/mongoferry/mongoferry:v0.2.0" {
		t.Errorf("image %s with image.tag=v0.2.0", img)
	}

	// The metrics Service selects the manager's pods on the metrics port.
	var svc corev1.Service
	convert(t, findOne(t, render(t), "Service", releaseName+"-metrics"), &svc)
	for k, v := range svc.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("the metrics Service selects %v, not the manager's pods %v", svc.Spec.Selector, d.Spec.Template.Labels)
		}
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "metrics" {
		t.Errorf("metrics Service ports %+v", svc.Spec.Ports)
	}
}

func appVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir(t), "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil || c.AppVersion == "" {
		t.Fatalf("Chart.yaml appVersion: %q %v", c.AppVersion, err)
	}
	return c.AppVersion
}

// TestMonitoringOptIn: no monitoring object by default; each value renders
// its object; without the monitoring.coreos.com/v1 API the rendering fails
// and says what to do.
func TestMonitoringOptIn(t *testing.T) {
	for _, o := range renderMonitoring(t) {
		if strings.HasPrefix(o.GetAPIVersion(), "monitoring.coreos.com/") || o.GetKind() == "ConfigMap" {
			t.Errorf("default values render %s %s", o.GetKind(), o.GetName())
		}
	}
	for _, tc := range []struct{ value, kind, name string }{
		{"monitoring.serviceMonitor.enabled", "ServiceMonitor", releaseName + "-manager"},
		{"monitoring.podMonitor.enabled", "PodMonitor", releaseName + "-workers"},
		{"monitoring.prometheusRule.enabled", "PrometheusRule", releaseName},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			objs := renderMonitoring(t, "--set", tc.value+"=true")
			findOne(t, objs, tc.kind, tc.name)
			_, err := helm(t, renderArgs(t, "--set", tc.value+"=true")...)
			want := tc.value + " is true, but the cluster has no monitoring.coreos.com/v1 API: install the prometheus-operator CRDs (ServiceMonitor, PodMonitor, PrometheusRule) first, or set " +
				tc.value + "=false (with helm template, pass --api-versions monitoring.coreos.com/v1)"
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("without the API: %v\nwant the message: %s", err, want)
			}
		})
	}
	// The dashboard is a ConfigMap: it needs no API beyond the core one.
	findOne(t, render(t, "--set", "monitoring.dashboard.enabled=true"), "ConfigMap", releaseName+"-dashboard")
}

// TestMonitors checks what the ServiceMonitor and the PodMonitor scrape.
func TestMonitors(t *testing.T) {
	objs := renderMonitoring(t, "--values", filepath.Join(chartDir(t), "ci", "monitoring-values.yaml"))
	sm := findOne(t, objs, "ServiceMonitor", "")
	var svc corev1.Service
	convert(t, findOne(t, objs, "Service", releaseName+"-metrics"), &svc)
	sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	for k, v := range sel {
		if svc.Labels[k] != v {
			t.Errorf("the ServiceMonitor selects %v, not the metrics Service %v", sel, svc.Labels)
		}
	}
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(eps) != 1 {
		t.Fatalf("ServiceMonitor endpoints %v", eps)
	}
	ep := eps[0].(map[string]any)
	if ep["port"] != "metrics" || ep["honorLabels"] != true || ep["interval"] != "15s" || ep["scrapeTimeout"] != "10s" {
		t.Errorf("ServiceMonitor endpoint %v: want port metrics, honorLabels, interval 15s, scrapeTimeout 10s", ep)
	}
	if sm.GetLabels()["release"] != "prometheus" {
		t.Errorf("ServiceMonitor labels %v lack monitoring.serviceMonitor.labels", sm.GetLabels())
	}

	pm := findOne(t, objs, "PodMonitor", "")
	sel, _, _ = unstructured.NestedStringMap(pm.Object, "spec", "selector", "matchLabels")
	if want := map[string]string{"app.kubernetes.io/name": "mongoferry-worker", "app.kubernetes.io/managed-by": "mongoferry-operator"}; !reflect.DeepEqual(sel, want) {
		t.Errorf("PodMonitor selects %v, want the workers' labels %v", sel, want)
	}
	if anyNS, _, _ := unstructured.NestedBool(pm.Object, "spec", "namespaceSelector", "any"); !anyNS {
		t.Errorf("cluster-wide PodMonitor namespaceSelector %v, want any", pm.Object["spec"].(map[string]any)["namespaceSelector"])
	}
	pm = findOne(t, renderMonitoring(t, "--set", "monitoring.podMonitor.enabled=true", "--set", "watchNamespaces={shop,billing}"), "PodMonitor", "")
	if ns, _, _ := unstructured.NestedStringSlice(pm.Object, "spec", "namespaceSelector", "matchNames"); !slices.Equal(ns, []string{"shop", "billing"}) {
		t.Errorf("PodMonitor with watchNamespaces selects namespaces %v", ns)
	}
}

// TestNotes: NOTES.txt tells the user what to do next, and warns about
// alerts without the ServiceMonitor and CRDs deleted on uninstall.
func TestNotes(t *testing.T) {
	// helm template does not render NOTES.txt (helm install --dry-run
	// would, but needs a cluster): renderNotes runs it through a template.
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"rollout status deployment/" + releaseName, "kubectl create secret generic src-creds", "kind: SyncTask", "kubectl get synctasks -w",
			"Monitoring is off", "--set monitoring.serviceMonitor.enabled=true", "The SyncTask CRD is kept when the release is uninstalled"}},
		{[]string{"--set", "monitoring.prometheusRule.enabled=true"}, []string{"PrometheusRule " + releaseName, "WARNING: the alerts read the manager's metrics"}},
		{[]string{"--set", "crds.keep=false"}, []string{"uninstalling the release deletes the SyncTask CRD and every SyncTask"}},
		{[]string{"--set", "watchNamespaces={shop,billing}"}, []string{"the namespaces shop, billing only"}},
	} {
		got := renderNotes(t, tc.args...)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("NOTES.txt with %v lacks %q:\n%s", tc.args, w, got)
			}
		}
	}
}

// renderNotes renders NOTES.txt with the chart's values by copying the
// chart and turning NOTES.txt into a ConfigMap template.
func renderNotes(t *testing.T, extra ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "mongoferry")
	copyDir(t, chartDir(t), dir)
	notes, err := os.ReadFile(filepath.Join(dir, "templates", "NOTES.txt"))
	if err != nil {
		t.Fatal(err)
	}
	wrapper := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  notes: |-\n    {{- tpl (.Files.Get \"notes.tpl\") . | nindent 4 }}\n"
	for path, content := range map[string][]byte{
		filepath.Join(dir, "notes.tpl"):                  notes,
		filepath.Join(dir, "templates", "zz-notes.yaml"): []byte(wrapper),
	} {
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	args := append([]string{"template", releaseName, dir, "--namespace", releaseNamespace, "--api-versions", monitoringAPI, "--show-only", "templates/zz-notes.yaml"}, extra...)
	out, err := helm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	cm := findOne(t, decodeObjects(t, "notes", []byte(out)), "ConfigMap", "notes")
	s, _, _ := unstructured.NestedString(cm.Object, "data", "notes")
	if strings.Contains(s, "<no value>") {
		t.Errorf("NOTES.txt shows <no value>:\n%s", s)
	}
	return s
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMonitoringCRDsVersion: the prometheus-operator CRDs the tests install
// are the release the Makefile names.
func TestMonitoringCRDsVersion(t *testing.T) {
	root := repoRoot(t)
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^PROMETHEUS_OPERATOR_VERSION \?= v(\S+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile sets no PROMETHEUS_OPERATOR_VERSION")
	}
	dir := filepath.Join(root, "test", "testdata", "prometheus-operator-crds")
	for _, plural := range []string{"servicemonitors", "podmonitors", "prometheusrules"} {
		objs := readObjects(t, filepath.Join(dir, "monitoring.coreos.com_"+plural+".yaml"))
		if len(objs) != 1 || objs[0].GetName() != plural+".monitoring.coreos.com" {
			t.Fatalf("%s: %d objects", plural, len(objs))
		}
		if v := objs[0].GetAnnotations()["operator.prometheus.io/version"]; v != string(m[1]) {
			t.Errorf("%s CRD is from prometheus-operator %s, the Makefile says v%s: run make monitoring-crds", plural, v, m[1])
		}
	}
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil || !strings.Contains(string(readme), "**v"+string(m[1])+"**") {
		t.Errorf("test/testdata/prometheus-operator-crds/README.md does not name v%s", m[1])
	}
}
