// Package workertls secures a worker's /status and /metrics: a CA the
// operator keeps (ca.go) issues the workers' serving certificates and the
// manager's client certificate, and the worker's HTTPS server (server.go)
// lets only the manager read /status.
package workertls

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"
)

// Names in the certificates.
const (
	// ManagerName is the common name of the manager's client certificate:
	// the one identity a worker serves /status to.
	ManagerName = "mongoferry-manager"
	// WorkerServerName is in every worker's serving certificate, for
	// scrapers that reach workers by IP and verify one fixed name
	// (a PodMonitor's tlsConfig.serverName).
	WorkerServerName = "mongoferry-worker"
	caName           = "mongoferry-worker-ca"
)

// Validity and renewal.
const (
	// CAValidity is how long a new CA is valid; LoadCA's caller replaces
	// a CA with less than CARenewBefore left.
	CAValidity    = 10 * 365 * 24 * time.Hour
	CARenewBefore = 365 * 24 * time.Hour
	// LeafValidity is how long an issued certificate is valid; one with
	// less than LeafRenewBefore left is issued again.
	LeafValidity    = 365 * 24 * time.Hour
	LeafRenewBefore = 30 * 24 * time.Hour
)

// CA issues the workers' and the manager's certificates.
type CA struct {
	cert *x509.Certificate
	key  crypto.Signer
	// CertPEM is the CA certificate, KeyPEM its private key (PKCS #8).
	CertPEM, KeyPEM []byte
}

// NewCA makes a self-signed CA valid from now for CAValidity.
func NewCA(now time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate the CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: caName},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(CAValidity),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("sign the CA certificate: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode the CA key: %w", err)
	}
	return LoadCA(pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", kder))
}

// LoadCA reads a CA from its certificate and key (PEM). Errors never
// quote the key.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := parseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("CA certificate: not a CA")
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, errors.New("CA key: unreadable, or not the certificate's key")
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, errors.New("CA key: cannot sign")
	}
	return &CA{cert: cert, key: signer, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// Expires is when the CA certificate stops being valid.
func (ca *CA) Expires() time.Time { return ca.cert.NotAfter }

// Pool is a pool holding the CA only.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// Leaf is what to issue: a serving certificate for DNSNames and IPs, or a
// client certificate.
type Leaf struct {
	CommonName string
	DNSNames   []string
	IPs        []net.IP
	Client     bool
}

// Issue signs a new certificate for l, valid from now for LeafValidity,
// and returns it and its key (PEM).
func (ca *CA) Issue(l Leaf, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate a key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: l.CommonName},
		NotBefore: now.Add(-time.Hour), NotAfter: minTime(now.Add(LeafValidity), ca.cert.NotAfter),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: l.DNSNames, IPAddresses: l.IPs,
	}
	if l.Client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign the certificate of %s: %w", l.CommonName, err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode a key: %w", err)
	}
	return pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", kder), nil
}

// Current tells whether certPEM was issued by this CA for l and is still
// valid for more than LeafRenewBefore after now: if not, issue it again.
func (ca *CA) Current(certPEM []byte, l Leaf, now time.Time) bool {
	cert, err := parseCert(certPEM)
	if err != nil || cert.CheckSignatureFrom(ca.cert) != nil {
		return false
	}
	if now.Add(LeafRenewBefore).After(cert.NotAfter) || cert.Subject.CommonName != l.CommonName {
		return false
	}
	return slices.Equal(cert.DNSNames, l.DNSNames) &&
		slices.EqualFunc(cert.IPAddresses, l.IPs, func(a, b net.IP) bool { return a.Equal(b) })
}

// ClientCertificate keeps a client certificate for name, issued by ca and
// issued again when it nears its end; pass GetClientCertificate to a
// tls.Config.
type ClientCertificate struct {
	ca   *CA
	name string
	now  func() time.Time
	cur  chan *tls.Certificate // one slot: the current certificate, or nil
}

// NewClientCertificate issues the first certificate.
func NewClientCertificate(ca *CA, name string) (*ClientCertificate, error) {
	c := &ClientCertificate{ca: ca, name: name, now: time.Now, cur: make(chan *tls.Certificate, 1)}
	cert, err := c.issue()
	if err != nil {
		return nil, err
	}
	c.cur <- cert
	return c, nil
}

func (c *ClientCertificate) issue() (*tls.Certificate, error) {
	certPEM, keyPEM, err := c.ca.Issue(Leaf{CommonName: c.name, Client: true}, c.now())
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("client certificate of %s: %w", c.name, err)
	}
	return &pair, nil
}

// GetClientCertificate returns the current certificate, issuing a new one
// first when it has less than LeafRenewBefore left.
func (c *ClientCertificate) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	cert := <-c.cur
	if cert.Leaf == nil || c.now().Add(LeafRenewBefore).After(cert.Leaf.NotAfter) {
		next, err := c.issue()
		if err != nil {
			c.cur <- cert
			return nil, err
		}
		cert = next
	}
	c.cur <- cert
	return cert, nil
}

// ClientConfig is the manager's TLS configuration for reading workers:
// it trusts ca only and presents cert.
func ClientConfig(ca *CA, cert *ClientCertificate) *tls.Config {
	return &tls.Config{RootCAs: ca.Pool(), GetClientCertificate: cert.GetClientCertificate, MinVersion: tls.VersionTLS12}
}

func parseCert(certPEM []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM CERTIFICATE block")
	}
	return x509.ParseCertificate(b.Bytes)
}

func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	return n, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
