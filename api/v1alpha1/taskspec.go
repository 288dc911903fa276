package v1alpha1

import (
	"slices"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// TLSMountPath is the directory in which a worker finds the keys of its
// task's TLS Secrets, one file each, under <role>/ (role source or target):
// ca.pem for tls.caSecret, client.pem for tls.certificateKeySecret, and
// client.crt and client.key for tls.certificateSecret's tls.crt and tls.key.
const TLSMountPath = "/etc/mongoferry/tls"

// The files of TLSMountPath, under each role's directory.
const (
	CAFileName             = "ca.pem"
	CertificateKeyFileName = "client.pem"
	CertificateFileName    = "client.crt"
	PrivateKeyFileName     = "client.key"
)

// The keys of a kubernetes.io/tls Secret that tls.certificateSecret reads
// (corev1.TLSCertKey and corev1.TLSPrivateKeyKey).
const (
	TLSCertificateKey = "tls.crt"
	TLSPrivateKeyKey  = "tls.key"
)

// Usernames are the usernames read from the credentials Secrets
// (source.credentialsSecret and target.credentialsSecret): the only part of
// a Secret that enters a worker's task file.
type Usernames struct {
	Source, Target string
}

// TLSFileKind says what a TLS Secret key holds.
type TLSFileKind int

// The kinds of TLSSecretFile.
const (
	// TLSFileCA is tls.caSecret: the CA certificates.
	TLSFileCA TLSFileKind = iota
	// TLSFileCertificateKey is tls.certificateKeySecret: the client
	// certificate followed by its key.
	TLSFileCertificateKey
	// TLSFileCertificate is tls.certificateSecret's tls.crt: the client
	// certificate.
	TLSFileCertificate
	// TLSFilePrivateKey is tls.certificateSecret's tls.key: the client
	// certificate's private key.
	TLSFilePrivateKey
)

// TLSSecretFile is one TLS Secret key of a SyncTask and the file the
// workers read it from.
type TLSSecretFile struct {
	// Field is the reference's path in the spec, such as
	// source.tls.caSecret, for messages.
	Field string
	// Role is source or target.
	Role string
	// Kind says what the key holds.
	Kind TLSFileKind
	// Ref is the Secret key.
	Ref SecretKeyRef
	// Path is the file, relative to TLSMountPath.
	Path string
}

// TLSSecretFiles lists the spec's TLS Secret keys (source before target, the
// CA before the client certificate, a certificate before its key), each with
// the file a worker reads it from.
func (s *SyncTaskSpec) TLSSecretFiles() []TLSSecretFile {
	var out []TLSSecretFile
	for _, ep := range []struct {
		role string
		tls  *TLS
	}{{"source", s.Source.TLS}, {"target", s.Target.TLS}} {
		if ep.tls == nil {
			continue
		}
		add := func(field string, kind TLSFileKind, ref SecretKeyRef, file string) {
			out = append(out, TLSSecretFile{Field: ep.role + ".tls." + field, Role: ep.role, Kind: kind, Ref: ref, Path: ep.role + "/" + file})
		}
		if r := ep.tls.CASecret; r != nil {
			add("caSecret", TLSFileCA, *r, CAFileName)
		}
		if r := ep.tls.CertificateKeySecret; r != nil {
			add("certificateKeySecret", TLSFileCertificateKey, *r, CertificateKeyFileName)
		}
		if n := ep.tls.CertificateSecret; n != "" {
			add("certificateSecret", TLSFileCertificate, SecretKeyRef{Name: n, Key: TLSCertificateKey}, CertificateFileName)
			add("certificateSecret", TLSFilePrivateKey, SecretKeyRef{Name: n, Key: TLSPrivateKeyKey}, PrivateKeyFileName)
		}
	}
	return out
}

// SecretNames lists the Secrets the spec names (credentials and TLS), each
// once.
func (s *SyncTaskSpec) SecretNames() []string {
	var names []string
	add := func(n string) {
		if n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	add(s.Source.CredentialsSecret)
	add(s.Target.CredentialsSecret)
	for _, f := range s.TLSSecretFiles() {
		add(f.Ref.Name)
	}
	return names
}

// TaskSpec renders the spec as the workers' task (what `ferry run` reads
// from a task file). The shared options are copied as they are. Each
// endpoint keeps its URI, authSource and TLS switches, the source its kind
// and shard overrides, the target its sharding and shard keys. An endpoint
// with a credentialsSecret gets the username read from that Secret (users)
// and passwordEnv naming the variable the controller fills from the Secret's
// password key; each TLS Secret key becomes the file under TLSMountPath the
// controller mounts it as (TLSSecretFiles). Suspend is left out: it is the
// controller's business (no workers run), not the worker's.
//
// TaskSpec reads no Secret and checks nothing: config.Task.Validate does, on
// the task with its defaults.
func (s *SyncTaskSpec) TaskSpec(users Usernames) config.Spec {
	out := config.Spec{
		Mode: s.Mode,
		Source: config.Endpoint{
			URI:           s.Source.URI,
			Kind:          s.Source.Kind,
			Shards:        slices.Clone(s.Source.Shards),
			AuthSource:    s.Source.AuthSource,
			AuthMechanism: s.Source.AuthMechanism,
			TLS:           taskTLS(s.Source.TLS),
		},
		Target: config.Endpoint{
			URI:           s.Target.URI,
			AuthSource:    s.Target.AuthSource,
			AuthMechanism: s.Target.AuthMechanism,
			TLS:           taskTLS(s.Target.TLS),
			Sharding:      s.Target.Sharding,
		},
		Namespaces:  *s.Namespaces.DeepCopy(),
		Threads:     *s.Threads.DeepCopy(),
		Cache:       *s.Cache.DeepCopy(),
		FullSync:    *s.FullSync.DeepCopy(),
		Incremental: *s.Incremental.DeepCopy(),
		Verify:      *s.Verify.DeepCopy(),
		RateLimit:   s.RateLimit,
		Checkpoint:  *s.Checkpoint.DeepCopy(),
		Cutover:     s.Cutover,
	}
	for _, k := range s.Target.ShardKeys {
		out.Target.ShardKeys = append(out.Target.ShardKeys, *k.DeepCopy())
	}
	if s.DDL != nil {
		ddl := *s.DDL
		out.DDL = &ddl
	}
	if s.Source.CredentialsSecret != "" {
		out.Source.Username, out.Source.PasswordEnv = users.Source, workerapi.EnvSourcePassword
	}
	if s.Target.CredentialsSecret != "" {
		out.Target.Username, out.Target.PasswordEnv = users.Target, workerapi.EnvTargetPassword
	}
	for _, f := range s.TLSSecretFiles() {
		tls := out.Source.TLS
		if f.Role == "target" {
			tls = out.Target.TLS
		}
		path := TLSMountPath + "/" + f.Path
		switch f.Kind {
		case TLSFileCA:
			tls.CAFile = path
		case TLSFileCertificateKey:
			tls.CertificateKeyFile = path
		case TLSFileCertificate:
			tls.CertificateFile = path
		case TLSFilePrivateKey:
			tls.PrivateKeyFile = path
		}
	}
	return out
}

// taskTLS is an endpoint's TLS switches, without its Secrets.
func taskTLS(t *TLS) *config.TLS {
	if t == nil {
		return nil
	}
	return &config.TLS{Enabled: t.Enabled, InsecureSkipVerify: t.InsecureSkipVerify}
}
