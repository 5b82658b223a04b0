package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/hostmgr/local/supervise"
	"github.com/peloton-sched/peloton/internal/testing/etcdtest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The fault tests: what the stack must survive without losing work or
// running it twice, with real processes (etcd servers, `peloton up`) and
// real faults (SIGSTOP, SIGKILL).

// runLog is a file every run of a fault test's jobs appends to: a "start"
// line when it starts and an "end" line when it ends, with its instance,
// run and the time, so the test sees what really ran, whatever Peloton says.
type runLog struct {
	path   string
	marker string // in every run's command line, to find leftovers
}

func newRunLog(t *testing.T) *runLog {
	var b [6]byte
	_, _ = rand.Read(b[:])
	l := &runLog{path: filepath.Join(t.TempDir(), "runs.log"), marker: "peloton-fault-" + hex.EncodeToString(b[:])}
	t.Cleanup(func() { _ = exec.Command("pkill", "-9", "-f", l.marker).Run() })
	return l
}

// command is a run that logs its start, works for secs, and logs its end,
// also when it is stopped with SIGTERM (a kill, a preemption, a drain).
func (l *runLog) command(secs float64) []string { return l.commandAfter("", secs) }

// gatedCommand is command that starts working only once the file gate
// exists, so a test can hold every run until they all run, whatever the
// time their launches take.
func (l *runLog) gatedCommand(gate string, secs float64) []string {
	return l.commandAfter(fmt.Sprintf(`while [ ! -e %s ]; do sleep 0.5; done; `, gate), secs)
}

// commandAfter is command with the shell code wait run between the start
// line and the work.
func (l *runLog) commandAfter(wait string, secs float64) []string {
	line := `"%s $PELOTON_JOB_ID/$PELOTON_INSTANCE_ID $PELOTON_RUN_ID $(date +%%s%%N)" >> ` + l.path
	return []string{"sh", "-c", fmt.Sprintf(
		`trap 'echo `+line+`; exit 143' TERM; echo `+line+`; %ssleep %g & wait $!; echo `+line+` # %s`,
		"end", "start", wait, secs, "end", l.marker)}
}

type span struct {
	run        int
	start, end int64 // end 0: no end line
}

// spans reads the log: the runs of every instance, by "<job>/<instance>".
func (l *runLog) spans(t *testing.T) map[string][]span {
	t.Helper()
	f, err := os.Open(l.path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type key struct {
		inst string
		run  int
	}
	byRun := map[key]*span{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 4 {
			continue // a line cut by a kill
		}
		run, _ := strconv.Atoi(fs[2])
		at, _ := strconv.ParseInt(fs[3], 10, 64)
		k := key{fs[1], run}
		if byRun[k] == nil {
			byRun[k] = &span{run: run}
		}
		if fs[0] == "start" {
			byRun[k].start = at
		} else {
			byRun[k].end = at
		}
	}
	out := map[string][]span{}
	for k, s := range byRun {
		out[k.inst] = append(out[k.inst], *s)
	}
	return out
}

// checkNoOverlap fails if any instance had two runs alive at once, or if
// the log does not hold instances instances.
func (l *runLog) checkNoOverlap(t *testing.T, instances int) {
	t.Helper()
	spans := l.spans(t)
	if len(spans) != instances {
		t.Errorf("%d instances ran, want %d", len(spans), instances)
	}
	for inst, ss := range spans {
		sort.Slice(ss, func(i, j int) bool { return ss[i].start < ss[j].start })
		for i := 1; i < len(ss); i++ {
			prev, cur := ss[i-1], ss[i]
			if prev.end == 0 || prev.end > cur.start {
				t.Errorf("instance %s: run %d (started %s, ended %s) and run %d (started %s) overlap",
					inst, prev.run, stamp(prev.start), stamp(prev.end), cur.run, stamp(cur.start))
			}
		}
	}
}

func stamp(ns int64) string {
	if ns == 0 {
		return "never"
	}
	return time.Unix(0, ns).Format("15:04:05.000")
}

// leftovers lists the processes of the test's runs still alive.
func (l *runLog) leftovers() string {
	out, _ := exec.Command("pgrep", "-a", "-f", l.marker).Output()
	var lines []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line != "" && !strings.Contains(line, "pgrep") {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines, "\n")
}

// TestKill9ThreeTimesRunsEachInstanceOnce kills `peloton up` with SIGKILL
// three times while a 300-instance batch job runs, restarting it on the
// same data each time: the local backend adopts the runs the killed servers
// left, no instance ever has two runs alive at once, every instance
// succeeds, and no process of the job is left.
func TestKill9ThreeTimesRunsEachInstanceOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts peloton up three times")
	}
	bin := buildPeloton(t)
	dir := t.TempDir()
	logf := newRunLog(t)
	const n = 300
	p := startUp(t, bin, dir)
	spec := batch("kill9", n, logf.command(2)...)
	spec.DefaultSpec.Resources.Cpu = 0.05
	cr, err := p.jobs.CreateJob(ctxT(t), &pelotonv1.CreateJobRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	for kill := 1; kill <= 3; kill++ {
		// The scenario, not a wait: kills 2, 2.5 and 3 s into each
		// server's life land at different points of its recovery and
		// launches, some before it shows anything a test could wait on.
		time.Sleep(time.Duration(1500+500*kill) * time.Millisecond)
		p.kill()
		p = startUp(t, bin, dir)
	}
	var job *pelotonv1.Job
	testutil.Eventually(t, 4*time.Minute, "the job done after the third restart", func() error {
		resp, err := p.jobs.GetJob(ctxT(t), &pelotonv1.GetJobRequest{JobId: cr.JobId})
		if err != nil {
			t.Fatalf("%v (%s)", err, p.state())
		}
		job = resp.Job
		if st := job.Status.State; st != pelotonv1.JobState_JOB_SUCCEEDED && st != pelotonv1.JobState_JOB_FAILED {
			return fmt.Errorf("%v", job.Status)
		}
		return nil
	})
	if job.Status.State != pelotonv1.JobState_JOB_SUCCEEDED || job.Status.TaskCounts["SUCCEEDED"] != n {
		t.Fatalf("job ended %v with counts %v; want every instance SUCCEEDED", job.Status.State, job.Status.TaskCounts)
	}
	logf.checkNoOverlap(t, n)
	runs, again := 0, 0
	for _, ss := range logf.spans(t) {
		runs += len(ss)
		if len(ss) > 1 {
			again++
		}
	}
	t.Logf("%d runs for %d instances; %d instances ran more than once (a run whose launch was cut short by a kill)", runs, n, again)
	if left := logf.leftovers(); left != "" {
		t.Errorf("processes of the killed servers still run:\n%s", left)
	}
}

// TestStoreOutageLosesNothing pauses the external etcd (SIGSTOP) while a
// batch job's runs end, then stops it while another's do: once etcd is
// back, every run's end is recorded without a restart of Peloton, nothing
// ran twice, creates during the outage failed with Unavailable and left
// nothing, and /readyz said so meanwhile.
func TestStoreOutageLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("two 30 s store outages")
	}
	// One of the few long tests that mostly wait (on real processes, health
	// checks, outages): they run beside each other, after the rest (suite time).
	t.Parallel()
	outage := 30 * time.Second
	if v := os.Getenv("PELOTON_TEST_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("PELOTON_TEST_OUTAGE: %v", err)
		}
		outage = d
	}
	etcd := etcdtest.Start(t, 1)
	s := startStack(t, t.TempDir(), stackOpts{etcd: etcd.Endpoints()})
	logf := newRunLog(t)
	const n = 100

	// runJob creates a job of n runs that each work secs once the gate
	// file opens, and waits until they all run.
	runJob := func(name, gate string, secs float64) string {
		spec := batch(name, n, logf.gatedCommand(gate, secs)...)
		spec.DefaultSpec.Resources.Cpu = 0.05
		cr, err := s.jobs.CreateJob(ctxT(t), &pelotonv1.CreateJobRequest{Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 90*time.Second, "job "+name+" all running", func() error {
			resp, err := s.jobs.GetJob(ctxT(t), &pelotonv1.GetJobRequest{JobId: cr.JobId})
			if err != nil {
				t.Fatal(err)
			}
			if counts := resp.Job.Status.TaskCounts; counts["RUNNING"] != n {
				return fmt.Errorf("task counts %v", counts)
			}
			return nil
		})
		return cr.JobId
	}
	createFails := func(when string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: batch("during-"+when, 1, "true")})
		if status.Code(err) != codes.Unavailable {
			t.Errorf("create while etcd is %s: %v; want Unavailable", when, err)
		}
		if code, body := s.rest("GET", "/readyz", nil, nil); code != 503 || !strings.Contains(body, "not ready") {
			t.Errorf("/readyz while etcd is %s: %d %q; want 503", when, code, body)
		}
	}
	// waitDone waits, without restarting anything, until the job succeeded.
	waitDone := func(id, after string) {
		s.waitJob(id, pelotonv1.JobState_JOB_SUCCEEDED, 2*time.Minute)
		testutil.Eventually(t, 30*time.Second, "/readyz after "+after, func() error {
			if code, body := s.rest("GET", "/readyz", nil, nil); code != 200 {
				return fmt.Errorf("%d %q", code, body)
			}
			return nil
		})
	}

	// The two outages: etcd paused (its connections hang), then stopped
	// (they are refused).
	for _, o := range []struct {
		name, after string
		down        func()
		up          func() error
	}{
		{"paused", "a pause", etcd.Members[0].Pause, func() error { etcd.Members[0].Resume(); return nil }},
		{"stopped", "a stop", etcd.Members[0].Stop, etcd.Members[0].Restart},
	} {
		gate := filepath.Join(t.TempDir(), "gate")
		id := runJob(o.name, gate, 1)
		o.down()
		// Every run ends during the outage.
		if err := os.WriteFile(gate, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		createFails(o.name)
		time.Sleep(outage) // the outage itself: its length is the scenario, nothing to wait on
		if err := o.up(); err != nil {
			t.Fatal(err)
		}
		waitDone(id, o.after)
	}

	logf.checkNoOverlap(t, 2*n)
	for inst, ss := range logf.spans(t) {
		if len(ss) != 1 {
			t.Errorf("instance %s ran %d times, want once", inst, len(ss))
		}
	}
	resp, err := s.jobs.ListJobs(ctxT(t), &pelotonv1.ListJobsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Jobs) != 2 {
		var names []string
		for _, j := range resp.Jobs {
			names = append(names, j.Spec.GetName())
		}
		t.Errorf("jobs after the outages: %v; the creates during them must leave nothing", names)
	}
}

// TestEtcdLeaderKilled runs the stack on a 3-member etcd cluster and kills
// the etcd leader while a job runs: the stack goes on and the job finishes.
func TestEtcdLeaderKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-member etcd cluster")
	}
	etcd := etcdtest.Start(t, 3)
	s := startStack(t, t.TempDir(), stackOpts{etcd: etcd.Endpoints()})
	logf := newRunLog(t)
	spec := batch("leader", 40, logf.command(1)...)
	spec.DefaultSpec.Resources.Cpu = 0.5 // 16 at a time: the job takes several waves
	cr, err := s.jobs.CreateJob(ctxT(t), &pelotonv1.CreateJobRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	// Kill the leader while the job runs: once its first wave does.
	s.waitJob(cr.JobId, pelotonv1.JobState_JOB_RUNNING, time.Minute)
	l := etcd.Leader()
	if l < 0 {
		t.Fatal("no etcd leader")
	}
	etcd.Members[l].Kill()
	s.waitJob(cr.JobId, pelotonv1.JobState_JOB_SUCCEEDED, 2*time.Minute)
	logf.checkNoOverlap(t, 40)
}

// TestDrainAndUpdateResumeAfterKill9 kills `peloton up` with SIGKILL in the
// middle of a host drain and then of a rolling update of a service: each
// resumes after the restart and finishes, and at no sample were more of the
// service's instances down than its maximumUnavailableInstances.
func TestDrainAndUpdateResumeAfterKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts peloton up twice")
	}
	bin := buildPeloton(t)
	dir := t.TempDir()
	logf := newRunLog(t)
	const n, budget = 4, 1
	p := startUp(t, bin, dir)
	spec := service("drained", n, budget, "sh", "-c", "exec sleep 600 # "+logf.marker)
	cr, err := p.jobs.CreateJob(ctxT(t), &pelotonv1.CreateJobRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	worst := 0
	check := maxDown(t, budget, &worst)
	armed := false // the budget holds once the service first ran whole
	sample := func(ts []*pelotonv1.Task) {
		if armed {
			check(ts)
		}
	}
	// waitFor polls the tasks (checking the budget at every sample) until
	// cond holds.
	waitFor := func(what string, within time.Duration, cond func([]*pelotonv1.Task) bool) {
		t.Helper()
		testutil.Eventually(t, within, what, func() error {
			resp, err := p.tasks.ListTasks(ctxT(t), &pelotonv1.ListTasksRequest{JobId: cr.JobId})
			if err != nil {
				return err
			}
			sample(resp.Tasks)
			if !cond(resp.Tasks) {
				return errors.New("not yet")
			}
			return nil
		})
	}
	waitFor("all running", 60*time.Second, allRunning(n))
	armed = true

	var onHost0 int
	resp, _ := p.tasks.ListTasks(ctxT(t), &pelotonv1.ListTasksRequest{JobId: cr.JobId})
	for _, tk := range resp.Tasks {
		if tk.Status.Host == "local-0" {
			onHost0++
		}
	}
	if _, err := p.api.Hosts.StartMaintenance(ctxT(t), &pelotonv1.StartMaintenanceRequest{Hosts: []string{"local-0"}}); err != nil {
		t.Fatal(err)
	}
	if onHost0 > 1 {
		// Kill while the drain is under way: some left, some not yet.
		waitFor("the drain under way", 60*time.Second, func(ts []*pelotonv1.Task) bool {
			left := 0
			for _, tk := range ts {
				if tk.Status.Host == "local-0" && tk.Status.State == pelotonv1.TaskState_RUNNING {
					left++
				}
			}
			return left < onHost0
		})
	}
	p.kill()
	p = startUp(t, bin, dir)
	waitFor("every instance running off the drained host", 120*time.Second, func(ts []*pelotonv1.Task) bool {
		for _, tk := range ts {
			if tk.Status.Host == "local-0" {
				return false
			}
		}
		return allRunning(n)(ts)
	})
	testutil.Eventually(t, 60*time.Second, "local-0 drained after the restart", func() error {
		hs, err := p.api.Hosts.ListHosts(ctxT(t), &pelotonv1.ListHostsRequest{})
		if err == nil && len(hs.Hosts) > 0 && hs.Hosts[0].Name == "local-0" && hs.Hosts[0].State == pelotonv1.HostState_HOST_DRAINED {
			return nil
		}
		return fmt.Errorf("hosts %v (%v)", hs, err)
	})
	if _, err := p.api.Hosts.CompleteMaintenance(ctxT(t), &pelotonv1.CompleteMaintenanceRequest{Hosts: []string{"local-0"}}); err != nil {
		t.Fatal(err)
	}

	next := proto.Clone(spec).(*pelotonv1.JobSpec)
	next.DefaultSpec.Command = []string{"sh", "-c", "exec sleep 601 # " + logf.marker}
	cu, err := p.updates.CreateUpdate(ctxT(t), &pelotonv1.CreateUpdateRequest{JobId: cr.JobId, Spec: next,
		UpdateSpec: &pelotonv1.UpdateSpec{BatchSize: 1, MinReadySeconds: 1}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor("the update under way", 60*time.Second, func([]*pelotonv1.Task) bool {
		return p.update(t, cu.Update.Id).Status.InstancesDone >= 1
	})
	p.kill()
	p = startUp(t, bin, dir)
	waitFor("the update done", 120*time.Second, func(ts []*pelotonv1.Task) bool {
		u := p.update(t, cu.Update.Id)
		if u.Status.State != pelotonv1.UpdateState_UPDATE_SUCCEEDED {
			if u.Status.State != pelotonv1.UpdateState_UPDATE_ROLLING_FORWARD {
				t.Fatalf("after the kill the update is %v", u.Status)
			}
			return false
		}
		for _, tk := range ts {
			if tk.Status.SpecVersion != 2 {
				return false
			}
		}
		return allRunning(n)(ts)
	})
	t.Logf("at most %d of %d instances were down at once (budget %d)", worst, n, budget)
}

// jobEnd waits, at most within, until job id of p ends (SUCCEEDED or
// FAILED) and returns it.
func jobEnd(t *testing.T, p *upProcess, id string, within time.Duration) *pelotonv1.Job {
	t.Helper()
	var job *pelotonv1.Job
	testutil.Eventually(t, within, "job "+id+" to end", func() error {
		resp, err := p.jobs.GetJob(ctxT(t), &pelotonv1.GetJobRequest{JobId: id})
		if err != nil {
			return err
		}
		job = resp.Job
		switch job.Status.State {
		case pelotonv1.JobState_JOB_SUCCEEDED, pelotonv1.JobState_JOB_FAILED:
			return nil
		}
		return fmt.Errorf("%v", job.Status)
	})
	return job
}

// TestKill9NeverRedoesFinishedWork is the scenario of a crash in the middle
// of a batch job: 60 instances whose runs each work 12 s, `peloton up`
// killed with SIGKILL once all of them run and again as the first ends. Every run is started
// under a supervisor that outlives the control plane and records how the
// run ended, so the runs that ended while no stack watched, and those the
// restarted stacks adopted, end with their true exit codes: exactly 60 runs
// for 60 instances, every one SUCCEEDED with exit-zero. A run that exits 3
// is reported exit 3 across the restarts and retried per its restart
// policy only (one retry: two runs).
func TestKill9NeverRedoesFinishedWork(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts peloton up twice")
	}
	bin := buildPeloton(t)
	dir := t.TempDir()
	logf := newRunLog(t)
	const n = 60
	p := startUp(t, bin, dir)
	spec := batch("exactly-once", n, logf.command(12)...)
	spec.DefaultSpec.Resources.Cpu = 0.05
	cr, err := p.jobs.CreateJob(ctxT(t), &pelotonv1.CreateJobRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	line := func(what string) string {
		return "echo \"" + what + " fail/$PELOTON_INSTANCE_ID $PELOTON_RUN_ID $(date +%s%N)\" >> " + logf.path
	}
	failing := batch("fails-with-3", 1, "sh", "-c", line("start")+"; sleep 8; "+line("end")+"; exit 3 # "+logf.marker)
	failing.DefaultSpec.RestartPolicy = &pelotonv1.RestartPolicy{MaxFailures: 1, BackoffSeconds: 1}
	fr, err := p.jobs.CreateJob(ctxT(t), &pelotonv1.CreateJobRequest{Spec: failing})
	if err != nil {
		t.Fatal(err)
	}
	// The first crash once every run is under way, the second as the
	// first runs end: some of them end while no stack runs, the others are
	// adopted by the third stack, and so is the retry of the failing run.
	logged := func(what string, cond func(map[string][]span) error) {
		testutil.Eventually(t, 2*time.Minute, what, func() error {
			if _, err := os.Stat(logf.path); err != nil {
				return err // no run has started
			}
			return cond(logf.spans(t))
		})
	}
	logged("every run under way", func(spans map[string][]span) error {
		if len(spans) < n+1 {
			return fmt.Errorf("%d of %d runs started", len(spans), n+1)
		}
		return nil
	})
	p.kill()
	p = startUp(t, bin, dir)
	logged("a run of the job ended", func(spans map[string][]span) error {
		for inst, ss := range spans {
			for _, s := range ss {
				if !strings.HasPrefix(inst, "fail/") && s.end != 0 {
					return nil
				}
			}
		}
		return errors.New("none yet")
	})
	p.kill()
	p = startUp(t, bin, dir)

	job := jobEnd(t, p, cr.JobId, 3*time.Minute)
	if job.Status.State != pelotonv1.JobState_JOB_SUCCEEDED || job.Status.TaskCounts["SUCCEEDED"] != n {
		t.Fatalf("job ended %v with counts %v; want every instance SUCCEEDED", job.Status.State, job.Status.TaskCounts)
	}
	ts, err := p.tasks.ListTasks(ctxT(t), &pelotonv1.ListTasksRequest{JobId: cr.JobId})
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range ts.Tasks {
		if st := tk.Status; st.State != pelotonv1.TaskState_SUCCEEDED || st.Reason != "exit-zero" || st.ExitCode != 0 || st.RunId != 1 {
			t.Errorf("instance %d: %v %q exit %d run %d; want SUCCEEDED exit-zero, exit 0, its first run",
				tk.InstanceId, st.State, st.Reason, st.ExitCode, st.RunId)
		}
	}
	logf.checkNoOverlap(t, n+1)
	spans := logf.spans(t)
	runs := 0
	for inst, ss := range spans {
		if strings.HasPrefix(inst, "fail/") {
			continue
		}
		runs += len(ss)
	}
	if runs != n {
		t.Errorf("%d runs executed for %d instances; want exactly one each", runs, n)
	}

	fj := jobEnd(t, p, fr.JobId, 3*time.Minute)
	ft, err := p.tasks.ListTasks(ctxT(t), &pelotonv1.ListTasksRequest{JobId: fr.JobId})
	if err != nil || len(ft.Tasks) != 1 {
		t.Fatalf("ListTasks of the failing job: %v, %v", ft, err)
	}
	if st := ft.Tasks[0].Status; fj.Status.State != pelotonv1.JobState_JOB_FAILED || st.ExitCode != 3 || st.Reason != "exit-nonzero" {
		t.Errorf("the failing job ended %v, its task %v %q exit %d; want JOB_FAILED, exit-nonzero with exit 3",
			fj.Status.State, st.State, st.Reason, st.ExitCode)
	}
	if got := len(spans["fail/0"]); got != 2 {
		t.Errorf("the run that exits 3 ran %d times; want 2 (one retry, restartPolicy.maxFailures 1)", got)
	}
	if left := logf.leftovers(); left != "" {
		t.Errorf("processes of the runs still run:\n%s", left)
	}
}

// TestKill9WithSupervisorsRunsAgainOnce kills `peloton up` and every run's
// supervisor with SIGKILL, as a crash that takes the whole process tree but
// the runs would: how the runs end can then not be known, so each is
// reported LOST when it ends and runs again once, after it, never beside
// it, and the job still succeeds.
func TestKill9WithSupervisorsRunsAgainOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts peloton up")
	}
	bin := buildPeloton(t)
	dir := t.TempDir()
	logf := newRunLog(t)
	const n = 3
	p := startUp(t, bin, dir)
	cr, err := p.jobs.CreateJob(ctxT(t), &pelotonv1.CreateJobRequest{Spec: batch("sup-lost", n, logf.command(4)...)})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "every run started", func() error {
		if _, err := os.Stat(logf.path); err != nil {
			return err
		}
		if got := len(logf.spans(t)); got != n {
			return fmt.Errorf("%d of %d started", got, n)
		}
		return nil
	})
	p.kill()
	sups := supervisorsOf(t, dir)
	if len(sups) != n {
		t.Fatalf("found %d supervisors of %s, want %d", len(sups), dir, n)
	}
	for _, pid := range sups {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	p = startUp(t, bin, dir)
	if job := jobEnd(t, p, cr.JobId, 2*time.Minute); job.Status.State != pelotonv1.JobState_JOB_SUCCEEDED {
		t.Fatalf("job %v; want it to succeed after the lost runs ran again", job.Status)
	}
	logf.checkNoOverlap(t, n)
	for inst, ss := range logf.spans(t) {
		if len(ss) != 2 {
			t.Errorf("instance %s ran %d times; want twice (the lost run, then once again)", inst, len(ss))
		}
	}
}

// supervisorsOf lists the pids of the supervisors of runs under data dir.
func supervisorsOf(t *testing.T, dir string) []int {
	t.Helper()
	marker := []byte(supervise.SupervisorEnv + "=" + dir + "/")
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		for v := range bytes.SplitSeq(env, []byte{0}) {
			if bytes.HasPrefix(v, marker) {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}
