package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestPoolCreateWarnsBeyondCapacity: pool create with a reservation larger
// than the cluster (two hosts of 2 CPUs) creates the pool and warns on
// stderr that the reservation waits for hosts.
func TestPoolCreateWarnsBeyondCapacity(t *testing.T) {
	s := startStack(t)
	s.waitFor(30*time.Second, "the root pool entitled to the hosts' 4 CPUs", func() (bool, string) {
		var root pelotonv1.Pool
		s.get(&root, "pool", "get", "/")
		return root.GetStatus().GetEntitlement().GetCpu() == 4, root.GetStatus().String()
	})
	file := filepath.Join(t.TempDir(), "pool.yaml")
	if err := os.WriteFile(file, []byte("reservation: {cpu: 64}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := s.run("pool", "create", "/huge", "-f", file)
	want := "warning: reservation cpu 64 exceeds the cluster's capacity 4; it will be honoured only when hosts join\n"
	if r.code != exitOK || r.stderr != want || !strings.Contains(r.stdout, "/huge") {
		t.Errorf("exit %d, stdout %q, stderr %q; want the pool and %q", r.code, r.stdout, r.stderr, want)
	}
	if r := s.run("pool", "create", "/fits", "-f", "../../../examples/pool.yaml"); r.code != exitOK || r.stderr != "" {
		t.Errorf("a pool within capacity: exit %d, stderr %q", r.code, r.stderr)
	}
}
