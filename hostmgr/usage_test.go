package hostmgr

import (
	"math"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func report(host, agent string, seq uint64, cpu float64, runs map[string]float64) *pelotonv1.UsageReport {
	r := &pelotonv1.UsageReport{Host: host, AgentId: agent, Sequence: seq,
		Usage: &pelotonv1.HostUsage{Cpu: cpu, MemoryUsedMb: 100, MemoryAvailableMb: 900, Source: "proc"},
		Runs:  map[string]*pelotonv1.TaskUsage{}}
	for id, c := range runs {
		r.Runs[id] = &pelotonv1.TaskUsage{Cpu: c, MemoryUsedMb: 10}
	}
	return r
}

// TestUsageReports: a host's last report is its usage, with the stack's
// receive time; a resent or older report of the same agent is dropped; a
// new agent (restarted) starts its own sequence; a report's runs replace
// the last one's; unknown hosts and malformed reports are refused naming
// what is wrong; a host that leaves takes its usage with it.
func TestUsageReports(t *testing.T) {
	m := newTestManager(t, 2, resources.Resources{MilliCPU: 4000, MemoryMB: 1024})
	take := func(r *pelotonv1.UsageReport) UsageResult {
		t.Helper()
		res, err := m.Usage().TakeUsage(r)
		if err != nil {
			t.Fatalf("report %d of %s: %v", r.Sequence, r.Host, err)
		}
		return res
	}
	usageOf := func(name string) *pelotonv1.HostUsage {
		for _, h := range m.ListHosts() {
			if h.Name == name {
				return h.Usage
			}
		}
		t.Fatalf("no host %s", name)
		return nil
	}
	if u := usageOf("a"); u != nil {
		t.Fatalf("usage before any report: %v", u)
	}
	if take(report("a", "x", 1, 1.5, map[string]float64{"j-0-1": 1, "j-1-1": 0.5})) != UsageTaken {
		t.Fatal("first report not taken")
	}
	u := usageOf("a")
	if u.GetCpu() != 1.5 || u.AgentId != "x" || u.Sequence != 1 || u.ReceiveTime == nil || u.Source != "proc" {
		t.Fatalf("usage of a: %v", u)
	}
	if r := m.RunUsage("j-0-1"); r.GetCpu() != 1 {
		t.Fatalf("run j-0-1: %v", r)
	}
	// Resent, and older: dropped.
	if take(report("a", "x", 1, 9, nil)) != UsageDuplicate || take(report("a", "x", 0+1, 9, nil)) != UsageDuplicate {
		t.Fatal("a resent report was taken")
	}
	if usageOf("a").GetCpu() != 1.5 {
		t.Fatal("a duplicate changed the usage")
	}
	// Only reports taken count (the UI's usage events follow the count).
	if n := m.Usage().UsageReports(); n != 1 {
		t.Fatalf("UsageReports = %d after one report taken and two dropped, want 1", n)
	}
	// The next one replaces the runs: j-1-1 ended.
	take(report("a", "x", 2, 1, map[string]float64{"j-0-1": 1}))
	if m.RunUsage("j-1-1") != nil || m.RunUsage("j-0-1") == nil {
		t.Fatalf("runs after the second report: j-0-1 %v, j-1-1 %v", m.RunUsage("j-0-1"), m.RunUsage("j-1-1"))
	}
	// A restarted agent starts again at 1.
	if take(report("a", "y", 1, 0.25, nil)) != UsageTaken || usageOf("a").GetCpu() != 0.25 {
		t.Fatal("a new agent's first report not taken")
	}

	for _, tc := range []struct {
		r    *pelotonv1.UsageReport
		code codes.Code
		want string
	}{
		{report("zz", "x", 1, 1, nil), codes.NotFound, "host zz is not a host of this cluster"},
		{report("", "x", 1, 1, nil), codes.InvalidArgument, "host: required"},
		{report("a", "", 1, 1, nil), codes.InvalidArgument, "agentId: required"},
		{report("a", "x", 0, 1, nil), codes.InvalidArgument, "sequence: must be > 0"},
		{&pelotonv1.UsageReport{Host: "a", AgentId: "x", Sequence: 5}, codes.InvalidArgument, "usage: required"},
		{report("a", "x", 5, math.NaN(), nil), codes.InvalidArgument, "usage.cpu: must be a number >= 0"},
		{report("a", "x", 5, -1, nil), codes.InvalidArgument, "usage.cpu"},
		{report("a", "x", 5, 1, map[string]float64{"j-0-1": math.Inf(1)}), codes.InvalidArgument, "runs[j-0-1].cpu"},
		{&pelotonv1.UsageReport{Host: "a", AgentId: "x", Sequence: 5, Usage: &pelotonv1.HostUsage{},
			Runs: map[string]*pelotonv1.TaskUsage{"j-0-1": {LatencyP99Seconds: math.NaN()}}}, codes.InvalidArgument, "runs[j-0-1].latencyP99Seconds"},
		{&pelotonv1.UsageReport{Host: "a", AgentId: "x", Sequence: 5, Usage: &pelotonv1.HostUsage{},
			Revoked: []string{"j-0-1"}, RevokedResources: map[string]string{"j-0-1": "disk"}}, codes.InvalidArgument, `revokedResources[j-0-1]: "disk"`},
		{&pelotonv1.UsageReport{Host: "a", AgentId: "x", Sequence: 5, Usage: &pelotonv1.HostUsage{},
			RevokedResources: map[string]string{"j-0-1": "memory"}}, codes.InvalidArgument, "revokedResources[j-0-1]: not in revoked"},
	} {
		_, err := m.Usage().TakeUsage(tc.r)
		if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("report %v: %v, want %s %q", tc.r, err, tc.code, tc.want)
		}
	}
	if usageOf("a").GetCpu() != 0.25 {
		t.Fatal("a refused report changed the usage")
	}

	// b leaves the backend: its usage goes, and its agent is refused.
	take(report("b", "z", 1, 2, map[string]float64{"k-0-1": 2}))
	m.backend.(*fixedHosts).hosts = m.backend.(*fixedHosts).hosts[:1]
	m.refreshHosts()
	if m.RunUsage("k-0-1") != nil {
		t.Error("a run of a host that left still has usage")
	}
	if _, err := m.Usage().TakeUsage(report("b", "z", 2, 2, nil)); status.Code(err) != codes.NotFound {
		t.Errorf("a report of a host that left: %v", err)
	}
}
