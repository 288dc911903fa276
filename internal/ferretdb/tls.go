package ferretdb

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// TLS makes a server listen with TLS only.
type TLS struct {
	// CertFile and KeyFile are the server's certificate and key (PEM).
	CertFile, KeyFile string
	// CAFile, when set, makes the server require client certificates
	// signed by that CA (FerretDB's --listen-tls-ca-file).
	CAFile string
	// Client is what the test's own clients (Client, waitReady) use.
	Client *tls.Config
}

// CA is a certificate authority a test makes to issue server and client
// certificates.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA certificate.
	PEM []byte
}

// NewCA makes a self-signed CA named cn.
func NewCA(cn string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Issue returns a certificate and its key (PEM) for cn: a server
// certificate valid for 127.0.0.1, ::1 and localhost, or a client one.
func (ca *CA) Issue(cn string, client bool) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	} else {
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// Files holds the paths WriteFiles wrote.
type Files struct {
	// CA is the CA certificate; ServerCert and ServerKey the server's;
	// Client the client certificate and key in one file (the shape
	// tls.certificateKeyFile takes); ClientCert and ClientKey the same
	// certificate and key in two files (tls.certificateFile and
	// tls.privateKeyFile, a kubernetes.io/tls Secret's tls.crt and tls.key).
	CA, ServerCert, ServerKey, Client, ClientCert, ClientKey string
	// ClientConfig trusts the CA and presents the client certificate.
	ClientConfig *tls.Config
}

// WriteFiles issues a server and a client certificate and writes them, with
// the CA, into dir.
func (ca *CA) WriteFiles(dir string) (Files, error) {
	f := Files{CA: filepath.Join(dir, "ca.pem"), ServerCert: filepath.Join(dir, "server.pem"),
		ServerKey: filepath.Join(dir, "server-key.pem"), Client: filepath.Join(dir, "client.pem"),
		ClientCert: filepath.Join(dir, "tls.crt"), ClientKey: filepath.Join(dir, "tls.key")}
	scert, skey, err := ca.Issue("server", false)
	if err != nil {
		return f, err
	}
	ccert, ckey, err := ca.Issue("client", true)
	if err != nil {
		return f, err
	}
	for path, data := range map[string][]byte{f.CA: ca.PEM, f.ServerCert: scert, f.ServerKey: skey, f.Client: append(slices.Clip(ccert), ckey...),
		f.ClientCert: ccert, f.ClientKey: ckey} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return f, err
		}
	}
	pair, err := tls.X509KeyPair(ccert, ckey)
	if err != nil {
		return f, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	f.ClientConfig = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	return f, nil
}
