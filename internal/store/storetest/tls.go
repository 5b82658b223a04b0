package storetest

import (
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/peloton-sched/peloton/internal/testing/tlstest"
)

// TLSEtcd is an etcd server, in the test's process, that answers only over
// TLS on 127.0.0.1 and only clients with a certificate its CA signed
// (etcd's --client-cert-auth), as a production etcd should.
type TLSEtcd struct {
	// Endpoint is its client URL, https://127.0.0.1:<port>.
	Endpoint string
	// CAFile signed the server's certificate and ClientCert's.
	CAFile string
	// ClientCert and ClientKey are a client certificate the server takes.
	ClientCert, ClientKey string
	// OtherCAFile is a CA that signed nothing of this server's, and
	// OtherCert and OtherKey a client certificate it signed.
	OtherCAFile, OtherCert, OtherKey string
}

// StartTLSEtcd starts a TLSEtcd on a fresh temp dir; it stops at the
// test's end.
func StartTLSEtcd(t testing.TB) *TLSEtcd {
	t.Helper()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "etcd")
	other := tlstest.NewCA(t, dir, "other")
	serverCert, serverKey := ca.Issue(t, "server", "etcd", tlstest.Opts{})
	e := &TLSEtcd{CAFile: ca.File, OtherCAFile: other.File}
	e.ClientCert, e.ClientKey = ca.Issue(t, "client", "peloton", tlstest.Opts{})
	e.OtherCert, e.OtherKey = other.Issue(t, "other-client", "peloton", tlstest.Opts{})

	// A free port, picked here: etcd would advertise ":0" otherwise.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	client := url.URL{Scheme: "https", Host: addr}
	peer, _ := url.Parse("unix://storetest-tls-etcd-no-peers")
	cfg := embed.NewConfig()
	cfg.Name = "tls"
	cfg.Dir = filepath.Join(dir, "data")
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = nil, []url.URL{*peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ClientTLSInfo = transport.TLSInfo{CertFile: serverCert, KeyFile: serverKey, TrustedCAFile: ca.File, ClientCertAuth: true}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("storetest: TLS etcd: %v", err)
	}
	t.Cleanup(srv.Close)
	select {
	case <-srv.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("storetest: TLS etcd: not ready after 30s")
	}
	e.Endpoint = client.String()
	return e
}
