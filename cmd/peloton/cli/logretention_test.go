package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/cluster"
)

func TestLogRetentionFlag(t *testing.T) {
	serve := []string{"serve", "cluster", "--etcd-endpoints", "http://e:2379"}
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{[]string{"up"}, 0},
		{[]string{"up", "--log-retention", "168h"}, 168 * time.Hour},
		{serve, 0},
		{append(serve, "--log-retention", "90m"), 90 * time.Minute},
	} {
		got := cluster.Config{LogRetention: -1}
		run := func(_ context.Context, cfg cluster.Config) error { got = cfg; return nil }
		if r := runWith(t, run, "", tc.args...); r.code != exitOK {
			t.Fatalf("peloton %q: exit %d, stderr %q", tc.args, r.code, r.stderr)
		}
		if got.LogRetention != tc.want {
			t.Errorf("peloton %q: LogRetention %s, want %s", tc.args, got.LogRetention, tc.want)
		}
	}
	for _, args := range [][]string{{"up", "--log-retention", "-1s"}, append(serve, "--log-retention", "-24h")} {
		r := runCLI(t, "", args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--log-retention") {
			t.Errorf("peloton %q: exit %d, stderr %q; want exit 2 naming --log-retention", args, r.code, r.stderr)
		}
	}
}
