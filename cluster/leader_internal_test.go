package cluster

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/internal/replica"
	"github.com/peloton-sched/peloton/internal/store"
)

// TestReplicaConfig: the stack campaigns on its own cluster's key with its
// own addresses, and its errors name `peloton serve cluster`'s flags. (The
// follower itself is tested in internal/replica.)
func TestReplicaConfig(t *testing.T) {
	cfg := withDefaults(Config{ClusterName: "east", EtcdEndpoints: []string{"http://etcd:2379"}, LeaderElect: true,
		Listen: "10.0.0.1:5391", HTTPListen: "10.0.0.1:5291", AdvertiseHost: "peloton-0.peloton", Logger: slog.New(slog.DiscardHandler)})
	rc := replicaConfig(cfg, nil)
	if want := "/peloton/clusters/east/leader/cluster"; rc.Key != want {
		t.Errorf("election key %q, want %q", rc.Key, want)
	}
	if rc.Listen != cfg.Listen || rc.HTTPListen != cfg.HTTPListen || rc.AdvertiseHost != cfg.AdvertiseHost || rc.Lease != cfg.LeaderLease {
		t.Errorf("replica config %+v does not carry the stack's addresses and lease", rc)
	}
	cfg.AdvertiseHost, cfg.Listen = "", "0.0.0.0:5391"
	if err := replica.Check(replicaConfig(cfg, nil)); err == nil || !strings.Contains(err.Error(), "--listen 0.0.0.0:5391") || !strings.Contains(err.Error(), "--advertise-host") {
		t.Errorf("wildcard listen without an advertised host: %v", err)
	}
}

// TestTermFence: only a term fences the stack's store.
func TestTermFence(t *testing.T) {
	var none *term
	if none.storeFence() != nil {
		t.Error("a stack without a term is fenced")
	}
	tm := &term{fence: store.Fence{Key: "/peloton/clusters/local/leader/cluster/1", Revision: 7}}
	if f := tm.storeFence(); f == nil || *f != tm.fence {
		t.Errorf("term's fence %v, want %v", f, tm.fence)
	}
}
