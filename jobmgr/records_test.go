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
