package resmgr

import (
	"container/list"
	"sort"
	"time"

	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Task is resmgr's view of one run of one instance: enough to queue, admit and
// place it.
type Task struct {
	JobID       string
	Instance    uint32
	RunID       uint32
	Pool        string
	Priority    uint32
	Preemptible bool
	// Revocable tasks run on capacity nobody is entitled to right now and are
	// the first to be preempted.
	Revocable bool
	Resources resources.Resources
	// Strategy is the effective placement strategy: Placement's, or the job
	// type's default when the spec leaves it unset.
	Strategy pelotonv1.PlacementStrategy
	// Placement is where the task may run (partition, constraints, max
	// instances per host); nil means anywhere. It points into the job's spec
	// and is shared by every instance without an override, so it costs one
	// pointer per task: never modify it.
	Placement *pelotonv1.PlacementSpec
	// PrevHost is the host of the instance's previous run, preferred when it
	// still fits ("" for a first run).
	PrevHost string
	// BoundHost is the host this instance must run on: where a STATEFUL
	// instance's volume is, or the host a DAEMON instance serves; empty = anywhere.
	BoundHost string
	// Gang names the gang the task was queued in when it is one of several
	// ("" for a gang of one). resmgr does not use it; it comes back in the
	// Placement, and jobmgr passes it on to the backend (LaunchSpec.Gang).
	Gang string
}

// RunID names the run: <jobID>-<instance>-<run>, the backend's task ID.
func (t *Task) RunTaskID() string { return RunTaskID(t.JobID, t.Instance, t.RunID) }

// Key names the instance: <jobID>-<instance>.
func (t *Task) Key() string { return InstanceKey(t.JobID, t.Instance) }

// instKey is InstanceKey as a map key: it costs no string to build, and
// resmgr looks tasks up by it several times per launch.
type instKey struct {
	job  string
	inst uint32
}

func (t *Task) key() instKey { return instKey{t.JobID, t.Instance} }

// Gang is a set of tasks admitted and placed all together or not at all. A
// task that is not part of a larger gang is a gang of one.
type Gang struct {
	Tasks    []*Task
	Pool     string
	Priority uint32
	// Resources is the sum over Tasks.
	Resources resources.Resources
	// SameLabel, if set, is a host label whose one value every member's
	// host must have (spec.gang.sameLabel): the placement engine picks a
	// value with room for the whole gang.
	SameLabel string
	// WaitingSince is when the gang's instances began to wait, as the
	// job's records say (zero: now). jobmgr passes it so that a gang
	// queued again after a restart keeps the wait that counts towards its
	// host reservation (hostres.go) and its place among the waiting.
	WaitingSince time.Time

	enqueued  time.Time
	attempts  int
	notBefore time.Time
	// heldUntil keeps a gang that no host could ever take out of admission
	// until then (or until the hosts change).
	heldUntil time.Time
	// block is what refused the gang at its last admission pass.
	block  blockKind
	elem   *list.Element
	bucket *bucket
}

// NewGang builds a gang from tasks of one pool and priority.
func NewGang(tasks ...*Task) *Gang {
	g := &Gang{Tasks: tasks}
	if len(tasks) > 0 {
		g.Pool, g.Priority = tasks[0].Pool, tasks[0].Priority
	}
	for _, t := range tasks {
		g.Resources = g.Resources.Add(t.Resources)
	}
	return g
}

// Attempts is how many placement rounds this gang has failed.
func (g *Gang) Attempts() int { return g.attempts }

type bucket struct {
	priority uint32
	gangs    *list.List
}

// priorityQueue is a leaf pool's pending queue: FIFO within a priority,
// higher priorities first.
type priorityQueue struct {
	buckets []*bucket // sorted by priority, descending
	size    int
}

func newPriorityQueue() *priorityQueue { return &priorityQueue{} }

func (q *priorityQueue) push(g *Gang) {
	i := sort.Search(len(q.buckets), func(i int) bool { return q.buckets[i].priority <= g.Priority })
	if i == len(q.buckets) || q.buckets[i].priority != g.Priority {
		b := &bucket{priority: g.Priority, gangs: list.New()}
		q.buckets = append(q.buckets, nil)
		copy(q.buckets[i+1:], q.buckets[i:])
		q.buckets[i] = b
	}
	b := q.buckets[i]
	g.elem = b.gangs.PushBack(g)
	g.bucket = b
	q.size++
}

func (q *priorityQueue) remove(g *Gang) {
	if g.elem == nil || g.bucket == nil {
		return
	}
	g.bucket.gangs.Remove(g.elem)
	g.elem, g.bucket = nil, nil
	q.size--
}

// each visits gangs in admission order until fn returns false. fn may remove
// the gang it is given.
func (q *priorityQueue) each(fn func(*Gang) bool) {
	for _, b := range q.buckets {
		for e := b.gangs.Front(); e != nil; {
			next := e.Next()
			if !fn(e.Value.(*Gang)) {
				return
			}
			e = next
		}
	}
}
