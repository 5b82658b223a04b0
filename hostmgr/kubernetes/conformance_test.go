package kubernetes

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/hostmgr/backendtest"
	"github.com/peloton-sched/peloton/internal/testing/kubetest"
)

// TestConformance runs the backend suite against the shared kube-apiserver
// with kwok nodes. Each case gets two nodes and a namespace of its own;
// every backend of a case watches only them, as a restarted Peloton would.
//
// Volumes are declared unsupported here, not in the backend: ReleaseVolume
// deletes the folder with a helper pod, and kwok runs no command, so that
// pod never ends. The volume's hostPath in the pod is checked in
// pod_test.go.
func TestConformance(t *testing.T) {
	c := cluster(t)
	backendtest.Run(t, backendtest.Harness{
		Caps: backendtest.Capabilities{HealthChecks: true, RunsOutliveBackend: true, Partitions: true},
		Setup: func(t *testing.T) func() hostmgr.Backend {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			id := fmt.Sprintf("t%d", testSeq.Add(1))
			if _, err := c.AddNodes(ctx, kubetest.NodeSpec{Prefix: id, Count: 2, CPU: "4", Memory: "8Gi",
				Labels: map[string]string{"peloton.io/test": id}}); err != nil {
				t.Fatal(err)
			}
			if err := c.CreateNamespace(ctx, id); err != nil {
				t.Fatal(err)
			}
			return func() hostmgr.Backend {
				b, err := New(Config{REST: c.Config, Namespace: id, NodeSelector: "peloton.io/test=" + id,
					RequestTimeout: 5 * time.Second, StartTimeout: 30 * time.Second, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
		},
	})
}
