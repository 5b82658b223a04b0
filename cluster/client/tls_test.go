package client_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/peloton-sched/peloton/cluster/client"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// selfSigned makes a certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "peloton-test"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// TestTransportCredentialsHook: with TLS credentials the client talks to a
// TLS server; without them (plaintext) it cannot.
func TestTransportCredentialsHook(t *testing.T) {
	cert, roots := selfSigned(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	impl := &slowJobs{deadlines: make(chan time.Duration, 4)}
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})))
	pelotonv1.RegisterJobServiceServer(g, impl)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)

	c, err := client.New(lis.Addr().String(), client.Options{
		TransportCredentials: credentials.NewTLS(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Jobs.GetJob(context.Background(), &pelotonv1.GetJobRequest{JobId: "j"}); err != nil {
		t.Fatalf("GetJob over TLS: %v", err)
	}

	plain, err := client.New(lis.Addr().String(), client.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Jobs.GetJob(context.Background(), &pelotonv1.GetJobRequest{JobId: "j"}); err == nil {
		t.Fatal("a plaintext client got an answer from a TLS server")
	}
}
