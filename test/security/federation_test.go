package security

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pclient "github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/federation"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	"github.com/peloton-sched/peloton/internal/testing/tlstest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestFederationOverMutualTLS: a federation and a cluster stack, both
// secured, talk over mutual TLS - the federation as its own certificate's
// principal (peloton-federation, admin of the cluster), the operator as a
// token holder of the federation's API. The cluster turns READY (the
// federation's health checks pass the cluster's guard), and a global pool
// reaches the cluster's pool tree (a write, as the federation's
// principal). A federation without a client certificate cannot reach the
// cluster at all: it stays UNREACHABLE.
func TestFederationOverMutualTLS(t *testing.T) {
	p := newPKI(t)
	e, _ := storetest.StartEtcd(t)
	s := startStack(t, "east", e.Endpoints(), p.security(t, ""))
	fedCert, fedKey := p.ca.Issue(t, "federation", "peloton-federation", tlstest.Opts{})

	good := startFederation(t, e.Endpoints(), p, pclient.Options{TLS: &pclient.TLSFiles{CAFile: p.ca.File, CertFile: fedCert, KeyFile: fedKey}})
	root := p.asFederation(t, good, "root")
	if _, err := root.Clusters.RegisterCluster(ctx(t), &pelotonv1.RegisterClusterRequest{Name: "east", Endpoint: s.info.GRPCAddr}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "east READY through mutual TLS", func() error {
		c, err := root.Clusters.GetCluster(ctx(t), &pelotonv1.GetClusterRequest{Name: "east"})
		if err != nil {
			return err
		}
		if st := c.GetCluster().GetState(); st != pelotonv1.ClusterState_CLUSTER_READY {
			return fmt.Errorf("east is %s: %s", st, c.GetCluster().GetMessage())
		}
		return nil
	})
	if _, err := root.Pools.CreateFederatedPool(ctx(t), &pelotonv1.CreateFederatedPoolRequest{Path: "/global",
		Spec: &pelotonv1.FederatedPoolSpec{Reservation: &pelotonv1.Resources{Cpu: 1}}}); err != nil {
		t.Fatal(err)
	}
	east := p.as(t, s.info.GRPCAddr, "root")
	testutil.Eventually(t, 20*time.Second, "the global pool in east's tree", func() error {
		_, err := east.Pools.GetPool(ctx(t), &pelotonv1.GetPoolRequest{Path: "/global"})
		return err
	})
	// The federation's API is guarded by the same rules: alice (a
	// submitter of /a/**) cannot deregister a cluster.
	alice := p.asFederation(t, good, "alice")
	if _, err := alice.Clusters.DeregisterCluster(ctx(t), &pelotonv1.DeregisterClusterRequest{Name: "east"}); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "admin") {
		t.Errorf("alice deregistering a cluster: %v, want PermissionDenied naming admin", err)
	}

	// A federation that presents no certificate is refused by the
	// cluster's listener.
	// (Its own etcd: a federation's keys have one fixed prefix.)
	e2, _ := storetest.StartEtcd(t)
	bare := p.asFederation(t, startFederation(t, e2.Endpoints(), p, pclient.Options{TLS: &pclient.TLSFiles{CAFile: p.ca.File}}), "root")
	if _, err := bare.Clusters.RegisterCluster(ctx(t), &pelotonv1.RegisterClusterRequest{Name: "east", Endpoint: s.info.GRPCAddr}); err != nil {
		t.Fatal(err)
	}
	// The good federation saw east READY within a few checks; this one
	// never does, and says why. It marks east UNREACHABLE once its checks
	// have failed for UnreachableAfter: proof enough that they ran.
	var last *pelotonv1.Cluster
	testutil.Eventually(t, 10*time.Second, "east UNREACHABLE from the federation without a certificate", func() error {
		c, err := bare.Clusters.GetCluster(ctx(t), &pelotonv1.GetClusterRequest{Name: "east"})
		if err != nil {
			t.Fatal(err)
		}
		last = c.GetCluster()
		switch last.GetState() {
		case pelotonv1.ClusterState_CLUSTER_READY:
			t.Fatal("a federation without a client certificate reached a cluster that requires one")
		case pelotonv1.ClusterState_CLUSTER_UNREACHABLE:
			return nil
		}
		return fmt.Errorf("east is %s", last.GetState())
	})
	// Under TLS 1.3 the client learns of the refused handshake only when
	// it next reads or writes: the reason is the server's alert
	// ("certificate required") or, as often, the connection it closed.
	msg := strings.ToLower(last.GetMessage())
	if last.GetState() != pelotonv1.ClusterState_CLUSTER_UNREACHABLE ||
		!(strings.Contains(msg, "certificate") || strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection reset") || strings.Contains(msg, "eof")) {
		t.Errorf("east from the federation without a certificate: %s %q, want UNREACHABLE saying why (the handshake refused)", last.GetState(), last.GetMessage())
	}
}

// startFederation runs a federation on endpoints with the stack's
// listener security and clusterCreds for its calls to the clusters.
func startFederation(t *testing.T, endpoints []string, p *pki, clusterCreds pclient.Options) string {
	t.Helper()
	ready := make(chan string, 1)
	cfg := federation.Config{EtcdEndpoints: endpoints, Listen: testutil.FreeAddr(t), HTTPListen: testutil.FreeAddr(t),
		Security: p.security(t, ""), ShutdownGrace: 2 * time.Second,
		Options: federation.Options{ClusterCredentials: clusterCreds, CheckEvery: 200 * time.Millisecond, UnreachableAfter: 2 * time.Second,
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))},
		OnReady: func(grpcAddr, _ string) { ready <- grpcAddr }}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- federation.Run(runCtx, cfg) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("federation: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the federation did not stop within 30s")
		}
	})
	select {
	case addr := <-ready:
		return addr
	case err := <-done:
		t.Fatalf("federation: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("federation not ready within 60s")
	}
	return ""
}

func (p *pki) asFederation(t *testing.T, addr, who string) *pclient.Federation {
	t.Helper()
	f, err := pclient.NewFederation(addr, pclient.Options{Timeout: 20 * time.Second, Token: tokens[who],
		TLS: &pclient.TLSFiles{CAFile: p.ca.File, CertFile: p.cliCert, KeyFile: p.cliKey}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
