package cli

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestChangesHonourOutput: a command that changes something prints a line
// for the tables, and for -o json and -o yaml the object as the server has
// it afterwards (a deleted one: a document naming it), never the line.
func TestChangesHonourOutput(t *testing.T) {
	f := &fakeServer{states: []pelotonv1.JobState{pelotonv1.JobState_JOB_RUNNING}}
	addr := startFake(t, f)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"job", "create", "-f", "../../../examples/hello.yaml"}, "job-1\n"},
		{[]string{"job", "create", "-f", "../../../examples/hello.yaml", "-o", "json"}, "{\n  \"id\": \"job-1\",\n  \"spec\": {\n    \"name\": \"hello\","},
		{[]string{"job", "create", "-f", "../../../examples/hello.yaml", "-o", "yaml"}, "id: job-1\n"},
		{[]string{"job", "cancel", "job-1"}, "job job-1: cancel requested\n"},
		{[]string{"job", "cancel", "job-1", "-o", "json"}, `"state": "JOB_RUNNING"`},
		{[]string{"job", "restart", "job-1", "-o", "yaml"}, "id: job-1\n"},
		{[]string{"job", "wait", "job-1", "--for", "RUNNING", "-o", "json"}, `"id": "job-1"`},
		{[]string{"job", "delete", "job-1"}, "job job-1 deleted\n"},
		{[]string{"job", "delete", "job-1", "-o", "json"}, "{\n  \"deleted\": true,\n  \"jobId\": \"job-1\"\n}\n"},
		{[]string{"task", "kill", "job-1", "2", "-o", "json"}, `"instanceId": 2`},
		{[]string{"pool", "delete", "/a", "-o", "yaml"}, "deleted: true\npath: /a\n"},
	} {
		r := runCLI(t, "", append([]string{"--server", addr}, tc.args...)...)
		if r.code != exitOK || !strings.Contains(r.stdout, tc.want) {
			t.Errorf("%s: exit %d, stdout %q (want %q), stderr %q", tc.args, r.code, r.stdout, tc.want, r.stderr)
		}
		if o := strings.Join(tc.args, " "); strings.Contains(o, "-o") && strings.Contains(r.stdout, "requested") {
			t.Errorf("%s printed its line, not the object: %q", tc.args, r.stdout)
		}
	}
	if f.cancels != 2 || f.kills != 1 {
		t.Errorf("cancels %d, kills %d; want 2 and 1", f.cancels, f.kills)
	}

	// task logs prints the run's bytes: a document is not on offer, and
	// saying so beats ignoring -o.
	r := runCLI(t, "", "--server", addr, "task", "logs", "job-1", "0", "-o", "json")
	if r.code != exitUsage || !strings.Contains(r.stderr, "task logs prints the run's output as it was written") {
		t.Errorf("task logs -o json: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestJobCancelOfAFinishedJob: cancelling a job that already ended changes
// nothing, and says so instead of "cancel requested"; it still succeeds.
func TestJobCancelOfAFinishedJob(t *testing.T) {
	f := &fakeServer{states: []pelotonv1.JobState{pelotonv1.JobState_JOB_SUCCEEDED}}
	addr := startFake(t, f)
	r := runCLI(t, "", "--server", addr, "job", "cancel", "job-1")
	if r.code != exitOK || r.stdout != "job job-1 has already finished (JOB_SUCCEEDED): nothing to cancel\n" {
		t.Errorf("cancel of a finished job: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if f.cancels != 0 {
		t.Errorf("CancelJob called %d times for a finished job", f.cancels)
	}
}

func (f *fakeFederation) GetFederatedJob(_ context.Context, req *pelotonv1.GetFederatedJobRequest) (*pelotonv1.GetFederatedJobResponse, error) {
	return &pelotonv1.GetFederatedJobResponse{Job: &pelotonv1.FederatedJob{Id: req.GetJobId(), Cluster: "a"}}, nil
}

func (f *fakeFederation) KillFederatedJob(context.Context, *pelotonv1.KillFederatedJobRequest) (*pelotonv1.KillFederatedJobResponse, error) {
	return &pelotonv1.KillFederatedJobResponse{}, nil
}

// TestFedJobChangesHonourOutput: fed job create and kill print the
// federated job for -o json and -o yaml, as fed job get does.
func TestFedJobChangesHonourOutput(t *testing.T) {
	fed := startFakeFederation(t, &fakeFederation{})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"fed", "job", "create", "-f", "../../../examples/hello.yaml"}, "fed-1\n"},
		{[]string{"fed", "job", "create", "-f", "../../../examples/hello.yaml", "-o", "json"}, "{\n  \"id\": \"fed-1\","},
		{[]string{"fed", "job", "kill", "fed-1", "-o", "yaml"}, "id: fed-1\n"},
	} {
		r := runCLI(t, "", append([]string{"--federation", fed}, tc.args...)...)
		if r.code != exitOK || !strings.Contains(r.stdout, tc.want) {
			t.Errorf("%s: exit %d, stdout %q (want %q), stderr %q", tc.args, r.code, r.stdout, tc.want, r.stderr)
		}
	}
}

// TestTaskGetShowsHistory: task get's table ends with the instance's run
// history, oldest first, as README promises.
func TestTaskGetShowsHistory(t *testing.T) {
	task := makeTask("j1", 0, pelotonv1.TaskState_RUNNING)
	t0 := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	task.Status.RunId = 2
	task.Status.History = []*pelotonv1.TaskTransition{
		{State: pelotonv1.TaskState_RUNNING, RunId: 1, Time: timestamppb.New(t0)},
		{State: pelotonv1.TaskState_PREEMPTING, RunId: 1, Time: timestamppb.New(t0.Add(time.Minute)), Reason: "preempted by a higher priority"},
		{State: pelotonv1.TaskState_RUNNING, RunId: 2, Time: timestamppb.New(t0.Add(2 * time.Minute))},
	}
	got := render(t, formatTable, task, func(w io.Writer, wide bool) { writeTaskDetail(w, task, wide) })
	want := "\nHISTORY\n" +
		"TIME                   RUN   STATE        REASON\n" +
		"2026-03-04T05:06:07Z   1     RUNNING      -\n" +
		"2026-03-04T05:07:07Z   1     PREEMPTING   preempted by a higher priority\n" +
		"2026-03-04T05:08:07Z   2     RUNNING      -\n"
	if !strings.HasSuffix(got, want) || !strings.HasPrefix(got, "INSTANCE") {
		t.Errorf("task get:\n%s\nwant it to end with:\n%s", got, want)
	}
	// No history, no section.
	task.Status.History = nil
	if got := render(t, formatTable, task, func(w io.Writer, wide bool) { writeTaskDetail(w, task, wide) }); strings.Contains(got, "HISTORY") {
		t.Errorf("task get without history:\n%s", got)
	}
}

// TestJobGetShowsHealthyAndUpdated: job get of a long-running job shows how
// many instances serve and how many of those run the spec in force, as
// docs/federation.md promises; a batch job, for which the server does not
// count them, keeps its columns.
func TestJobGetShowsHealthyAndUpdated(t *testing.T) {
	job := makeJob("s1").Name("web").Instances(3).State(pelotonv1.JobState_JOB_RUNNING).Tasks("RUNNING", 3).Obj()
	job.Spec.Type = pelotonv1.JobType_SERVICE
	job.Status.Healthy, job.Status.Updated = 2, 1
	got := render(t, formatTable, job, func(w io.Writer, wide bool) { writeJobDetail(w, job, wide) })
	want := "" +
		"ID   NAME   TYPE      POOL       STATE         INSTANCES   TASKS       HEALTHY   UPDATED   CREATED\n" +
		"s1   web    SERVICE   /default   JOB_RUNNING   3           RUNNING=3   2         1         -\n"
	if got != want {
		t.Errorf("job get of a service:\n%s\nwant:\n%s", got, want)
	}
	batch := helloJob()
	if got := render(t, formatTable, batch, func(w io.Writer, wide bool) { writeJobDetail(w, batch, wide) }); strings.Contains(got, "HEALTHY") {
		t.Errorf("job get of a batch job:\n%s", got)
	}
}

// TestNumbersRefusedInWords: a bad number, as a flag or an argument, is
// refused naming it, without Go's parse errors.
func TestNumbersRefusedInWords(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"task", "logs", "j", "0", "--run", "-1"}, `Error: --run: "-1" is not a non-negative integer`},
		{[]string{"task", "logs", "j", "0", "--run", "4294967296"}, `Error: --run: "4294967296" is more than 4294967295`},
		{[]string{"task", "get", "j", "x1"}, `Error: instance: "x1" is not a non-negative integer`},
		{[]string{"task", "kill", "j", "--", "-1"}, `Error: instance: "-1" is not a non-negative integer`},
		{[]string{"task", "kill", "j", "-1"}, `Error: "-1" is not a non-negative integer`},
		{[]string{"job", "restart", "j", "--instances", "0,-2"}, `Error: --instances: "-2" is not a non-negative integer`},
		{[]string{"job", "wait", "j", "--for", "RUNNING", "--timeout", "soon"}, `Error: --timeout: "soon" is not a duration (e.g. 30s, 5m, 1h)`},
		{[]string{"update", "start", "j", "-f", "x.yaml", "--batch-size", "-1"}, `Error: --batch-size: "-1" is not a non-negative integer`},
	} {
		r := runCLI(t, "", tc.args...)
		line, _, _ := strings.Cut(r.stderr, "\n")
		if r.code != exitUsage || line != tc.want {
			t.Errorf("%s: exit %d, stderr %q; want %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

// TestUpdateWatchOutcome: update watch fails only for an update that failed,
// was aborted, or rolled back on its own; a rollback the user asked for is
// what they wanted. Only rollbackOnFailure rolls an update back on its own.
func TestUpdateWatchOutcome(t *testing.T) {
	mk := func(s pelotonv1.UpdateState, onFailure bool, msg string) *pelotonv1.Update {
		return &pelotonv1.Update{Id: "u1", Spec: &pelotonv1.UpdateSpec{RollbackOnFailure: onFailure},
			Status: &pelotonv1.UpdateStatus{State: s, Message: msg}}
	}
	for _, tc := range []struct {
		u       *pelotonv1.Update
		ok      bool
		message string
	}{
		{mk(pelotonv1.UpdateState_UPDATE_SUCCEEDED, false, ""), true, "update u1 is UPDATE_SUCCEEDED"},
		{mk(pelotonv1.UpdateState_UPDATE_ROLLED_BACK, false, ""), true, "update u1 is UPDATE_ROLLED_BACK, as asked"},
		{mk(pelotonv1.UpdateState_UPDATE_ROLLED_BACK, true, ""), false, "update u1 is UPDATE_ROLLED_BACK"},
		{mk(pelotonv1.UpdateState_UPDATE_FAILED, false, "2 instances failed"), false, "update u1 is UPDATE_FAILED: 2 instances failed"},
		{mk(pelotonv1.UpdateState_UPDATE_ABORTED, false, "aborted by user"), false, "update u1 is UPDATE_ABORTED: aborted by user"},
	} {
		ok, msg := updateOutcome(tc.u)
		if ok != tc.ok || msg != tc.message {
			t.Errorf("%v: got %v %q, want %v %q", tc.u.GetStatus().GetState(), ok, msg, tc.ok, tc.message)
		}
	}
}

// TestHostMessageNamesEachJobOnce: what holds a drain is said per instance
// by the server, and both maintenance and a move repeat it; the MESSAGE
// column names each job once, with its instances as ranges.
func TestHostMessageNamesEachJobOnce(t *testing.T) {
	note := "instance 0 of job web waits for its SLA (budget used); instance 1 of job web waits for its SLA (budget used); " +
		"instance 3 of job web waits for its SLA (budget used); STATEFUL instance 2 of job db holds its volume here: kill it or delete the job; and 2 more"
	h := &pelotonv1.Host{
		MaintenanceMessage: "draining: 5 tasks left; " + note,
		PartitionMessage:   "moving to partition batch: draining 5 tasks; " + note,
	}
	want := "draining: 5 tasks left; job web: instances 0-1,3 wait for its SLA (budget used); " +
		"job db: STATEFUL instance 2 holds its volume here: kill it or delete the job; and 2 more; moving to partition batch: draining 5 tasks"
	if got := hostMessage(h); got != want {
		t.Errorf("host message:\n got %q\nwant %q", got, want)
	}
	if got := hostMessage(&pelotonv1.Host{MaintenanceMessage: "drained: holds no tasks"}); got != "drained: holds no tasks" {
		t.Errorf("plain message: %q", got)
	}
}

// TestFedServiceCreateOfAJobSpec: a plain JobSpec given to fed service
// create is told the wrapper a federated service needs, not only that
// defaultSpec is an unknown field.
func TestFedServiceCreateOfAJobSpec(t *testing.T) {
	r := runCLI(t, "", "--federation", closedAddr(t), "fed", "service", "create", "-f", "../../../examples/hello.yaml")
	want := `Error: ../../../examples/hello.yaml: a federated service expects a job:/placement: wrapper, and this file is a JobSpec: put it under job: ` +
		`(with placement: saying where its instances run; see "peloton fed service create --help")` + "\n"
	if r.code != exitError || r.stderr != want {
		t.Errorf("exit %d, stderr %q\nwant %q", r.code, r.stderr, want)
	}
	// A misspelt wrapper is still named as such.
	r = runCLI(t, "jobs: {name: x}\n", "--federation", closedAddr(t), "fed", "service", "create", "-f", "-")
	if r.code != exitError || !strings.Contains(r.stderr, `unknown field "jobs" (did you mean "job"?)`) {
		t.Errorf("misspelt wrapper: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestJobGetShowsReservation: job get shows the hosts set aside for a
// waiting gang, what each holds and how much of it is idle.
func TestJobGetShowsReservation(t *testing.T) {
	job := helloJob()
	since := timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	job.Status.Reservation = &pelotonv1.GangReservation{Gang: "g1", FirstInstance: 4, Members: 4, Pool: "/default", Since: since,
		Hosts: []*pelotonv1.ReservedHost{{Name: "h1", Since: since, Held: &pelotonv1.Resources{Cpu: 8, MemoryMb: 1024}, Free: &pelotonv1.Resources{Cpu: 2, MemoryMb: 512}}}}
	got := render(t, formatTable, job, func(w io.Writer, wide bool) { writeJobDetail(w, job, wide) })
	for _, want := range []string{
		"reservation: gang g1 (instances 4-7) in pool /default since 2026-01-02T03:04:05Z, 1 host; setting hosts aside",
		"HOST   HELD CPU/MEM   IDLE CPU/MEM   SINCE\nh1     8/1024         2/512          2026-01-02T03:04:05Z\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("job get with a reservation:\n%s\nwant it to contain:\n%s", got, want)
		}
	}
	job.Status.Reservation.Complete = true
	if got := render(t, formatTable, job, func(w io.Writer, wide bool) { writeJobDetail(w, job, wide) }); !strings.Contains(got, "complete: the hosts hold the whole gang") {
		t.Errorf("complete reservation:\n%s", got)
	}
}
