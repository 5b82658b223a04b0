package mesos

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	mesosv1 "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/hostmgr/mesos/mesostest"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Scenario tests against the protocol-level test master (mesostest), not
// a real Mesos. No test asserts a duration: waits are bounded polls.

const waitFor = 30 * time.Second

// rec is a started backend and the events its sink got.
type rec struct {
	t      *testing.T
	b      *Backend
	mu     sync.Mutex
	events map[string][]hostmgr.TaskEvent
}

func startBackend(t *testing.T, cfg Config) *rec {
	t.Helper()
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &rec{t: t, b: b, events: map[string][]hostmgr.TaskEvent{}}
	if err := b.Start(context.Background(), r.sink); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return r
}

func (r *rec) sink(ev hostmgr.TaskEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events[ev.TaskID] = append(r.events[ev.TaskID], ev)
}

func (r *rec) of(id string) []hostmgr.TaskEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hostmgr.TaskEvent(nil), r.events[id]...)
}

// ended returns the run's terminal event, if it has one.
func (r *rec) ended(id string) (hostmgr.TaskEvent, bool) {
	evs := r.of(id)
	if len(evs) > 0 && terminal(evs[len(evs)-1].State) {
		return evs[len(evs)-1], true
	}
	return hostmgr.TaskEvent{}, false
}

func (r *rec) waitState(id string, s pelotonv1.TaskState) {
	r.t.Helper()
	testutil.Eventually(r.t, waitFor, id+" reaches "+s.String(), func() bool {
		for _, ev := range r.of(id) {
			if ev.State == s {
				return true
			}
		}
		return false
	})
}

func (r *rec) launch(id, host string, cmd ...string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := r.b.Launch(ctx, runSpec(id, host, cmd...)); err != nil {
		r.t.Fatalf("Launch %s: %v", id, err)
	}
}

func runSpec(id, host string, cmd ...string) hostmgr.LaunchSpec {
	return hostmgr.LaunchSpec{TaskID: id, JobID: strings.TrimSuffix(id, "-0-1"), RunID: 1, Host: host, Command: cmd,
		Resources: resources.Resources{MilliCPU: 100, MemoryMB: 32}, KillGrace: 3 * time.Second}
}

func agents(n int) []mesostest.AgentSpec {
	out := make([]mesostest.AgentSpec, n)
	for i := range out {
		out[i] = mesostest.AgentSpec{CPUs: 4, MemMB: 4096, Attributes: map[string]string{"rack": fmt.Sprintf("r%d", i%3)}}
	}
	return out
}

// TestThousandRunsOnHundredAgents launches 1,000 runs over 100 agents at
// once, in protobuf: every one runs and succeeds exactly once, every
// update is acknowledged, and the launches went in batched ACCEPTs.
func TestThousandRunsOnHundredAgents(t *testing.T) {
	t.Parallel()
	m := newMaster(t, mesostest.Config{Agents: agents(100)})
	r := startBackend(t, testConfig(m, newStore(t)))
	hosts := r.b.Hosts()
	if len(hosts) != 100 {
		t.Fatalf("%d hosts, want 100", len(hosts))
	}
	if hosts[0].Capacity != (resources.Resources{MilliCPU: 4000, MemoryMB: 4096, DiskMB: 65536}) || hosts[0].Labels["rack"] == "" ||
		hosts[0].Partition != DefaultPartition {
		t.Fatalf("host %+v: want the agent's resources, its attributes as labels, the default partition", hosts[0])
	}
	const n = 1000
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			if err := r.b.Launch(ctx, runSpec(fmt.Sprintf("big-%d-0-1", i), hosts[i%len(hosts)].Name, "sleep", "0.2")); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitFor, "all 1,000 runs end", func() bool {
		for i := range n {
			if _, ok := r.ended(fmt.Sprintf("big-%d-0-1", i)); !ok {
				return false
			}
		}
		return true
	})
	for i := range n {
		id := fmt.Sprintf("big-%d-0-1", i)
		evs := r.of(id)
		var states []string
		for _, ev := range evs {
			states = append(states, ev.State.String())
		}
		if got := strings.Join(states, " "); got != "LAUNCHED RUNNING SUCCEEDED" {
			t.Fatalf("run %s: events %s, want LAUNCHED RUNNING SUCCEEDED once each", id, got)
		}
		if evs[0].Host != hosts[i%len(hosts)].Name {
			t.Fatalf("run %s on %s, want %s", id, evs[0].Host, hosts[i%len(hosts)].Name)
		}
	}
	testutil.Eventually(t, waitFor, "every update acknowledged", func() bool { return m.Unacknowledged() == 0 })
	if a := m.Calls(scheduler.Call_ACCEPT); a >= n {
		t.Errorf("%d ACCEPT calls for %d runs; want them batched per agent", a, n)
	}
	if len(r.b.Runs()) != 0 {
		t.Errorf("Runs lists %d runs after all ended", len(r.b.Runs()))
	}
}

// TestJSONKillAndFinish speaks JSON: a run finishes, another is killed
// with its grace sent as the kill policy.
func TestJSONKillAndFinish(t *testing.T) {
	t.Parallel()
	m := newMaster(t, mesostest.Config{Agents: agents(2)})
	cfg := testConfig(m, newStore(t))
	cfg.ContentType = ContentTypeJSON
	r := startBackend(t, cfg)
	host := r.b.Hosts()[0].Name
	r.launch("json-ok-0-1", host, "exit", "0")
	r.launch("json-kill-0-1", host, "sleep", "3600")
	r.waitState("json-ok-0-1", pelotonv1.TaskState_SUCCEEDED)
	r.waitState("json-kill-0-1", pelotonv1.TaskState_RUNNING)
	// Output is the agent's; with since or timestamps the refusal also
	// says there are no times (the API's FAILED_PRECONDITION).
	if _, err := r.b.Logs(context.Background(), "json-ok-0-1", hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDOUT}); !errors.Is(err, ErrNoLogs) || errors.Is(err, hostmgr.ErrNoLogTimes) {
		t.Errorf("Logs = %v, want ErrNoLogs", err)
	}
	if _, err := r.b.Logs(context.Background(), "json-ok-0-1", hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDOUT, Timestamps: true}); !errors.Is(err, ErrNoLogs) || !errors.Is(err, hostmgr.ErrNoLogTimes) {
		t.Errorf("Logs with timestamps = %v, want ErrNoLogs and ErrNoLogTimes", err)
	}
	if err := r.b.Kill(context.Background(), "json-kill-0-1", 7*time.Second); err != nil {
		t.Fatal(err)
	}
	r.waitState("json-kill-0-1", pelotonv1.TaskState_KILLED)
	kills := m.Kills()
	if len(kills) != 1 || kills[0].TaskID != "json-kill-0-1" || kills[0].Grace != 7*time.Second {
		t.Errorf("master got kills %+v, want one of json-kill-0-1 with a 7s grace", kills)
	}
	if err := r.b.Kill(context.Background(), "json-kill-0-1", time.Second); err != nil {
		t.Errorf("second Kill = %v, want nil", err)
	}
}

// TestOfferVoidMidLaunch: the offers of an ACCEPT are gone by the time it
// reaches the master (a rescind racing the call). The master loses the
// task (INVALID_OFFERS); it never reached an agent, so the backend
// launches it again on the next offer, and it runs once.
func TestOfferVoidMidLaunch(t *testing.T) {
	t.Parallel()
	m := newMaster(t, mesostest.Config{Agents: agents(1)})
	r := startBackend(t, testConfig(m, newStore(t)))
	host := r.b.Hosts()[0].Name
	testutil.Eventually(t, waitFor, "the master has offered", func() bool { return m.Offers() > 0 })
	if m.VoidOffers() == 0 {
		t.Fatal("no offer to void")
	}
	r.launch("void-0-1", host, "sleep", "0.1")
	r.waitState("void-0-1", pelotonv1.TaskState_SUCCEEDED)
	if got := m.Calls(scheduler.Call_ACCEPT); got < 2 {
		t.Errorf("%d ACCEPT calls, want the void one and the one that launched", got)
	}
	var states []string
	for _, ev := range r.of("void-0-1") {
		states = append(states, ev.State.String())
	}
	if strings.Join(states, " ") != "LAUNCHED RUNNING SUCCEEDED" {
		t.Errorf("events %v, want LAUNCHED RUNNING SUCCEEDED", states)
	}
}

// TestRescindDropsOffer: a rescinded offer is dropped at once; a launch
// on its agent revives offers and runs on the next one.
func TestRescindDropsOffer(t *testing.T) {
	t.Parallel()
	m := newMaster(t, mesostest.Config{Agents: agents(1)})
	r := startBackend(t, testConfig(m, newStore(t)))
	host := r.b.Hosts()[0].Name
	testutil.Eventually(t, waitFor, "the master has offered", func() bool { return m.Offers() > 0 })
	if m.Rescind("agent-0") == 0 {
		t.Fatal("nothing rescinded")
	}
	testutil.Eventually(t, waitFor, "the backend drops the rescinded offer", func() bool {
		r.b.mu.Lock()
		defer r.b.mu.Unlock()
		return len(r.b.agents["agent-0"].offers) == 0
	})
	revives := m.Calls(scheduler.Call_REVIVE)
	r.launch("after-rescind-0-1", host, "true")
	r.waitState("after-rescind-0-1", pelotonv1.TaskState_SUCCEEDED)
	if m.Calls(scheduler.Call_REVIVE) <= revives {
		t.Error("no REVIVE for a launch that found no offer")
	}
}

// TestSuppressWhenIdle: with nothing to launch, offers are declined and
// then suppressed; a launch revives them.
func TestSuppressWhenIdle(t *testing.T) {
	t.Parallel()
	m := newMaster(t, mesostest.Config{Agents: agents(2)})
	cfg := testConfig(m, newStore(t))
	cfg.OfferHold, cfg.IdleSuppress = 50*time.Millisecond, 200*time.Millisecond
	r := startBackend(t, cfg)
	testutil.Eventually(t, waitFor, "DECLINE then SUPPRESS", func() bool {
		return m.Calls(scheduler.Call_DECLINE) > 0 && m.Calls(scheduler.Call_SUPPRESS) > 0
	})
	r.launch("revived-0-1", r.b.Hosts()[1].Name, "true")
	r.waitState("revived-0-1", pelotonv1.TaskState_SUCCEEDED)
	if m.Calls(scheduler.Call_REVIVE) == 0 {
		t.Error("no REVIVE after SUPPRESS")
	}
}

// TestMasterFailover: the master drops the stream (a failover); the
// backend subscribes again, gets a new stream ID, keeps every run, and
// launches and kills on the new stream.
func TestMasterFailover(t *testing.T) {
	t.Parallel()
	m := newMaster(t, mesostest.Config{Agents: agents(3)})
	r := startBackend(t, testConfig(m, newStore(t)))
	hosts := r.b.Hosts()
	for i := range 6 {
		r.launch(fmt.Sprintf("mf-%d-0-1", i), hosts[i%3].Name, "sleep", "3600")
	}
	for i := range 6 {
		r.waitState(fmt.Sprintf("mf-%d-0-1", i), pelotonv1.TaskState_RUNNING)
	}
	fw := m.FrameworkID()
	m.DropStream()
	testutil.Eventually(t, waitFor, "a second subscription", func() bool { return m.Subscriptions() >= 2 })
	if m.FrameworkID() != fw {
		t.Fatalf("framework %s after failover, want %s", m.FrameworkID(), fw)
	}
	r.launch("mf-after-0-1", hosts[0].Name, "true")
	r.waitState("mf-after-0-1", pelotonv1.TaskState_SUCCEEDED)
	if err := r.b.Kill(context.Background(), "mf-0-0-1", time.Second); err != nil {
		t.Fatal(err)
	}
	r.waitState("mf-0-0-1", pelotonv1.TaskState_KILLED)
	for i := 1; i < 6; i++ {
		id := fmt.Sprintf("mf-%d-0-1", i)
		if st, err := r.b.Status(id); err != nil || st.State != pelotonv1.TaskState_RUNNING {
			t.Errorf("Status(%s) after failover = %+v, %v; want RUNNING", id, st, err)
		}
		if s, _, ok := m.TaskState(id); !ok || s != mesosv1.TASK_RUNNING {
			t.Errorf("master has %s as %v (%v), want TASK_RUNNING", id, s, ok)
		}
	}
}

// TestFrameworkFailover: the stack dies (no teardown); while none runs, a
// run ends. A new backend over the same store subscribes with the stored
// framework ID, reconciles, reports the end the master kept, keeps the
// live runs, and launches nothing twice.
func TestFrameworkFailover(t *testing.T) {
	t.Parallel()
	m := newMaster(t, mesostest.Config{Agents: agents(2)})
	st := newStore(t)
	old := startBackend(t, testConfig(m, st))
	host := old.b.Hosts()[0].Name
	old.launch("ff-live-0-1", host, "sleep", "3600")
	old.launch("ff-gap-0-1", host, "sleep", "0.5")
	old.waitState("ff-live-0-1", pelotonv1.TaskState_RUNNING)
	old.waitState("ff-gap-0-1", pelotonv1.TaskState_RUNNING)
	fw := old.b.FrameworkID()
	kv, err := st.Get(context.Background(), keyFrameworkID)
	if err != nil || string(kv.Value) != fw {
		t.Fatalf("store has framework ID %q (%v), want %q", kv.Value, err, fw)
	}
	_ = old.b.Close()
	testutil.Eventually(t, waitFor, "the gap run ends while no stack runs", func() bool {
		s, _, ok := m.TaskState("ff-gap-0-1")
		return ok && s == mesosv1.TASK_FINISHED
	})

	r := startBackend(t, testConfig(m, st))
	if r.b.FrameworkID() != fw || m.FrameworkID() != fw {
		t.Fatalf("framework %s / master %s after restart, want %s", r.b.FrameworkID(), m.FrameworkID(), fw)
	}
	if s, err := r.b.Status("ff-live-0-1"); err != nil || s.State != pelotonv1.TaskState_RUNNING || s.Host != host {
		t.Fatalf("Status of the live run = %+v, %v; want RUNNING on %s", s, err, host)
	}
	r.waitState("ff-gap-0-1", pelotonv1.TaskState_SUCCEEDED)
	if err := r.b.Launch(context.Background(), runSpec("ff-live-0-1", host, "sleep", "1")); !errors.Is(err, hostmgr.ErrAlreadyLaunched) {
		t.Errorf("Launch of a live run after failover = %v, want ErrAlreadyLaunched", err)
	}
	testutil.Eventually(t, waitFor, "every update acknowledged", func() bool { return m.Unacknowledged() == 0 })
	if len(m.Tasks()) != 1 {
		t.Errorf("master holds tasks %v, want the live run only", m.Tasks())
	}
}

// TestAgentLost: a FAILURE event for an agent ends its runs LOST and
// removes it from the hosts; runs elsewhere go on.
func TestAgentLost(t *testing.T) {
	t.Parallel()
	m := newMaster(t, mesostest.Config{Agents: agents(2)})
	r := startBackend(t, testConfig(m, newStore(t)))
	r.launch("lost-0-1", "host-0", "sleep", "3600")
	r.launch("kept-0-1", "host-1", "sleep", "3600")
	r.waitState("lost-0-1", pelotonv1.TaskState_RUNNING)
	r.waitState("kept-0-1", pelotonv1.TaskState_RUNNING)
	if err := m.LoseAgent("agent-0"); err != nil {
		t.Fatal(err)
	}
	r.waitState("lost-0-1", pelotonv1.TaskState_LOST)
	if end, _ := r.ended("lost-0-1"); end.Reason != ReasonAgentLost {
		t.Errorf("end %+v, want reason %s", end, ReasonAgentLost)
	}
	testutil.Eventually(t, waitFor, "host-0 leaves the hosts", func() bool {
		for _, h := range r.b.Hosts() {
			if h.Name == "host-0" {
				return false
			}
		}
		return true
	})
	if s, err := r.b.Status("kept-0-1"); err != nil || s.State != pelotonv1.TaskState_RUNNING {
		t.Errorf("run on the other agent: %+v, %v", s, err)
	}
	if n := len(r.of("lost-0-1")); n != 3 {
		t.Errorf("lost run has %d events, want LAUNCHED RUNNING LOST (the master's TASK_LOST is not a second end)", n)
	}
}

// TestHeartbeatsWatched: a master that stops sending anything, with the
// stream open, is left after HeartbeatMisses intervals and subscribed to
// again.
func TestHeartbeatsWatched(t *testing.T) {
	t.Parallel()
	m := newMaster(t, mesostest.Config{Agents: agents(1), Heartbeat: 100 * time.Millisecond})
	r := startBackend(t, testConfig(m, newStore(t)))
	m.StallHeartbeats(true)
	testutil.Eventually(t, waitFor, "the backend subscribes again", func() bool { return m.Subscriptions() >= 2 })
	m.StallHeartbeats(false)
	r.launch("hb-0-1", "host-0", "true")
	r.waitState("hb-0-1", pelotonv1.TaskState_SUCCEEDED)
}

// TestErrorEventFailsLoudly: an ERROR event stops the backend: launches
// fail with the master's message, and it does not subscribe again.
func TestErrorEventFailsLoudly(t *testing.T) {
	t.Parallel()
	m := newMaster(t, mesostest.Config{Agents: agents(1)})
	r := startBackend(t, testConfig(m, newStore(t)))
	m.SendError("Framework failed over too late")
	testutil.Eventually(t, waitFor, "the backend takes the error", func() bool { return r.b.fatalErr() != nil })
	err := r.b.Launch(context.Background(), runSpec("after-error-0-1", "host-0", "true"))
	if err == nil || !strings.Contains(err.Error(), "Framework failed over too late") {
		t.Fatalf("Launch after ERROR = %v, want the master's message", err)
	}
	if m.Subscriptions() != 1 {
		t.Errorf("%d subscriptions, want no new one after ERROR", m.Subscriptions())
	}
}

// TestMaintenance: an inverse offer makes its agent unschedulable; with no
// run of ours there, the backend accepts it.
func TestMaintenance(t *testing.T) {
	t.Parallel()
	m := newMaster(t, mesostest.Config{Agents: agents(2)})
	r := startBackend(t, testConfig(m, newStore(t)))
	if err := m.ScheduleMaintenance("agent-1", time.Now().Add(time.Hour), time.Hour); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitFor, "host-1 unschedulable", func() bool {
		for _, h := range r.b.Hosts() {
			if h.Name == "host-1" {
				return h.Unschedulable
			}
		}
		return false
	})
	testutil.Eventually(t, waitFor, "the inverse offer accepted", func() bool { return len(m.AcceptedInverseOffers()) == 1 })
}

// TestBadConfig: flags' values are checked, naming the flag.
func TestBadConfig(t *testing.T) {
	st := store.Store(nil)
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Master: ""}, "--mesos-master: required"},
		{Config{Master: "localhost:5050"}, "--mesos-master"},
		{Config{Master: "ftp://h:5050"}, "--mesos-master"},
		{Config{Master: "http://h"}, "--mesos-master"},
		{Config{Master: "http://h:5050/master"}, "--mesos-master"},
		{Config{Master: "http://h:5050", ContentType: "xml"}, "--mesos-content-type"},
		{Config{Master: "http://h:5050", Role: "a/b"}, "--mesos-role"},
		{Config{Master: "http://h:5050", FailoverTimeout: -time.Second}, "--mesos-failover-timeout"},
		{Config{Master: "http://h:5050"}, "Store"},
	} {
		c.cfg.Store = st
		if c.want != "Store" {
			c.cfg.Store = newStoreless{}
		}
		if _, err := New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", c.cfg, err, c.want)
		}
	}
	if u, err := ParseMaster("http://10.0.0.1:5050/"); err != nil || u != "http://10.0.0.1:5050/api/v1/scheduler" {
		t.Errorf("ParseMaster = %q, %v", u, err)
	}
}

// newStoreless is a store that is never used: TestBadConfig fails before.
type newStoreless struct{ store.Store }

// TestVolumes: a STATEFUL run's volume is reserved and created on its
// agent, found again by the next run of the instance, and destroyed (its
// disk unreserved) by ReleaseVolume. Without a role there is no volume.
func TestVolumes(t *testing.T) {
	t.Parallel()
	m := newMaster(t, mesostest.Config{Agents: agents(1)})
	r := startBackend(t, testConfig(m, newStore(t)))
	vol := &hostmgr.Volume{ID: "db-0", SizeMB: 100, MountPath: "/data"}
	for run := 1; run <= 2; run++ {
		s := runSpec(fmt.Sprintf("db-0-%d", run), "host-0", "exit", "0")
		s.Volume = vol
		if err := r.b.Launch(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		r.waitState(s.TaskID, pelotonv1.TaskState_SUCCEEDED)
		testutil.Eventually(t, waitFor, "the volume is free on the agent again", func() bool {
			v := m.Volumes("agent-0")
			return len(v) == 1 && v[0] == "db-0"
		})
	}
	if err := r.b.ReleaseVolume(context.Background(), "host-0", "db-0"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitFor, "the volume destroyed", func() bool { return len(m.Volumes("agent-0")) == 0 })

	cfg := testConfig(m, newStore(t))
	cfg.Role = ""
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := runSpec("norole-0-1", "host-0", "true")
	s.Volume = vol
	if err := b.Launch(context.Background(), s); !errors.Is(err, hostmgr.ErrLaunchBlocked) || !strings.Contains(err.Error(), "--mesos-role") {
		t.Errorf("Launch with a volume and no role = %v, want ErrLaunchBlocked naming --mesos-role", err)
	}
}

// TestGangLaunchGroup: the members of a gang launched on one agent, as
// jobmgr launches them (together, each from a goroutine of its own), go
// out in one LAUNCH_GROUP with a default executor, and every member runs
// and ends; members on other agents go in a LAUNCH_GROUP of their agent,
// and a run of no gang in a plain LAUNCH.
func TestGangLaunchGroup(t *testing.T) {
	t.Parallel()
	m := newMaster(t, mesostest.Config{Agents: agents(3)})
	cfg := testConfig(m, newStore(t))
	// A window far longer than the members' launches take to arrive, even
	// on a loaded machine under -race: the test checks the grouping, not
	// how short a window suffices.
	cfg.GangWindow = 2 * time.Second
	r := startBackend(t, cfg)
	type launch struct{ id, host, gang string }
	var ls []launch
	for i := range 4 {
		ls = append(ls, launch{fmt.Sprintf("one-%d-1", i), "host-0", "one/gang-0"})
	}
	for i := range 4 {
		ls = append(ls, launch{fmt.Sprintf("split-%d-1", i), fmt.Sprintf("host-%d", 1+i%2), "split/gang-0"})
	}
	ls = append(ls, launch{"alone-0-1", "host-0", ""})
	var wg sync.WaitGroup
	errs := make(chan error, len(ls))
	for _, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := runSpec(l.id, l.host, "sleep", "0.2")
			s.Gang = l.gang
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			if err := r.b.Launch(ctx, s); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, l := range ls {
		r.waitState(l.id, pelotonv1.TaskState_SUCCEEDED)
		var states []string
		for _, ev := range r.of(l.id) {
			states = append(states, ev.State.String())
		}
		if got := strings.Join(states, " "); got != "LAUNCHED RUNNING SUCCEEDED" {
			t.Errorf("run %s: events %s, want LAUNCHED RUNNING SUCCEEDED", l.id, got)
		}
	}
	byAgent := map[string][]string{}
	for _, g := range m.Groups() {
		if byAgent[g.Agent] != nil {
			t.Errorf("agent %s got more than one LAUNCH_GROUP: %+v", g.Agent, m.Groups())
		}
		tasks := append([]string(nil), g.Tasks...)
		sort.Strings(tasks)
		byAgent[g.Agent] = tasks
	}
	want := map[string][]string{
		"agent-0": {"one-0-1", "one-1-1", "one-2-1", "one-3-1"},
		"agent-1": {"split-0-1", "split-2-1"},
		"agent-2": {"split-1-1", "split-3-1"},
	}
	if !reflect.DeepEqual(byAgent, want) {
		t.Errorf("LAUNCH_GROUPs by agent %v, want %v", byAgent, want)
	}
	if n := m.Launched(); n != 1 {
		t.Errorf("%d tasks went through LAUNCH, want only the run of no gang", n)
	}
	testutil.Eventually(t, waitFor, "every update acknowledged", func() bool { return m.Unacknowledged() == 0 })
}

// TestMaintenanceDrainsHost: a maintenance window the master schedules
// for an agent becomes hostmgr maintenance of its host: HOST_DRAINING, a
// drain request for our runs there (the stand-in for jobmgr kills each
// and runs it again on the other host, as jobmgr's drain does), then
// HOST_DRAINED, and only then is the inverse offer accepted. When the
// window ends, the host is back in service (HOST_UP), with no operator.
func TestMaintenanceDrainsHost(t *testing.T) {
	t.Parallel()
	m := newMaster(t, mesostest.Config{Agents: agents(2)})
	st := newStore(t)
	b, err := New(testConfig(m, st))
	if err != nil {
		t.Fatal(err)
	}
	hm := hostmgr.NewManager(b, hostmgr.Options{Store: st, Logger: b.log})
	if err := hm.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hm.Close() })
	go func() { // the events jobmgr would read
		for range hm.Events() {
		}
	}()
	res := resources.Resources{MilliCPU: 100, MemoryMB: 32}
	launch := func(id, host string) {
		t.Helper()
		hm.Recover(id, host, res) // as placement's Commit holds it
		s := runSpec(id, host, "sleep", "3600")
		if err := hm.Launch(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		launch(fmt.Sprintf("mt-%d-1", i), "host-0")
	}
	hm.Recovered()
	testutil.Eventually(t, waitFor, "both runs running", func() bool { return m.Running() == 2 })
	stateOf := func(host string) pelotonv1.HostState {
		for _, h := range hm.ListHosts() {
			if h.Name == host {
				return h.State
			}
		}
		return pelotonv1.HostState_HOST_STATE_UNSPECIFIED
	}

	if err := m.ScheduleMaintenance("agent-0", time.Now().Add(time.Hour), time.Hour); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitFor, "host-0 draining", func() bool { return stateOf("host-0") == pelotonv1.HostState_HOST_DRAINING })
	if n := len(m.AcceptedInverseOffers()); n != 0 {
		t.Fatalf("%d inverse offers accepted while our runs are on the agent", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	ds := hm.Drains(ctx)
	if len(ds) != 1 || ds[0].Host != "host-0" || len(ds[0].TaskIDs) != 2 {
		t.Fatalf("drain requests %+v, want one for host-0's two runs", ds)
	}
	for _, id := range ds[0].TaskIDs {
		if err := hm.Kill(ctx, id, time.Second); err != nil {
			t.Fatal(err)
		}
		launch(strings.TrimSuffix(id, "-1")+"-2", "host-1")
	}
	testutil.Eventually(t, waitFor, "host-0 drained", func() bool { return stateOf("host-0") == pelotonv1.HostState_HOST_DRAINED })
	testutil.Eventually(t, waitFor, "the inverse offer accepted", func() bool { return len(m.AcceptedInverseOffers()) == 1 })
	testutil.Eventually(t, waitFor, "the runs again on host-1", func() bool { return m.Running() == 2 })
	for i := range 2 {
		if s, agent, ok := m.TaskState(fmt.Sprintf("mt-%d-2", i)); !ok || s != mesosv1.TASK_RUNNING || agent != "agent-1" {
			t.Errorf("run mt-%d-2: %v on %s (%v), want TASK_RUNNING on agent-1", i, s, agent, ok)
		}
	}

	if err := m.EndMaintenance("agent-0"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitFor, "host-0 back in service", func() bool { return stateOf("host-0") == pelotonv1.HostState_HOST_UP })
}
