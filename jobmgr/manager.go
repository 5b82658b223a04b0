package jobmgr

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peloton-sched/peloton/history"
	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/requestid"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
	"github.com/peloton-sched/peloton/sla"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/client-go/util/workqueue"
)

// Store layout, relative to the store's prefix:
//
//	jobs/<id>/runtime        JobStatus (task counts omitted; they are derived)
//	jobs/<id>/spec/<version> zstd-compressed JobVersion (the spec and why it was made)
//	tasks/<id>/<instance>    TaskStatus of the instance's current run
//	updates/<id>             Update (see update.go)
func jobRuntimeKey(id string) string        { return "jobs/" + id + "/runtime" }
func jobSpecKey(id string, v uint64) string { return fmt.Sprintf("jobs/%s/spec/%d", id, v) }
func taskKey(id string, inst uint32) string { return fmt.Sprintf("tasks/%s/%d", id, inst) }
func taskPrefix(id string) string           { return "tasks/" + id + "/" }
func jobPrefix(id string) string            { return "jobs/" + id + "/" }

// task is one instance: its current run's status and store revision.
type task struct {
	// cur is the instance's state as last decided: readers load it and
	// never wait (taskrec.go).
	cur atomic.Pointer[taskView]
	// writes queues the writers of the instance behind the one whose
	// write is on its way.
	writes turns[*taskWrite]
	// notBefore delays the next enqueue (backoff after a lost run), in
	// Unix nanoseconds; zero: no delay.
	notBefore atomic.Int64
}

// job is one job in memory. Its type and pool never change; its spec
// changes by new versions (version.go). The runtime is guarded by mu and
// only changed by the goal-state engine's job evaluation and by API calls.
type job struct {
	id   string
	typ  pelotonv1.JobType
	pool string
	// cur is the version in force; versions holds every version loaded.
	cur      atomic.Pointer[jobVersion]
	vmu      sync.RWMutex
	versions map[uint64]*jobVersion
	// taskSlice holds one task per instance ID (nil until created). The
	// slice is published whole: once visible it is never written in place,
	// only replaced (see fillTasks), so readers need no lock to index it.
	taskSlice atomic.Pointer[[]*task]
	// lr is the state only long-running jobs have (longrunning.go).
	lr longRunning
	// requestID is the request id the job was created with, if any
	// (index.go); set before the job is visible.
	requestID string
	// collectNotBefore holds the collector off the job until then
	// (collect.go); guarded by mu.
	collectNotBefore time.Time
	// loadedAt is when a finished job was loaded on demand, and unloaded
	// is set once it left memory again (index.go): a writer still holding
	// it must not write through it. Guarded by mu.
	loadedAt time.Time
	unloaded bool

	// rec is the runtime record as last written: readers load it and never
	// wait; writes take turns (jobrec.go).
	rec    atomic.Pointer[jobView]
	writes turns[*jobWrite]
	// mu guards collectNotBefore, loadedAt and unloaded above; it is never
	// held across a store call.
	mu sync.Mutex
	// counts of instances per task state, maintained on every task write.
	counts [numTaskStates]atomic.Int32
	// goalKilled mirrors rt.GoalState == KILLED for lock-free reads by task code.
	goalKilled atomic.Bool
}

// tasks returns the job's current task slice.
func (j *job) tasks() []*task { return *j.taskSlice.Load() }

// instanceCount is the number of instances the job has now.
func (j *job) instanceCount() uint32 { return uint32(len(j.tasks())) }

// checkInstance returns NotFound unless the job has instance inst.
func (j *job) checkInstance(inst uint32) error {
	if n := j.instanceCount(); inst >= n {
		return apierr.NotFound("job %s has no instance %d (instanceCount %d)", j.id, inst, n)
	}
	if j.removed(inst) {
		return apierr.NotFound("job %s has no instance %d: it was removed by a scale (spec.removedInstances)", j.id, inst)
	}
	return nil
}

// resourcesOf is what instance inst's current run holds.
func (j *job) resourcesOf(inst uint32) resources.Resources {
	return j.runVersion(inst).resourcesOf(inst)
}

// hosts returns the host the instance's last run ran on, which placement
// prefers for the next run when it still fits, and the host it is bound to
// (STATEFUL, DAEMON), the only one its runs may use.
func (j *job) hosts(inst uint32) (prev, bound string) {
	t := j.task(inst)
	if t == nil {
		return "", ""
	}
	rt := t.status()
	prev = rt.Host
	if prev == "" {
		prev = rt.PreviousHost
	}
	return prev, rt.BoundHost
}

// activeCount is how many instances are queued or hold a host: what
// sla.maximumRunningInstances bounds.
func (j *job) activeCount() int32 {
	var n int32
	for _, st := range []taskState{taskPending, taskReady, taskPlacing, taskPlaced, taskLaunching, taskLaunched, taskStarting, taskRunning, taskKilling, taskPreempting} {
		n += j.counts[st].Load()
	}
	return n
}

// Manager is the job manager.
type Manager struct {
	// selfScaleEnv is Options.SelfScaleEnv.
	selfScaleEnv func(jobID string) map[string]string
	store        store.Store
	batcher      *store.Batcher
	rm           Resources
	hm           Hosts
	// budgets is Options.Budgets (nil: none).
	budgets hostmgr.DisruptionBudgeter
	sla     sla.Evaluator
	// slaTimeout bounds each call to sla (longrunning.go).
	slaTimeout time.Duration
	log        *slog.Logger
	now        func() time.Time

	mu   sync.RWMutex
	jobs map[string]*job
	// held are the jobs that cannot be loaded because a record of theirs
	// is in quarantine (quarantine.go); guarded by mu.
	held map[string]bool
	// updates holds every update record by ID (update.go); guarded by mu.
	updates map[string]*update
	// finished are the finished jobs not in memory, by ID (index.go);
	// guarded by mu. A job is in jobs or in finished, never both.
	finished map[string]*finishedJob
	// loadMu makes loads of finished jobs one at a time (index.go).
	loadMu sync.Mutex
	// history is the archive of finished jobs, cluster the name they are
	// archived under, and collect the collector's settings (collect.go).
	history history.Store
	cluster string
	collect CollectOptions
	// archiveErr is the collector's last failure (collect.go).
	archiveErr archiveErr

	queue       workqueue.TypedDelayingInterface[string]
	workers     int
	launchers   int
	lostBackoff time.Duration
	// foreign adopts work other clients hand to Peloton (foreign.go); nil
	// when the backend has none.
	foreign *foreignCtl
	// retry holds the task events whose write failed (retry.go).
	retryMu sync.Mutex
	retry   unwritten
	// reconciler state (reconcile.go).
	recon reconciler
	// unverified: waiting instances whose run the backend must be asked
	// about before they run (unrecorded.go).
	unverified unverified
	// runCtx is the engine's context, set by Start; retries scheduled for
	// later use it so they stop with the engine.
	runCtx context.Context
	wg     sync.WaitGroup
	// own holds the goroutines spawn started (owned.go); ownStopped says
	// Wait has begun, so none may start.
	ownMu      sync.Mutex
	ownStopped bool
	own        sync.WaitGroup

	// The parts of Manager (parts.go); each shares this state and its
	// locks.
	upd   *Updates
	arch  *Archive
	eng   *engine
	recs  *reconcilers
	adopt *adoption
	rw    *recordWriter
	// watch tells watchers of published views (watch.go).
	watch *Watches
}

// Options tunes a Manager.
type Options struct {
	Logger *slog.Logger
	// Workers is the number of goal-state engine workers (default 16).
	Workers int
	// Launchers is the number of goroutines turning placements into launches.
	// Each records a run and waits for that write's group commit, then waits
	// on the backend (a pod create on Kubernetes), so how many run at once
	// bounds the launch rate. The default keeps the batcher's txns full while
	// the rest wait on the backend: its PipelineOps plus 256 (1,024 with the
	// batcher's defaults). With 256, launches waited on commits with a third
	// of the CPU idle (docs/benchmarks.md, batch).
	Launchers int
	// LostBackoff delays re-running an instance whose run was lost (default 1s).
	LostBackoff time.Duration
	// SLA is the evaluator every voluntary disruption of a long-running
	// job's instances asks (default: a new in-process one).
	SLA sla.Evaluator
	// SLATimeout bounds each call to the evaluator (default 5s). A call that
	// times out is not a grant: the disruption waits and asks again.
	SLATimeout time.Duration
	// ReconcileEvery is how often every run jobmgr believes active is
	// compared with what the backend reports (default 10s; reconcile.go).
	ReconcileEvery time.Duration
	// History is the archive finished jobs move to once their time to
	// live has passed (collect.go); nil: finished jobs stay in the store
	// until deleted.
	History history.Store
	// ClusterName is the name jobs are archived under (required with
	// History).
	ClusterName string
	// Collect tunes the collector of finished jobs.
	Collect CollectOptions
	// Budgets, if set, is told each SERVICE and STATEFUL job's disruption
	// budget when it changes (the backend, when it keeps budgets: the
	// kubernetes backend's PodDisruptionBudgets). Runs carry it anyway
	// (LaunchSpec.Budget); this is for changes between launches.
	Budgets hostmgr.DisruptionBudgeter
	// SelfScaleEnv, if set, is the environment the runs of a self-scaling
	// job (spec.selfScale) get besides their own: EnvJobToken, EnvServer
	// and EnvAPI.
	SelfScaleEnv func(jobID string) map[string]string
}

// New builds a job manager. Start loads state and starts the engine.
func New(st store.Store, b *store.Batcher, rm Resources, hm Hosts, opts Options) *Manager {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Workers == 0 {
		opts.Workers = 16
	}
	if opts.Launchers == 0 {
		opts.Launchers = 256
		if b != nil {
			opts.Launchers += b.PipelineOps()
		}
	}
	if opts.LostBackoff == 0 {
		opts.LostBackoff = time.Second
	}
	if opts.SLA == nil {
		opts.SLA = sla.NewLocal(nil)
	}
	if opts.SLATimeout == 0 {
		opts.SLATimeout = defaultSLATimeout
	}
	m := &Manager{selfScaleEnv: opts.SelfScaleEnv, store: st, batcher: b, rm: rm, hm: hm, budgets: opts.Budgets, sla: opts.SLA, slaTimeout: opts.SLATimeout, updates: map[string]*update{}, log: opts.Logger.With("component", "jobmgr"), now: time.Now,
		finished: map[string]*finishedJob{}, history: opts.History, cluster: opts.ClusterName, collect: opts.Collect.withDefaults(),
		jobs: map[string]*job{}, held: map[string]bool{}, queue: newWorkQueue(), workers: opts.Workers, launchers: opts.Launchers, lostBackoff: opts.LostBackoff,
		retry: unwritten{byRun: map[string][]hostmgr.TaskEvent{}, wake: make(chan struct{}, 1)}, recon: newReconciler(opts.ReconcileEvery)}
	attachParts(m)
	rm.SetJobChecker(m.poolHasJobs)
	return m
}

func (m *Manager) poolHasJobs(pool string) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, j := range m.jobs {
		if j.pool == pool {
			return true
		}
	}
	for _, f := range m.finished {
		if f.summary.GetSpec().GetPool() == pool {
			return true
		}
	}
	return false
}

func (m *Manager) getJob(id string) (*job, error) {
	m.mu.RLock()
	j, ok := m.jobs[id]
	m.mu.RUnlock()
	if !ok {
		if id == "" {
			return nil, apierr.Invalid("jobId", "required")
		}
		// A finished job is loaded when someone asks for it.
		if j, err := m.arch.loadFinished(id); err != nil {
			return nil, apierr.Unavailable("load finished job %s from the store: %v", id, err)
		} else if j != nil {
			return j, nil
		}
		if m.eng.isHeld(id) {
			return nil, heldError(id)
		}
		return nil, apierr.NotFound("job %s does not exist", id)
	}
	return j, nil
}

func newJobID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// CreateJob validates spec, stores it and returns the new job's ID. Tasks are
// created asynchronously by the engine, so a 100,000-instance job returns at
// once; if the process dies before they exist, the engine creates them after
// restart.
func (m *Manager) CreateJob(ctx context.Context, spec *pelotonv1.JobSpec) (string, error) {
	return m.CreateJobOnce(ctx, spec, requestid.Request{})
}

// CreateJobOnce is CreateJob made safe to retry by r (see package
// requestid): if r was carried out before it returns the job it created and
// creates nothing; otherwise the job and r's record are stored in one
// transaction.
func (m *Manager) CreateJobOnce(ctx context.Context, spec *pelotonv1.JobSpec, r requestid.Request) (string, error) {
	var id string
	done, err := requestid.WriteFirst(ctx, m.store, r, m.now(), func(o requestid.Outcome) error {
		var err error
		id, err = m.createJob(ctx, spec, r.ID, func(id string) []store.Op { return o.Ops(r, id, m.now()) })
		return err
	}, func(err error) bool {
		// Not a race with a retry of r (that is a conflict): a record of
		// r found now would be this very create's, which is being undone.
		return errors.As(err, new(unsureCreate))
	})
	if err != nil || done != "" {
		return done, err
	}
	return id, nil
}

// createJob validates and stores a new job; with(id) are more writes for
// the job's own transaction.
func (m *Manager) createJob(ctx context.Context, spec *pelotonv1.JobSpec, requestID string, with func(id string) []store.Op) (string, error) {
	spec, err := m.CheckCreateJob(spec)
	if err != nil {
		return "", err
	}
	id := newJobID()
	if err := m.storeJob(ctx, id, spec, requestID, with(id)...); err != nil {
		return "", err
	}
	return id, nil
}

// CheckCreateJob makes every check CreateJob makes of spec and returns the
// spec as it would be stored (a copy, its pool resolved), storing nothing:
// a dry run of CreateJob.
func (m *Manager) CheckCreateJob(spec *pelotonv1.JobSpec) (*pelotonv1.JobSpec, error) {
	if err := validateJobSpec(spec, m.largestHost()); err != nil {
		return nil, err
	}
	pool, err := m.rm.CheckLeafPool(spec.Pool, "spec.pool")
	if err != nil {
		return nil, err
	}
	if spec.Foreign != nil {
		return nil, apierr.Invalid("spec.foreign", "set by Peloton for the jobs it adopts from Kubernetes; a job you create cannot have it")
	}
	if len(spec.RemovedInstances) > 0 {
		return nil, apierr.Invalid("spec.removedInstances", "set by Peloton when a scale removes instances; a job you create cannot have it")
	}
	spec = proto.Clone(spec).(*pelotonv1.JobSpec)
	spec.Pool = pool
	return spec, nil
}

// storeJob stores a new job, validated and with its pool resolved, and
// hands it to the engine. requestID is the request id it was created with
// (if any); extra are more writes for the same transaction.
func (m *Manager) storeJob(ctx context.Context, id string, spec *pelotonv1.JobSpec, requestID string, extra ...store.Op) error {
	created := m.now()
	jv, err := newJobVersion(1, spec, created, "created")
	if err != nil {
		return err
	}
	enc, err := encodeVersion(jv.record())
	if err != nil {
		return fmt.Errorf("encode spec: %w", err)
	}
	enc, undoChunks, err := m.versionRecord(ctx, id, 1, enc)
	if err != nil {
		return apierr.Unavailable("the store (etcd) did not take the job's spec; nothing was created, try again: %v", err)
	}
	// Chunks of a spec whose job surely was not created go at once; those
	// of a create that may have landed stay for settleCreate's check and
	// the next start's sweep.
	keepChunks := false
	defer func() {
		if undoChunks != nil && !keepChunks {
			undoChunks()
		}
	}()
	rt := &pelotonv1.JobStatus{State: pelotonv1.JobState_JOB_INITIALIZED, GoalState: goalOf(spec.Type), SpecVersion: 1, CreateTime: timestamppb.New(created)}
	rtb, err := proto.Marshal(rt)
	if err != nil {
		return fmt.Errorf("jobmgr: encode job %s runtime: %w", id, err)
	}
	live, err := liveIndexOp(id, requestID)
	if err != nil {
		return err
	}
	// start hands the job the store took (at rev) to the engine; false if
	// it has it already (a restart's recovery found it).
	start := func(rev int64) bool {
		j := newJob(id, jv, rt, rev)
		j.requestID = requestID
		m.mu.Lock()
		if m.jobs[id] != nil {
			m.mu.Unlock()
			return false
		}
		m.jobs[id] = j
		m.mu.Unlock()
		m.watch.jobChanged(id)
		m.queue.Add(id)
		return true
	}
	ops := append([]store.Op{
		store.Put(jobSpecKey(id, 1), enc, store.MustNotExist),
		store.Put(jobRuntimeKey(id), rtb, store.MustNotExist),
		live}, extra...)
	// Group-committed: creates arriving together (a federation's batch,
	// many submitters) share an etcd txn, each still all or nothing.
	rev, err := m.batcher.WriteTxn(ctx, ops...)
	if err != nil {
		if errors.Is(err, store.ErrConflict) {
			return apierr.Unavailable("store job: %v", err)
		}
		keepChunks = true
		if requestID == "" {
			// The client is told the job was not created; should the
			// write land after all, it is removed (settleCreate).
			m.settleCreate(id, ops, nil)
			return unsureCreate{apierr.Unavailable("the store (etcd) did not take the job; nothing was created, try again: %v", err)}
		}
		// With a request id, a job that landed is kept: a retry under the
		// id may be answered with it at any moment (the record commits
		// with the job), so removing it could take a job from a client
		// told it exists. The retry finds it, or creates it if it did not
		// land.
		m.settleCreate(id, ops, start)
		return unsureCreate{apierr.Unavailable("the store (etcd) did not answer whether it took the job; retry with the same request id: the retry answers with the job if it was created, and creates it if not: %v", err)}
	}
	keepChunks = true
	metrics.StoreWrites.WithLabelValues("job").Add(2)
	start(rev)
	m.log.Info("job created", "job", id, "name", spec.Name, "instances", spec.InstanceCount, "pool", spec.Pool)
	return nil
}

// newJob builds a job in memory whose version in force is cur.
func newJob(id string, cur *jobVersion, rt *pelotonv1.JobStatus, rev int64) *job {
	j := &job{id: id, typ: cur.spec.Type, pool: cur.spec.Pool, versions: map[uint64]*jobVersion{}}
	j.publishJob(&jobView{rt: rt, rev: rev})
	j.addVersion(cur, true)
	ts := make([]*task, cur.extent)
	j.taskSlice.Store(&ts)
	return j
}

// goalOf is the goal state of a new job: batch work runs to completion,
// long-running work runs until cancelled.
func goalOf(t pelotonv1.JobType) pelotonv1.JobState {
	if isLongRunning(t) {
		return pelotonv1.JobState_JOB_RUNNING
	}
	return pelotonv1.JobState_JOB_SUCCEEDED
}

// jobProto renders a job for the API.
func (m *Manager) jobProto(j *job) *pelotonv1.Job {
	rec := j.view()
	st := proto.Clone(rec.rt).(*pelotonv1.JobStatus)
	st.Version = uint64(rec.rev)
	st.TaskCounts = map[string]uint32{}
	for s := range j.counts {
		if n := j.counts[s].Load(); n > 0 {
			st.TaskCounts[pelotonv1.TaskState(s).String()] = uint32(n)
		}
	}
	return &pelotonv1.Job{Id: j.id, Spec: j.spec(), Status: st}
}

// GetJob returns one job.
func (m *Manager) GetJob(id string) (*pelotonv1.Job, error) {
	j, err := m.getJob(id)
	if err != nil {
		return nil, err
	}
	out := m.jobProto(j)
	waiting := out.Status.TaskCounts[taskPending.String()] + out.Status.TaskCounts[taskInitialized.String()]
	if !m.hm.Substrate().Reachable {
		// A launched run's start is the substrate's to carry out.
		waiting += out.Status.TaskCounts[taskLaunched.String()]
	}
	if out.Status.Message == "" && waiting > 0 {
		out.Status.Message = m.pendingReason(j)
	}
	if waiting > 0 {
		out.Status.Reservation = m.rm.JobHostReservation(j.id)
	}
	if isLongRunning(j.typ) {
		out.Status.Healthy, out.Status.Updated = j.serving(out.Status.SpecVersion)
		if fr, ok := m.sla.(sla.FallbackReporter); ok {
			out.Status.SlaFallback = fr.InFallback(j.id)
		}
		if out.Status.SlaFallback && out.Status.Message == "" {
			out.Status.Message = fmt.Sprintf("the federation's SLA evaluator cannot be reached: disruptions are decided here, on this cluster's share of the service's budget (%d)",
				budgetOf(out.Spec))
		}
	}
	return out, nil
}

// serving counts the job's instances that serve now (available: running,
// and healthy if checked) and, of those, the ones whose run runs what
// spec version v asks of them: at v, or at a version that asks the same
// of that instance (an update replaces only the instances whose spec
// changes, and a rollback is a new version equal to an old one). Only
// GetJob pays for the scan: a deploy system watching a rollout asks for
// one job, not for lists.
func (j *job) serving(v uint64) (healthy, updated uint32) {
	want := j.version(v)
	memo := sameTaskMemo{}
	for inst, t := range j.tasks() {
		if t == nil {
			continue
		}
		tv := t.view()
		up, at := !tv.availableSince.IsZero(), tv.rt.GetSpecVersion()
		if !up {
			continue
		}
		healthy++
		if at == v {
			updated++
		} else if have := j.version(at); want != nil && have != nil && memo.same(have, want, uint32(inst)) {
			updated++
		}
	}
	return healthy, updated
}

// pendingReason says why the job's first waiting instance waits, in the
// words resmgr gave it (pool, resource kind and amount missing), so that
// `peloton job get` answers "why does my job not run" without a task list.
// While the backend's substrate is away, that is why (substrateWait).
// Only GetJob pays for the scan; it stops at the first waiting instance.
func (m *Manager) pendingReason(j *job) string {
	away := m.substrateWait()
	for inst, t := range j.tasks() {
		if t == nil {
			continue
		}
		tv := t.view()
		st, reason, msg := tv.rt.GetState(), tv.rt.GetReason(), tv.rt.GetMessage()
		if away != "" && waitsForSubstrate(st) {
			return fmt.Sprintf("instance %d waits: %s", inst, away)
		}
		if (st == taskPending || st == taskInitialized) && reason == hostmgr.ReasonLaunchBlocked {
			return fmt.Sprintf("instance %d waits: %s", inst, msg)
		}
		if st != taskPending {
			continue
		}
		if _, reason, ok := m.rm.TaskState(j.id, uint32(inst)); ok && reason != "" {
			return fmt.Sprintf("instance %d waits: %s", inst, reason)
		}
	}
	return ""
}

// substrateWait says why work waits while the backend's substrate is away
// ("the mesos master http://... is not reachable (for 12s): HTTP 404 Not
// Found: <!DOCTYPE html>"): hostmgr offers no host meanwhile, so no other
// reason matters until it answers. "" while it is reachable.
func (m *Manager) substrateWait() string {
	return m.hm.Substrate().Describe(m.now())
}

// waitsForSubstrate reports whether an instance in state s waits for the
// substrate while it is away: it is not placed yet, or launched and not
// started.
func waitsForSubstrate(s taskState) bool {
	switch s {
	case taskInitialized, taskPending, taskReady, taskPlacing, taskPlaced, taskLaunching, taskLaunched:
		return true
	}
	return false
}

// largestHost is what a task may ask for at most: the capacity of the
// largest host, per kind. A backend that never reached its substrate
// knows no host to judge by, so then nothing is refused for its size.
func (m *Manager) largestHost() resources.Resources {
	largest := m.hm.LargestHost()
	if largest.IsZero() && !m.hm.Substrate().Reachable {
		return resources.Unlimited
	}
	return largest
}

// ListJobs returns jobs matching every given filter, newest first.
func (m *Manager) ListJobs(pool string, states []pelotonv1.JobState, name string) ([]*pelotonv1.Job, error) {
	if pool != "" {
		var err error
		if pool, err = resmgr.NormalizePath(pool, "pool"); err != nil {
			return nil, err
		}
	}
	want := map[pelotonv1.JobState]bool{}
	for _, s := range states {
		want[s] = true
	}
	m.mu.RLock()
	js := make([]*job, 0, len(m.jobs))
	for _, j := range m.jobs {
		js = append(js, j)
	}
	m.mu.RUnlock()
	var out []*pelotonv1.Job
	for _, j := range js {
		if pool != "" && j.pool != pool {
			continue
		}
		if name != "" && !strings.Contains(j.spec().Name, name) {
			continue
		}
		p := m.jobProto(j)
		if len(want) > 0 && !want[p.Status.State] {
			continue
		}
		out = append(out, p)
	}
	// Finished jobs not in memory, as their index entries summarize them.
	out = append(out, m.arch.finishedSummaries(func(p *pelotonv1.Job) bool {
		return (pool == "" || p.Spec.GetPool() == pool) && (name == "" || strings.Contains(p.Spec.GetName(), name)) &&
			(len(want) == 0 || want[p.Status.GetState()])
	})...)
	sort.Slice(out, func(a, b int) bool {
		ta, tb := out[a].Status.CreateTime.AsTime(), out[b].Status.CreateTime.AsTime()
		if !ta.Equal(tb) {
			return ta.After(tb)
		}
		return out[a].Id < out[b].Id
	})
	return out, nil
}

// updateJobRuntime applies fn to a copy of the job's runtime and stores it
// with compare-and-swap, in its turn (jobrec.go). fn may run more than
// once, should the record have changed under it: it must only decide.
func (m *Manager) updateJobRuntime(ctx context.Context, j *job, fn func(rt *pelotonv1.JobStatus) error) error {
	return m.rw.writeJob(ctx, j, &jobWrite{decide: fn})
}

// errUnloaded is the error of a write through a copy of a finished job
// that has left memory meanwhile (index.go): the caller retries, and
// loads the job again.
func errUnloaded(id string) error {
	return apierr.Aborted("job %s changed concurrently; retry", id)
}

// CancelJob kills every instance of a job. Cancelling a finished job is a no-op.
func (m *Manager) CancelJob(ctx context.Context, id string) error {
	j, err := m.getJob(id)
	if err != nil {
		return err
	}
	if m.adopt.isForeign(j) {
		return refuseForeign(j, "delete or scale")
	}
	err = m.updateJobRuntime(ctx, j, func(rt *pelotonv1.JobStatus) error {
		if isJobTerminal(rt.State) {
			return nil
		}
		rt.GoalState = pelotonv1.JobState_JOB_KILLED
		rt.State = pelotonv1.JobState_JOB_KILLING
		rt.Message = "cancelled by user"
		return nil
	})
	if err != nil {
		return apierr.Unavailable("%v", err)
	}
	if u := m.upd.activeUpdate(id); u != nil {
		err := m.upd.saveUpdate(ctx, u, func(x *pelotonv1.Update) error {
			if !updateActive(x.Status.State) {
				return nil // it ended meanwhile
			}
			x.Status.State, x.Status.Message = updateAborted, "aborted: the job was cancelled"
			x.Status.CompletionTime, x.Status.InstancesCurrent = timestamppb.New(m.now()), nil
			return nil
		})
		if err != nil {
			m.log.Warn("abort the update of a cancelled job", "job", id, "err", err)
		}
	}
	m.queue.Add(id)
	return nil
}

// DeleteJob removes a finished job and all its records. The job's runtime
// record goes first in one transaction, so the job vanishes atomically; task
// and spec records are removed after it (and, should the process die in
// between, swept as orphans at the next start).
func (m *Manager) DeleteJob(ctx context.Context, id string) error {
	j, err := m.getJob(id)
	if err != nil {
		return err
	}
	rec := j.view()
	state, rev := rec.rt.State, rec.rev
	if !isJobTerminal(state) {
		return apierr.FailedPrecondition("job %s is %s; cancel it and wait for it to finish before deleting", id, state)
	}
	if _, err := m.store.Txn(ctx, removalOps(id, rev)...); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return apierr.Aborted("job %s changed concurrently; retry", id)
		}
		return apierr.Unavailable("delete job %s: %v", id, err)
	}
	m.forget(ctx, j)
	m.log.Info("job deleted", "job", id)
	return nil
}

// forget drops a job whose runtime is gone from memory, releases what it
// holds, and removes its other records.
func (m *Manager) forget(ctx context.Context, j *job) {
	id := j.id
	m.mu.Lock()
	delete(m.jobs, id)
	delete(m.finished, id)
	var updates []string
	for uid, u := range m.updates {
		if u.snapshot().JobId == id {
			updates = append(updates, uid)
			delete(m.updates, uid)
		}
	}
	m.mu.Unlock()
	m.watch.jobGone(id)
	m.recs.forgetSLAJob(id)
	for inst, t := range j.tasks() {
		m.rm.Release(id, uint32(inst))
		if t == nil || j.typ != pelotonv1.JobType_STATEFUL {
			continue
		}
		tv := t.view()
		host := tv.rt.BoundHost
		if host != "" {
			if err := m.hm.ReleaseVolume(ctx, host, volumeID(id, uint32(inst))); err != nil {
				m.log.Warn("release volume", "job", id, "instance", inst, "host", host, "err", err)
			}
		}
	}
	for _, uid := range updates {
		if _, err := m.batcher.Write(ctx, store.Delete(updateKey(uid), store.AnyRevision)); err != nil {
			m.log.Warn("delete update record", "update", uid, "err", err)
		}
	}
	m.arch.finishRemoval(ctx, id)
}

// sweep deletes every record under a job's prefixes, and reports whether
// it deleted them all.
func (m *Manager) sweep(ctx context.Context, id string) bool {
	var failed atomic.Bool
	for _, prefix := range []string{taskPrefix(id), jobPrefix(id)} {
		kvs, err := m.store.List(ctx, prefix)
		if err != nil {
			m.log.Warn("sweep job records", "job", id, "err", err)
			return false
		}
		var wg sync.WaitGroup
		for _, kv := range kvs {
			wg.Add(1)
			go func(key string) {
				defer wg.Done()
				if _, err := m.batcher.Write(ctx, store.Delete(key, store.AnyRevision)); err != nil {
					m.log.Warn("sweep record", "key", key, "err", err)
					failed.Store(true)
				}
			}(kv.Key)
		}
		wg.Wait()
	}
	return !failed.Load()
}

// RestartJob starts a new run of the given instances (default: every
// instance that has not succeeded). Running instances are killed first.
func (m *Manager) RestartJob(ctx context.Context, id string, instances []uint32) error {
	j, err := m.getJob(id)
	if err != nil {
		return err
	}
	if m.adopt.isForeign(j) {
		return refuseForeign(j, "restart")
	}
	for i, inst := range instances {
		if n := j.instanceCount(); inst >= n {
			return apierr.Invalid(fmt.Sprintf("instances[%d]", i), "instance %d does not exist: the job has %d", inst, n)
		}
		if j.removed(inst) {
			return apierr.Invalid(fmt.Sprintf("instances[%d]", i), "instance %d does not exist: it was removed by a scale", inst)
		}
	}
	rec := j.view()
	state := rec.rt.State
	if state == pelotonv1.JobState_JOB_INITIALIZED {
		return apierr.FailedPrecondition("job %s is still creating its tasks; retry in a moment", id)
	}
	if isLongRunning(j.typ) && !isJobTerminal(state) && !j.goalKilled.Load() {
		// A service in service restarts without breaking its SLA: a rolling restart.
		return m.upd.rollingRestart(ctx, j, instances)
	}
	err = m.updateJobRuntime(ctx, j, func(rt *pelotonv1.JobStatus) error {
		rt.GoalState = goalOf(j.typ)
		rt.Message = "restarted by user"
		if isJobTerminal(rt.State) || rt.State == pelotonv1.JobState_JOB_KILLING {
			rt.State = pelotonv1.JobState_JOB_PENDING
			rt.CompletionTime = nil
		}
		return nil
	})
	if err != nil {
		return apierr.Unavailable("%v", err)
	}
	explicit := len(instances) > 0
	if !explicit {
		for i, t := range j.tasks() {
			if t != nil {
				instances = append(instances, uint32(i))
			}
		}
	}
	for _, inst := range instances {
		t := j.task(inst)
		if t == nil {
			continue
		}
		var kill string
		var grace time.Duration
		err := m.updateTask(ctx, j, inst, func(rt *pelotonv1.TaskStatus) error {
			if !explicit && rt.State == taskSucceeded {
				return errSkip
			}
			switch {
			case isTerminal(rt.State):
				newRun(rt, rt.RunId+1, "restarted by user")
				rt.FailureCount = 0
			case isActive(rt.State):
				rt.DesiredRunId = rt.RunId + 1
				rt.GoalState = m.taskGoal(j)
				if rt.State != taskKilling {
					rt.State, rt.Reason, rt.Message = taskKilling, "restarting", "killing the current run to restart"
				}
				kill, grace = resmgr.RunTaskID(j.id, inst, rt.RunId), graceOf(j.version(rt.SpecVersion), inst)
			default: // initialized or pending: it will run anyway
				rt.GoalState = m.taskGoal(j)
			}
			return nil
		})
		if err != nil && !errors.Is(err, errSkip) {
			return apierr.Unavailable("%v", err)
		}
		if kill != "" {
			m.eng.killRun(ctx, j, inst, kill, grace)
		}
	}
	m.queue.Add(id)
	return nil
}

func (m *Manager) taskGoal(j *job) taskState {
	if j.goalKilled.Load() {
		return taskKilled
	}
	if isLongRunning(j.typ) {
		return taskRunning
	}
	return taskSucceeded
}

// killGrace is the kill grace period of instance inst's current run (see
// graceOf), from the instance's published view.
func (m *Manager) killGrace(j *job, inst uint32) time.Duration {
	return graceOf(j.runVersion(inst), inst)
}

// graceOf is the kill grace period of instance inst under version v.
func graceOf(v *jobVersion, inst uint32) time.Duration {
	g := v.sharedTaskSpec(inst).KillGracePeriodSeconds
	if g == 0 {
		g = DefaultKillGrace
	}
	return time.Duration(g) * time.Second
}

// newRun turns rt into the INITIALIZED start of run `run`, at the spec
// version a restart for an update asked for, if any.
func newRun(rt *pelotonv1.TaskStatus, run uint32, message string) {
	rt.State = taskInitialized
	rt.RunId = run
	rt.DesiredRunId = 0
	if rt.DesiredSpecVersion != 0 {
		rt.SpecVersion, rt.DesiredSpecVersion = rt.DesiredSpecVersion, 0
	}
	rt.RestartInPlace = false
	rt.Health, rt.Ports = pelotonv1.HealthState_HEALTH_UNKNOWN, nil
	if rt.Host != "" {
		rt.PreviousHost = rt.Host
	}
	rt.Host = ""
	rt.ExitCode = 0
	rt.Reason = ""
	rt.Message = message
	rt.StartTime = nil
	rt.CompletionTime = nil
}

var errSkip = errors.New("skip")

// maxHistory bounds the transitions kept in a task record, so the record
// stays well under 1 KiB.
const maxHistory = 16

// taskProto renders one instance for the API, overlaying resmgr's live state
// (READY, PLACING, PLACED and why it waits) on a PENDING task.
func (m *Manager) taskProto(j *job, inst uint32, withSpec bool) *pelotonv1.Task {
	out := &pelotonv1.Task{JobId: j.id, InstanceId: inst}
	t := j.task(inst)
	if t == nil {
		out.Status = &pelotonv1.TaskStatus{State: taskInitialized, Message: "task not created yet"}
	} else {
		tv := t.view()
		out.Status = proto.Clone(tv.rt).(*pelotonv1.TaskStatus)
	}
	if out.Status.State == taskPending {
		if st, reason, ok := m.rm.TaskState(j.id, inst); ok {
			if st == taskReady || st == taskPlacing || st == taskPlaced || st == taskLaunching {
				out.Status.State = st
			}
			out.Status.PendingReason = reason
		}
	}
	if limit := j.spec().GetSla().GetMaximumRunningInstances(); limit > 0 && out.Status.State == taskInitialized &&
		out.Status.GoalState != taskKilled && out.Status.PendingReason == "" {
		out.Status.PendingReason = fmt.Sprintf("waiting: at most %d instances of this job run at once (sla.maximumRunningInstances)", limit)
	}
	if waitsForSubstrate(out.Status.State) && out.Status.GoalState != taskKilled {
		if away := m.substrateWait(); away != "" {
			out.Status.PendingReason = away
		}
	}
	out.TaskId = resmgr.RunTaskID(j.id, inst, out.Status.RunId)
	out.Status.Revocable = j.spec().GetSla().GetRevocable()
	if out.Status.RunId > 0 {
		out.Status.Usage = m.hm.RunUsage(out.TaskId)
	}
	if withSpec {
		out.Spec = j.version(out.Status.SpecVersion).taskSpec(inst)
	}
	return out
}

// ListTasks returns a job's instances, optionally only those in some states.
func (m *Manager) ListTasks(jobID string, states []pelotonv1.TaskState) ([]*pelotonv1.Task, error) {
	j, err := m.getJob(jobID)
	if err != nil {
		return nil, err
	}
	want := map[pelotonv1.TaskState]bool{}
	for _, s := range states {
		want[s] = true
	}
	out := make([]*pelotonv1.Task, 0, len(j.tasks()))
	for i := range j.tasks() {
		if j.removed(uint32(i)) {
			continue
		}
		tp := m.taskProto(j, uint32(i), false)
		if len(want) > 0 && !want[tp.Status.State] {
			continue
		}
		out = append(out, tp)
	}
	return out, nil
}

// GetTask returns one instance with its effective spec.
func (m *Manager) GetTask(jobID string, inst uint32) (*pelotonv1.Task, error) {
	j, err := m.getJob(jobID)
	if err != nil {
		return nil, err
	}
	if err := j.checkInstance(inst); err != nil {
		return nil, err
	}
	return m.taskProto(j, inst, true), nil
}

// KillTask kills one instance; it ends KILLED and is not retried.
func (m *Manager) KillTask(ctx context.Context, jobID string, inst uint32) error {
	j, err := m.getJob(jobID)
	if err != nil {
		return err
	}
	if err := j.checkInstance(inst); err != nil {
		return err
	}
	if j.task(inst) == nil {
		return apierr.FailedPrecondition("job %s is still creating its tasks; retry in a moment", jobID)
	}
	if err := m.recs.disrupt(ctx, j, inst, "kill", "killed by user", defaultMinReady); err != nil {
		return slaError(err)
	}
	if err := m.killInstance(ctx, j, inst, "killed-by-user"); err != nil {
		return apierr.Unavailable("%v", err)
	}
	m.queue.Add(jobID)
	return nil
}

// killInstance drives one instance to KILLED: at once if it holds no host,
// through KILLING and the backend otherwise.
func (m *Manager) killInstance(ctx context.Context, j *job, inst uint32, reason string) error {
	var kill string
	err := m.updateTask(ctx, j, inst, func(rt *pelotonv1.TaskStatus) error {
		rt.GoalState = taskKilled
		rt.DesiredRunId = 0
		switch {
		case isTerminal(rt.State):
			return errSkip
		case isActive(rt.State):
			if rt.State != taskKilling {
				rt.State, rt.Reason = taskKilling, reason
			}
			kill = resmgr.RunTaskID(j.id, inst, rt.RunId)
		default:
			m.rm.Release(j.id, inst)
			rt.State, rt.Reason = taskKilled, reason
			rt.CompletionTime = timestamppb.New(m.now())
		}
		return nil
	})
	return m.eng.killDecided(ctx, j, inst, kill, m.killGrace(j, inst), err)
}

// Logs opens the output of one run of an instance (run 0 = the current run).
// Output without times per line, when opts asks for them, is a
// FailedPrecondition saying why.
func (m *Manager) Logs(ctx context.Context, jobID string, inst, run uint32, opts hostmgr.LogOptions) (io.ReadCloser, error) {
	j, err := m.getJob(jobID)
	if err != nil {
		return nil, err
	}
	if err := j.checkInstance(inst); err != nil {
		return nil, err
	}
	t := j.task(inst)
	if t == nil {
		return nil, apierr.FailedPrecondition("instance %d of job %s has not started yet", inst, jobID)
	}
	tv := t.view()
	cur, state, host := tv.rt.RunId, tv.rt.State, tv.rt.Host
	if run == 0 {
		run = cur
		if host == "" && !isActive(state) && run > 1 {
			run-- // a new run that has not started yet: show the last one that did
		}
	}
	if run > cur {
		return nil, apierr.NotFound("instance %d of job %s has no run %d yet (current run %d)", inst, jobID, run, cur)
	}
	rc, err := m.hm.Logs(ctx, resmgr.RunTaskID(jobID, inst, run), opts)
	if errors.Is(err, hostmgr.ErrUnknownTask) {
		return nil, apierr.NotFound("no output for run %d of instance %d of job %s (it has not started, or its host is gone)", run, inst, jobID)
	}
	if errors.Is(err, hostmgr.ErrNoLogTimes) {
		return nil, apierr.FailedPrecondition("since, timestamps: run %d of instance %d of job %s: %v", run, inst, jobID, err)
	}
	if err != nil {
		return nil, apierr.Unavailable("open logs: %v", err)
	}
	return rc, nil
}

// parseTaskID splits <jobID>-<instance>-<run>.
func parseTaskID(id string) (jobID string, inst, run uint32, ok bool) {
	i := strings.LastIndexByte(id, '-')
	if i < 0 {
		return "", 0, 0, false
	}
	r, err := strconv.ParseUint(id[i+1:], 10, 32)
	if err != nil {
		return "", 0, 0, false
	}
	k := strings.LastIndexByte(id[:i], '-')
	if k < 0 {
		return "", 0, 0, false
	}
	n, err := strconv.ParseUint(id[k+1:i], 10, 32)
	if err != nil {
		return "", 0, 0, false
	}
	return id[:k], uint32(n), uint32(r), true
}

// JobPool returns the pool job id runs in (its current version's), for
// deciding who may see and touch it.
func (m *Manager) JobPool(id string) (string, error) {
	j, err := m.getJob(id)
	if err != nil {
		return "", err
	}
	return j.spec().GetPool(), nil
}
