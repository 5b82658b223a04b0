package cli

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/cluster"
)

func TestServeClusterNeedsEtcdEndpoints(t *testing.T) {
	r := runCLI(t, "", "serve", "cluster")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--etcd-endpoints") {
		t.Errorf("serve cluster: exit %d, stderr %q; want exit 2 naming --etcd-endpoints", r.code, r.stderr)
	}
}

func TestUpRejectsBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"up", "--backend", "nope"}, "--backend"},
		{[]string{"serve", "cluster", "--etcd-endpoints", "http://e:2379", "--backend", "k8s"}, "--backend"},
		{[]string{"up", "--log-level", "loud"}, "--log-level"},
		{[]string{"up", "--hosts", "0"}, "--hosts"},
		{[]string{"up", "--host-cpu", "-1"}, "--host-cpu"},
		{[]string{"up", "--host-memory-mb", "-5"}, "--host-memory-mb"},
		{[]string{"up", "--listen", "nonsense"}, "--listen"},
		{[]string{"up", "--etcd-listen", "nonsense"}, "--etcd-listen"},
		{[]string{"up", "--backend", "sim", "--host-gpu", "-1"}, "--host-gpu"},
		{[]string{"up", "--backend", "sim", "--host-labels", "zone=a,zone"}, "--host-labels"},
		{[]string{"up", "--host-labels", "zone=a"}, "--host-labels"},
		{[]string{"up", "--host-gpu", "1"}, "--host-gpu"},
		{[]string{"up", "--partitions", "batch=2,stateless=2", "--hosts", "3"}, "--partitions"},
		{[]string{"up", "--partitions", "batch"}, "--partitions"},
		{[]string{"up", "--partitions", "Batch=1"}, "--partitions"},
		{[]string{"up", "--partitions", "batch=0"}, "--partitions"},
		{[]string{"up", "--partitions", "batch=x"}, "--partitions"},
		{[]string{"up", "--partitions", "batch=1,batch=1"}, "--partitions"},
		{[]string{"up", "--backend", "sim", "--partitions", "batch=1"}, "--partitions"},
		{[]string{"up", "--backend", "kubernetes", "--kube-qps", "0"}, "--kube-qps"},
		{[]string{"up", "--backend", "kubernetes", "--kube-burst", "-1"}, "--kube-burst"},
		{[]string{"up", "--backend", "kubernetes", "--kube-pool-namespaces", "team=ns"}, "--kube-pool-namespaces"},
		{[]string{"up", "--backend", "kubernetes", "--kube-namespace", " "}, "--kube-namespace"},
		{[]string{"up", "--backend", "kubernetes", "--kube-secondary-namespaces", "Team_A"}, "--kube-secondary-namespaces"},
		{[]string{"up", "--backend", "kubernetes", "--kube-bind-mode", "nodeName"}, "--kube-bind-mode"},
		{[]string{"serve", "cluster", "--etcd-endpoints", "http://e:2379", "--kube-bind-mode", ""}, "--kube-bind-mode"},
		{[]string{"up", "--leader-elect"}, "--leader-elect"},
		{[]string{"up", "--cluster-name", "East"}, "--cluster-name"},
		{[]string{"up", "--cluster-name", ""}, "--cluster-name"},
		{[]string{"serve", "cluster", "--etcd-endpoints", "http://e:2379", "--cluster-name", "a.b"}, "--cluster-name"},
		{[]string{"serve", "cluster", "--etcd-endpoints", "http://e:2379", "--federation-ui", "fed.example:5292"}, "--federation-ui"},
		{[]string{"serve", "cluster", "--etcd-endpoints", "http://e:2379", "--federation-ui", "ftp://fed.example/"}, "--federation-ui"},
		{[]string{"serve", "cluster", "--etcd-endpoints", "http://e:2379", "--leader-elect", "--leader-lease", "500ms"}, "--leader-lease"},
		{[]string{"serve", "cluster", "--etcd-endpoints", "http://e:2379", "--leader-elect", "--leader-lease", "0s"}, "--leader-lease"},
		{[]string{"serve", "cluster", "--etcd-endpoints", "http://e:2379", "--leader-elect", "--listen", "0.0.0.0:5391"}, "--advertise-host"},
		{[]string{"serve", "cluster", "--etcd-endpoints", "http://e:2379", "--leader-elect", "--listen", ":5391"}, "--advertise-host"},
	} {
		r := runCLI(t, "", tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.flag) {
			t.Errorf("peloton %q: exit %d, stderr %q; want exit 2 naming %s", tc.args, r.code, r.stderr, tc.flag)
		}
	}
}

func TestUpBuildsConfig(t *testing.T) {
	var got cluster.Config
	run := func(ctx context.Context, cfg cluster.Config) error {
		got = cfg
		cfg.OnReady(cluster.ReadyInfo{
			ClusterName:   cfg.ClusterName,
			GRPCAddr:      "127.0.0.1:5391",
			HTTPAddr:      "127.0.0.1:5291",
			EtcdEndpoints: []string{"unix:///srv/peloton-data/etcd/client.sock"},
		})
		cfg.OnReady(cluster.ReadyInfo{GRPCAddr: "again"})
		cfg.Logger.Debug("debug line")
		cfg.Logger.Warn("warn line")
		return nil
	}
	r := runWith(t, run, "", "up", "--hosts", "3", "--host-cpu", "2", "--host-memory-mb", "1024", "--log-level", "warn")
	if r.code != exitOK {
		t.Fatalf("up: exit %d, stderr %q", r.code, r.stderr)
	}
	if want := "peloton is ready: grpc 127.0.0.1:5391, http http://127.0.0.1:5291, etcd unix:///srv/peloton-data/etcd/client.sock, data ./peloton-data, cluster local\n"; r.stdout != want {
		t.Errorf("stdout = %q, want %q", r.stdout, want)
	}
	if got.DataDir != "./peloton-data" || got.Listen != "127.0.0.1:5391" || got.HTTPListen != "127.0.0.1:5291" ||
		got.EtcdListen != "" || len(got.EtcdEndpoints) != 0 || got.Backend != "local" || got.TaskUser != "" ||
		got.Hosts != 3 || got.HostCPU != 2 || got.HostMemoryMB != 1024 || got.ClusterName != "local" {
		t.Errorf("config = %+v", got)
	}
	if strings.Contains(r.stderr, "debug line") || !strings.Contains(r.stderr, "level=WARN msg=\"warn line\"") {
		t.Errorf("logs at --log-level warn = %q", r.stderr)
	}

	r = runWith(t, run, "", "serve", "cluster", "--etcd-endpoints", "http://a:2379, http://b:2379", "--listen", ":7000", "--cluster-name", "east-1", "--insecure")
	if r.code != exitOK {
		t.Fatalf("serve cluster: exit %d, stderr %q", r.code, r.stderr)
	}
	if !strings.HasSuffix(r.stdout, ", cluster east-1\n") {
		t.Errorf("serve cluster --cluster-name east-1: ready line %q", r.stdout)
	}
	if len(got.EtcdEndpoints) != 2 || got.EtcdEndpoints[1] != "http://b:2379" || got.EtcdListen != "" || got.Listen != ":7000" ||
		got.ClusterName != "east-1" {
		t.Errorf("serve cluster config = %+v", got)
	}
}

func TestUpReportsRunError(t *testing.T) {
	run := func(context.Context, cluster.Config) error {
		return errors.New("listen tcp 127.0.0.1:5391: address already in use")
	}
	r := runWith(t, run, "", "up")
	if r.code != exitError || r.stderr != "Error: listen tcp 127.0.0.1:5391: address already in use\n" {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestUpSimBackendConfig(t *testing.T) {
	var got cluster.Config
	run := func(ctx context.Context, cfg cluster.Config) error {
		got = cfg
		return nil
	}
	r := runWith(t, run, "", "up", "--backend", "sim", "--hosts", "1000", "--host-gpu", "2", "--host-labels", "zone=a,zone=b")
	if r.code != exitOK {
		t.Fatalf("up --backend sim: exit %d, stderr %q", r.code, r.stderr)
	}
	if got.Backend != "sim" || got.Hosts != 1000 || got.HostGPU != 2 ||
		len(got.HostLabels) != 2 || got.HostLabels[0] != "zone=a" || got.HostLabels[1] != "zone=b" {
		t.Errorf("config = %+v", got)
	}

	r = runWith(t, run, "", "serve", "cluster", "--etcd-endpoints", "http://e:2379", "--backend", "sim",
		"--host-labels", "zone=a", "--host-labels", "peloton.io/partition=batch")
	if r.code != exitOK {
		t.Fatalf("serve cluster --backend sim: exit %d, stderr %q", r.code, r.stderr)
	}
	if got.Backend != "sim" || len(got.HostLabels) != 2 || got.HostLabels[1] != "peloton.io/partition=batch" {
		t.Errorf("serve cluster config = %+v", got)
	}
}

func TestUpKubernetesBackendConfig(t *testing.T) {
	var got cluster.Config
	run := func(ctx context.Context, cfg cluster.Config) error {
		got = cfg
		return nil
	}
	r := runWith(t, run, "", "serve", "cluster", "--etcd-endpoints", "http://e:2379", "--backend", "kubernetes",
		"--kubeconfig", "/etc/peloton/kubeconfig", "--kube-namespace", "batch", "--kube-qps", "500", "--kube-burst", "1000",
		"--kube-bind-mode", "node-name", "--kube-pool-namespaces", "/org/ml=ml,/org/web=web", "--kube-node-selector", "pool=peloton",
		"--kube-secondary-namespaces", "spark,web")
	if r.code != exitOK {
		t.Fatalf("serve cluster --backend kubernetes: exit %d, stderr %q", r.code, r.stderr)
	}
	k := got.Kube
	if got.Backend != "kubernetes" || k.Kubeconfig != "/etc/peloton/kubeconfig" || k.Namespace != "batch" ||
		k.QPS != 500 || k.Burst != 1000 || k.PoolNamespaces["/org/ml"] != "ml" || k.PoolNamespaces["/org/web"] != "web" ||
		k.NodeSelector != "pool=peloton" || k.BindMode != "node-name" || !k.Secondary || strings.Join(k.SecondaryNamespaces, ",") != "spark,web" {
		t.Errorf("config = %+v", got)
	}
	r = runWith(t, run, "", "serve", "cluster", "--etcd-endpoints", "http://e:2379", "--backend", "kubernetes", "--kube-secondary=false")
	if r.code != exitOK || got.Kube.Secondary {
		t.Errorf("--kube-secondary=false: exit %d, config %+v", r.code, got.Kube)
	}
}

func TestServeClusterLeaderElectConfig(t *testing.T) {
	var got cluster.Config
	run := func(ctx context.Context, cfg cluster.Config) error {
		got = cfg
		return nil
	}
	r := runWith(t, run, "", "serve", "cluster", "--etcd-endpoints", "http://e:2379")
	if r.code != exitOK || got.LeaderElect || got.LeaderLease != cluster.DefaultLeaderLease {
		t.Fatalf("serve cluster: exit %d, stderr %q, config %+v", r.code, r.stderr, got)
	}
	r = runWith(t, run, "", "serve", "cluster", "--etcd-endpoints", "http://e:2379", "--leader-elect",
		"--leader-lease", "20s", "--listen", "0.0.0.0:5391", "--advertise-host", "10.1.2.3", "--insecure")
	if r.code != exitOK {
		t.Fatalf("serve cluster --leader-elect: exit %d, stderr %q", r.code, r.stderr)
	}
	if !got.LeaderElect || got.LeaderLease != 20*time.Second || got.AdvertiseHost != "10.1.2.3" || got.Listen != "0.0.0.0:5391" {
		t.Errorf("config = %+v", got)
	}
	// A specific --listen host is what the others dial.
	r = runWith(t, run, "", "serve", "cluster", "--etcd-endpoints", "http://e:2379", "--leader-elect", "--listen", "10.0.0.5:5391", "--insecure")
	if r.code != exitOK || !got.LeaderElect || got.AdvertiseHost != "" {
		t.Fatalf("serve cluster --leader-elect --listen 10.0.0.5:5391: exit %d, stderr %q, config %+v", r.code, r.stderr, got)
	}
}

// TestServerCommandsHaveNoClientFlags: `up --help` and `serve cluster
// --help` list only server flags, and a client flag given to them is a
// usage error rather than silently ignored. `up` asks for /default to
// reserve the hosts of a fresh cluster; `serve cluster` does not.
func TestServerCommandsHaveNoClientFlags(t *testing.T) {
	var got cluster.Config
	run := func(_ context.Context, cfg cluster.Config) error { got = cfg; return nil }
	for _, args := range [][]string{{"up", "--help"}, {"serve", "cluster", "--help"}} {
		r := runWith(t, run, "", args...)
		if r.code != exitOK || !strings.Contains(r.stdout, "--data-dir") {
			t.Fatalf("%v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
		for _, f := range []string{"--server", "--output", "--timeout", "Global Flags"} {
			if strings.Contains(r.stdout, f) {
				t.Errorf("%v lists %s:\n%s", args, f, r.stdout)
			}
		}
	}
	r := runWith(t, run, "", "up", "-o", "json")
	if r.code != exitUsage || !strings.Contains(r.stderr, `--output is a flag of the client commands; "peloton up" takes only the flags in --help`) {
		t.Errorf("up -o json: exit %d, %q", r.code, r.stderr)
	}
	r = runWith(t, run, "", "up", "--cluster", "a")
	if r.code != exitUsage || !strings.Contains(r.stderr, `--cluster is a flag of the client commands`) {
		t.Errorf("up --cluster a: exit %d, %q", r.code, r.stderr)
	}
	// serve cluster's own --federation (where to register) is not the
	// client's: it is accepted.
	if r := runWith(t, run, "", "serve", "cluster", "--etcd-endpoints", "http://a:2379", "--federation", "127.0.0.1:5392"); r.code != exitOK {
		t.Errorf("serve cluster --federation: exit %d, %q", r.code, r.stderr)
	}
	if r := runWith(t, run, "", "up"); r.code != exitOK || !got.DefaultReservesHosts {
		t.Errorf("up: exit %d, DefaultReservesHosts %v", r.code, got.DefaultReservesHosts)
	}
	if r := runWith(t, run, "", "serve", "cluster", "--etcd-endpoints", "http://a:2379"); r.code != exitOK || got.DefaultReservesHosts {
		t.Errorf("serve cluster: exit %d, DefaultReservesHosts %v", r.code, got.DefaultReservesHosts)
	}
}

// --partitions splits the local hosts; from two hosts the default splits
// them between the advisor's batch and stateless partitions.
func TestUpPartitions(t *testing.T) {
	var got cluster.Config
	run := func(ctx context.Context, cfg cluster.Config) error {
		got = cfg
		return nil
	}
	for _, tc := range []struct {
		args  []string
		hosts int
		parts string
	}{
		{[]string{"up", "--partitions", "batch=2,stateless=2"}, 4, "batch batch stateless stateless"},
		{[]string{"up", "--partitions", "gpu=1, batch=2", "--hosts", "3"}, 3, "gpu batch batch"},
		{[]string{"up", "--hosts", "3"}, 3, "batch batch stateless"},
		{[]string{"up", "--hosts", "2", "--advisor-stateless-partition", "web"}, 2, "batch web"},
		{[]string{"up"}, 1, ""},
		{[]string{"up", "--backend", "sim", "--hosts", "4"}, 4, ""},
	} {
		got = cluster.Config{}
		if r := runWith(t, run, "", tc.args...); r.code != exitOK {
			t.Fatalf("%q: exit %d, stderr %q", tc.args, r.code, r.stderr)
		}
		if got.Hosts != tc.hosts || strings.Join(got.HostPartitions, " ") != tc.parts {
			t.Errorf("%q: hosts %d, partitions %q; want %d %q", tc.args, got.Hosts, got.HostPartitions, tc.hosts, tc.parts)
		}
	}
}

// TestServeClusterFederationUI: --federation-ui reaches the cluster's web
// UI, whose Clusters page links to it.
func TestServeClusterFederationUI(t *testing.T) {
	var got cluster.Config
	r := runWith(t, func(_ context.Context, cfg cluster.Config) error { got = cfg; return nil }, "",
		"serve", "cluster", "--etcd-endpoints", "http://e:2379", "--federation-ui", "https://fed.example:5292/")
	if r.code != exitOK || got.UI == nil {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	rec := httptest.NewRecorder()
	got.UI.ServeHTTP(rec, httptest.NewRequest("GET", "/ui/clusters", nil))
	if want := `<meta name="peloton-federation-ui" content="https://fed.example:5292/">`; !strings.Contains(rec.Body.String(), want) {
		t.Errorf("the cluster's UI lacks %s", want)
	}
}
