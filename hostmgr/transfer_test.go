package hostmgr

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestTransferHold: the new run holds exactly what the old one held, on the
// same host, counted once for the host and once for the job; the old run
// holds nothing any more. A refused transfer changes nothing.
func TestTransferHold(t *testing.T) {
	r := resources.Resources{MilliCPU: 300, MemoryMB: 30}
	for _, tc := range []struct {
		name     string
		from, to string
		wantHost string
		// holds lists the runs that must hold r afterwards, gone those that
		// must hold nothing.
		holds, gone []string
	}{
		{"moves the hold to the new run", "j-0-1", "j-0-2", "a", []string{"j-0-2", "k-0-1"}, []string{"j-0-1"}},
		{"from holds nothing", "j-0-9", "j-0-10", "", []string{"j-0-1", "k-0-1"}, []string{"j-0-9", "j-0-10"}},
		{"to already holds something", "j-0-1", "k-0-1", "", []string{"j-0-1", "k-0-1"}, nil},
		{"to is from", "j-0-1", "j-0-1", "", []string{"j-0-1", "k-0-1"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newTestManager(t, 2, resources.Resources{MilliCPU: 1000, MemoryMB: 100})
			m.Recover("j-0-1", "a", r)
			m.Recover("k-0-1", "a", r)
			host, ok := m.TransferHold(tc.from, tc.to)
			if host != tc.wantHost || ok != (tc.wantHost != "") {
				t.Fatalf("TransferHold(%s, %s) = %q, %v; want %q", tc.from, tc.to, host, ok, tc.wantHost)
			}
			for _, id := range tc.holds {
				if !m.HoldsExactly(id, r) {
					t.Errorf("%s should hold %s", id, r)
				}
			}
			for _, id := range tc.gone {
				if m.HoldsExactly(id, r) || m.HoldsExactly(id, resources.Resources{}) {
					t.Errorf("%s should hold nothing", id)
				}
			}
			// The host's totals and the job's count do not change either way.
			if h := m.ListHosts()[0]; h.Allocated.Cpu != 0.6 || h.TaskCount != 2 {
				t.Errorf("host a after transfer: %v, %d runs; want 0.6 CPU, 2 runs", h.Allocated, h.TaskCount)
			}
			l, offers := m.AcquireHosts(HostFilter{Max: 2, Jobs: map[string]bool{"j": true}})
			if offers[0].Name != "a" || offers[0].JobCounts["j"] != 1 {
				t.Errorf("job j on host a after transfer: %v", offers[0].JobCounts)
			}
			m.ReleaseLease(l)
		})
	}
}

// TestTransferHoldThenRelease: releasing the old run after a transfer frees
// nothing; releasing the new one frees the host and the job's count.
func TestTransferHoldThenRelease(t *testing.T) {
	m := newTestManager(t, 1, resources.Resources{MilliCPU: 1000, MemoryMB: 100})
	r := resources.Resources{MilliCPU: 600, MemoryMB: 30}
	m.Recover("j-0-1", "a", r)
	if _, ok := m.TransferHold("j-0-1", "j-0-2"); !ok {
		t.Fatal("transfer refused")
	}
	m.ReleaseTask("j-0-1") // the old run's end event, arriving late
	if h := m.ListHosts()[0]; h.Allocated.Cpu != 0.6 || h.TaskCount != 1 {
		t.Fatalf("releasing the old run freed the new run's hold: %v, %d runs", h.Allocated, h.TaskCount)
	}
	// The transferred hold still counts in Commit: a second 0.6 CPU run does
	// not fit, and the job is at its cap of 1 per host.
	l, offers := m.AcquireHosts(HostFilter{Max: 1, Jobs: map[string]bool{"j": true}})
	if len(offers) != 1 || offers[0].JobCounts["j"] != 1 {
		t.Fatalf("offers after transfer: %v", offers)
	}
	if err := m.Commit(l, []Assignment{{TaskID: "j-1-1", JobID: "j", Host: "a", Resources: resources.Resources{MilliCPU: 100, MemoryMB: 1}, MaxPerHost: 1}}); err == nil {
		t.Fatal("commit ignored the transferred run's count")
	}
	m.ReleaseTask("j-0-2")
	if h := m.ListHosts()[0]; h.Allocated.Cpu != 0 || h.TaskCount != 0 {
		t.Fatalf("after releasing the new run: %v, %d runs", h.Allocated, h.TaskCount)
	}
	_, offers = m.AcquireHosts(HostFilter{Max: 1, Jobs: map[string]bool{"j": true}})
	if len(offers) != 1 || offers[0].JobCounts != nil || offers[0].Free.MilliCPU != 1000 {
		t.Fatalf("offers after release: %+v", offers)
	}
}

// TestTransferHoldOnDrainingHost: a hold moved on a draining host keeps it
// draining; the host becomes drained when the new run ends.
func TestTransferHoldOnDrainingHost(t *testing.T) {
	m := maintManager(t, nil) // a holds j-0-1
	if _, err := m.Maintenance().StartMaintenance(context.Background(), []string{"a"}); err != nil {
		t.Fatal(err)
	}
	if host, ok := m.TransferHold("j-0-1", "j-0-2"); !ok || host != "a" {
		t.Fatalf("transfer on a draining host: %q %v", host, ok)
	}
	m.ReleaseTask("j-0-1")
	if got := states(m); got != "a=HOST_DRAINING b=HOST_UP c=HOST_UP" {
		t.Fatalf("after releasing the old run: %s", got)
	}
	m.ReleaseTask("j-0-2")
	waitStates(t, m, "a=HOST_DRAINED b=HOST_UP c=HOST_UP")
}

// replacing is fixedHosts that replaces runs in place as a Replacer must:
// the old run's end (KILLED, replaced-in-place) reaches the sink before
// Replace returns. err, if set, is returned instead, changing nothing.
type replacing struct {
	fixedHosts
	sink func(TaskEvent)
	err  error
}

func (r *replacing) Start(_ context.Context, sink func(TaskEvent)) error { r.sink = sink; return nil }
func (r *replacing) CheckReplace(string, LaunchSpec) error               { return r.err }
func (r *replacing) Replace(_ context.Context, old string, next LaunchSpec) error {
	if r.err != nil {
		return r.err
	}
	r.sink(TaskEvent{TaskID: old, Host: next.Host, State: pelotonv1.TaskState_KILLED, Reason: ReasonReplaced})
	r.sink(TaskEvent{TaskID: next.TaskID, Host: next.Host, State: pelotonv1.TaskState_LAUNCHED})
	return nil
}

var _ Replacer = (*replacing)(nil)

// TestReplaceMovesTheHold: a run replaced in place leaves its room to the
// new run, though its end frees what it holds; a backend that cannot
// replace (or is no Replacer) says ErrNotReplaceable; and a replacement
// on a draining host is handed to Drains, as a launch there would be.
func TestReplaceMovesTheHold(t *testing.T) {
	r := resources.Resources{MilliCPU: 600, MemoryMB: 30}
	b := &replacing{fixedHosts: fixedHosts{[]HostInfo{{Name: "a", Capacity: resources.Resources{MilliCPU: 1000, MemoryMB: 100}}}}}
	m := NewManager(b, Options{LeaseTTL: time.Minute, EventBuffer: 16})
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	m.Recover("j-0-1", "a", r)
	m.Recovered()
	next := LaunchSpec{TaskID: "j-0-2", JobID: "j", RunID: 2, Host: "a", Resources: r}
	if err := m.CheckReplace("j-0-1", next); err != nil {
		t.Fatal(err)
	}
	if err := m.Replace(context.Background(), "j-0-1", next); err != nil {
		t.Fatal(err)
	}
	if ev := <-m.Events(); ev.TaskID != "j-0-1" || ev.Reason != ReasonReplaced {
		t.Fatalf("first event %+v, want the old run's end", ev)
	}
	<-m.Events()
	if !m.HoldsExactly("j-0-2", r) || m.HoldsExactly("j-0-1", r) {
		t.Fatalf("after the replacement: j-0-2 holds %v, j-0-1 %v", m.HoldsExactly("j-0-2", r), m.HoldsExactly("j-0-1", r))
	}
	if h := m.ListHosts()[0]; h.Allocated.Cpu != 0.6 || h.TaskCount != 1 {
		t.Fatalf("host after the replacement: %v, %d runs", h.Allocated, h.TaskCount)
	}

	if _, err := m.Maintenance().StartMaintenance(context.Background(), []string{"a"}); err != nil {
		t.Fatal(err)
	}
	third := next
	third.TaskID, third.RunID = "j-0-3", 3
	if err := m.Replace(context.Background(), "j-0-2", third); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var asked []string
	for ctx.Err() == nil && !strings.Contains(strings.Join(asked, " "), "j-0-3") {
		for _, d := range m.Drains(ctx) {
			asked = append(asked, d.Host+":"+strings.Join(d.TaskIDs, ","))
		}
	}
	// The drain asks for the run on the host when it starts (j-0-2), and
	// for the one that replaced it there.
	if got := strings.Join(asked, " "); got != "a:j-0-2 a:j-0-3" {
		t.Fatalf("drain requests %q, want a:j-0-2 a:j-0-3", got)
	}

	b.err = fmt.Errorf("%w: test", ErrNotReplaceable)
	if err := m.CheckReplace("j-0-3", next); !errors.Is(err, ErrNotReplaceable) {
		t.Fatalf("CheckReplace: %v", err)
	}
	if err := NewManager(&fixedHosts{}, Options{}).CheckReplace("x-0-1", next); !errors.Is(err, ErrNotReplaceable) {
		t.Fatalf("a backend that is no Replacer: %v", err)
	}
	if err := NewManager(&fixedHosts{}, Options{}).Replace(context.Background(), "x-0-1", next); !errors.Is(err, ErrNotReplaceable) {
		t.Fatalf("a backend that is no Replacer: %v", err)
	}
}
