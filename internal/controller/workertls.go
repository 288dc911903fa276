package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/pkg/workertls"
)

// Worker TLS: with it on (the manager's --worker-tls), the manager keeps a
// CA in a Secret of its own namespace (EnsureWorkerCA), issues each task's
// workers a serving certificate into the task's worker TLS Secret
// (WorkerTLSName), mounted at WorkerTLSMountPath, and reads the workers'
// /status over HTTPS with a client certificate of its own, verifying the
// worker's certificate against the CA. The workers serve /metrics over
// TLS to anyone (Prometheus scrapes with the CA) and /status to the
// manager's certificate only.

// Keys of the worker TLS Secret (a kubernetes.io/tls Secret with the CA).
const (
	WorkerTLSCertKey = corev1.TLSCertKey
	WorkerTLSKeyKey  = corev1.TLSPrivateKeyKey
	WorkerTLSCAKey   = "ca.crt"
)

// WorkerTLSMountPath is where the workers find their TLS Secret's files.
const WorkerTLSMountPath = "/etc/mongoferry/worker-tls"

// workerTLSVolume names the worker TLS Secret's volume.
const workerTLSVolume = "worker-tls"

// WorkerTLSName is the name of a task's worker TLS Secret.
func WorkerTLSName(task string) string { return WorkerName(task) + "-tls" }

// WorkerTLS holds what the manager needs to secure the workers'
// endpoints; a SyncTaskReconciler without one serves them over plain HTTP.
type WorkerTLS struct {
	// CA issues the workers' certificates (EnsureWorkerCA loads it).
	CA *workertls.CA
	// Client is the manager's client certificate.
	Client *workertls.ClientCertificate
}

// NewWorkerTLS issues the manager's client certificate from ca.
func NewWorkerTLS(ca *workertls.CA) (*WorkerTLS, error) {
	c, err := workertls.NewClientCertificate(ca, workertls.ManagerName)
	if err != nil {
		return nil, err
	}
	return &WorkerTLS{CA: ca, Client: c}, nil
}

// podIPKey carries the pod IP a status request dials.
type podIPKey struct{}

// HTTPClient reads workers' /status over mutual TLS: a request names the
// pod by its DNS name under the headless Service (which the worker's
// certificate holds, and which is verified against the CA) and dials the
// pod IP in its context (withPodIP), so no DNS lookup is needed.
func (w *WorkerTLS) HTTPClient(timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: timeout}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		TLSClientConfig: workertls.ClientConfig(w.CA, w.Client),
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			ip, _ := ctx.Value(podIPKey{}).(string)
			_, port, err := net.SplitHostPort(addr)
			if ip == "" || err != nil {
				return nil, fmt.Errorf("dial %s: no pod IP for a worker status request", addr)
			}
			return d.DialContext(ctx, network, net.JoinHostPort(ip, port))
		},
		// A pod name keeps its DNS name when the pod is replaced and
		// gets a new IP: no connection is kept for a name.
		DisableKeepAlives: true,
	}}
}

// workerTLSLeaf is the serving certificate of a task's workers: every pod
// name under the headless Service, and WorkerServerName for scrapers.
func workerTLSLeaf(task *syncv1alpha1.SyncTask) workertls.Leaf {
	svc := WorkerName(task.Name) + "." + task.Namespace + ".svc"
	return workertls.Leaf{CommonName: WorkerName(task.Name), DNSNames: []string{"*." + svc, workertls.WorkerServerName}}
}

// podDNSName is a worker pod's name under the headless Service.
func podDNSName(task *syncv1alpha1.SyncTask, pod string) string {
	return pod + "." + WorkerName(task.Name) + "." + task.Namespace + ".svc"
}

// ensureWorkerTLS keeps the task's worker TLS Secret holding a current
// serving certificate from the CA (issued again when it nears its end,
// when the CA changed, or when its names would not match) and folds the
// certificate into the workers' config hash, so that the workers restart
// with a new one. It does nothing when worker TLS is off.
func (r *SyncTaskReconciler) ensureWorkerTLS(ctx context.Context, task *syncv1alpha1.SyncTask, rnd *rendered) error {
	if r.WorkerTLS == nil {
		return nil
	}
	ca, leaf, now := r.WorkerTLS.CA, workerTLSLeaf(task), time.Now()
	name := WorkerTLSName(task.Name)
	var cur corev1.Secret
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: task.Namespace, Name: name}, &cur)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("read Secret %s: %w", name, err)
	}
	cert := cur.Data[WorkerTLSCertKey]
	if err != nil || len(cur.Data[WorkerTLSKeyKey]) == 0 || string(cur.Data[WorkerTLSCAKey]) != string(ca.CertPEM) || !ca.Current(cert, leaf, now) {
		var key []byte
		if cert, key, err = ca.Issue(leaf, now); err != nil {
			return fmt.Errorf("issue the workers' certificate of %s: %w", task.Name, err)
		}
		s := corev1ac.Secret(name, task.Namespace).
			WithLabels(workerLabels(task)).
			WithOwnerReferences(ownerRef(task)).
			WithType(corev1.SecretTypeTLS).
			WithData(map[string][]byte{WorkerTLSCertKey: cert, WorkerTLSKeyKey: key, WorkerTLSCAKey: ca.CertPEM})
		if err := r.Client.Apply(ctx, s, FieldOwner, client.ForceOwnership); err != nil {
			return fmt.Errorf("apply Secret %s: %w", name, err)
		}
	}
	h := sha256.Sum256([]byte(rnd.hash + "\x00" + string(cert)))
	rnd.hash = hex.EncodeToString(h[:])
	rnd.workerTLS = true
	return nil
}

// applyWorkerTLS makes the worker serve HTTPS with its TLS Secret's files
// and the kubelet probe it over HTTPS.
func applyWorkerTLS(task *syncv1alpha1.SyncTask, pod *corev1ac.PodSpecApplyConfiguration, container *corev1ac.ContainerApplyConfiguration, security *corev1ac.PodSecurityContextApplyConfiguration) {
	items := []*corev1ac.KeyToPathApplyConfiguration{}
	for _, k := range []string{WorkerTLSCertKey, WorkerTLSKeyKey, WorkerTLSCAKey} {
		items = append(items, corev1ac.KeyToPath().WithKey(k).WithPath(k).WithMode(tlsFileMode))
	}
	pod.WithVolumes(corev1ac.Volume().WithName(workerTLSVolume).WithSecret(
		corev1ac.SecretVolumeSource().WithSecretName(WorkerTLSName(task.Name)).WithItems(items...)))
	container.WithVolumeMounts(corev1ac.VolumeMount().WithName(workerTLSVolume).WithMountPath(WorkerTLSMountPath).WithReadOnly(true))
	container.WithArgs(
		"--tls-cert-file", WorkerTLSMountPath+"/"+WorkerTLSCertKey,
		"--tls-key-file", WorkerTLSMountPath+"/"+WorkerTLSKeyKey,
		"--tls-client-ca-file", WorkerTLSMountPath+"/"+WorkerTLSCAKey,
		"--status-client", workertls.ManagerName)
	security.WithFSGroup(workerUID)
}

// workerProbe is the worker's /healthz probe, over HTTPS with worker TLS
// (the kubelet does not verify the certificate, and needs none of its
// own).
func workerProbe(tls bool) *corev1ac.ProbeApplyConfiguration {
	get := corev1ac.HTTPGetAction().WithPath("/healthz").WithPort(intstr.FromString(MetricsPortName))
	if tls {
		get.WithScheme(corev1.URISchemeHTTPS)
	}
	return corev1ac.Probe().WithHTTPGet(get).WithTimeoutSeconds(2)
}

// podMonitorTLS is the scrape endpoint's TLS: the CA from the task's
// worker TLS Secret and the name every worker certificate holds.
func podMonitorTLS(task *syncv1alpha1.SyncTask, endpoint map[string]any) {
	endpoint["scheme"] = "https"
	endpoint["tlsConfig"] = map[string]any{
		"ca":         map[string]any{"secret": map[string]any{"name": WorkerTLSName(task.Name), "key": WorkerTLSCAKey}},
		"serverName": workertls.WorkerServerName,
	}
}

// statusURL is the URL of a worker's /status, and the context its request
// is made in.
func (r *SyncTaskReconciler) statusURL(ctx context.Context, task *syncv1alpha1.SyncTask, pod, ip string, port int32) (context.Context, string) {
	return r.workerURL(ctx, task, pod, ip, port, "/status")
}

// workerURL is the URL of path on a worker's status server, and the
// context its request is made in.
func (r *SyncTaskReconciler) workerURL(ctx context.Context, task *syncv1alpha1.SyncTask, pod, ip string, port int32, path string) (context.Context, string) {
	p := strconv.Itoa(int(port))
	if r.WorkerTLS == nil {
		return ctx, "http://" + net.JoinHostPort(ip, p) + path
	}
	return context.WithValue(ctx, podIPKey{}, ip), "https://" + net.JoinHostPort(podDNSName(task, pod), p) + path
}

// EnsureWorkerCA loads the workers' CA from the Secret namespace/name,
// creating the Secret with a new CA when it is missing, and replacing the
// CA when it has less than workertls.CARenewBefore left (the workers'
// certificates are then issued again as their tasks are reconciled). c
// must read the API server directly: the manager's cache has not started
// yet when this runs.
func EnsureWorkerCA(ctx context.Context, c client.Client, namespace, name string) (*workertls.CA, error) {
	now := time.Now()
	for range 3 {
		var s corev1.Secret
		err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &s)
		switch {
		case apierrors.IsNotFound(err):
			ca, err := workertls.NewCA(now)
			if err != nil {
				return nil, err
			}
			s = corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{ManagedByLabel: ManagedBy}},
				Type:       corev1.SecretTypeTLS,
				Data:       map[string][]byte{corev1.TLSCertKey: ca.CertPEM, corev1.TLSPrivateKeyKey: ca.KeyPEM},
			}
			err = c.Create(ctx, &s)
			if apierrors.IsAlreadyExists(err) {
				continue // another replica made it first: use theirs
			}
			if err != nil {
				return nil, fmt.Errorf("create the worker CA Secret %s/%s: %w", namespace, name, err)
			}
			return ca, nil
		case err != nil:
			return nil, fmt.Errorf("read the worker CA Secret %s/%s: %w", namespace, name, err)
		}
		ca, err := workertls.LoadCA(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
		if err != nil {
			return nil, fmt.Errorf("the worker CA Secret %s/%s: %w (delete it to have a new CA made)", namespace, name, err)
		}
		if now.Add(workertls.CARenewBefore).Before(ca.Expires()) {
			return ca, nil
		}
		if ca, err = workertls.NewCA(now); err != nil {
			return nil, err
		}
		s.Data = map[string][]byte{corev1.TLSCertKey: ca.CertPEM, corev1.TLSPrivateKeyKey: ca.KeyPEM}
		err = c.Update(ctx, &s)
		if apierrors.IsConflict(err) {
			continue // another replica renewed it: use theirs
		}
		if err != nil {
			return nil, fmt.Errorf("renew the worker CA in Secret %s/%s: %w", namespace, name, err)
		}
		return ca, nil
	}
	return nil, errors.New("the worker CA Secret " + namespace + "/" + name + " kept changing while it was read")
}
