// Package tlstest makes throwaway certificate authorities and the
// certificates they sign, as PEM files, for tests of TLS and mutual TLS.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

var serial atomic.Int64

// CA is a certificate authority whose certificate is in File.
type CA struct {
	Name string
	File string
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA makes a CA named name with its files in dir.
func NewCA(t testing.TB, dir, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &CA{Name: name, File: filepath.Join(dir, name+"-ca.pem"), dir: dir, cert: cert, key: key}
	writePEM(t, ca.File, "CERTIFICATE", der)
	return ca
}

// Opts describe one certificate.
type Opts struct {
	// Groups go into the subject's Organization (Peloton reads them as the
	// holder's groups).
	Groups []string
	// DNS and IPs are the subject alternative names; a server certificate
	// with neither gets localhost and 127.0.0.1.
	DNS []string
	IPs []net.IP
	// NotBefore and NotAfter default to an hour ago and a day from now.
	NotBefore, NotAfter time.Time
}

// Issue signs a certificate for cn usable by servers and clients alike and
// writes it and its key to <dir>/<file>.pem and <dir>/<file>-key.pem.
func (ca *CA) Issue(t testing.TB, file, cn string, o Opts) (certFile, keyFile string) {
	t.Helper()
	key := newKey(t)
	if o.NotBefore.IsZero() {
		o.NotBefore = time.Now().Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = time.Now().Add(24 * time.Hour)
	}
	if len(o.DNS) == 0 && len(o.IPs) == 0 {
		o.DNS, o.IPs = []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: cn, Organization: o.Groups},
		DNSNames: o.DNS, IPAddresses: o.IPs, NotBefore: o.NotBefore, NotAfter: o.NotAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(ca.dir, file+".pem"), filepath.Join(ca.dir, file+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kder)
	return certFile, keyFile
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// writePEM replaces path by writing a temporary file and renaming it, as
// a careful operator's rotation does.
func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
