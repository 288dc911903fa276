package v1alpha1

import "github.com/mongoferry/mongoferry/pkg/config"

// Source is the deployment a SyncTask reads from: a replica set, or the
// mongos of a sharded cluster. Credentials come only from the Secret named
// by credentialsSecret, TLS material only from Secrets.
//
// +kubebuilder:validation:XValidation:rule=`!self.uri.matches('^mongodb([+]srv)?://[^/?@]*:[^/?@]*@')`,message="must not contain a password: put the username and password in the Secret named by source.credentialsSecret (keys username and password)",fieldPath=".uri",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule=`!self.uri.matches('^mongodb([+]srv)?://[^/?@:]*@')`,message="must not contain a username: put the username and password in the Secret named by source.credentialsSecret (keys username and password)",fieldPath=".uri",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule=`!has(self.shards) || self.shards.all(s, !s.uri.matches('^mongodb([+]srv)?://[^/?@]*@'))`,message="must not contain credentials: shards use the Secret named by source.credentialsSecret (keys username and password)",fieldPath=".shards",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule=`!has(self.shards) || !has(self.kind) || self.kind != 'replicaSet'`,message="lists the shards of a sharded source: remove it, or set source.kind to sharded (or auto)",fieldPath=".shards"
type Source struct {
	// URI is a mongodb:// or mongodb+srv:// URI without credentials.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	URI string `json:"uri"`
	// Kind is the source's topology: replicaSet, sharded, or auto to ask
	// the server.
	// +kubebuilder:default=auto
	// +optional
	Kind config.ClusterKind `json:"kind,omitempty"`
	// Shards overrides the addresses of a sharded source's shards that
	// config.shards gives; each is reached with the source's credentials
	// and TLS.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	Shards []config.Shard `json:"shards,omitempty"`
	// CredentialsSecret names a Secret in the SyncTask's namespace with the
	// keys username and password; leave it out for a source without
	// authentication.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	CredentialsSecret string `json:"credentialsSecret,omitempty"`
	// AuthSource is the database the user is defined in: admin by
	// default, $external with PLAIN, MONGODB-X509 and MONGODB-AWS.
	// +optional
	AuthSource string `json:"authSource,omitempty"`
	// AuthMechanism is how the user authenticates; the server's choice
	// (SCRAM) when empty. PLAIN sends the credentialsSecret's username and
	// password to an LDAP directory (or FerretDB); MONGODB-X509
	// authenticates with the TLS client certificate (tls.certificateSecret
	// or certificateKeySecret, no credentialsSecret); MONGODB-AWS with an
	// AWS access key id and secret access key in the credentialsSecret, or
	// without one from the worker pod's AWS role or AWS_* variables
	// (workerTemplate).
	// +optional
	AuthMechanism config.AuthMechanism `json:"authMechanism,omitempty"`
	// TLS says how to reach the source over TLS.
	// +optional
	TLS *TLS `json:"tls,omitempty"`
}

// Target is the deployment a SyncTask writes to: a replica set, or the
// mongos of a sharded cluster (whose topology the workers ask the server
// for). Credentials and TLS material come from Secrets, as for the source.
//
// +kubebuilder:validation:XValidation:rule=`!self.uri.matches('^mongodb([+]srv)?://[^/?@]*:[^/?@]*@')`,message="must not contain a password: put the username and password in the Secret named by target.credentialsSecret (keys username and password)",fieldPath=".uri",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule=`!self.uri.matches('^mongodb([+]srv)?://[^/?@:]*@')`,message="must not contain a username: put the username and password in the Secret named by target.credentialsSecret (keys username and password)",fieldPath=".uri",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule=`!has(self.shardKeys) || self.shardKeys.all(k, !has(k.hashed) || k.hashed in k.fields)`,message="names a hashed field that is not one of the key's fields: name one of fields",fieldPath=".shardKeys"
// +kubebuilder:validation:XValidation:rule=`!has(self.shardKeys) || self.shardKeys.all(k, !has(k.hashed) || !has(k.unique) || !k.unique)`,message="a hashed shard key cannot be unique: remove unique or hashed",fieldPath=".shardKeys"
type Target struct {
	// URI is a mongodb:// or mongodb+srv:// URI without credentials.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	URI string `json:"uri"`
	// CredentialsSecret names a Secret in the SyncTask's namespace with the
	// keys username and password; leave it out for a target without
	// authentication.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	CredentialsSecret string `json:"credentialsSecret,omitempty"`
	// AuthSource is the database the user is defined in: admin by
	// default, $external with PLAIN, MONGODB-X509 and MONGODB-AWS.
	// +optional
	AuthSource string `json:"authSource,omitempty"`
	// AuthMechanism is how the user authenticates; the server's choice
	// (SCRAM) when empty. PLAIN sends the credentialsSecret's username and
	// password to an LDAP directory (or FerretDB); MONGODB-X509
	// authenticates with the TLS client certificate (tls.certificateSecret
	// or certificateKeySecret, no credentialsSecret); MONGODB-AWS with an
	// AWS access key id and secret access key in the credentialsSecret, or
	// without one from the worker pod's AWS role or AWS_* variables
	// (workerTemplate).
	// +optional
	AuthMechanism config.AuthMechanism `json:"authMechanism,omitempty"`
	// TLS says how to reach the target over TLS.
	// +optional
	TLS *TLS `json:"tls,omitempty"`
	// Sharding says what to do with a sharded target's collections: match
	// shards each one like the source's collection (or as shardKeys says)
	// before the copy writes to it, and stops on one already sharded on
	// another key; keep uses such a collection as it is.
	// +kubebuilder:validation:Enum=match;keep
	// +optional
	Sharding config.TargetSharding `json:"sharding,omitempty"`
	// ShardKeys gives target collections a shard key of their own: for a
	// replica-set source, or to change a key.
	// +optional
	// +listType=map
	// +listMapKey=namespace
	// +kubebuilder:validation:MaxItems=1024
	ShardKeys []config.ShardKey `json:"shardKeys,omitempty"`
}

// TLS is transport security for one endpoint. Its PEM material comes from
// Secrets in the SyncTask's namespace, which the operator mounts into the
// workers and reads itself for its own connection (the target's, for the
// checkpoint cleanup); a SyncTask names no files.
//
// +kubebuilder:validation:XValidation:rule=`(!has(self.caSecret) && !has(self.certificateKeySecret) && !has(self.certificateSecret)) || (has(self.enabled) && self.enabled)`,message="names TLS Secrets while TLS is off: set enabled: true"
// +kubebuilder:validation:XValidation:rule=`!has(self.certificateSecret) || !has(self.certificateKeySecret)`,message="names two client certificates: keep certificateSecret (a kubernetes.io/tls Secret, such as cert-manager writes) or certificateKeySecret (one key holding the certificate and its key), not both",fieldPath=".certificateSecret"
type TLS struct {
	// Enabled turns TLS on.
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// CASecret is the Secret key holding the PEM of the certificate
	// authorities that signed the server's certificate; the system's
	// roots when left out. A cert-manager Secret serves as it is:
	// {name: <the Certificate's secretName>, key: ca.crt}.
	// +optional
	CASecret *SecretKeyRef `json:"caSecret,omitempty"`
	// CertificateKeySecret is the Secret key holding the PEM of the client
	// certificate followed by its private key, for a server that asks
	// clients for a certificate.
	// +optional
	CertificateKeySecret *SecretKeyRef `json:"certificateKeySecret,omitempty"`
	// CertificateSecret names a kubernetes.io/tls Secret holding the client
	// certificate under tls.crt and its private key under tls.key (what
	// cert-manager writes for a Certificate's secretName), for a server
	// that asks clients for a certificate; the workers roll when it is
	// renewed. Set this or certificateKeySecret, not both.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	CertificateSecret string `json:"certificateSecret,omitempty"`
	// InsecureSkipVerify accepts any server certificate: for tests only.
	// +optional
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
}

// SecretKeyRef names one key of a Secret in the SyncTask's namespace.
type SecretKeyRef struct {
	// Name is the Secret's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Key is the key in the Secret's data.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`
}
