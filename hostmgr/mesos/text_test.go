package mesos

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/hostmgr/mesos/mesostest"
	"github.com/peloton-sched/peloton/internal/quarantine"
	"github.com/peloton-sched/peloton/internal/sanitize"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
)

// nextEvent waits for the next event of run id from hostmgr.
func nextEvent(t *testing.T, hm *hostmgr.Manager, id string, want pelotonv1.TaskState) hostmgr.TaskEvent {
	t.Helper()
	deadline := time.After(waitFor)
	for {
		select {
		case ev := <-hm.Events():
			if ev.TaskID == id && ev.State == want {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %s event of %s within %s", want, id, waitFor)
		}
	}
}

// TestStatusMessageNotUTF8: Mesos passes on an executor's status message
// byte for byte. One that is not valid UTF-8 (and a long one) reaches the
// stack through hostmgr valid and bounded, the run's record in the store
// keeps it valid and cut on a rune boundary, and a backend restarted over
// that store reads it back valid. An agent attribute that is not valid
// UTF-8 becomes a valid host label.
func TestStatusMessageNotUTF8(t *testing.T) {
	t.Parallel()
	m := newMaster(t, mesostest.Config{Agents: []mesostest.AgentSpec{{CPUs: 4, MemMB: 4096, Attributes: map[string]string{"rack\xff": "r\xfe"}}}})
	st := newStore(t)
	ctx := context.Background()
	start := func() *hostmgr.Manager {
		b, err := New(testConfig(m, st))
		if err != nil {
			t.Fatal(err)
		}
		hm := hostmgr.NewManager(b, hostmgr.Options{})
		if err := hm.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return hm
	}
	hm := start()
	hosts := hm.ListHosts()
	if len(hosts) != 1 {
		t.Fatalf("hosts: %v", hosts)
	}
	if _, err := proto.Marshal(hosts[0]); err != nil || hosts[0].Labels["rack\uFFFD"] != "r\uFFFD" {
		t.Fatalf("host labels %q: %v", hosts[0].Labels, err)
	}
	const id = "dirty-0-1"
	if err := hm.Launch(ctx, runSpec(id, hosts[0].Name, "sleep", "3600")); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, hm, id, pelotonv1.TaskState_RUNNING)
	said := "Command printed \xff\xfe and " + strings.Repeat("é", 3000)
	if err := m.Fail(id, said); err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, hm, id, pelotonv1.TaskState_FAILED)
	if !utf8.ValidString(ev.Message) || len(ev.Message) > sanitize.MaxMessage || !strings.HasPrefix(ev.Message, "Command printed \uFFFD and éé") {
		t.Errorf("the event's message is %d bytes, valid %v: %.60q", len(ev.Message), utf8.ValidString(ev.Message), ev.Message)
	}

	// The record is rewritten with the run's end before the end is
	// acknowledged, so it may trail the event.
	var rec record
	testutil.Eventually(t, waitFor, "the run's end recorded", func() bool {
		kv, err := st.Get(ctx, keyRuns+id)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			t.Fatal(err)
		}
		return terminal(pelotonv1.TaskState(rec.State))
	})
	if !utf8.ValidString(rec.Message) || len(rec.Message) > 256 || strings.HasSuffix(rec.Message, "\uFFFD") {
		t.Errorf("the stored record's message is %d bytes, valid %v, ends %q: want valid, at most 256, cut between runes",
			len(rec.Message), utf8.ValidString(rec.Message), rec.Message[max(0, len(rec.Message)-6):])
	}
	if err := hm.Close(); err != nil {
		t.Fatal(err)
	}

	hm = start()
	defer hm.Close()
	ev, err := hm.Status(id)
	if err != nil {
		t.Fatal(err)
	}
	if ev.State != pelotonv1.TaskState_FAILED || !utf8.ValidString(ev.Message) {
		t.Errorf("after a restart: %s %.60q", ev.State, ev.Message)
	}
}

// TestUnreadableRunRecordIsQuarantined: a run record that cannot be read
// is moved aside at start (where it waits for a person), not left to be
// skipped at every start.
func TestUnreadableRunRecordIsQuarantined(t *testing.T) {
	t.Parallel()
	m := newMaster(t, mesostest.Config{Agents: agents(1)})
	st := newStore(t)
	ctx := context.Background()
	if _, err := st.Txn(ctx, store.Put(keyRuns+"bad-0-1", []byte("{not json"), store.MustNotExist)); err != nil {
		t.Fatal(err)
	}
	r := startBackend(t, testConfig(m, st))
	if _, err := r.b.Status("bad-0-1"); err == nil {
		t.Error("the unreadable run is known")
	}
	keys, err := quarantine.List(ctx, st, keyRuns)
	if err != nil || len(keys) != 1 || quarantine.Original(keys[0]) != keyRuns+"bad-0-1" {
		t.Errorf("quarantined: %v %v", keys, err)
	}
}
