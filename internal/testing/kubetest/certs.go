package kubetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the throw-away key material of one test cluster: a CA that signs
// the apiserver's serving certificate and the admin's client certificate,
// and the key that signs service-account tokens.
type pki struct {
	caCert, caKey   string // files
	servingCert     string
	servingKey      string
	adminCert       string
	adminKey        string
	saKey, saPub    string
	caPEM           []byte
	adminCertPEM    []byte
	adminKeyPEM     []byte
	servingIPs      []net.IP
	servingDNSNames []string
}

// newPKI writes everything into dir. The serving certificate names loopback
// and advertise, the address the apiserver advertises but that no one dials.
func newPKI(dir string, advertise net.IP) (*pki, error) {
	p := &pki{
		caCert: filepath.Join(dir, "ca.crt"), caKey: filepath.Join(dir, "ca.key"),
		servingCert: filepath.Join(dir, "apiserver.crt"), servingKey: filepath.Join(dir, "apiserver.key"),
		adminCert: filepath.Join(dir, "admin.crt"), adminKey: filepath.Join(dir, "admin.key"),
		saKey: filepath.Join(dir, "sa.key"), saPub: filepath.Join(dir, "sa.pub"),
		servingIPs:      []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, advertise},
		servingDNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "peloton-kubetest-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	if err := writeFile(p.caCert, p.caPEM); err != nil {
		return nil, err
	}
	if err := writeKey(p.caKey, caKey); err != nil {
		return nil, err
	}

	issue := func(serial int64, tmpl *x509.Certificate, certPath, keyPath string) ([]byte, []byte, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, err
		}
		certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		if err := writeFile(certPath, certPEM); err != nil {
			return nil, nil, err
		}
		if err := writeKey(keyPath, key); err != nil {
			return nil, nil, err
		}
		keyPEM, err := os.ReadFile(keyPath)
		return certPEM, keyPEM, err
	}
	if _, _, err := issue(2, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: p.servingIPs, DNSNames: p.servingDNSNames,
	}, p.servingCert, p.servingKey); err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	// system:masters is the group RBAC lets do anything: the tests (and the
	// backend under test) act as the cluster's administrator.
	p.adminCertPEM, p.adminKeyPEM, err = issue(3, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "peloton-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, p.adminCert, p.adminKey)
	if err != nil {
		return nil, fmt.Errorf("admin certificate: %w", err)
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if err := writeKey(p.saKey, saKey); err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := writeFile(p.saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})); err != nil {
		return nil, err
	}
	return p, nil
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writeFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
}

func writeFile(path string, data []byte) error { return os.WriteFile(path, data, 0o600) }
