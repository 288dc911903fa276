package workertls

import (
	"net"
	"testing"
	"time"
)

// TestCurrent: a worker's certificate is issued again when it nears its
// end, names other hosts, or comes from another CA (a CA replaced).
func TestCurrent(t *testing.T) {
	now := time.Now()
	ca, err := NewCA(now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA(now)
	if err != nil {
		t.Fatal(err)
	}
	l := Leaf{CommonName: "a-worker", DNSNames: []string{"*.a-worker.ns.svc", WorkerServerName}, IPs: []net.IP{net.IPv4(10, 0, 0, 1)}}
	cert, _, err := ca.Issue(l, now)
	if err != nil {
		t.Fatal(err)
	}
	otherCert, _, err := other.Issue(l, now)
	if err != nil {
		t.Fatal(err)
	}
	moved := l
	moved.DNSNames = []string{"*.b-worker.ns.svc", WorkerServerName}
	for _, tc := range []struct {
		name string
		cert []byte
		leaf Leaf
		at   time.Time
		want bool
	}{
		{"fresh", cert, l, now, true},
		{"a month before its end", cert, l, now.Add(LeafValidity - LeafRenewBefore + time.Hour), false},
		{"other names", cert, moved, now, false},
		{"another CA", otherCert, l, now, false},
		{"not PEM", []byte("garbage"), l, now, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ca.Current(tc.cert, tc.leaf, tc.at); got != tc.want {
				t.Fatalf("Current = %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := LoadCA(ca.CertPEM, other.KeyPEM); err == nil {
		t.Fatal("LoadCA accepted another CA's key")
	}
	if again, err := LoadCA(ca.CertPEM, ca.KeyPEM); err != nil || !again.Expires().Equal(ca.Expires()) {
		t.Fatalf("LoadCA: %v", err)
	}
}
