package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/cluster"
	pclient "github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/federation"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	"github.com/peloton-sched/peloton/internal/testing/tlstest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestIsolationFlagsRejected: every bad --task-user, --etcd-listen and
// --etcd-cacert/--etcd-cert/--etcd-key is a usage error naming its flag
// (and, for an unknown user, the user), before anything starts; so is a
// negative --reservation-after.
func TestIsolationFlagsRejected(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "etcd")
	cert, key := ca.Issue(t, "client", "peloton", tlstest.Opts{})
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	https := []string{"serve", "cluster", "--etcd-endpoints", "https://127.0.0.1:2379"}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"up", "--task-user", "peloton-no-such-user"}, []string{"--task-user", "peloton-no-such-user", "no user"}},
		{[]string{"up", "--task-user", "root"}, []string{"--task-user", "root"}},
		{[]string{"up", "--backend", "sim", "--task-user", "nobody"}, []string{"--task-user", "local backend"}},
		{[]string{"up", "--etcd-listen", "0.0.0.0:5379"}, []string{"--etcd-listen", "loopback"}},
		{[]string{"up", "--etcd-listen", "10.1.2.3:5379"}, []string{"--etcd-listen", "loopback"}},
		{[]string{"up", "--etcd-listen", ":5379"}, []string{"--etcd-listen", "loopback"}},
		{[]string{"up", "--etcd-cacert", ca.File}, []string{"--etcd-cacert", "external etcd"}},
		{append(https, "--etcd-cert", cert), []string{"--etcd-cert", "--etcd-key"}},
		{append(https, "--etcd-key", key), []string{"--etcd-key", "--etcd-cert"}},
		{append(https, "--etcd-cacert", filepath.Join(dir, "missing.pem")), []string{"--etcd-cacert", "missing.pem"}},
		{append(https, "--etcd-cacert", notPEM), []string{"--etcd-cacert", "no PEM certificate"}},
		{append(https, "--etcd-cert", notPEM, "--etcd-key", key), []string{"--etcd-cert", "--etcd-key"}},
		{[]string{"serve", "cluster", "--etcd-endpoints", "http://127.0.0.1:2379", "--etcd-cacert", ca.File}, []string{"--etcd-endpoints", "plain http", "--etcd-cacert"}},
		{[]string{"serve", "federation", "--etcd-endpoints", "https://127.0.0.1:2379", "--etcd-key", key}, []string{"--etcd-key", "--etcd-cert"}},
		{[]string{"up", "--etcd-endpoints", "https://127.0.0.1:2379", "--etcd-cacert", filepath.Join(dir, "missing.pem")}, []string{"--etcd-cacert"}},
		{[]string{"up", "--reservation-after", "-1s"}, []string{"--reservation-after", "must be >= 0"}},
		{[]string{"serve", "cluster", "--etcd-endpoints", "http://127.0.0.1:2379", "--reservation-after", "-5m"}, []string{"--reservation-after"}},
	} {
		r := runCLI(t, "", tc.args...)
		ok := r.code == exitUsage
		for _, w := range tc.want {
			ok = ok && strings.Contains(r.stderr, w)
		}
		if !ok {
			t.Errorf("peloton %q: exit %d, stderr %q; want exit 2 naming %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

// TestTaskUserNeedsRoot: without root, --task-user is a usage error that
// says peloton cannot switch user.
func TestTaskUserNeedsRoot(t *testing.T) {
	geteuid = func() int { return 1000 }
	t.Cleanup(func() { geteuid = os.Geteuid })
	r := runCLI(t, "", "up", "--task-user", "nobody")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--task-user nobody") || !strings.Contains(r.stderr, "not root") {
		t.Errorf("exit %d, stderr %q; want a usage error saying it needs root", r.code, r.stderr)
	}
}

// TestIsolationFlagsConfig: the flags reach the cluster's and the
// federation's configurations.
func TestIsolationFlagsConfig(t *testing.T) {
	geteuid = func() int { return 0 }
	t.Cleanup(func() { geteuid = os.Geteuid })
	var got cluster.Config
	run := func(_ context.Context, cfg cluster.Config) error { got = cfg; return nil }
	if r := runWith(t, run, "", "up", "--task-user", "nobody", "--etcd-listen", "127.0.0.1:5379"); r.code != exitOK {
		t.Fatalf("up: exit %d, stderr %q", r.code, r.stderr)
	}
	if got.TaskUser != "nobody" || got.EtcdListen != "127.0.0.1:5379" {
		t.Errorf("up --task-user nobody --etcd-listen 127.0.0.1:5379: config %+v", got)
	}

	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "etcd")
	cert, key := ca.Issue(t, "client", "peloton", tlstest.Opts{})
	tlsArgs := []string{"--etcd-endpoints", "https://127.0.0.1:2379", "--etcd-cacert", ca.File, "--etcd-cert", cert, "--etcd-key", key}
	if r := runWith(t, run, "", append([]string{"serve", "cluster"}, tlsArgs...)...); r.code != exitOK {
		t.Fatalf("serve cluster: exit %d, stderr %q", r.code, r.stderr)
	}
	if f := got.EtcdTLS; f.CAFile != ca.File || f.CertFile != cert || f.KeyFile != key {
		t.Errorf("serve cluster: EtcdTLS %+v", f)
	}
	var fed federation.Config
	runFed := func(_ context.Context, cfg federation.Config) error { fed = cfg; return nil }
	if r := runFedWith(t, run, runFed, "", append([]string{"serve", "federation"}, tlsArgs...)...); r.code != exitOK {
		t.Fatalf("serve federation: exit %d, stderr %q", r.code, r.stderr)
	}
	if f := fed.EtcdTLS; f.CAFile != ca.File || f.CertFile != cert || f.KeyFile != key {
		t.Errorf("serve federation: EtcdTLS %+v", f)
	}
}

// TestUpClustersShareTheEtcdSocket runs what `peloton up --clusters a,b`
// runs: the first cluster embeds etcd, the federation and the second
// cluster use its socket. Each ready line names the socket, nothing of
// theirs listens on TCP but their APIs, and the federation hears from both
// clusters.
func TestUpClustersShareTheEtcdSocket(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two stacks and a federation")
	}
	before := testutil.ListeningTCPPorts(t)
	var out testutil.SyncBuffer
	a := newApp(&out, io.Discard)
	log := slog.New(slog.DiscardHandler)
	dataDir := t.TempDir()
	first := cluster.Config{ClusterName: "a", DataDir: dataDir, Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0",
		Backend: "sim", Hosts: 1, ShutdownGrace: 5 * time.Second, Logger: log}
	fcfg := federation.Config{Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0", Options: federation.Options{Logger: log}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- a.runUp(ctx, first, []string{"a", "b"}, fcfg, map[string]string{"backend": "sim"}, pclient.Options{})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("up: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("up did not stop within 60s")
		}
	})
	readyRE := regexp.MustCompile(`(?m)^peloton is ready: grpc (\S+), http http://(\S+), etcd (\S+), data \S+, cluster (\S+)$`)
	fedRE := regexp.MustCompile(`(?m)^peloton federation is ready: grpc (\S+), http http://(\S+)$`)
	testutil.Eventually(t, 90*time.Second, "both clusters and the federation ready", func() error {
		if len(readyRE.FindAllString(out.String(), -1)) < 2 || !fedRE.MatchString(out.String()) {
			return fmt.Errorf("stdout:\n%s", out.String())
		}
		return nil
	})
	sock := "unix://" + filepath.Join(dataDir, "etcd", "client.sock")
	api := map[int]bool{}
	addPort := func(addr string) {
		_, p, _ := net.SplitHostPort(addr)
		n, _ := strconv.Atoi(p)
		api[n] = true
	}
	for _, m := range readyRE.FindAllStringSubmatch(out.String(), -1) {
		if m[3] != sock {
			t.Errorf("cluster %s uses etcd %s, want %s", m[4], m[3], sock)
		}
		addPort(m[1])
		addPort(m[2])
	}
	f := fedRE.FindStringSubmatch(out.String())
	addPort(f[1])
	addPort(f[2])
	for p := range testutil.ListeningTCPPorts(t) {
		if !before[p] && !api[p] {
			t.Errorf("up listens on TCP port %d, which is none of its APIs (%s)", p, out.String())
		}
	}
	fc, err := pclient.NewFederation(f[1], pclient.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	testutil.Eventually(t, 90*time.Second, "the federation listing both clusters", func() error {
		resp, err := fc.Clusters.ListClusters(context.Background(), &pelotonv1.ListClustersRequest{})
		if err == nil && len(resp.GetClusters()) != 2 {
			err = fmt.Errorf("it lists %v", resp.GetClusters())
		}
		return err
	})
}
