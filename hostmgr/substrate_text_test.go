package hostmgr

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/sanitize"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
)

// dirtyBackend says things no protobuf record can hold: invalid UTF-8 and
// huge strings, in events, in Status and Runs, and in its hosts.
type dirtyBackend struct {
	fixedHosts
	sink func(TaskEvent)
}

const (
	dirtyText   = "exit \xff\xfe status \xc3"
	badHostName = "bad\xffhost"
)

func dirtyEvent(id string) TaskEvent {
	return TaskEvent{TaskID: id, Host: "h1", State: pelotonv1.TaskState_FAILED, ExitCode: 3,
		Reason: "why\xff" + strings.Repeat("r", 500), Message: dirtyText + strings.Repeat("m", 10000), Time: time.Now()}
}

func (d *dirtyBackend) Start(_ context.Context, sink func(TaskEvent)) error {
	d.sink = sink
	return nil
}
func (d *dirtyBackend) Status(id string) (TaskEvent, error) { return dirtyEvent(id), nil }
func (d *dirtyBackend) Runs() []RunInfo {
	return []RunInfo{{TaskID: "j-0-1", Host: "h1", Last: dirtyEvent("j-0-1")}}
}

var _ RunLister = (*dirtyBackend)(nil)

func checkClean(t *testing.T, what string, ev TaskEvent) {
	t.Helper()
	for _, s := range []struct {
		name string
		v    string
		max  int
	}{{"reason", ev.Reason, sanitize.MaxReason}, {"message", ev.Message, sanitize.MaxMessage}, {"host", ev.Host, sanitize.MaxName}} {
		if !utf8.ValidString(s.v) || len(s.v) > s.max {
			t.Errorf("%s: %s is %d bytes, valid UTF-8 %v: %q", what, s.name, len(s.v), utf8.ValidString(s.v), s.v)
		}
	}
	rt := &pelotonv1.TaskStatus{Reason: ev.Reason, Message: ev.Message, Host: ev.Host}
	if _, err := proto.Marshal(rt); err != nil {
		t.Errorf("%s: a task record with it does not marshal: %v", what, err)
	}
}

// TestSubstrateTextIsCleanedWhereItEnters: whatever a backend says, what
// hostmgr passes on (events, Status, Runs, hosts) is valid UTF-8 within
// bounds, so every record or answer built from it marshals.
func TestSubstrateTextIsCleanedWhereItEnters(t *testing.T) {
	b := &dirtyBackend{fixedHosts: fixedHosts{hosts: []HostInfo{
		{Name: "h1", Capacity: resources.Resources{MilliCPU: 1000, MemoryMB: 100}, Partition: "p\xff",
			Labels: map[string]string{"zone\xff": "a\xfe", "rack": strings.Repeat("x", 5000)}},
		{Name: badHostName, Capacity: resources.Resources{MilliCPU: 1000, MemoryMB: 100}},
	}}}
	m := NewManager(b, Options{})
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	b.sink(dirtyEvent("j-0-1"))
	select {
	case ev := <-m.Events():
		checkClean(t, "event", ev)
		if !strings.HasPrefix(ev.Message, "exit \uFFFD status \uFFFDmmm") {
			t.Errorf("message %q: want the readable part kept", ev.Message[:40])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
	ev, err := m.Status("j-0-1")
	if err != nil {
		t.Fatal(err)
	}
	checkClean(t, "Status", ev)
	for _, r := range m.Runs() {
		checkClean(t, "Runs", r.Last)
	}

	hosts := m.ListHosts()
	if len(hosts) != 1 || hosts[0].Name != "h1" {
		t.Fatalf("hosts %v: want h1 only (a host whose name is not UTF-8 cannot be named in the API)", hosts)
	}
	if _, err := proto.Marshal(&pelotonv1.ListHostsResponse{Hosts: hosts}); err != nil {
		t.Fatalf("the hosts do not marshal: %v", err)
	}
	if hosts[0].Labels["zone\uFFFD"] != "a\uFFFD" || len(hosts[0].Labels["rack"]) > sanitize.MaxLabelValue || hosts[0].Partition != "p\uFFFD" {
		t.Errorf("host h1: labels %q partition %q", hosts[0].Labels, hosts[0].Partition)
	}
}
