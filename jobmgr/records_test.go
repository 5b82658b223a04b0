package jobmgr

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/quarantine"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
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
	testutil.Eventually(t, 20*time.Second, "both instances recorded running", func() error {
		for inst := uint32(0); inst < 2; inst++ {
			if rt := p.storedTask(t, id, inst); rt.GetState() != pelotonv1.TaskState_RUNNING {
				return fmt.Errorf("instance %d: %v", inst, rt)
			}
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
		v := j.task(0).view()
		msg, unsure := v.rt.Message, v.unsure
		if msg == "bad \xff" || unsure {
			t.Errorf("memory: message %q, unsure %v", msg, unsure)
		}
	})

	t.Run("job runtime", func(t *testing.T) {
		err := p.jm.updateJobRuntime(ctx, j, func(rt *pelotonv1.JobStatus) error {
			rt.Message = "bad \xff"
			return nil
		})
		unencodable("job runtime", err)
		// The engine may write the runtime meanwhile (the job's state moves
		// on); what must not be in it is the bad message.
		after, err := p.st.Get(ctx, jobRuntimeKey(id))
		if err != nil {
			t.Fatal(err)
		}
		stored := &pelotonv1.JobStatus{}
		if err := proto.Unmarshal(after.Value, stored); err != nil || strings.Contains(stored.Message, "bad") {
			t.Errorf("the stored runtime: %v (%v)", stored, err)
		}
		rec := j.view()
		msg, unsure := rec.rt.Message, rec.unsure
		if msg == "bad \xff" || unsure {
			t.Errorf("memory: message %q, unsure %v", msg, unsure)
		}
	})

	t.Run("update", func(t *testing.T) {
		up, err := p.jm.upd.CreateUpdate(ctx, id, patchService("svc", "img:2"), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		p.jm.mu.RLock()
		u := p.jm.updates[up.Id]
		p.jm.mu.RUnlock()
		// The update's driver may rewrite the record meanwhile (its
		// state moves on); what must not be in it is the bad message.
		err = p.jm.upd.saveUpdate(ctx, u, func(x *pelotonv1.Update) error {
			x.Status.Message = "bad \xff"
			return nil
		})
		msg := u.record().Status.GetMessage()
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

// garbage is what a record that cannot be decoded looks like to recovery:
// not protobuf, not zstd.
var garbage = []byte("\xff\xfe not a record")

// TestCorruptRecordsAreQuarantinedAtStart: records that cannot be decoded
// (a task of a running job, a job's runtime, a task of a finished job, an
// update) do not stop a restart. Each is moved under quarantine/ and
// counted (a finished job's when it is loaded: finished jobs are loaded
// when asked for, not at start); the running job's instance runs again; the job whose runtime is
// gone is held: it cannot be read, its runs go on and its other records
// stay, also across the next restart; the finished job stays finished.
func TestCorruptRecordsAreQuarantinedAtStart(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	s := newSandboxes(1)
	p := startProcessWith(t, e, s, Options{LostBackoff: 10 * time.Millisecond, ReconcileEvery: time.Hour})
	ctx := t.Context()
	create := func(spec *pelotonv1.JobSpec) string {
		t.Helper()
		id, err := p.jm.CreateJob(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	running, held, done := create(sleepers("running", 2)), create(patchService("held", "img:1")), create(sleepers("done", 2))
	testutil.Eventually(t, 20*time.Second, "six runs", func() error {
		if live := s.live(); len(live) != 6 {
			return fmt.Errorf("live runs: %v", live)
		}
		return nil
	})
	s.finish(resmgr.RunTaskID(done, 0, 1), pelotonv1.TaskState_SUCCEEDED, false)
	s.finish(resmgr.RunTaskID(done, 1, 1), pelotonv1.TaskState_SUCCEEDED, false)
	stateOf := func(p *process, id string) pelotonv1.JobState {
		j, err := p.jm.GetJob(id)
		if err != nil {
			t.Fatal(err)
		}
		return j.Status.State
	}
	testutil.Eventually(t, 20*time.Second, "job done succeeded", func() error {
		if st := stateOf(p, done); st != pelotonv1.JobState_JOB_SUCCEEDED {
			return fmt.Errorf("job done is %s", st)
		}
		return nil
	})
	p.crash()

	bad := []string{taskKey(running, 1), jobRuntimeKey(held), taskKey(done, 0), "updates/u-garbage"}
	for _, k := range bad {
		if _, err := p.st.Txn(ctx, store.Put(k, garbage, store.AnyRevision)); err != nil {
			t.Fatal(err)
		}
	}
	before := promtestutil.ToFloat64(metrics.QuarantinedRecords)
	p2 := startProcessWith(t, e, s, Options{LostBackoff: 10 * time.Millisecond, ReconcileEvery: time.Hour})
	if st := stateOf(p2, done); st != pelotonv1.JobState_JOB_SUCCEEDED {
		t.Errorf("the finished job, loaded when asked for: %s", st)
	}

	checkQuarantine := func(p *process) {
		t.Helper()
		keys, err := quarantine.List(ctx, p.st, "")
		if err != nil {
			t.Fatal(err)
		}
		var originals []string
		for _, k := range keys {
			originals = append(originals, quarantine.Original(k))
		}
		sort.Strings(originals)
		want := append([]string(nil), bad...)
		sort.Strings(want)
		if !slices.Equal(originals, want) {
			t.Errorf("quarantined %v, want %v", originals, want)
		}
		for _, k := range bad {
			if kv, err := p.st.Get(ctx, k); err == nil && bytes.Equal(kv.Value, garbage) {
				t.Errorf("%s still holds the bad record", k)
			}
		}
	}
	checkQuarantine(p2)
	if d := promtestutil.ToFloat64(metrics.QuarantinedRecords) - before; d != float64(len(bad)) {
		t.Errorf("%v records counted as quarantined, want %d", d, len(bad))
	}

	// The running job: its instance without a record runs again; the
	// backend still had its run, on the host it is placed on again, so
	// that run goes on.
	(&faultProcess{process: p2}).waitStates(t, running, pelotonv1.TaskState_RUNNING, 20*time.Second)

	// The held job: not readable, its runs untouched by reconciliation,
	// its records kept.
	checkHeld := func(p *process) {
		t.Helper()
		if _, err := p.jm.GetJob(held); apierrCode(err) != "FailedPrecondition" || !strings.Contains(err.Error(), "quarantine") {
			t.Errorf("GetJob of the held job: %v, want FailedPrecondition naming the quarantine", err)
		}
		p.jm.recs.reconcileOnce(ctx)
		p.jm.recs.reconcileOnce(ctx)
		live := strings.Join(s.live(), " ")
		for inst := uint32(0); inst < 2; inst++ {
			if !strings.Contains(live, resmgr.RunTaskID(held, inst, 1)+"@") {
				t.Errorf("the held job's run %d was stopped: live %s", inst, live)
			}
		}
		for _, k := range []string{jobSpecKey(held, 1), taskKey(held, 0), taskKey(held, 1)} {
			if _, err := p.st.Get(ctx, k); err != nil {
				t.Errorf("the held job's record %s: %v", k, err)
			}
		}
	}
	checkHeld(p2)

	// The finished job: still finished, its instance in the job's state.
	checkDone := func(p *process) {
		t.Helper()
		if st := stateOf(p, done); st != pelotonv1.JobState_JOB_SUCCEEDED {
			t.Errorf("job done is %s, want JOB_SUCCEEDED", st)
		}
		tk, err := p.jm.GetTask(done, 0)
		if err != nil {
			t.Fatal(err)
		}
		if tk.Status.State != pelotonv1.TaskState_SUCCEEDED || tk.Status.Reason != ReasonRecordQuarantined || !strings.Contains(tk.Status.Message, "quarantine/tasks/") {
			t.Errorf("the finished job's quarantined instance: %v", tk.Status)
		}
		if rt := p.storedTask(t, done, 0); rt.GetReason() != ReasonRecordQuarantined {
			t.Errorf("its stored record: %v", rt)
		}
	}
	checkDone(p2)
	if n := len(s.live()); n != 4 {
		t.Errorf("%d runs live, want 4 (running's two, held's two): %v", n, s.live())
	}

	// Another restart finds the quarantine as it was and moves nothing.
	p2.crash()
	before = promtestutil.ToFloat64(metrics.QuarantinedRecords)
	p3 := startProcessWith(t, e, s, Options{LostBackoff: 10 * time.Millisecond, ReconcileEvery: time.Hour})
	if d := promtestutil.ToFloat64(metrics.QuarantinedRecords) - before; d != 0 {
		t.Errorf("the second restart quarantined %v more", d)
	}
	checkQuarantine(p3)
	checkHeld(p3)
	checkDone(p3)
	(&faultProcess{process: p3}).waitStates(t, running, pelotonv1.TaskState_RUNNING, 20*time.Second)
}

// TestCorruptSpecVersions: a spec version that cannot be decoded is moved
// aside. An older one costs the job nothing but that version; the one in
// force makes the job held.
func TestCorruptSpecVersions(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	s := newSandboxes(1)
	p := startProcess(t, e, s)
	ctx := t.Context()
	updated, err := p.jm.CreateJob(ctx, patchService("updated", "img:1"))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "an update of the job accepted", func() error {
		_, err := p.jm.upd.CreateUpdate(ctx, updated, patchService("updated", "img:2"), nil, 0)
		return err
	})
	lost, err := p.jm.CreateJob(ctx, sleepers("lost", 1))
	if err != nil {
		t.Fatal(err)
	}
	p.crash()
	for _, k := range []string{jobSpecKey(updated, 1), jobSpecKey(lost, 1)} {
		if _, err := p.st.Txn(ctx, store.Put(k, garbage, store.AnyRevision)); err != nil {
			t.Fatal(err)
		}
	}
	p2 := startProcess(t, e, s)
	j, err := p2.jm.GetJob(updated)
	if err != nil {
		t.Fatalf("the job that lost an old version: %v", err)
	}
	if j.Status.SpecVersion != 2 || j.Spec.DefaultSpec.Image != "img:2" {
		t.Errorf("the job that lost an old version is at version %d, image %s", j.Status.SpecVersion, j.Spec.DefaultSpec.Image)
	}
	if _, err := p2.jm.GetJob(lost); apierrCode(err) != "FailedPrecondition" {
		t.Errorf("the job whose version in force is gone: %v, want FailedPrecondition", err)
	}
	if keys, _ := quarantine.List(ctx, p2.st, "jobs/"); len(keys) != 2 {
		t.Errorf("quarantined: %v", keys)
	}
}
