package e2e

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// histServerP99 is the P99 testdata/histserver's histogram gives over any
// window of whole ticks (see its doc).
const histServerP99 = 0.375

// buildHistServer builds testdata/histserver.
func buildHistServer(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "histserver")
	out, err := exec.Command("go", "build", "-o", bin, "./testdata/histserver").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestLatencyP99: a service whose spec names its metrics port and latency
// histogram gets its P99 measured by the host agent of its host and shown
// on its task, by the API and by `peloton task get`; a service whose
// metrics port serves nothing has no P99, and its usage says why.
func TestLatencyP99(t *testing.T) {
	bin := buildHistServer(t)
	s := startStack(t, t.TempDir(), stackOpts{hosts: 1, agentInterval: 500 * time.Millisecond})

	// Created from YAML, as a user would, so the API's field names are
	// part of what is tested.
	spec := filepath.Join(t.TempDir(), "hist.yaml")
	if err := os.WriteFile(spec, []byte(fmt.Sprintf(`name: hist
type: SERVICE
pool: /default
instanceCount: 1
defaultSpec:
  command: [%q]
  resources: {cpu: 0.2, memoryMb: 128}
  ports: [{name: http}]
  metrics: {port: http, latencyHistogram: request_seconds}
`, bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := s.runCLI("job", "create", "-f", spec)
	if err != nil {
		t.Fatalf("job create: %v\n%s", err, errOut)
	}
	hist := strings.TrimSpace(out)
	silentSpec := service("silent", 1, 1, "sleep", "60")
	silentSpec.DefaultSpec.Ports = []*pelotonv1.PortSpec{{Name: "http"}}
	silentSpec.DefaultSpec.Metrics = &pelotonv1.MetricsSpec{Port: "http", LatencyHistogram: "request_seconds"}
	silent := s.createJob(silentSpec)

	usageOf := func(job string) *pelotonv1.TaskUsage {
		resp, err := s.tasks.GetTask(ctxT(t), &pelotonv1.GetTaskRequest{JobId: job, InstanceId: 0})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Task.Status.Usage
	}
	// The first readings have no P99 (the run not yet seen, the server
	// not yet up, the first scrape); then every window's is the same.
	testutil.Eventually(t, 45*time.Second, "the histogram service's P99", func() error {
		u := usageOf(hist)
		p := u.GetLatencyP99Seconds()
		if p == 0 {
			return fmt.Errorf("no P99 yet: usage %v", u)
		}
		if math.Abs(p-histServerP99) > 1e-9 || u.GetLatencyError() != "" {
			t.Fatalf("P99 %v error %q, want %v: the buckets make it exact", p, u.GetLatencyError(), histServerP99)
		}
		return nil
	})
	out, errOut, err = s.runCLI("task", "get", hist, "0")
	if err != nil {
		t.Fatalf("task get: %v\n%s", err, errOut)
	}
	// The instance's row, then its history.
	if rs := strings.Split(strings.TrimSpace(out), "\n"); len(rs) < 2 || !strings.Contains(rs[0], "MEM USED") || !strings.Contains(rs[0], "P99") ||
		!strings.Contains(rs[1], "375ms") {
		t.Errorf("task get shows no P99 of 375ms:\n%s", out)
	}

	testutil.Eventually(t, 30*time.Second, "the silent service's latency error", func() error {
		u := usageOf(silent)
		if u.GetLatencyP99Seconds() != 0 {
			t.Fatalf("a service serving nothing has a P99: usage %v", u)
		}
		if !strings.Contains(u.GetLatencyError(), "connection refused") {
			return fmt.Errorf("usage %v: want a latency error saying the connection was refused", u)
		}
		return nil
	})
}
