package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/federation"
	"github.com/peloton-sched/peloton/history"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestServeFederationArchive: --archive opens the history store the
// federation is run with (a bbolt file here), --finished-job-ttl reaches
// its options, and bad values are refused naming the flag.
func TestServeFederationArchive(t *testing.T) {
	noCluster := func(context.Context, cluster.Config) error { t.Error("serve federation ran a cluster"); return nil }
	path := filepath.Join(t.TempDir(), "fed", "history.db")
	var ttl time.Duration
	var usable error
	runFed := func(ctx context.Context, cfg federation.Config) error {
		ttl = cfg.Options.FinishedJobTTL
		if cfg.History == nil {
			usable = context.Canceled
			return nil
		}
		// The store is open while the federation runs.
		usable = cfg.History.PutFederated(ctx, &history.Federated{Federation: "f", Kind: history.KindFederatedJob, ID: "j",
			Job: &pelotonv1.FederatedJob{Id: "j"}, CreateTime: time.Unix(1, 0)})
		return nil
	}
	args := []string{"serve", "federation", "--etcd-endpoints", "http://127.0.0.1:2379"}
	if r := runFedWith(t, noCluster, runFed, "", append(args, "--archive", path, "--finished-job-ttl", "2h")...); r.code != exitOK {
		t.Fatalf("serve federation --archive: exit %d, stderr %q", r.code, r.stderr)
	}
	if usable != nil || ttl != 2*time.Hour {
		t.Fatalf("the federation ran with history usable=%v, ttl %s", usable, ttl)
	}
	// Closed once the federation stopped: the file opens again.
	h, err := history.OpenBolt(path)
	if err != nil {
		t.Fatalf("the archive was left open: %v", err)
	}
	if _, err := h.GetFederated(context.Background(), "f", history.KindFederatedJob, "j"); err != nil {
		t.Errorf("what the federation archived: %v", err)
	}
	h.Close()

	if r := runFedWith(t, noCluster, runFed, "", args...); r.code != exitOK || usable == nil || ttl != federation.DefaultFinishedJobTTL {
		t.Fatalf("without --archive: exit %d, history %v, ttl %s", r.code, usable, ttl)
	}
	for flag, val := range map[string]string{"--archive": "mysql://x", "--finished-job-ttl": "0s"} {
		r := runFedWith(t, noCluster, runFed, "", append(args, flag, val)...)
		if r.code == exitOK || !strings.Contains(r.stderr, flag) {
			t.Errorf("serve federation %s %s: exit %d, stderr %q; want it refused naming the flag", flag, val, r.code, r.stderr)
		}
	}
}
