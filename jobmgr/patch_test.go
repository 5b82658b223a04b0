package jobmgr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	"github.com/peloton-sched/peloton/placement"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// sandboxes is a cluster whose runs live in sandboxes that can be patched
// into the next run of their instance, as pods can (hostmgr.Replacer):
// enough to drive jobmgr's in-place restarts without Kubernetes. A run is
// RUNNING as soon as it is launched and runs until it is killed. Each
// process of the control plane sees it through its own view; the view of a
// process that crashed is dead: it does nothing and reports nothing, while
// the sandboxes live on, as pods outlive Peloton.
type sandboxes struct {
	hosts []hostmgr.HostInfo

	mu       sync.Mutex
	view     *sandboxView // the live process's
	runs     map[string]*sandboxRun
	launches int
	patches  int
	// refuse makes CheckReplace and Replace refuse; late makes only
	// Replace refuse, as when the run ends between the two.
	refuse, late bool
	// entered, if set, is closed when Replace is called, which then waits
	// for release: the process can be crashed between the record and the
	// patch.
	entered, release chan struct{}
	// hold, if set, keeps every Launch waiting until it is closed, as a
	// slow apiserver would; inFlight and maxInFlight count those waiting.
	hold                  chan struct{}
	inFlight, maxInFlight int
	// taken makes the backend hold a run of that task ID, in that state,
	// when its Launch comes (as a backend remembers runs by ID).
	taken map[string]pelotonv1.TaskState
	// holdKills makes Kill take the kill and end nothing until
	// releaseKills, as a run with a long grace period does.
	holdKills bool
	heldKills []string
	// launchErr, if set, is what every Launch returns, starting nothing.
	launchErr error
	// outputRemoved lists the jobs RemoveJobOutput was called for.
	outputRemoved []string
}

// releaseKills ends the runs whose kills were held.
func (s *sandboxes) releaseKills() {
	s.mu.Lock()
	s.holdKills = false
	ids := s.heldKills
	s.heldKills = nil
	s.mu.Unlock()
	for _, id := range ids {
		s.finish(id, pelotonv1.TaskState_KILLED, false)
	}
}

type sandboxRun struct {
	host, image string
	gang        string // the LaunchSpec's Gang
	env         map[string]string
	last        hostmgr.TaskEvent
}

func newSandboxes(n int) *sandboxes {
	s := &sandboxes{runs: map[string]*sandboxRun{}}
	for i := 0; i < n; i++ {
		s.hosts = append(s.hosts, hostmgr.HostInfo{Name: fmt.Sprintf("h%d", i), Partition: "default",
			Capacity: resources.Resources{MilliCPU: 4000, MemoryMB: 4096, DiskMB: 4096}})
	}
	return s
}

// live lists the task IDs of the runs that have not ended, sorted.
func (s *sandboxes) live() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id, r := range s.runs {
		if !isTerminal(r.last.State) {
			out = append(out, id+"@"+r.host+":"+r.image)
		}
	}
	sort.Strings(out)
	return out
}

func (s *sandboxes) counts() (launches, patches int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.launches, s.patches
}

// sandboxView is one process's backend.
type sandboxView struct {
	s    *sandboxes
	sink func(hostmgr.TaskEvent)
}

var (
	_ hostmgr.Backend  = (*sandboxView)(nil)
	_ hostmgr.Replacer = (*sandboxView)(nil)
)

var errDead = errors.New("sandboxes: this process crashed")

func (v *sandboxView) Name() string { return "sandboxes" }
func (v *sandboxView) Start(_ context.Context, sink func(hostmgr.TaskEvent)) error {
	v.s.mu.Lock()
	v.sink, v.s.view = sink, v
	v.s.mu.Unlock()
	return nil
}
func (v *sandboxView) Hosts() []hostmgr.HostInfo { return v.s.hosts }
func (v *sandboxView) Close() error              { return nil }
func (v *sandboxView) Logs(context.Context, string, hostmgr.LogOptions) (io.ReadCloser, error) {
	return nil, hostmgr.ErrUnknownTask
}

// setLocked records an event and returns the function that reports it,
// to call without the lock.
func (v *sandboxView) setLocked(id string, r *sandboxRun, st pelotonv1.TaskState, reason string) func() {
	r.last = hostmgr.TaskEvent{TaskID: id, Host: r.host, State: st, Reason: reason, Time: time.Now()}
	ev, sink := r.last, v.sink
	return func() { sink(ev) }
}

func (v *sandboxView) Launch(ctx context.Context, spec hostmgr.LaunchSpec) error {
	s := v.s
	s.mu.Lock()
	if hold := s.hold; hold != nil {
		s.inFlight++
		s.maxInFlight = max(s.maxInFlight, s.inFlight)
		s.mu.Unlock()
		select {
		case <-hold:
		case <-ctx.Done():
		}
		s.mu.Lock()
		s.inFlight--
	}
	if s.view != v {
		s.mu.Unlock()
		return errDead
	}
	if s.launchErr != nil {
		err := s.launchErr
		s.mu.Unlock()
		return err
	}
	if st, ok := s.taken[spec.TaskID]; ok {
		s.runs[spec.TaskID] = &sandboxRun{host: spec.Host, last: hostmgr.TaskEvent{TaskID: spec.TaskID, Host: spec.Host, State: st, Time: time.Now()}}
	}
	if s.runs[spec.TaskID] != nil {
		s.mu.Unlock()
		return fmt.Errorf("sandboxes: %s: %w", spec.TaskID, hostmgr.ErrAlreadyLaunched)
	}
	r := &sandboxRun{host: spec.Host, image: spec.Image, gang: spec.Gang, env: spec.Env}
	s.runs[spec.TaskID] = r
	s.launches++
	launched := v.setLocked(spec.TaskID, r, pelotonv1.TaskState_LAUNCHED, "")
	running := v.setLocked(spec.TaskID, r, pelotonv1.TaskState_RUNNING, "")
	s.mu.Unlock()
	launched()
	running()
	return nil
}

func (v *sandboxView) Kill(_ context.Context, id string, _ time.Duration) error {
	s := v.s
	s.mu.Lock()
	if s.view != v {
		s.mu.Unlock()
		return errDead
	}
	r := s.runs[id]
	if r == nil {
		s.mu.Unlock()
		return hostmgr.ErrUnknownTask
	}
	if isTerminal(r.last.State) {
		s.mu.Unlock()
		return nil
	}
	if s.holdKills {
		s.heldKills = append(s.heldKills, id)
		s.mu.Unlock()
		return nil
	}
	killed := v.setLocked(id, r, pelotonv1.TaskState_KILLED, "killed")
	s.mu.Unlock()
	killed()
	return nil
}

func (v *sandboxView) Status(id string) (hostmgr.TaskEvent, error) {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	if r := v.s.runs[id]; r != nil {
		return r.last, nil
	}
	return hostmgr.TaskEvent{}, hostmgr.ErrUnknownTask
}

func (v *sandboxView) check(old string, next hostmgr.LaunchSpec) error {
	s := v.s
	r := s.runs[old]
	switch {
	case s.view != v:
		return errDead
	case s.refuse:
		return fmt.Errorf("%w: refused by the test", hostmgr.ErrNotReplaceable)
	case r == nil || r.last.State != pelotonv1.TaskState_RUNNING || r.host != next.Host || s.runs[next.TaskID] != nil:
		return fmt.Errorf("%w: %s is not running on %s", hostmgr.ErrNotReplaceable, old, next.Host)
	}
	return nil
}

func (v *sandboxView) CheckReplace(old string, next hostmgr.LaunchSpec) error {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	return v.check(old, next)
}

func (v *sandboxView) Replace(_ context.Context, old string, next hostmgr.LaunchSpec) error {
	s := v.s
	s.mu.Lock()
	entered, release := s.entered, s.release
	s.entered = nil
	s.mu.Unlock()
	if entered != nil {
		close(entered)
		<-release
	}
	s.mu.Lock()
	if err := v.check(old, next); err != nil {
		s.mu.Unlock()
		return err
	}
	if s.late {
		s.mu.Unlock()
		return fmt.Errorf("%w: refused late by the test", hostmgr.ErrNotReplaceable)
	}
	r := s.runs[old]
	s.patches++
	n := &sandboxRun{host: r.host, image: next.Image}
	s.runs[next.TaskID] = n
	ended := v.setLocked(old, r, pelotonv1.TaskState_KILLED, hostmgr.ReasonReplaced)
	launched := v.setLocked(next.TaskID, n, pelotonv1.TaskState_LAUNCHED, "")
	running := v.setLocked(next.TaskID, n, pelotonv1.TaskState_RUNNING, "")
	s.mu.Unlock()
	ended()
	launched()
	running()
	return nil
}

// process is one control plane over the shared store and sandboxes.
type process struct {
	jm     *Manager
	hm     *hostmgr.Manager
	st     store.Store // the store itself, under any wrapper the process writes through
	cancel context.CancelFunc
	batch  *store.Batcher
}

func startProcess(t *testing.T, e *store.Embedded, s *sandboxes) *process {
	t.Helper()
	return startProcessWith(t, e, s, Options{LostBackoff: 10 * time.Millisecond})
}

// startProcessWith is startProcess with the job manager's options (their
// Logger is the process's).
func startProcessWith(t testing.TB, e *store.Embedded, s *sandboxes, opts Options) *process {
	t.Helper()
	return startProcessOn(t, e, s, opts, procConfig{level: slog.LevelWarn})
}

// procConfig varies how startProcessOn builds a process.
type procConfig struct {
	// wrap, if set, wraps the store the job manager writes through.
	wrap func(store.Store) store.Store
	// noEngines leaves resmgr and placement stopped: nothing is placed.
	noEngines      bool
	level          slog.Level
	requestTimeout time.Duration
	// backend, if set, is the process's backend over its view.
	backend func(*sandboxView) hostmgr.Backend
}

func startProcessOn(t testing.TB, e *store.Embedded, s *sandboxes, opts Options, pc procConfig) *process {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := store.NewEtcd(ctx, store.EtcdConfig{Endpoints: e.Endpoints(), MaxTxnOps: e.MaxTxnOps(), RequestTimeout: pc.requestTimeout})
	if err != nil {
		t.Fatal(err)
	}
	jst := store.Store(st)
	if pc.wrap != nil {
		jst = pc.wrap(st)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: pc.level}))
	batch := store.NewBatcher(jst, store.BatcherOptions{})
	rm, err := resmgr.New(ctx, st, resmgr.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	var b hostmgr.Backend = &sandboxView{s: s}
	if pc.backend != nil {
		b = pc.backend(b.(*sandboxView))
	}
	hm := hostmgr.NewManager(b, hostmgr.Options{Logger: log, Store: st, OnCapacity: rm.SetPartitionCapacity})
	if err := hm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	rm.SetPartitionCapacity(hm.CapacityByPartition())
	opts.Logger = log
	jm := New(jst, batch, rm, hm, opts)
	if err := jm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if !pc.noEngines {
		go rm.Run(ctx)
		go placement.NewEngine(rm, hm, placement.EngineOptions{Logger: log}).Run(ctx)
	}
	p := &process{jm: jm, hm: hm, st: st, cancel: cancel, batch: batch}
	t.Cleanup(func() {
		cancel()
		jm.Wait() // everything the job manager started ends with the test
		_ = batch.Close()
		_ = st.Close()
	})
	return p
}

// crash stops the process as a crash would, as far as the others can
// tell: it writes nothing more and its backend is dead.
func (p *process) crash() {
	_ = p.batch.Close()
	p.cancel()
}

func patchService(name, image string) *pelotonv1.JobSpec {
	return &pelotonv1.JobSpec{Name: name, Type: pelotonv1.JobType_SERVICE, Pool: resmgr.DefaultPoolPath, InstanceCount: 2,
		Sla: &pelotonv1.SlaSpec{MaximumUnavailableInstances: 1},
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"server"}, Image: image, KillGracePeriodSeconds: 1,
			Resources:     &pelotonv1.Resources{Cpu: 0.5, MemoryMb: 64},
			RestartPolicy: &pelotonv1.RestartPolicy{BackoffSeconds: 1, MaxBackoffSeconds: 1}}}
}

// waitFor is testutil.Eventually for a condition that says what it is at
// while it is not met.
func waitFor(t *testing.T, what string, within time.Duration, ok func() (bool, string)) {
	t.Helper()
	testutil.Eventually(t, within, what, func() error {
		if done, state := ok(); !done {
			return errors.New("still " + state)
		}
		return nil
	})
}

// tasksOf renders every instance as "inst:state/run@host".
func tasksOf(t *testing.T, jm *Manager, id string) string {
	t.Helper()
	ts, err := jm.ListTasks(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, tk := range ts {
		parts = append(parts, fmt.Sprintf("%d:%s/%d@%s", tk.InstanceId, tk.Status.State, tk.Status.RunId, tk.Status.Host))
	}
	return strings.Join(parts, " ")
}

func runningJob(t *testing.T, jm *Manager, spec *pelotonv1.JobSpec) (string, map[uint32]string) {
	t.Helper()
	id, err := jm.CreateJob(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "job running", 20*time.Second, func() (bool, string) {
		got := tasksOf(t, jm, id)
		return strings.Count(got, ":RUNNING/") == int(spec.InstanceCount), got
	})
	hosts := map[uint32]string{}
	ts, _ := jm.ListTasks(id, nil)
	for _, tk := range ts {
		hosts[tk.InstanceId] = tk.Status.Host
	}
	return id, hosts
}

func waitUpdateDone(t *testing.T, jm *Manager, updateID string) {
	t.Helper()
	waitFor(t, "update "+updateID, 30*time.Second, func() (bool, string) {
		u, err := jm.upd.GetUpdate(updateID)
		if err != nil {
			t.Fatal(err)
		}
		return u.Status.State == pelotonv1.UpdateState_UPDATE_SUCCEEDED, u.Status.String()
	})
}

// restartsBy returns how peloton_update_restarts_total rose since before.
func restartsBy(before map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for _, how := range []string{"patched", "in-place", "placed"} {
		if d := promtest.ToFloat64(metrics.Restarts.WithLabelValues(how)) - before[how]; d != 0 {
			out[how] = d
		}
	}
	return out
}

func restartsNow() map[string]float64 { return restartsBy(map[string]float64{}) }

// TestInPlaceUpdatePatchesRuns: an in-place update of the image on a
// backend that can patch runs patches each run into the next (same host,
// no new sandbox, the old run ended replaced-in-place); where the backend
// refuses, the instance is stopped and launched again on its host as
// before; where it refuses after the patch was recorded, the old run is
// stopped and the instance runs again through placement. In every case no
// run of the old image is left running.
func TestInPlaceUpdatePatchesRuns(t *testing.T) {
	for _, tc := range []struct {
		name           string
		refuse, late   bool
		wantRun        uint32
		wantLaunches   int
		wantPatches    int
		wantRestarts   map[string]float64
		wantSameHost   bool
		wantOldReasons string
	}{
		{"patched", false, false, 2, 2, 2, map[string]float64{"patched": 2}, true, hostmgr.ReasonReplaced},
		{"refused: stopped and launched in place", true, false, 2, 4, 0, map[string]float64{"in-place": 2}, true, "killed"},
		{"refused after the record: placed again", false, true, 3, 4, 0, map[string]float64{"placed": 2}, false, "killed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := storetest.StartEtcd(t)
			s := newSandboxes(2)
			p := startProcess(t, e, s)
			id, hosts := runningJob(t, p.jm, patchService("patch", "img:1"))
			s.mu.Lock()
			s.refuse, s.late = tc.refuse, tc.late
			s.mu.Unlock()
			before := restartsNow()
			u, err := p.jm.upd.CreateUpdate(context.Background(), id, patchService("patch", "img:2"),
				&pelotonv1.UpdateSpec{BatchSize: 1, InPlace: true}, 0)
			if err != nil {
				t.Fatal(err)
			}
			waitUpdateDone(t, p.jm, u.Id)
			waitFor(t, "instances on the new image", 10*time.Second, func() (bool, string) {
				live := s.live()
				return len(live) == 2 && strings.Count(strings.Join(live, " "), ":img:2") == 2, strings.Join(live, " ")
			})
			ts, _ := p.jm.ListTasks(id, nil)
			for _, tk := range ts {
				st := tk.Status
				if st.State != pelotonv1.TaskState_RUNNING || st.RunId != tc.wantRun || st.SpecVersion != 2 {
					t.Errorf("instance %d: %s run %d v%d, want RUNNING run %d v2", tk.InstanceId, st.State, st.RunId, st.SpecVersion, tc.wantRun)
				}
				if tc.wantSameHost && st.Host != hosts[tk.InstanceId] {
					t.Errorf("instance %d moved from %s to %s", tk.InstanceId, hosts[tk.InstanceId], st.Host)
				}
				if old, err := (&sandboxView{s: s}).Status(resmgr.RunTaskID(id, tk.InstanceId, 1)); err != nil ||
					old.State != pelotonv1.TaskState_KILLED || old.Reason != tc.wantOldReasons {
					t.Errorf("instance %d's first run ended %+v (%v), want KILLED (%s)", tk.InstanceId, old, err, tc.wantOldReasons)
				}
			}
			if l, n := s.counts(); l != tc.wantLaunches || n != tc.wantPatches {
				t.Errorf("%d launches and %d patches, want %d and %d", l, n, tc.wantLaunches, tc.wantPatches)
			}
			if got := restartsBy(before); fmt.Sprint(got) != fmt.Sprint(tc.wantRestarts) {
				t.Errorf("peloton_update_restarts_total rose by %v, want %v", got, tc.wantRestarts)
			}
			if tc.name == "patched" {
				// One record ended run 1 and launched run 2, through the
				// states of the table.
				tk, _ := p.jm.GetTask(id, 0)
				var hist []string
				for _, h := range tk.Status.History {
					if h.RunId == 2 {
						hist = append(hist, h.State.String())
					}
				}
				if got := strings.Join(hist, " "); got != "INITIALIZED PENDING LAUNCHED RUNNING" {
					t.Errorf("run 2's history %s, want INITIALIZED PENDING LAUNCHED RUNNING", got)
				}
			}
		})
	}
}

// TestPatchCutShortByACrash: the process dies after it recorded a patched
// restart (run 2 LAUNCHED on the host) and before it asked the backend, so
// the sandbox still runs run 1. The next process asks for the patch again;
// if the backend refuses now, it stops run 1 and runs the instance again.
// Either way the update finishes and nothing of the old image runs on.
func TestPatchCutShortByACrash(t *testing.T) {
	for _, tc := range []struct {
		name         string
		refuse       bool
		wantRun      uint32
		wantLaunches int
	}{
		{"patch asked again", false, 2, 1},
		{"refused now: old run stopped", true, 3, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := storetest.StartEtcd(t)
			s := newSandboxes(1)
			p1 := startProcess(t, e, s)
			spec := patchService("crash", "img:1")
			spec.InstanceCount = 1
			id, hosts := runningJob(t, p1.jm, spec)
			entered, release := make(chan struct{}), make(chan struct{})
			s.mu.Lock()
			s.entered, s.release = entered, release
			s.mu.Unlock()
			// Released last: the crashed process's Replace then finds its
			// view dead and its store closed.
			t.Cleanup(func() { close(release) })
			next := patchService("crash", "img:2")
			next.InstanceCount = 1
			u, err := p1.jm.upd.CreateUpdate(context.Background(), id, next, &pelotonv1.UpdateSpec{BatchSize: 1, InPlace: true}, 0)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-entered:
			case <-time.After(20 * time.Second):
				t.Fatalf("Replace was never called: %s", tasksOf(t, p1.jm, id))
			}
			if got := tasksOf(t, p1.jm, id); got != "0:LAUNCHED/2@"+hosts[0] {
				t.Fatalf("recorded before the patch: %s, want run 2 LAUNCHED on %s", got, hosts[0])
			}
			p1.crash()
			s.mu.Lock()
			s.refuse = tc.refuse
			s.mu.Unlock()

			p2 := startProcess(t, e, s)
			waitUpdateDone(t, p2.jm, u.Id)
			want := fmt.Sprintf("%s-0-%d@%s:img:2", id, tc.wantRun, hosts[0])
			waitFor(t, "the instance on the new image, alone", 10*time.Second, func() (bool, string) {
				live := strings.Join(s.live(), " ")
				return live == want, live
			})
			if got := tasksOf(t, p2.jm, id); got != fmt.Sprintf("0:RUNNING/%d@%s", tc.wantRun, hosts[0]) {
				t.Errorf("after the restart: %s", got)
			}
			if l, _ := s.counts(); l != tc.wantLaunches {
				t.Errorf("%d launches, want %d", l, tc.wantLaunches)
			}
		})
	}
}
