// Command manager is MongoFerry's Kubernetes operator: it runs the SyncTask
// reconciler (controller.SyncTaskReconciler) and exports every SyncTask's
// status as Prometheus metrics (controller.SyncTaskCollector).
//
// Parts: the flags and their defaults (options, bindFlags), logging (slog,
// also behind controller-runtime's logr and client-go's klog), and run,
// which builds the manager: scheme, leader election, metrics endpoint,
// health and readiness probes, reconciler and metrics collector.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/controller"
	"github.com/mongoferry/mongoferry/internal/version"
)

// LeaderElectionID names the Lease that manager replicas compete for.
const LeaderElectionID = "mongoferry.sync.mongoferry.io"

// WorkerImageRepository is the image repository of released workers; the
// default worker image is this repository at the manager's own version.
const WorkerImageRepository = "ghcr.io/mongoferry/mongoferry"

// DefaultWorkerCASecret is the default of --worker-tls-secret.
const DefaultWorkerCASecret = "mongoferry-worker-ca"

// defaultWorkerImage, when set at build time
// (-ldflags "-X main.defaultWorkerImage=registry/name:tag", as
// `make docker-build` does with IMG), replaces WorkerImageRepository:version
// as the default of --worker-image, so a manager built into an image starts
// its workers from that same image.
var defaultWorkerImage string

// DefaultWorkerImage is the default of --worker-image.
func DefaultWorkerImage() string {
	if defaultWorkerImage != "" {
		return defaultWorkerImage
	}
	return WorkerImageRepository + ":" + version.Version
}

// options are the manager's command-line settings.
type options struct {
	metricsAddr             string
	metricsSecure           bool
	probeAddr               string
	leaderElect             bool
	leaderElectionNamespace string
	workerImage             string
	workerStatusTimeout     time.Duration
	shardRefreshInterval    time.Duration
	watchNamespaces         string
	workerPodMonitors       bool
	workerTLS               bool
	workerTLSSecret         string
	workerTLSNamespace      string
	logFormat               string
	logLevel                string
}

// bindFlags defines the manager's flags on fs (flag.CommandLine in main,
// where controller-runtime has also defined --kubeconfig).
func bindFlags(fs *flag.FlagSet) *options {
	o := &options{}
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", `address of the /metrics endpoint; "0" disables it`)
	fs.BoolVar(&o.metricsSecure, "metrics-secure", false, "serve /metrics over HTTPS (a self-signed certificate) to clients the API server authenticates (TokenReview) and authorizes (SubjectAccessReview: get on the non-resource URL /metrics, as the chart's metrics-reader ClusterRole grants); plain HTTP when false")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", `address of the /healthz and /readyz probes; "0" disables them`)
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "elect a leader among manager replicas (Lease "+LeaderElectionID+"), so that only one reconciles; on in the Deployment")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election Lease; the manager's own namespace in a cluster, required with --leader-elect outside one")
	fs.StringVar(&o.workerImage, "worker-image", DefaultWorkerImage(), "container image of the workers (it must hold /ferry) for SyncTasks without spec.workerImage")
	fs.DurationVar(&o.workerStatusTimeout, "worker-status-timeout", 5*time.Second, "timeout of one request to a worker's /status")
	fs.DurationVar(&o.shardRefreshInterval, "shard-refresh-interval", controller.DefaultShardRefreshInterval, "how often the workers of a SyncTask whose source may be sharded list its shards again (config.shards through mongos; ferry run --discover-interval), so that an added shard gets a worker")
	fs.StringVar(&o.watchNamespaces, "watch-namespaces", "", "comma-separated namespaces whose SyncTasks the manager runs (it then needs RBAC in those only); empty: every namespace")
	fs.BoolVar(&o.workerPodMonitors, "worker-podmonitors", true, "make a PodMonitor for each SyncTask's workers when the prometheus-operator CRDs are installed; false when one PodMonitor scrapes every worker (the Helm chart's)")
	fs.BoolVar(&o.workerTLS, "worker-tls", false, "workers serve /metrics and /status over HTTPS with certificates from a CA the manager keeps (--worker-tls-secret), /status to the manager's client certificate only; plain HTTP when false")
	fs.StringVar(&o.workerTLSSecret, "worker-tls-secret", DefaultWorkerCASecret, "with --worker-tls: the Secret (kubernetes.io/tls) holding the workers' CA, in --worker-tls-namespace; made at start when missing")
	fs.StringVar(&o.workerTLSNamespace, "worker-tls-namespace", "", "with --worker-tls: the namespace of --worker-tls-secret; default the manager's own ($POD_NAMESPACE, else its ServiceAccount's)")
	fs.StringVar(&o.logFormat, "log-format", "json", "log format: json or text")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return o
}

func main() {
	o := bindFlags(flag.CommandLine)
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "manager: unexpected arguments %q: the manager takes flags only (see -help)\n", flag.Args())
		os.Exit(2)
	}
	log, err := newLogger(os.Stderr, o.logFormat, o.logLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		os.Exit(2)
	}
	setLoggers(log)
	cfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error("no Kubernetes API server to talk to: in a cluster the manager uses its ServiceAccount; outside one, pass --kubeconfig or set KUBECONFIG", "err", err)
		os.Exit(1)
	}
	if err := run(ctrl.SetupSignalHandler(), o, cfg, log); err != nil {
		log.Error("manager failed", "err", err)
		os.Exit(1)
	}
}

// setLoggers makes log the logger of everything in the process:
// controller-runtime logs through logr and client-go (leader election,
// informers) through klog, and both end up in log's handler. logr's V(n)
// is slog level -n, so V(1) shows with --log-level=debug.
func setLoggers(log *slog.Logger) {
	slog.SetDefault(log)
	ctrl.SetLogger(logr.FromSlogHandler(log.Handler()))
	klog.SetSlogLogger(log)
}

// newLogger returns a slog logger writing to w in the given format at the
// given level (the same flags as `ferry run`).
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %q is not one of debug, info, warn, error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: %q is not json or text", format)
}

// newScheme holds the core Kubernetes types (Secrets, StatefulSets,
// Services, Events, ...) and the SyncTask API.
func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := syncv1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// run builds the manager on the API server cfg reaches and runs it until
// ctx ends (SIGTERM) or it fails.
func run(ctx context.Context, o *options, cfg *rest.Config, log *slog.Logger) error {
	if o.workerImage == "" {
		return errors.New("--worker-image: must not be empty: name the image holding /ferry, such as " + WorkerImageRepository + ":" + version.Version)
	}

	namespaces, err := parseNamespaces(o.watchNamespaces)
	if err != nil {
		return err
	}
	scheme, err := newScheme()
	if err != nil {
		return fmt.Errorf("scheme: %w", err)
	}
	mgr, err := newManager(cfg, o, scheme, namespaces)
	if err != nil {
		return err
	}

	r := &controller.SyncTaskReconciler{
		Client:        mgr.GetClient(),
		Scheme:        mgr.GetScheme(),
		Recorder:      mgr.GetEventRecorder("mongoferry-manager"),
		WorkerImage:   o.workerImage,
		StatusClient:  &http.Client{Timeout: o.workerStatusTimeout},
		NoPodMonitors: !o.workerPodMonitors,

		ShardRefreshInterval: o.shardRefreshInterval,
	}
	if o.workerTLS {
		if r.WorkerTLS, err = workerTLS(ctx, o, cfg, scheme, log); err != nil {
			return err
		}
		r.StatusClient = r.WorkerTLS.HTTPClient(o.workerStatusTimeout)
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up the SyncTask controller: %w", err)
	}
	collector := &controller.SyncTaskCollector{Reader: mgr.GetCache(), Elected: mgr.Elected(), Log: log}
	if err := controller.RegisterSyncTaskCollector(collector); err != nil {
		return fmt.Errorf("register the SyncTask metrics: %w", err)
	}

	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("informers", cacheSynced(mgr.GetCache())); err != nil {
		return fmt.Errorf("readiness check: %w", err)
	}

	watched := "all"
	if len(namespaces) > 0 {
		watched = strings.Join(namespaces, ",")
	}
	log.Info("starting manager", "version", version.Version, "workerImage", o.workerImage,
		"metrics", o.metricsAddr, "probes", o.probeAddr, "leaderElection", o.leaderElect,
		"namespaces", watched, "workerPodMonitors", o.workerPodMonitors, "workerTLS", o.workerTLS)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	log.Info("manager stopped")
	return nil
}

// newManager is the controller-runtime manager: only the operator's own
// pods, StatefulSets and Services are cached, and only in the watched
// namespaces when they are listed.
func newManager(cfg *rest.Config, o *options, scheme *runtime.Scheme, namespaces []string) (ctrl.Manager, error) {
	cacheOpts := cache.Options{ByObject: controller.CacheByObject()}
	if len(namespaces) > 0 {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			cacheOpts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   cacheOpts,
		Metrics:                 metricsOptions(o),
		HealthProbeBindAddress:  o.probeAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        LeaderElectionID,
		LeaderElectionNamespace: o.leaderElectionNamespace,
		// main exits as soon as Start returns, so the Lease can be handed
		// over at once instead of after its duration.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return nil, fmt.Errorf("new manager: %w", err)
	}
	return mgr, nil
}

// parseNamespaces reads --watch-namespaces: names separated by commas,
// blanks around them ignored, each a valid namespace name (a DNS label).
func parseNamespaces(s string) ([]string, error) {
	var out []string
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
			return nil, fmt.Errorf("--watch-namespaces: %q is not a namespace name: %s", n, strings.Join(errs, "; "))
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// cacheSynced is a readiness check: ready once the informers the manager
// has started are synced, so a new replica does not take traffic (metrics
// scrapes) before it can answer from its cache.
func cacheSynced(c cache.Cache) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), time.Second)
		defer cancel()
		if !c.WaitForCacheSync(ctx) {
			return errors.New("informer caches not synced yet")
		}
		return nil
	}
}

// metricsOptions serves /metrics as the flags say: plain HTTP, or HTTPS
// with every request authenticated and authorized by the API server, in
// the manner of kubebuilder's scaffold.
func metricsOptions(o *options) metricsserver.Options {
	m := metricsserver.Options{BindAddress: o.metricsAddr}
	if o.metricsSecure {
		m.SecureServing = true
		m.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return m
}

// serviceAccountNamespace is the file holding the pod's namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// workerTLS loads (or makes) the workers' CA in the manager's namespace
// and issues the manager's client certificate. It reads the API server
// directly: the manager's cache has not started yet, and may not cover
// the manager's own namespace.
func workerTLS(ctx context.Context, o *options, cfg *rest.Config, scheme *runtime.Scheme, log *slog.Logger) (*controller.WorkerTLS, error) {
	ns := o.workerTLSNamespace
	if ns == "" {
		ns = os.Getenv("POD_NAMESPACE")
	}
	if ns == "" {
		if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
			ns = strings.TrimSpace(string(b))
		}
	}
	if ns == "" {
		return nil, errors.New("--worker-tls-namespace: not set, and the manager does not run in a pod: name the namespace of the workers' CA Secret")
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("--worker-tls: %w", err)
	}
	ca, err := controller.EnsureWorkerCA(ctx, c, ns, o.workerTLSSecret)
	if err != nil {
		return nil, fmt.Errorf("--worker-tls: %w", err)
	}
	wt, err := controller.NewWorkerTLS(ca)
	if err != nil {
		return nil, fmt.Errorf("--worker-tls: %w", err)
	}
	log.Info("worker TLS on", "caSecret", ns+"/"+o.workerTLSSecret, "caExpires", ca.Expires().UTC().Format(time.RFC3339))
	return wt, nil
}
