package chart

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestSecureMetrics: metrics.secure makes the manager serve HTTPS with
// authentication and authorization (its flag, the TokenReview and
// SubjectAccessReview rights), grants /metrics to the listed readers, and
// makes the ServiceMonitor scrape over HTTPS with a token; off, none of it
// is rendered.
func TestSecureMetrics(t *testing.T) {
	off := renderMonitoring(t, "--set", "monitoring.serviceMonitor.enabled=true")
	for _, o := range find(off, "ClusterRole") {
		if n := o.GetName(); n == releaseName+"-mongoferry-metrics-auth" || n == releaseName+"-mongoferry-metrics-reader" {
			t.Errorf("metrics.secure off renders %s", n)
		}
	}
	objs := renderMonitoring(t, "--set", "monitoring.serviceMonitor.enabled=true", "--set", "metrics.secure=true",
		"--set", "metrics.readers[0].name=prometheus-k8s", "--set", "metrics.readers[0].namespace=monitoring")
	args, _, _ := unstructured.NestedSlice(find(objs, "Deployment")[0].Object, "spec", "template", "spec", "containers")
	container := args[0].(map[string]any)
	if !slices.Contains(toStrings(container["args"]), "--metrics-secure=true") {
		t.Errorf("manager args %v, want --metrics-secure=true", container["args"])
	}
	var rules []string
	for _, o := range find(objs, "ClusterRole") {
		rs, _, _ := unstructured.NestedSlice(o.Object, "rules")
		for _, r := range rs {
			rm := r.(map[string]any)
			rules = append(rules, toStrings(rm["resources"])...)
			rules = append(rules, toStrings(rm["nonResourceURLs"])...)
		}
	}
	for _, want := range []string{"tokenreviews", "subjectaccessreviews", "/metrics"} {
		if !slices.Contains(rules, want) {
			t.Errorf("no ClusterRole rule for %s", want)
		}
	}
	bound := false
	for _, o := range find(objs, "ClusterRoleBinding") {
		subs, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		for _, s := range subs {
			if m := s.(map[string]any); m["name"] == "prometheus-k8s" && m["namespace"] == "monitoring" {
				bound = true
			}
		}
	}
	if !bound {
		t.Error("metrics.readers not bound to the metrics-reader ClusterRole")
	}
	eps, _, _ := unstructured.NestedSlice(find(objs, "ServiceMonitor")[0].Object, "spec", "endpoints")
	ep := eps[0].(map[string]any)
	if ep["scheme"] != "https" || ep["bearerTokenFile"] == nil {
		t.Errorf("ServiceMonitor endpoint %v, want https with a bearer token", ep)
	}
}

// TestNetworkPolicy: networkPolicy.enabled lets only the manager and
// Prometheus reach the workers' metrics port, in each watched namespace.
func TestNetworkPolicy(t *testing.T) {
	if n := len(find(render(t), "NetworkPolicy")); n != 0 {
		t.Errorf("%d NetworkPolicies by default, want none", n)
	}
	objs := render(t, "--set", "networkPolicy.enabled=true", "--set", "watchNamespaces={shop,crm}")
	nps := find(objs, "NetworkPolicy")
	var nss []string
	for _, np := range nps {
		nss = append(nss, np.GetNamespace())
		sel, _, _ := unstructured.NestedStringMap(np.Object, "spec", "podSelector", "matchLabels")
		if sel["app.kubernetes.io/managed-by"] != "mongoferry-operator" {
			t.Errorf("%s selects %v, want the worker pods", np.GetNamespace(), sel)
		}
		ingress, _, _ := unstructured.NestedSlice(np.Object, "spec", "ingress")
		if len(ingress) != 1 {
			t.Fatalf("%d ingress rules", len(ingress))
		}
		rule := ingress[0].(map[string]any)
		if from := rule["from"].([]any); len(from) != 2 {
			t.Errorf("%d peers, want the manager and Prometheus", len(from))
		}
		ports := rule["ports"].([]any)
		if p := ports[0].(map[string]any); p["port"] != int64(9090) && p["port"] != float64(9090) {
			t.Errorf("port %v, want 9090", p["port"])
		}
	}
	if !slices.Equal(nss, []string{"shop", "crm"}) {
		t.Errorf("NetworkPolicies in %v, want shop and crm", nss)
	}
}

func toStrings(v any) []string {
	var out []string
	if s, ok := v.([]any); ok {
		for _, x := range s {
			if str, ok := x.(string); ok {
				out = append(out, str)
			}
		}
	}
	return out
}

// TestWorkerTLS: workers.tls.enabled turns on the manager's --worker-tls
// with its CA Secret in the release namespace (and the rights to it when
// the manager's Roles are in other namespaces only), and the chart's
// PodMonitor scrapes over HTTPS with that CA; off, none of it is
// rendered.
func TestWorkerTLS(t *testing.T) {
	flags := func(objs []*unstructured.Unstructured) []string {
		cs, _, _ := unstructured.NestedSlice(find(objs, "Deployment")[0].Object, "spec", "template", "spec", "containers")
		var out []string
		for _, a := range toStrings(cs[0].(map[string]any)["args"]) {
			if strings.HasPrefix(a, "--worker-tls") {
				out = append(out, a)
			}
		}
		return out
	}
	endpoint := func(objs []*unstructured.Unstructured) map[string]any {
		eps, _, _ := unstructured.NestedSlice(find(objs, "PodMonitor")[0].Object, "spec", "podMetricsEndpoints")
		return eps[0].(map[string]any)
	}
	off := renderMonitoring(t, "--set", "monitoring.podMonitor.enabled=true", "--set", "watchNamespaces={shop}")
	if f := flags(off); len(f) != 0 {
		t.Errorf("workers.tls off: manager args %v", f)
	}
	if ep := endpoint(off); ep["scheme"] != nil || ep["tlsConfig"] != nil {
		t.Errorf("workers.tls off: PodMonitor endpoint %v", ep)
	}
	for _, r := range find(off, "Role") {
		if strings.HasSuffix(r.GetName(), "-worker-ca") {
			t.Errorf("workers.tls off renders Role %s", r.GetName())
		}
	}

	on := renderMonitoring(t, "--set", "monitoring.podMonitor.enabled=true", "--set", "watchNamespaces={shop}", "--set", "workers.tls.enabled=true")
	caSecret := releaseName + "-worker-ca"
	want := []string{"--worker-tls=true", "--worker-tls-secret=" + caSecret, "--worker-tls-namespace=" + releaseNamespace}
	if f := flags(on); !slices.Equal(f, want) {
		t.Errorf("manager args %v, want %v", f, want)
	}
	ep := endpoint(on)
	ca, _, _ := unstructured.NestedStringMap(ep, "tlsConfig", "ca", "secret")
	if ep["scheme"] != "https" || ca["name"] != caSecret || ca["key"] != "tls.crt" || ep["tlsConfig"].(map[string]any)["serverName"] != "mongoferry-worker" {
		t.Errorf("PodMonitor endpoint %v, want https with the CA from %s", ep, caSecret)
	}
	var verbs []string
	for _, r := range find(on, "Role") {
		if r.GetName() != releaseName+"-worker-ca" {
			continue
		}
		if r.GetNamespace() != releaseNamespace {
			t.Errorf("CA Role in %s, want %s", r.GetNamespace(), releaseNamespace)
		}
		rs, _, _ := unstructured.NestedSlice(r.Object, "rules")
		for _, x := range rs {
			verbs = append(verbs, toStrings(x.(map[string]any)["verbs"])...)
		}
	}
	slices.Sort(verbs)
	if !slices.Equal(verbs, []string{"create", "get", "update"}) {
		t.Errorf("CA Secret verbs %v, want create, get, update", verbs)
	}
}
