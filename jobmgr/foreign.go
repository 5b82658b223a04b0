package jobmgr

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/apierr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
	"google.golang.org/protobuf/proto"
)

// Foreign jobs: work another system created and handed to Peloton to place
// (Kubernetes pods with schedulerName peloton, see hostmgr.ForeignSource).
// Each foreign task becomes one instance of a BATCH job that stands for its
// group: its gang, else its owner (a ReplicaSet, a Job, ...), else the bare
// pod. The job is admitted through its pool, preempted and gang-scheduled
// like any other; what differs is that Peloton never creates or re-creates
// its work. An instance is one pod for life: when its run ends (it
// finished, was preempted, or the pod was deleted) the instance ends, and
// a pod the owner creates in its place is a new instance of the same job.
// A job that ran out of instances comes back to life when new pods of its
// group arrive, except a gang's, whose next pods form a new job.
//
// Durable state: the job's versions in the store, as for any job, and on
// each pod the task ID it was adopted as (ForeignSource.Adopt). After a
// restart the pods that still wait are matched to their instances by that
// ID; instances whose pods are gone are ended.

// LabelForeignSource marks foreign jobs (value: the source, "kubernetes").
const LabelForeignSource = "peloton.io/source"

// foreignRetry is how long a foreign task that could not be adopted or
// launched waits before it is tried again, doubling up to foreignRetryMax.
const (
	foreignRetry    = 2 * time.Second
	foreignRetryMax = 2 * time.Minute
)

type instKey struct {
	job  string
	inst uint32
}

// foreignCtl turns foreign tasks into instances of foreign jobs.
type foreignCtl struct {
	m   *Manager
	src hostmgr.ForeignSource

	mu sync.Mutex
	// waiting holds the latest of each foreign task that waits for
	// placement, by UID.
	waiting map[string]hostmgr.ForeignTask
	// runOf and podOf map adopted tasks to their instances and back.
	runOf map[string]instKey
	podOf map[instKey]hostmgr.ForeignRef
	// backoff delays tasks whose adoption or launch failed.
	backoff map[string]retryState
	kick    chan struct{}
	// swept: the instances whose tasks went while no process watched
	// have been ended (sweep). Read and written by startForeign, then by
	// run alone.
	swept bool
}

type retryState struct {
	at    time.Time
	delay time.Duration
}

func (ad *adoption) isForeign(j *job) bool { return j.spec().GetForeign() != nil }

// refuseForeign is the error of API calls that would change a foreign job.
func refuseForeign(j *job, what string) error {
	f := j.spec().GetForeign()
	return apierr.FailedPrecondition("job %s stands for Kubernetes %s %s/%s, which Peloton only places; %s it through Kubernetes",
		j.id, f.GetKind(), f.GetNamespace(), f.GetName(), what)
}

// startForeign loads the foreign tasks there are, matches those Peloton
// adopted before a restart to their instances, ends the instances whose
// tasks are gone, and starts following changes. Called by Start after
// recovery and before the engine runs.
func (ad *adoption) startForeign(ctx context.Context) error {
	m := ad.m
	src := m.hm.Foreign()
	if src == nil {
		return nil
	}
	c := &foreignCtl{m: m, src: src, waiting: map[string]hostmgr.ForeignTask{}, runOf: map[string]instKey{},
		podOf: map[instKey]hostmgr.ForeignRef{}, backoff: map[string]retryState{}, kick: make(chan struct{}, 1)}
	m.foreign = c
	src.WatchForeign(c.changed)
	// While the substrate is away the source lists nothing yet, and
	// every instance would look as if its task had gone: the sweep waits
	// for the substrate (run).
	if m.hm.Substrate().Reachable {
		if err := c.sweep(ctx); err != nil {
			return err
		}
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		c.run(ctx)
	}()
	c.poke()
	return nil
}

// sweep matches the foreign tasks there are to the instances adopted
// before a restart, and ends the instances that wait for placement and
// whose tasks are not there any more; those already on a host are
// reconciled with the backend like every run.
func (c *foreignCtl) sweep(ctx context.Context) error {
	m := c.m
	for _, ft := range c.src.ForeignTasks() {
		c.changed(ft)
	}
	m.mu.RLock()
	var jobs []*job
	for _, j := range m.jobs {
		if m.adopt.isForeign(j) {
			jobs = append(jobs, j)
		}
	}
	m.mu.RUnlock()
	for _, j := range jobs {
		m.eng.fillTasks(j) // a job that had not created its tasks yet
		for inst, t := range j.tasks() {
			k := instKey{j.id, uint32(inst)}
			c.mu.Lock()
			_, mapped := c.podOf[k]
			c.mu.Unlock()
			if mapped || t == nil {
				continue
			}
			tv := t.view()
			st := tv.rt.State
			if !isTerminal(st) && !isActive(st) {
				if err := m.killInstance(ctx, j, uint32(inst), "pod-deleted"); err != nil {
					return fmt.Errorf("end instance %d of foreign job %s: %w", inst, j.id, err)
				}
			}
		}
	}
	c.swept = true
	return nil
}

func (c *foreignCtl) poke() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// changed takes one change of a foreign task from the source.
func (c *foreignCtl) changed(ft hostmgr.ForeignTask) {
	c.mu.Lock()
	k, adopted := c.runOf[ft.UID]
	if ft.TaskID != "" && !adopted {
		// Adopted by an earlier process: find its instance.
		if jobID, inst, _, ok := parseTaskID(ft.TaskID); ok && c.m.adopt.instanceWaits(jobID, inst) {
			k, adopted = instKey{jobID, inst}, true
			c.runOf[ft.UID], c.podOf[k] = k, ft.ForeignRef
		}
	}
	if ft.Gone || ft.Host != "" {
		delete(c.waiting, ft.UID)
		delete(c.backoff, ft.UID)
		if adopted {
			delete(c.runOf, ft.UID)
			if ft.Gone {
				delete(c.podOf, k)
			}
		}
		c.mu.Unlock()
		if adopted && c.m.adopt.instanceWaits(k.job, k.inst) {
			// Deleted, or bound by someone else, before Peloton placed it.
			reason := "pod-deleted"
			if !ft.Gone {
				reason = "bound-by-another-scheduler"
			}
			c.end(k, reason)
		}
		return
	}
	c.waiting[ft.UID] = ft
	c.mu.Unlock()
	c.poke()
}

// end kills an instance whose pod went away before it was placed.
func (c *foreignCtl) end(k instKey, reason string) {
	j, err := c.m.getJob(k.job)
	if err != nil || j.task(k.inst) == nil {
		return
	}
	ctx := c.m.runCtx
	if ctx == nil {
		ctx = context.Background()
	}
	if err := c.m.killInstance(ctx, j, k.inst, reason); err != nil {
		c.m.log.Warn("end a foreign instance whose pod went away", "job", k.job, "instance", k.inst, "err", err)
	}
	c.m.queue.Add(k.job)
}

// instanceWaits reports whether instance inst of job jobID exists and has
// not been launched or ended.
func (ad *adoption) instanceWaits(jobID string, inst uint32) bool {
	m := ad.m
	m.mu.RLock()
	j := m.jobs[jobID]
	m.mu.RUnlock()
	if j == nil {
		return false
	}
	if t := j.task(inst); t != nil {
		st := t.status().State
		return !isTerminal(st) && !isActive(st)
	}
	// Not created in memory yet: it waits if the spec has it.
	return inst < j.spec().InstanceCount
}

// refOf is the pod instance k stands for, or nil.
func (c *foreignCtl) refOf(k instKey) *hostmgr.ForeignRef {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.podOf[k]; ok {
		return &r
	}
	return nil
}

// launchFailed puts a pod whose launch failed back in line, after a
// backoff, as a new instance.
func (c *foreignCtl) launchFailed(k instKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.podOf[k]
	if !ok {
		return
	}
	delete(c.podOf, k)
	delete(c.runOf, r.UID)
	c.delayLocked(r.UID)
}

func (c *foreignCtl) delayLocked(uid string) {
	b := c.backoff[uid]
	b.delay = min(max(b.delay*2, foreignRetry), foreignRetryMax)
	b.at = c.m.now().Add(b.delay)
	c.backoff[uid] = b
}

// run adopts waiting foreign tasks, in batches: a burst of pods (a
// ReplicaSet scaled up) costs one new version of its job.
func (c *foreignCtl) run(ctx context.Context) {
	tick := time.NewTicker(foreignRetry)
	defer tick.Stop()
	var told time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.kick:
		case <-tick.C:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
		// Adopting and telling write to the substrate: while it is away
		// they wait, as the sweep does.
		if !c.m.hm.Substrate().Reachable {
			continue
		}
		if !c.swept {
			if err := c.sweep(ctx); err != nil {
				c.m.log.Warn("foreign tasks: ending the instances whose tasks went; trying again", "err", err)
				continue
			}
		}
		c.adoptWaiting(ctx)
		if now := c.m.now(); now.Sub(told) >= foreignTellEvery {
			told = now
			c.tellWaiting(ctx)
		}
	}
}

// foreignTellEvery is how often the reasons adopted foreign tasks wait
// are written back to them.
const foreignTellEvery = 5 * time.Second

// tellWaiting writes on each adopted foreign task that still waits why it
// does: what `peloton task list` says, for kubectl and autoscalers.
func (c *foreignCtl) tellWaiting(ctx context.Context) {
	c.mu.Lock()
	refs := make(map[instKey]hostmgr.ForeignRef, len(c.podOf))
	for k, r := range c.podOf {
		refs[k] = r
	}
	c.mu.Unlock()
	for k, r := range refs {
		j, err := c.m.getJob(k.job)
		if err != nil || j.task(k.inst) == nil {
			continue
		}
		st := c.m.taskProto(j, k.inst, false).Status
		if isTerminal(st.State) || isActive(st.State) || st.PendingReason == "" {
			continue
		}
		c.src.Waiting(ctx, r, "Peloton: "+st.PendingReason)
	}
}

// adoptWaiting makes instances of the foreign tasks that have none.
func (c *foreignCtl) adoptWaiting(ctx context.Context) {
	now := c.m.now()
	groups := map[string][]hostmgr.ForeignTask{}
	c.mu.Lock()
	for uid, ft := range c.waiting {
		if _, ok := c.runOf[uid]; ok || ft.Invalid != "" || c.backoff[uid].at.After(now) {
			continue
		}
		groups[ft.Group] = append(groups[ft.Group], ft)
	}
	c.mu.Unlock()
	keys := make([]string, 0, len(groups))
	for g := range groups {
		keys = append(keys, g)
	}
	sort.Strings(keys)
	for _, g := range keys {
		fts := groups[g]
		// Oldest name first: instance IDs follow pod names, which for most
		// owners follow creation.
		sort.Slice(fts, func(a, b int) bool { return fts[a].Ref < fts[b].Ref })
		if err := c.adoptGroup(ctx, g, fts); err != nil {
			c.m.log.Warn("adopt foreign tasks", "group", g, "tasks", len(fts), "err", err)
			c.mu.Lock()
			for _, ft := range fts {
				c.delayLocked(ft.UID)
			}
			c.mu.Unlock()
		}
	}
}

// adoptGroup makes fts, foreign tasks of one group, instances of the
// group's job: a new job, or new instances of the one there is.
func (c *foreignCtl) adoptGroup(ctx context.Context, group string, fts []hostmgr.ForeignTask) error {
	m := c.m
	j, id := m.adopt.foreignJob(group)
	gang := fts[0].GangSize
	if j == nil && gang > 1 && uint32(len(fts)) < gang {
		for _, ft := range fts {
			c.src.Waiting(ctx, ft.ForeignRef, fmt.Sprintf("Peloton: waiting for the rest of gang %s: %d of its %d pods exist",
				ft.Owner.Name, len(fts), gang))
		}
		return nil // the gang is not all there yet
	}
	pool := fts[0].Pool
	if j != nil {
		pool = j.pool
	}
	if _, err := m.rm.CheckLeafPool(pool, "annotation peloton.io/pool"); err != nil {
		for _, ft := range fts {
			c.src.Reject(ctx, ft.ForeignRef, "Peloton cannot schedule this pod: "+err.Error())
		}
		c.mu.Lock()
		for _, ft := range fts {
			c.delayLocked(ft.UID)
		}
		c.mu.Unlock()
		return nil
	}
	var take []hostmgr.ForeignTask
	for _, ft := range fts {
		if ft.Pool != pool {
			c.src.Reject(ctx, ft.ForeignRef, fmt.Sprintf("Peloton cannot schedule this pod: annotation peloton.io/pool: %s, but the other pods of %s %s/%s are in %s; pods of one owner share a pool",
				ft.Pool, ft.Owner.Kind, ft.Owner.Namespace, ft.Owner.Name, pool))
			continue
		}
		take = append(take, ft)
	}
	if len(take) == 0 {
		return nil
	}
	var first uint32
	if j == nil {
		spec := foreignSpec(take, pool)
		c.mapAll(id, 0, take)
		if err := m.storeJob(ctx, id, spec, ""); err != nil {
			c.unmapAll(id, 0, take)
			return err
		}
	} else {
		cur := j.current()
		first = cur.spec.InstanceCount
		spec := proto.Clone(cur.spec).(*pelotonv1.JobSpec)
		addInstances(spec, take)
		jv, err := newJobVersion(j.latestVersion()+1, spec, m.now(), fmt.Sprintf("%d pods of %s %s/%s arrived", len(take),
			take[0].Owner.Kind, take[0].Owner.Namespace, take[0].Owner.Name))
		if err != nil {
			return err
		}
		c.mapAll(id, first, take)
		if err := m.upd.storeNewVersion(ctx, j, jv, nil); err != nil {
			c.unmapAll(id, first, take)
			return err
		}
		m.queue.Add(id)
	}
	// Write each pod's instance on the pod, so that a restarted Peloton
	// finds it; a pod that went meanwhile ends its instance.
	insts := make([]uint32, len(take))
	for i := range take {
		insts[i] = first + uint32(i)
	}
	_ = parallel(insts, func(inst uint32) error {
		ft := take[inst-first]
		if err := c.src.Adopt(ctx, ft.ForeignRef, resmgr.RunTaskID(id, inst, 1)); err != nil {
			m.log.Info("foreign pod went before it was adopted", "pod", ft.Ref, "err", err)
			c.mu.Lock()
			delete(c.runOf, ft.UID)
			delete(c.podOf, instKey{id, inst})
			c.mu.Unlock()
			c.end(instKey{id, inst}, "pod-deleted")
		}
		return nil
	})
	m.log.Info("foreign tasks adopted", "job", id, "group", group, "pods", len(take), "firstInstance", first)
	return nil
}

func (c *foreignCtl) mapAll(id string, first uint32, fts []hostmgr.ForeignTask) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, ft := range fts {
		k := instKey{id, first + uint32(i)}
		c.runOf[ft.UID], c.podOf[k] = k, ft.ForeignRef
	}
}

func (c *foreignCtl) unmapAll(id string, first uint32, fts []hostmgr.ForeignTask) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, ft := range fts {
		delete(c.runOf, ft.UID)
		delete(c.podOf, instKey{id, first + uint32(i)})
	}
}

// foreignJob finds the job of a group: its ID follows from the group, so
// every process finds the same one. A gang whose members have all ended
// is over; the group's next pods form a new job (the next generation).
// It returns the live job, or nil and the ID a new one takes.
func (ad *adoption) foreignJob(group string) (*job, string) {
	m := ad.m
	m.mu.RLock()
	defer m.mu.RUnlock()
	for gen := 0; ; gen++ {
		id := foreignJobID(group, gen)
		j := m.jobs[id]
		if j == nil {
			return nil, id
		}
		if l := j.gangs(); l.ganged() && m.adopt.gangOver(j, l) {
			continue
		}
		return j, id
	}
}

// gangOver reports whether every member of j's gangs has ended (an adopted
// group is one gang, sla.minimumRunningInstances).
func (ad *adoption) gangOver(j *job, l gangLayout) bool {
	ts := j.tasks()
	_, end := l.members(l.count() - 1)
	if uint32(len(ts)) < end {
		return false
	}
	for _, t := range ts[:end] {
		if t == nil {
			return false
		}
		tv := t.view()
		st := tv.rt.State
		if !isTerminal(st) {
			return false
		}
	}
	return true
}

// foreignJobID is a UUID made from a group key and a generation.
func foreignJobID(group string, gen int) string {
	sum := sha256.Sum256([]byte(group + "#" + strconv.Itoa(gen)))
	b := sum[:16]
	b[6] = b[6]&0x0f | 0x80 // version 8: custom
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// foreignSpec is the spec of a new job for fts.
func foreignSpec(fts []hostmgr.ForeignTask, pool string) *pelotonv1.JobSpec {
	f := fts[0]
	spec := &pelotonv1.JobSpec{
		Name: f.Owner.Namespace + "/" + f.Owner.Kind + "/" + f.Owner.Name,
		Type: pelotonv1.JobType_BATCH,
		Pool: pool,
		Sla:  &pelotonv1.SlaSpec{Priority: f.Priority},
		Description: fmt.Sprintf("pods of %s %s/%s in %s, placed by Peloton as their scheduler",
			f.Owner.Kind, f.Owner.Namespace, f.Owner.Name, f.Owner.Source),
		Labels:      map[string]string{LabelForeignSource: f.Owner.Source},
		DefaultSpec: foreignTaskSpec(f),
		Foreign: &pelotonv1.ForeignOwner{Source: f.Owner.Source, Namespace: f.Owner.Namespace, Kind: f.Owner.Kind,
			Name: f.Owner.Name, Uid: f.Owner.UID},
	}
	if f.GangSize > 1 {
		spec.Sla.MinimumRunningInstances = f.GangSize
	}
	addInstances(spec, fts)
	return spec
}

// addInstances appends fts to spec as new instances, with overrides where
// a pod differs from the job's default.
func addInstances(spec *pelotonv1.JobSpec, fts []hostmgr.ForeignTask) {
	for _, ft := range fts {
		inst := spec.InstanceCount
		spec.InstanceCount++
		if ts := foreignTaskSpec(ft); !proto.Equal(ts, spec.DefaultSpec) {
			if spec.InstanceSpecs == nil {
				spec.InstanceSpecs = map[uint32]*pelotonv1.TaskSpec{}
			}
			spec.InstanceSpecs[inst] = ts
		}
	}
}

// foreignTaskSpec is what Peloton knows of a foreign task: what it holds
// and where it may run. Its owner runs it; Peloton never retries it.
func foreignTaskSpec(ft hostmgr.ForeignTask) *pelotonv1.TaskSpec {
	r := ft.Resources
	// A pod that requests nothing still takes a place in its pool.
	r.MilliCPU, r.MemoryMB = max(r.MilliCPU, 1), max(r.MemoryMB, 1)
	ts := &pelotonv1.TaskSpec{Command: ft.Command, Image: ft.Image, Resources: r.ToProto(),
		RestartPolicy: &pelotonv1.RestartPolicy{MaxFailures: 0}}
	if ft.Placement != nil {
		ts.Placement = proto.Clone(ft.Placement).(*pelotonv1.PlacementSpec)
	}
	return ts
}

// foreignEnd is the final state of a foreign instance whose run ended:
// its owner, not Peloton, decides whether another pod follows.
func foreignEnd(rt *pelotonv1.TaskStatus, ev hostmgr.TaskEvent, killedByUs bool) {
	switch {
	case rt.State == taskPreempting:
		rt.State = taskKilled // the reason says preempted-...
		rt.Message = "preempted; the pod was deleted"
	case killedByUs:
		rt.State = taskKilled
		if rt.Reason == "" {
			rt.Reason = "killed"
		}
		rt.Message = ev.Message
	default:
		rt.State, rt.Reason, rt.Message = ev.State, ev.Reason, ev.Message
		if ev.State == taskKilled {
			rt.State = taskLost // ended by someone else
		}
	}
	rt.DesiredRunId = 0
}

var errForeignGone = errors.New("its pod is gone")

// foreignRef is the launch reference of a foreign instance.
func (ad *adoption) foreignRef(j *job, inst uint32) (*hostmgr.ForeignRef, error) {
	m := ad.m
	if m.foreign == nil {
		return nil, errForeignGone
	}
	r := m.foreign.refOf(instKey{j.id, inst})
	if r == nil {
		return nil, errForeignGone
	}
	return r, nil
}
