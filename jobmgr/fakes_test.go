package jobmgr

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// fakeHosts is a recording jobmgr.Hosts: it remembers every run launched
// and every call made, in order, reports runs as a backend would (a kill
// ends the run KILLED with exit 143 unless keepOnKill is set), and lets a
// test send events, refuse launches and ask for drains.
type fakeHosts struct {
	callLog
	mu       sync.Mutex
	runs     map[string]*fakeRun
	draining map[string]bool
	// launchErr, if set, answers a launch instead of starting it.
	launchErr func(ctx context.Context, spec hostmgr.LaunchSpec) error
	// away, if set, has the substrate away: Substrate says so, and Status
	// knows no run.
	away atomic.Bool
	// budgets are the disruption budgets told by SetDisruptionBudget.
	budgets map[string]hostmgr.DisruptionBudget

	events chan hostmgr.TaskEvent
	drains chan []hostmgr.DrainRequest
}

// fakeRun is a run fakeHosts started: its spec and its last event.
type fakeRun struct {
	spec hostmgr.LaunchSpec
	last hostmgr.TaskEvent
}

func newFakeHosts() *fakeHosts {
	return &fakeHosts{runs: map[string]*fakeRun{}, draining: map[string]bool{},
		events: make(chan hostmgr.TaskEvent, 4096), drains: make(chan []hostmgr.DrainRequest, 16)}
}

var _ Hosts = (*fakeHosts)(nil)

// emit reports a run's new state, as the backend would.
func (f *fakeHosts) emit(taskID string, st pelotonv1.TaskState, exit int32, reason string) {
	f.mu.Lock()
	r := f.runs[taskID]
	ev := hostmgr.TaskEvent{TaskID: taskID, State: st, ExitCode: exit, Reason: reason, Time: time.Now()}
	if r != nil {
		ev.Host = r.spec.Host
		r.last = ev
	}
	f.mu.Unlock()
	f.events <- ev
}

func (f *fakeHosts) Launch(ctx context.Context, spec hostmgr.LaunchSpec) error {
	f.record("launch %s@%s", spec.TaskID, spec.Host)
	if f.launchErr != nil {
		if err := f.launchErr(ctx, spec); err != nil {
			return err
		}
	}
	f.mu.Lock()
	f.runs[spec.TaskID] = &fakeRun{spec: spec, last: hostmgr.TaskEvent{TaskID: spec.TaskID, Host: spec.Host, State: taskLaunched}}
	f.mu.Unlock()
	return nil
}

func (f *fakeHosts) CheckReplace(old string, _ hostmgr.LaunchSpec) error {
	return hostmgr.ErrNotReplaceable
}

func (f *fakeHosts) Replace(_ context.Context, old string, _ hostmgr.LaunchSpec) error {
	return hostmgr.ErrNotReplaceable
}

func (f *fakeHosts) Kill(_ context.Context, taskID string, grace time.Duration) error {
	f.record("kill %s", taskID)
	f.mu.Lock()
	r := f.runs[taskID]
	f.mu.Unlock()
	if r == nil {
		return hostmgr.ErrUnknownTask
	}
	if !isTerminal(r.last.State) {
		go f.emit(taskID, taskKilled, 143, "")
	}
	return nil
}

func (f *fakeHosts) Status(taskID string) (hostmgr.TaskEvent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r := f.runs[taskID]; r != nil && !f.away.Load() {
		return r.last, nil
	}
	return hostmgr.TaskEvent{}, hostmgr.ErrUnknownTask
}

func (f *fakeHosts) Runs() []hostmgr.RunInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []hostmgr.RunInfo
	for id, r := range f.runs {
		out = append(out, hostmgr.RunInfo{TaskID: id, Host: r.spec.Host, Resources: r.spec.Resources, Last: r.last})
	}
	return out
}

func (f *fakeHosts) Events() <-chan hostmgr.TaskEvent { return f.events }

func (f *fakeHosts) Logs(context.Context, string, hostmgr.LogOptions) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader("")), nil
}

func (f *fakeHosts) Prefetch(_ context.Context, hosts []string, image string) error {
	f.record("prefetch %s %v", image, hosts)
	return nil
}

func (f *fakeHosts) ReleaseVolume(_ context.Context, host, volumeID string) error {
	f.record("release-volume %s %s", host, volumeID)
	return nil
}

func (f *fakeHosts) RemoveJobOutput(_ context.Context, jobID string) error {
	f.record("remove-output %s", jobID)
	return nil
}

func (f *fakeHosts) SetDisruptionBudget(_ context.Context, jobID, _ string, b hostmgr.DisruptionBudget) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.budgets == nil {
		f.budgets = map[string]hostmgr.DisruptionBudget{}
	}
	f.budgets[jobID] = b
	return nil
}

// budget is the disruption budget last told for job jobID.
func (f *fakeHosts) budget(jobID string) (hostmgr.DisruptionBudget, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.budgets[jobID]
	return b, ok
}

func (f *fakeHosts) Foreign() hostmgr.ForeignSource { return nil }

func (f *fakeHosts) Recover(taskID, host string, _ resources.Resources) {
	f.record("recover %s@%s", taskID, host)
}

func (f *fakeHosts) RecoverRevocable(taskID, host string, _ resources.Resources) {
	f.record("recover-revocable %s@%s", taskID, host)
}

func (f *fakeHosts) Recovered()                { f.record("recovered") }
func (f *fakeHosts) ReleaseTask(taskID string) { f.record("release %s", taskID) }

func (f *fakeHosts) TransferHold(from, to string) (string, bool) { return "", false }

func (f *fakeHosts) HoldsExactly(string, resources.Resources) bool { return false }

func (f *fakeHosts) HostUp(string) bool { return true }

func (f *fakeHosts) LargestHost() resources.Resources {
	return resources.Resources{MilliCPU: 64000, MemoryMB: 256 << 10, DiskMB: 1 << 20}
}

func (f *fakeHosts) ListHosts() []*pelotonv1.Host { return nil }

func (f *fakeHosts) Substrate() hostmgr.SubstrateStatus {
	return hostmgr.SubstrateStatus{Name: "fake", Reachable: !f.away.Load()}
}

func (f *fakeHosts) Drains(ctx context.Context) []hostmgr.DrainRequest {
	select {
	case reqs := <-f.drains:
		return reqs
	case <-ctx.Done():
		return nil
	}
}

func (f *fakeHosts) Draining(host string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.draining[host]
}

func (f *fakeHosts) SetDrainNote(host, note string) { f.record("drain-note %s: %s", host, note) }

func (f *fakeHosts) Revoked(string) bool { return false }

func (f *fakeHosts) RunUsage(string) *pelotonv1.TaskUsage { return nil }

// fakeResources is a recording jobmgr.Resources: it keeps the runs queued
// and lets the test place them (place), as resmgr and the placement
// engine would, and records what jobmgr gives back.
type fakeResources struct {
	callLog
	mu      sync.Mutex
	queued  map[string]*resmgr.Task // by job/instance
	checker func(pool string) bool

	placements chan resmgr.Placement
	victims    chan []resmgr.Victim
}

func newFakeResources() *fakeResources {
	return &fakeResources{queued: map[string]*resmgr.Task{},
		placements: make(chan resmgr.Placement, 4096), victims: make(chan []resmgr.Victim, 16)}
}

var _ Resources = (*fakeResources)(nil)

// JobHostReservation: the fake sets no hosts aside (that is resmgr's and
// placement's, tested there).
func (f *fakeResources) JobHostReservation(string) *pelotonv1.GangReservation { return nil }

func (f *fakeResources) Enqueue(gangs ...*resmgr.Gang) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, g := range gangs {
		if len(g.Tasks) > 1 {
			ids := make([]string, len(g.Tasks))
			for i, t := range g.Tasks {
				ids[i] = t.RunTaskID()
			}
			f.record("gang %s: %s", g.Tasks[0].Gang, strings.Join(ids, " "))
		}
		for _, t := range g.Tasks {
			f.record("enqueue %s", t.RunTaskID())
			f.queued[fmt.Sprintf("%s/%d", t.JobID, t.Instance)] = t
		}
	}
	return nil
}

// place places the queued run of the job's instance on host, and reports
// whether one was queued.
func (f *fakeResources) place(jobID string, inst uint32, host string) bool {
	f.mu.Lock()
	key := fmt.Sprintf("%s/%d", jobID, inst)
	t := f.queued[key]
	delete(f.queued, key)
	f.mu.Unlock()
	if t == nil {
		return false
	}
	f.placements <- resmgr.Placement{Task: t, Host: host}
	return true
}

// queuedRun is the run id queued for the job's instance (0: none).
func (f *fakeResources) queuedRun(jobID string, inst uint32) uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t := f.queued[fmt.Sprintf("%s/%d", jobID, inst)]; t != nil {
		return t.RunID
	}
	return 0
}

func (f *fakeResources) GetPlacements(ctx context.Context, max int) []resmgr.Placement {
	select {
	case p := <-f.placements:
		return []resmgr.Placement{p}
	case <-ctx.Done():
		return nil
	}
}

func (f *fakeResources) GetPreemptions(ctx context.Context) []resmgr.Victim {
	select {
	case vs := <-f.victims:
		return vs
	case <-ctx.Done():
		return nil
	}
}

func (f *fakeResources) Recover(t *resmgr.Task) { f.record("recover %s", t.RunTaskID()) }

func (f *fakeResources) MarkRunning(jobID string, inst uint32) {
	f.record("running %s/%d", jobID, inst)
}

func (f *fakeResources) Release(jobID string, inst uint32) {
	f.mu.Lock()
	delete(f.queued, fmt.Sprintf("%s/%d", jobID, inst))
	f.mu.Unlock()
	f.record("release %s/%d", jobID, inst)
}

func (f *fakeResources) ReleaseRun(jobID string, inst, run uint32) {
	f.record("release-run %s", resmgr.RunTaskID(jobID, inst, run))
}

func (f *fakeResources) TaskState(string, uint32) (pelotonv1.TaskState, string, bool) {
	return 0, "", false
}

func (f *fakeResources) CheckLeafPool(path, field string) (string, error) { return path, nil }

func (f *fakeResources) SetJobChecker(fn func(pool string) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checker = fn
}

// callLog is the calls a fake recorded, in order.
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *callLog) record(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, fmt.Sprintf(format, args...))
}

// called returns the calls recorded so far whose text starts with prefix.
func (l *callLog) called(prefix string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, c := range l.calls {
		if strings.HasPrefix(c, prefix) {
			out = append(out, c)
		}
	}
	return out
}
