package cli

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/federation"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// result is what one in-process run of the CLI produced.
type result struct {
	stdout, stderr string
	code           int
}

// runCLI runs the CLI in-process with stdin, against PELOTON_SERVER unset,
// with a cluster runner that fails the test if it is reached.
func runCLI(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	return runWith(t, func(context.Context, cluster.Config) error {
		t.Errorf("cluster.Run called for %q", args)
		return nil
	}, stdin, args...)
}

func runWith(t *testing.T, run func(context.Context, cluster.Config) error, stdin string, args ...string) result {
	t.Helper()
	// The federation `up` starts beside its cluster: here it only waits,
	// as a federation with nothing to do would.
	return runFedWith(t, run, func(ctx context.Context, _ federation.Config) error { <-ctx.Done(); return nil }, stdin, args...)
}

// runFedWith is runWith with the federation's runner given too, for tests
// that look at what `serve federation` or `up` would run it with.
func runFedWith(t *testing.T, run func(context.Context, cluster.Config) error, runFed func(context.Context, federation.Config) error, stdin string, args ...string) result {
	t.Helper()
	return runEnvWith(t, nil, run, runFed, stdin, args...)
}

// runEnv is runCLI with exactly the environment env: no $HOME, no
// $PELOTON_* and no config file unless env says so.
func runEnv(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	return runEnvWith(t, env, func(context.Context, cluster.Config) error {
		t.Errorf("cluster.Run called for %q", args)
		return nil
	}, func(ctx context.Context, _ federation.Config) error { <-ctx.Done(); return nil }, "", args...)
}

func runEnvWith(t *testing.T, env map[string]string, run func(context.Context, cluster.Config) error, runFed func(context.Context, federation.Config) error, stdin string, args ...string) result {
	t.Helper()
	if len(args) > 0 && (args[0] == "up" || args[0] == "serve") {
		// The daemons' default --data-dir is relative (./peloton-data) and
		// `up` opens its archive there before it runs the stack: in a
		// directory of the test's own, never the source tree.
		t.Chdir(t.TempDir())
	}
	var out, errb bytes.Buffer
	a := newApp(&out, &errb)
	a.getenv = func(k string) string { return env[k] }
	a.runCluster = run
	a.runFederation = runFed
	a.poll = 10 * time.Millisecond
	a.updatePoll = 20 * time.Millisecond
	code := execute(a, args, strings.NewReader(stdin))
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

// jobBuilder builds Job fixtures: makeJob("j1").Name("hello").Obj().
type jobBuilder struct{ j *pelotonv1.Job }

func makeJob(id string) *jobBuilder {
	return &jobBuilder{j: &pelotonv1.Job{
		Id:     id,
		Spec:   &pelotonv1.JobSpec{Type: pelotonv1.JobType_BATCH, Pool: "/default"},
		Status: &pelotonv1.JobStatus{},
	}}
}

func (b *jobBuilder) Name(n string) *jobBuilder { b.j.Spec.Name = n; return b }
func (b *jobBuilder) Instances(n uint32) *jobBuilder {
	b.j.Spec.InstanceCount = n
	return b
}
func (b *jobBuilder) State(s pelotonv1.JobState) *jobBuilder { b.j.Status.State = s; return b }
func (b *jobBuilder) Message(m string) *jobBuilder           { b.j.Status.Message = m; return b }
func (b *jobBuilder) Tasks(state string, n uint32) *jobBuilder {
	if b.j.Status.TaskCounts == nil {
		b.j.Status.TaskCounts = map[string]uint32{}
	}
	b.j.Status.TaskCounts[state] = n
	return b
}
func (b *jobBuilder) Created(t time.Time) *jobBuilder {
	b.j.Status.CreateTime = timestamppb.New(t)
	return b
}
func (b *jobBuilder) Obj() *pelotonv1.Job { return b.j }

// makeTask builds a Task fixture.
func makeTask(job string, inst uint32, state pelotonv1.TaskState) *pelotonv1.Task {
	return &pelotonv1.Task{
		JobId:      job,
		InstanceId: inst,
		TaskId:     job + "-" + strconv.FormatUint(uint64(inst), 10) + "-1",
		Status:     &pelotonv1.TaskStatus{State: state, RunId: 1},
	}
}
