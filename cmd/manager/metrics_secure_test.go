package main

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mongoferry/mongoferry/internal/envtestutil"
	"github.com/mongoferry/mongoferry/internal/testutil"
)

// TestMetricsSecure: with --metrics-secure the manager's /metrics answers
// over HTTPS only to a client the API server (a real kube-apiserver)
// authenticates and authorizes: 401 without a token, 403 for a service
// account without the metrics-reader rule, 200 for one bound to it.
func TestMetricsSecure(t *testing.T) {
	env := envtestutil.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := testutil.FreeAddr(t)
	httpClient, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := metricsserver.NewServer(metricsOptions(&options{metricsAddr: addr, metricsSecure: true}), env.Config, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Start(ctx) }()

	ns := env.Namespace(t)
	token := func(name string) string {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if err := env.Client.Create(ctx, sa); err != nil {
			t.Fatal(err)
		}
		tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(600))}}
		if err := env.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	reader, other := token("prometheus"), token("someone")
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader-" + ns},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader-" + ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus", Namespace: ns}}}
	if err := env.Client.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the manager's self-signed certificate
	get := func(scheme, token string) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+"/metrics", nil)
		if err != nil {
			return 0, err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		defer func() { _ = resp.Body.Close() }()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	deadline := time.Now().Add(time.Minute)
	for _, c := range []struct {
		name, scheme, token string
		want                int
	}{
		{"no token", "https", "", http.StatusUnauthorized},
		{"a service account without the rule", "https", other, http.StatusForbidden},
		{"the metrics reader", "https", reader, http.StatusOK},
	} {
		var code int
		var err error
		for {
			if code, err = get(c.scheme, c.token); err == nil && code == c.want || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil || code != c.want {
			t.Errorf("%s: %d, %v; want %d", c.name, code, err, c.want)
		}
	}
	if code, err := get("http", ""); err == nil && code == http.StatusOK {
		t.Error("plain HTTP still serves /metrics")
	}
}

func ptr[T any](v T) *T { return &v }
