package jobmgr

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
	"google.golang.org/protobuf/proto"
)

// endSaying ends a live run as its backend would report it, with the
// backend's own reason and message.
func (s *sandboxes) endSaying(id string, st pelotonv1.TaskState, reason, msg string) {
	s.mu.Lock()
	r := s.runs[id]
	r.last = hostmgr.TaskEvent{TaskID: id, Host: r.host, State: st, ExitCode: 3, Reason: reason, Message: msg, Time: time.Now()}
	ev, sink := r.last, s.view.sink
	s.mu.Unlock()
	sink(ev)
}

// storedTask reads an instance's record from the store itself.
func (p *process) storedTask(t *testing.T, id string, inst uint32) *pelotonv1.TaskStatus {
	t.Helper()
	return (&faultProcess{process: p}).stored(t, id)[inst]
}

// TestBackendTextIsStoredValid: a run's end whose message and reason are
// not valid UTF-8 (as a substrate may say), and a launch whose backend
// error is not, are written to the task record, which reads back valid;
// and the stack goes on writing that record.
func TestBackendTextIsStoredValid(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	s := newSandboxes(1)
	p := startProcess(t, e, s)
	ended, err := p.jm.CreateJob(t.Context(), sleepers("ends", 1))
	if err != nil {
		t.Fatal(err)
	}
	again := sleepers("relaunched", 1)
	again.DefaultSpec.RestartPolicy = &pelotonv1.RestartPolicy{MaxFailures: 1}
	relaunched, err := p.jm.CreateJob(t.Context(), again)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "both jobs running", func() error {
		if live := s.live(); len(live) != 2 {
			return fmt.Errorf("live runs: %v", live)
		}
		return nil
	})
	bad := "oom\xff\xfe killed \xc3" + strings.Repeat("x", 9000)
	s.endSaying(resmgr.RunTaskID(ended, 0, 1), pelotonv1.TaskState_FAILED, "exit\xffnonzero", bad)
	s.mu.Lock()
	s.launchErr = errors.New("kubelet said \xff\xfe")
	s.mu.Unlock()
	s.endSaying(resmgr.RunTaskID(relaunched, 0, 1), pelotonv1.TaskState_FAILED, "exit-nonzero", "fine")

	testutil.Eventually(t, 20*time.Second, "the end and the failed relaunch stored", func() error {
		if rt := p.storedTask(t, ended, 0); rt == nil || rt.State != pelotonv1.TaskState_FAILED {
			return fmt.Errorf("ended: %v", rt)
		}
		if rt := p.storedTask(t, relaunched, 0); rt == nil || rt.State != pelotonv1.TaskState_FAILED || rt.RunId != 2 {
			return fmt.Errorf("relaunched: %v", rt)
		}
		return nil
	})
	for _, id := range []string{ended, relaunched} {
		rt := p.storedTask(t, id, 0)
		for _, v := range []string{rt.Reason, rt.Message} {
			if !utf8.ValidString(v) {
				t.Errorf("job %s: stored %q", id, v)
			}
		}
		for _, h := range rt.History {
			if !utf8.ValidString(h.Reason) {
				t.Errorf("job %s: history reason %q", id, h.Reason)
			}
		}
	}
	if m := p.storedTask(t, ended, 0).Message; !strings.Contains(m, "oom\uFFFD killed \uFFFD") || len(m) > 4096 {
		t.Errorf("the ended run's message is %d bytes: %.80q", len(m), m)
	}
	if m := p.storedTask(t, relaunched, 0).Message; !strings.Contains(m, "kubelet said \uFFFD") {
		t.Errorf("the failed launch's message: %q", m)
	}
}

// TestRecordsThatCannotBeEncodedAreNotWritten: a task, job runtime or
// update record that protobuf refuses (a string that is not UTF-8) is an
// error at its write: nothing is written, memory keeps what it had, and the
// error is not taken for a store failure (which would mark the record
// unsure and retry a write that can never succeed).
func TestRecordsThatCannotBeEncodedAreNotWritten(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	s := newSandboxes(1)
	p := startProcess(t, e, s)
	ctx := t.Context()
	id, err := p.jm.CreateJob(ctx, patchService("svc", "img:1"))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "both instances running", func() error {
		if live := s.live(); len(live) != 2 {
			return fmt.Errorf("live runs: %v", live)
		}
		return nil
	})
	j, err := p.jm.getJob(id)
	if err != nil {
		t.Fatal(err)
	}
	unencodable := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "encode") || isStoreError(err) {
			t.Errorf("%s: %v, want an encoding error that is not a store error", what, err)
		}
	}

	t.Run("task", func(t *testing.T) {
		before := p.storedTask(t, id, 0)
		err := p.jm.updateTask(ctx, j, 0, func(rt *pelotonv1.TaskStatus) error {
			rt.Message = "bad \xff"
			return nil
		})
		unencodable("task", err)
		if after := p.storedTask(t, id, 0); !proto.Equal(before, after) {
			t.Errorf("the record changed:\n%v\n%v", before, after)
		}
		tk := j.task(0)
		tk.mu.Lock()
		msg, unsure := tk.rt.Message, tk.unsure
		tk.mu.Unlock()
		if msg == "bad \xff" || unsure {
			t.Errorf("memory: message %q, unsure %v", msg, unsure)
		}
	})

	t.Run("job runtime", func(t *testing.T) {
		kv, err := p.st.Get(ctx, jobRuntimeKey(id))
		if err != nil {
			t.Fatal(err)
		}
		err = p.jm.updateJobRuntime(ctx, j, func(rt *pelotonv1.JobStatus) error {
			rt.Message = "bad \xff"
			return nil
		})
		unencodable("job runtime", err)
		if after, err := p.st.Get(ctx, jobRuntimeKey(id)); err != nil || after.Revision != kv.Revision {
			t.Errorf("the record was written: revision %d -> %d (%v)", kv.Revision, after.Revision, err)
		}
		j.mu.Lock()
		msg, unsure := j.rt.Message, j.unsure
		j.mu.Unlock()
		if msg == "bad \xff" || unsure {
			t.Errorf("memory: message %q, unsure %v", msg, unsure)
		}
	})

	t.Run("update", func(t *testing.T) {
		up, err := p.jm.CreateUpdate(ctx, id, patchService("svc", "img:2"), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		p.jm.mu.RLock()
		u := p.jm.updates[up.Id]
		p.jm.mu.RUnlock()
		// The update's driver may rewrite the record meanwhile (its
		// state moves on); what must not be in it is the bad message.
		u.mu.Lock()
		err = p.jm.saveUpdateLocked(ctx, u, func(x *pelotonv1.Update) error {
			x.Status.Message = "bad \xff"
			return nil
		})
		msg := u.u.Status.GetMessage()
		u.mu.Unlock()
		unencodable("update", err)
		if msg == "bad \xff" {
			t.Errorf("memory: message %q", msg)
		}
		after, err := p.st.Get(ctx, updateKey(up.Id))
		if err != nil {
			t.Fatal(err)
		}
		if m := decodeUpdate(t, after.Value).GetStatus().GetMessage(); strings.Contains(m, "bad") {
			t.Errorf("the record was written with the bad message: %q", m)
		}
	})
}

func decodeUpdate(t *testing.T, b []byte) *pelotonv1.Update {
	t.Helper()
	u := &pelotonv1.Update{}
	if err := proto.Unmarshal(b, u); err != nil {
		t.Fatal(err)
	}
	return u
}
