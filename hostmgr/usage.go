package hostmgr

import (
	"cmp"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Usage: what the host agents (package hostagent, one per host) read of
// their hosts and of the runs on them, as they last reported it. It is a
// live reading, kept in memory only: after a restart of the stack the
// agents' next reports (every few seconds) bring it back, and its age says
// how fresh it is. Reports are state, not events: each replaces the last,
// and a report resent after a lost acknowledgement (same agent, sequence
// not above the last taken) is dropped, so resending is always safe.

// Usage is the host manager's part that takes the host agents' reports
// (this file), computes each host's slack from them (slack.go), and holds
// the advisor's advice (advice.go). Get it with Manager.Usage. It is safe
// for concurrent use.
//
// The reports and the advice each have their own lock, taken after the
// host table's (Manager.mu) when both are: slack is computed for a host
// while the table holds it still.
type Usage struct {
	hm  *Manager
	log *slog.Logger
	// book is what the host agents last reported; its own lock.
	book usageBook
	// advice is the host advisor's last word (advice.go); its own lock.
	advice advice
	// The slack policy (slack.go) and who is told the cluster's slack.
	slackMargin float64
	memOversub  float64
	staleAfter  time.Duration
	onSlack     func(resources.Resources)
	// slackGauged: the hosts with slack gauges. Guarded by hm.mu.
	slackGauged map[string]bool
}

// usageBook holds the last report of every host.
type usageBook struct {
	mu    sync.Mutex
	hosts map[string]*hostReport
	// runs: each reported run's usage, by task run id.
	runs map[string]*pelotonv1.TaskUsage
	// revoked: revocable runs a host's QoS controller said it kills, and
	// when (kept revokedFor, for the run's end event to find).
	revoked map[string]time.Time
	// taken counts the reports taken (UsageReports).
	taken uint64
}

// ReasonQoSRevoked ends a revocable run its host agent's QoS controller
// killed because the host ran hot; the instance runs again, as preempted
// work does, with no failure counted.
const ReasonQoSRevoked = "qos-revoked"

// revokedFor is how long a revocation is remembered: far longer than a
// kill takes to be seen.
const revokedFor = 10 * time.Minute

// hostReport is a host's last report taken.
type hostReport struct {
	usage *pelotonv1.HostUsage
	// runs names the runs that report held, so that the next one drops
	// those it no longer has.
	runs []string
}

// UsageResult says what became of a report.
type UsageResult int

const (
	// UsageTaken: the report is now the host's usage.
	UsageTaken UsageResult = iota
	// UsageDuplicate: the agent sent it before (or a later one); dropped.
	UsageDuplicate
)

// maxRunsPerReport bounds the runs of one report: far above what a host
// runs, low enough that a broken agent cannot fill the stack's memory.
const maxRunsPerReport = 100_000

// maxLatencyError bounds a run's latencyError: a sentence, not a page.
const maxLatencyError = 1024

// validUsageReport checks a report's fields, naming the one at fault.
func validUsageReport(r *pelotonv1.UsageReport) error {
	u := r.GetUsage()
	bad := func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) || v < 0 }
	switch {
	case r.GetHost() == "":
		return apierr.Invalid("host", "required")
	case r.GetAgentId() == "":
		return apierr.Invalid("agentId", "required")
	case r.GetSequence() == 0:
		return apierr.Invalid("sequence", "must be > 0")
	case u == nil:
		return apierr.Invalid("usage", "required")
	case bad(u.Cpu):
		return apierr.Invalid("usage.cpu", "must be a number >= 0, not %v", u.Cpu)
	case u.MemoryUsedMb < 0:
		return apierr.Invalid("usage.memoryUsedMb", "must be >= 0, not %d", u.MemoryUsedMb)
	case u.MemoryAvailableMb < 0:
		return apierr.Invalid("usage.memoryAvailableMb", "must be >= 0, not %d", u.MemoryAvailableMb)
	case len(r.GetRuns()) > maxRunsPerReport:
		return apierr.Invalid("runs", "%d runs; at most %d", len(r.GetRuns()), maxRunsPerReport)
	}
	for id, kind := range r.GetRevokedResources() {
		switch {
		case !slices.Contains(r.GetRevoked(), id):
			return apierr.Invalid("revokedResources["+id+"]", "not in revoked")
		case kind != metrics.KindCPU && kind != metrics.KindMemory:
			return apierr.Invalid("revokedResources["+id+"]", "%q: want cpu or memory", kind)
		}
	}
	for id, ru := range r.GetRuns() {
		switch {
		case id == "":
			return apierr.Invalid("runs", "a run without a task id")
		case ru == nil:
			return apierr.Invalid("runs["+id+"]", "no usage")
		case bad(ru.Cpu):
			return apierr.Invalid("runs["+id+"].cpu", "must be a number >= 0, not %v", ru.Cpu)
		case ru.MemoryUsedMb < 0:
			return apierr.Invalid("runs["+id+"].memoryUsedMb", "must be >= 0, not %d", ru.MemoryUsedMb)
		case bad(ru.LatencyP99Seconds):
			return apierr.Invalid("runs["+id+"].latencyP99Seconds", "must be a number >= 0, not %v", ru.LatencyP99Seconds)
		case len(ru.LatencyError) > maxLatencyError:
			return apierr.Invalid("runs["+id+"].latencyError", "%d bytes; at most %d", len(ru.LatencyError), maxLatencyError)
		}
	}
	return nil
}

// TakeUsage takes a host agent's report. A report of a host this cluster
// does not have (never had, or whose host left) is NotFound; a malformed
// one InvalidArgument naming the field. A report from the host's agent at
// or below the sequence last taken is a duplicate, dropped.
func (us *Usage) TakeUsage(r *pelotonv1.UsageReport) (UsageResult, error) {
	if err := validUsageReport(r); err != nil {
		metrics.HostReports.WithLabelValues("refused").Inc()
		return 0, err
	}
	us.hm.mu.Lock()
	h := us.hm.hosts[r.Host]
	known := h != nil && !h.gone
	// Only the host's own revocable runs can be revoked; other names are
	// ignored (a non-revocable run the agent killed ends as it ends).
	var revoked []string
	for _, id := range r.Revoked {
		if t, ok := h.tasks[id]; known && ok && t.revocable {
			revoked = append(revoked, id)
		} else if known {
			us.log.Warn("a host agent revoked a run that is not a revocable run of its host; ignored", "host", r.Host, "task", id)
		}
	}
	us.hm.mu.Unlock()
	if !known {
		metrics.HostReports.WithLabelValues("refused").Inc()
		return 0, apierr.NotFound("host %s is not a host of this cluster (or has left it)", r.Host)
	}
	now := us.hm.now()
	b := &us.book
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.hosts == nil {
		b.hosts, b.runs, b.revoked = map[string]*hostReport{}, map[string]*pelotonv1.TaskUsage{}, map[string]time.Time{}
	}
	for id, at := range b.revoked {
		if now.Sub(at) > revokedFor {
			delete(b.revoked, id)
		}
	}
	for _, id := range revoked {
		if _, dup := b.revoked[id]; !dup {
			b.revoked[id] = now
			kind := cmp.Or(r.RevokedResources[id], metrics.KindCPU) // agents from before memory QoS name none
			metrics.HostQoSKills.WithLabelValues(r.Host, kind).Inc()
			us.log.Warn("host agent revokes a revocable run: its host runs hot", "host", r.Host, "task", id, "resource", kind)
		}
	}
	last := b.hosts[r.Host]
	if last != nil && last.usage.AgentId == r.AgentId && r.Sequence <= last.usage.Sequence {
		metrics.HostReports.WithLabelValues("duplicate").Inc()
		return UsageDuplicate, nil
	}
	u := proto.Clone(r.Usage).(*pelotonv1.HostUsage)
	u.ReceiveTime, u.AgentId, u.Sequence = timestamppb.New(now), r.AgentId, r.Sequence
	rep := &hostReport{usage: u, runs: make([]string, 0, len(r.Runs))}
	if last != nil {
		for _, id := range last.runs {
			delete(b.runs, id)
		}
	}
	for id, ru := range r.Runs {
		b.runs[id] = proto.Clone(ru).(*pelotonv1.TaskUsage)
		rep.runs = append(rep.runs, id)
	}
	b.hosts[r.Host] = rep
	b.taken++
	metrics.HostReports.WithLabelValues("taken").Inc()
	if st := u.GetSampleTime(); st != nil {
		metrics.HostReportDelay.Observe(max(now.Sub(st.AsTime()).Seconds(), 0))
	}
	metrics.HostCPUUsed.WithLabelValues(r.Host).Set(u.Cpu)
	metrics.HostMemoryUsed.WithLabelValues(r.Host).Set(float64(u.MemoryUsedMb) * (1 << 20))
	metrics.HostReportTime.WithLabelValues(r.Host).Set(float64(now.UnixNano()) / 1e9)
	// The host's series start at 0, not at its first kill.
	metrics.HostQoSKills.WithLabelValues(r.Host, metrics.KindCPU).Add(0)
	metrics.HostQoSKills.WithLabelValues(r.Host, metrics.KindMemory).Add(0)
	return UsageTaken, nil
}

// UsageReports counts the usage reports taken so far: it grows whenever
// what the pages show of usage may have changed (the UI's usage events).
func (us *Usage) UsageReports() uint64 {
	us.book.mu.Lock()
	defer us.book.mu.Unlock()
	return us.book.taken
}

// revoked is Manager.Revoked.
func (us *Usage) revoked(taskID string) bool {
	b := &us.book
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.revoked[taskID]
	return ok
}

// hostUsage is host name's last report, or nil.
func (us *Usage) hostUsage(name string) *pelotonv1.HostUsage {
	b := &us.book
	b.mu.Lock()
	defer b.mu.Unlock()
	if rep := b.hosts[name]; rep != nil {
		return proto.Clone(rep.usage).(*pelotonv1.HostUsage)
	}
	return nil
}

// runUsage is Manager.RunUsage.
func (us *Usage) runUsage(taskID string) *pelotonv1.TaskUsage {
	b := &us.book
	b.mu.Lock()
	defer b.mu.Unlock()
	if u := b.runs[taskID]; u != nil {
		return proto.Clone(u).(*pelotonv1.TaskUsage)
	}
	return nil
}

// forgetUsageLocked drops what hosts that left reported. Caller holds
// hm.mu; the reports' own lock is taken inside it (the order is always
// hm.mu, then book.mu).
func (us *Usage) forgetUsageLocked() {
	b := &us.book
	b.mu.Lock()
	defer b.mu.Unlock()
	for name, rep := range b.hosts {
		if h := us.hm.hosts[name]; h != nil && !h.gone {
			continue
		}
		for _, id := range rep.runs {
			delete(b.runs, id)
		}
		delete(b.hosts, name)
		metrics.HostCPUUsed.DeleteLabelValues(name)
		metrics.HostMemoryUsed.DeleteLabelValues(name)
		metrics.HostReportTime.DeleteLabelValues(name)
	}
}
