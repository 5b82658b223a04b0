package history

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// jobBuilder makes archived jobs for tests and benchmarks, shaped as the
// job manager leaves a finished batch job: one spec version (or a few),
// each instance's final run with the transitions a run goes through, on
// hosts of a large cluster, at nanosecond times.
type jobBuilder struct {
	j        *Job
	n        int // instances
	seed     uint64
	versions int
}

// makeJob starts a job of cluster c with id id: one instance, created at
// 2030-01-02 03:04:05 UTC, succeeded, named after its id, in pool /default.
func makeJob(c, id string) *jobBuilder {
	created := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	spec := &pelotonv1.JobSpec{
		Name: "job-" + id, Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 1,
		Sla:         &pelotonv1.SlaSpec{Priority: 1, MaximumUnavailableInstances: 1},
		Description: "a batch job made by history's tests",
		DefaultSpec: &pelotonv1.TaskSpec{
			Command:       []string{"/bin/sh", "-c", "process-shard --input s3://bucket/input --output s3://bucket/output"},
			Env:           map[string]string{"SHARDS": "1000", "MODE": "full"},
			Resources:     &pelotonv1.Resources{Cpu: 1, MemoryMb: 512, DiskMb: 1024},
			RestartPolicy: &pelotonv1.RestartPolicy{MaxFailures: 3},
		},
	}
	return &jobBuilder{
		j: &Job{
			Cluster: c, ID: id,
			Versions: []*pelotonv1.JobVersion{{Version: 1, Spec: spec, CreateTime: timestamppb.New(created), Cause: "created"}},
			Status: &pelotonv1.JobStatus{
				State: pelotonv1.JobState_JOB_SUCCEEDED, GoalState: pelotonv1.JobState_JOB_SUCCEEDED, SpecVersion: 1,
				CreateTime: timestamppb.New(created), Version: 7,
			},
			ArchiveTime: created.Add(25 * time.Hour),
		},
		n:        1,
		seed:     1,
		versions: 1,
	}
}

func (b *jobBuilder) spec() *pelotonv1.JobSpec { return b.j.Versions[0].Spec }

func (b *jobBuilder) name(n string) *jobBuilder { b.spec().Name = n; return b }
func (b *jobBuilder) pool(p string) *jobBuilder { b.spec().Pool = p; return b }
func (b *jobBuilder) state(s pelotonv1.JobState) *jobBuilder {
	b.j.Status.State = s
	return b
}
func (b *jobBuilder) labels(kv ...string) *jobBuilder {
	b.spec().Labels = map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		b.spec().Labels[kv[i]] = kv[i+1]
	}
	return b
}
func (b *jobBuilder) created(t time.Time) *jobBuilder {
	for _, v := range b.j.Versions {
		v.CreateTime = timestamppb.New(t)
	}
	b.j.Status.CreateTime = timestamppb.New(t)
	return b
}
func (b *jobBuilder) instances(n int) *jobBuilder { b.n = n; return b }
func (b *jobBuilder) seeded(s uint64) *jobBuilder { b.seed = s; return b }

// specVersions gives the job n spec versions (scales, an update), the last
// in force.
func (b *jobBuilder) specVersions(n int) *jobBuilder { b.versions = n; return b }

// obj finishes the job: its versions, its instances' runs and the status's
// counts and times.
func (b *jobBuilder) obj() *Job {
	j := b.j
	rng := rand.New(rand.NewPCG(b.seed, 42))
	created := j.Status.CreateTime.AsTime()
	base := b.spec()
	base.InstanceCount = uint32(b.n)
	for v := 2; v <= b.versions; v++ {
		s := cloneSpec(base)
		s.DefaultSpec.Env["VERSION"] = fmt.Sprint(v)
		s.InstanceCount = uint32(b.n)
		j.Versions = append(j.Versions, &pelotonv1.JobVersion{Version: uint64(v), Spec: s,
			CreateTime: timestamppb.New(created.Add(time.Duration(v) * time.Minute)), Cause: fmt.Sprintf("update u-%d", v)})
		j.Updates = append(j.Updates, &pelotonv1.Update{Id: fmt.Sprintf("u-%d", v), JobId: j.ID,
			Spec: &pelotonv1.UpdateSpec{BatchSize: 10}, FromVersion: uint64(v - 1), ToVersion: uint64(v), Cause: "update",
			Status: &pelotonv1.UpdateStatus{State: pelotonv1.UpdateState_UPDATE_SUCCEEDED, InstancesTotal: uint32(b.n),
				InstancesDone: uint32(b.n), CreateTime: timestamppb.New(created.Add(time.Duration(v) * time.Minute))}})
	}
	j.Status.SpecVersion = uint64(b.versions)
	counts := map[string]uint32{}
	j.Tasks = make([]*pelotonv1.TaskStatus, b.n)
	last := created
	for i := range j.Tasks {
		t := runOf(rng, created, i, b.versions)
		j.Tasks[i] = t
		counts[t.State.String()]++
		if c := t.CompletionTime.AsTime(); c.After(last) {
			last = c
		}
	}
	j.Status.TaskCounts = counts
	j.Status.StartTime = timestamppb.New(created.Add(40 * time.Millisecond))
	j.Status.CompletionTime = timestamppb.New(last)
	return j
}

// runOf is instance i's final run: launched at about 10 per millisecond of
// the job's life, running for seconds to a minute, mostly succeeding.
func runOf(rng *rand.Rand, created time.Time, i, specVersion int) *pelotonv1.TaskStatus {
	at := created.Add(time.Duration(i)*100*time.Microsecond + time.Duration(rng.Int64N(int64(50*time.Millisecond))))
	step := func() time.Time {
		at = at.Add(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
		return at
	}
	host := fmt.Sprintf("host-%04d.zone-%d.example", rng.IntN(5000), rng.IntN(3))
	run := uint32(1)
	t := &pelotonv1.TaskStatus{GoalState: pelotonv1.TaskState_SUCCEEDED, SpecVersion: uint64(specVersion)}
	tr := func(s pelotonv1.TaskState, reason string) {
		t.History = append(t.History, &pelotonv1.TaskTransition{State: s, RunId: run, Time: timestamppb.New(step()), Reason: reason})
	}
	if rng.IntN(50) == 0 { // a failed first run, retried
		tr(pelotonv1.TaskState_INITIALIZED, "")
		tr(pelotonv1.TaskState_PENDING, "")
		tr(pelotonv1.TaskState_LAUNCHED, "")
		tr(pelotonv1.TaskState_RUNNING, "")
		at = at.Add(time.Duration(rng.Int64N(int64(10 * time.Second))))
		tr(pelotonv1.TaskState_FAILED, "exit-nonzero")
		t.FailureCount = 1
		t.PreviousHost = host
		host = fmt.Sprintf("host-%04d.zone-%d.example", rng.IntN(5000), rng.IntN(3))
		run = 2
	}
	tr(pelotonv1.TaskState_INITIALIZED, "")
	tr(pelotonv1.TaskState_PENDING, "")
	tr(pelotonv1.TaskState_LAUNCHED, "")
	tr(pelotonv1.TaskState_RUNNING, "")
	t.StartTime = timestamppb.New(at)
	at = at.Add(5*time.Second + time.Duration(rng.Int64N(int64(55*time.Second))))
	t.RunId, t.Host = run, host
	if rng.IntN(100) == 0 {
		t.State, t.ExitCode, t.Reason, t.Message = pelotonv1.TaskState_FAILED, 1, "exit-nonzero", "exited with code 1"
		t.FailureCount++
	} else {
		t.State, t.Reason, t.Message = pelotonv1.TaskState_SUCCEEDED, "exit-zero", "exited with code 0"
	}
	tr(t.State, t.Reason)
	t.CompletionTime = t.History[len(t.History)-1].Time
	t.UpdateTime = t.CompletionTime
	return t
}

func cloneSpec(s *pelotonv1.JobSpec) *pelotonv1.JobSpec {
	c := &pelotonv1.JobSpec{Name: s.Name, Type: s.Type, Pool: s.Pool, InstanceCount: s.InstanceCount, Sla: s.Sla,
		Labels: s.Labels, Description: s.Description}
	d := s.DefaultSpec
	c.DefaultSpec = &pelotonv1.TaskSpec{Command: d.Command, Image: d.Image, Resources: d.Resources, RestartPolicy: d.RestartPolicy,
		Env: map[string]string{}}
	for k, v := range d.Env {
		c.DefaultSpec.Env[k] = v
	}
	return c
}

// bigJob is a job of 100,000 instances in cluster "a", made once for the
// tests that store one; they only read it.
var bigJob = sync.OnceValue(func() *Job {
	return makeJob("a", "big").instances(100_000).specVersions(2).obj()
})
