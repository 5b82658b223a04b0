package hostmgr

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/memstore"
	peltest "github.com/peloton-sched/peloton/internal/testing/testutil"
)

// maintSource is a backend with hosts a, b and c that schedules
// maintenance (MaintenanceSource): say calls hostmgr's callback as the
// backend's goroutine would.
type maintSource struct {
	fixedHosts
	mu      sync.Mutex
	changed func(host string, down bool)
}

var _ MaintenanceSource = (*maintSource)(nil)

func (s *maintSource) Name() string { return "src" }

func (s *maintSource) WatchMaintenance(changed func(host string, down bool)) {
	s.mu.Lock()
	s.changed = changed
	s.mu.Unlock()
}

func (s *maintSource) say(host string, down bool) {
	s.mu.Lock()
	f := s.changed
	s.mu.Unlock()
	f(host, down)
}

func newMaintSource() *maintSource {
	var hs []HostInfo
	for _, n := range []string{"a", "b", "c"} {
		hs = append(hs, HostInfo{Name: n, Capacity: resources.Resources{MilliCPU: 1000, MemoryMB: 100}})
	}
	return &maintSource{fixedHosts: fixedHosts{hs}}
}

// startSourced starts a Manager over src and st, with run j-0-1 on a and
// recovery done.
func startSourced(t *testing.T, src *maintSource, st store.Store) *Manager {
	t.Helper()
	m := NewManager(src, Options{LeaseTTL: time.Minute, Store: st})
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	m.Recover("j-0-1", "a", resources.Resources{MilliCPU: 100, MemoryMB: 10})
	m.Recovered()
	return m
}

// TestDecideSource is the decision table on a backend's word.
func TestDecideSource(t *testing.T) {
	for _, tc := range []struct {
		name                string
		down, known, moving bool
		state               hostState
		by                  string
		want                sourceStep
	}{
		{"down, up host: start", true, true, false, hostUp, "", sourceStart},
		{"down, unknown host: wait", true, false, false, hostUp, "", sourceWait},
		{"down, moving host: wait for the move", true, true, true, hostUp, "", sourceWait},
		{"down, draining already (the backend's): done", true, true, false, hostDraining, "src", sourceDone},
		{"down, drained by an operator: theirs", true, true, false, hostDrained, "", sourceDone},
		{"up, the backend's drain: complete", false, true, false, hostDraining, "src", sourceComplete},
		{"up, the backend's drained host: complete", false, true, false, hostDrained, "src", sourceComplete},
		{"up, an operator's drain: theirs", false, true, false, hostDraining, "", sourceDone},
		{"up, up host: done", false, true, false, hostUp, "", sourceDone},
		{"up, unknown host: wait", false, false, false, hostUp, "", sourceWait},
	} {
		if got := decideSource(tc.down, tc.known, tc.moving, tc.state, tc.by); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestMaintenanceFromBackend: what a MaintenanceSource says drives host
// maintenance, as an operator's `peloton host drain` would, and the
// record says who started it.
func TestMaintenanceFromBackend(t *testing.T) {
	type step struct {
		say      string // "a down", "b up", or "op start b" / "op complete b"
		want     string // states after it
		release  bool   // the run on a ends (jobmgr moved it)
		drainsOf string // a drain request for this host is published
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"down drains, drained, up returns it", []step{
			{say: "a down", want: "a=HOST_DRAINING b=HOST_UP c=HOST_UP", drainsOf: "a"},
			{release: true, want: "a=HOST_DRAINED b=HOST_UP c=HOST_UP"},
			{say: "a up", want: "a=HOST_UP b=HOST_UP c=HOST_UP"},
		}},
		{"an empty host is drained at once; said twice changes nothing", []step{
			{say: "b down", want: "a=HOST_UP b=HOST_DRAINED c=HOST_UP"},
			{say: "b down", want: "a=HOST_UP b=HOST_DRAINED c=HOST_UP"},
			{say: "b up", want: "a=HOST_UP b=HOST_UP c=HOST_UP"},
			{say: "b up", want: "a=HOST_UP b=HOST_UP c=HOST_UP"},
		}},
		{"window cancelled while draining", []step{
			{say: "a down", want: "a=HOST_DRAINING b=HOST_UP c=HOST_UP", drainsOf: "a"},
			{say: "a up", want: "a=HOST_UP b=HOST_UP c=HOST_UP"},
		}},
		{"an operator's maintenance is not completed by the backend", []step{
			{say: "op start b", want: "a=HOST_UP b=HOST_DRAINED c=HOST_UP"},
			{say: "b down", want: "a=HOST_UP b=HOST_DRAINED c=HOST_UP"},
			{say: "b up", want: "a=HOST_UP b=HOST_DRAINED c=HOST_UP"},
			{say: "op complete b", want: "a=HOST_UP b=HOST_UP c=HOST_UP"},
		}},
		{"an operator may end the backend's early", []step{
			{say: "c down", want: "a=HOST_UP b=HOST_UP c=HOST_DRAINED"},
			{say: "op complete c", want: "a=HOST_UP b=HOST_UP c=HOST_UP"},
			{say: "c up", want: "a=HOST_UP b=HOST_UP c=HOST_UP"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := memstore.New(memstore.Options{})
			src := newMaintSource()
			m := startSourced(t, src, st)
			ctx := context.Background()
			for _, s := range tc.steps {
				f := strings.Fields(s.say)
				switch {
				case len(f) == 2:
					src.say(f[0], f[1] == "down")
				case len(f) == 3 && f[1] == "start":
					if _, err := m.Maintenance().StartMaintenance(ctx, []string{f[2]}); err != nil {
						t.Fatal(err)
					}
				case len(f) == 3:
					if _, err := m.Maintenance().CompleteMaintenance(ctx, []string{f[2]}); err != nil {
						t.Fatal(err)
					}
				}
				if s.release {
					m.ReleaseTask("j-0-1")
				}
				waitStates(t, m, s.want)
				if s.drainsOf != "" {
					dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					ds := m.Drains(dctx)
					cancel()
					if len(ds) != 1 || ds[0].Host != s.drainsOf {
						t.Fatalf("%s: drain requests %+v, want one for %s", s.say, ds, s.drainsOf)
					}
				}
			}
			// Everything said is acted on (or moot): nothing waits.
			peltest.Eventually(t, 10*time.Second, "every word of the backend applied", func() error {
				m.maint.srcMu.Lock()
				left := len(m.maint.srcWant)
				m.maint.srcMu.Unlock()
				if left > 0 {
					return fmt.Errorf("%d left", left)
				}
				return nil
			})
			if s := states(m); s != tc.steps[len(tc.steps)-1].want {
				t.Errorf("states at the end: %s", s)
			}
		})
	}
}

// TestMaintenanceFromBackendSurvivesRestart: the record says the backend
// started a host's maintenance, so a restarted stack completes it when the
// backend says the window is over (once for each host it learns of), and
// still leaves an operator's alone.
func TestMaintenanceFromBackendSurvivesRestart(t *testing.T) {
	st := memstore.New(memstore.Options{})
	ctx := context.Background()
	src := newMaintSource()
	m1 := startSourced(t, src, st)
	src.say("b", true)
	waitStates(t, m1, "a=HOST_UP b=HOST_DRAINED c=HOST_UP")
	if _, err := m1.Maintenance().StartMaintenance(ctx, []string{"c"}); err != nil {
		t.Fatal(err)
	}
	kvs, err := st.List(ctx, "hosts/")
	if err != nil {
		t.Fatal(err)
	}
	var recs []string
	for _, kv := range kvs {
		recs = append(recs, kv.Key+"="+string(kv.Value))
	}
	if got := strings.Join(recs, " "); got != "hosts/b/maintenance=HOST_DRAINED by=src hosts/c/maintenance=HOST_DRAINED" {
		t.Fatalf("store records: %s", got)
	}
	if msg := m1.ListHosts()[1].MaintenanceMessage; !strings.Contains(msg, "src backend") {
		t.Errorf("b's message %q does not say the backend started it", msg)
	}
	_ = m1.Close()

	src2 := newMaintSource()
	m2 := startSourced(t, src2, st)
	if s := states(m2); s != "a=HOST_UP b=HOST_DRAINED c=HOST_DRAINED" {
		t.Fatalf("states after restart: %s", s)
	}
	for _, h := range []string{"a", "b", "c"} {
		src2.say(h, false) // the backend's first word on every host
	}
	waitStates(t, m2, "a=HOST_UP b=HOST_UP c=HOST_DRAINED")
}
