package envtestutil

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/mongoferry/mongoferry/internal/testserver"
)

// The API server reaches a node's kubelet for pods/log (kubectl logs) over
// TLS, at the address and port the Node object names. envtest runs no
// kubelet; a test's stand-in (the pod runner's log server) serves that
// endpoint with KubeletServingCertificate, which a CA made once per
// process signs, and every control plane New starts trusts that CA
// (--kubelet-certificate-authority).
var kubeletPKI struct {
	once   sync.Once
	caFile string
	cert   tls.Certificate
	err    error
}

func loadKubeletPKI() {
	p := &kubeletPKI
	p.err = func() error {
		ca, err := testserver.NewCA("envtest kubelet CA")
		if err != nil {
			return err
		}
		certPEM, keyPEM, err := ca.Issue("envtest kubelet", false)
		if err != nil {
			return err
		}
		if p.cert, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
			return err
		}
		dir, err := os.MkdirTemp("", "envtest-kubelet-")
		if err != nil {
			return err
		}
		p.caFile = filepath.Join(dir, "ca.pem")
		return os.WriteFile(p.caFile, ca.PEM, 0o600)
	}()
	if p.err != nil {
		p.err = fmt.Errorf("make the kubelet stand-in's certificates: %w", p.err)
	}
}

// KubeletServingCertificate is the certificate, valid for 127.0.0.1, with
// which a kubelet stand-in serves the API server of every control plane
// this process starts.
func KubeletServingCertificate() (tls.Certificate, error) {
	kubeletPKI.once.Do(loadKubeletPKI)
	return kubeletPKI.cert, kubeletPKI.err
}

func kubeletCAFile() (string, error) {
	kubeletPKI.once.Do(loadKubeletPKI)
	return kubeletPKI.caFile, kubeletPKI.err
}
