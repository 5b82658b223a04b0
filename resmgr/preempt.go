package resmgr

import (
	"sort"
	"time"

	"github.com/peloton-sched/peloton/internal/resources"
)

// Preemption reasons, fixed words users and dashboards can rely on.
const (
	// ReasonReclaim: the task's pool held more than its entitlement while
	// another pool waited for its entitled share.
	ReasonReclaim = "reclaim"
	// ReasonPriority: a higher-priority task of the same pool needed the room.
	ReasonPriority = "priority"
)

// Victim is a running task chosen for preemption.
type Victim struct {
	Task   *Task
	Reason string
	// Detail says why, for the task's message (e.g. "pool /a is over its
	// entitlement by cpu=2 while /b waits").
	Detail string
}

// victimOrder sorts candidates in the order they should go: lowest
// priority, then most recently admitted (the least work lost); revocable
// first, should any be among them (the planners leave them out: they hold
// slack, not capacity).
func victimOrder(cs []*taskState) {
	sort.Slice(cs, func(i, j int) bool {
		a, b := cs[i], cs[j]
		if a.task.Revocable != b.task.Revocable {
			return a.task.Revocable
		}
		if a.task.Priority != b.task.Priority {
			return a.task.Priority < b.task.Priority
		}
		if !a.admittedAt.Equal(b.admittedAt) {
			return a.admittedAt.After(b.admittedAt)
		}
		if a.task.JobID != b.task.JobID {
			return a.task.JobID < b.task.JobID
		}
		return a.task.Instance < b.task.Instance
	})
}

// covers reports whether freed covers need in every kind where need > 0.
func covers(freed, need resources.Resources) bool {
	for k := resources.Kind(0); k < resources.NumKinds; k++ {
		if need.Get(k) > 0 && freed.Get(k) < need.Get(k) {
			return false
		}
	}
	return true
}

// helps reports whether r frees anything of a kind still needed.
func helps(r, stillNeeded resources.Resources) bool {
	for k := resources.Kind(0); k < resources.NumKinds; k++ {
		if stillNeeded.Get(k) > 0 && r.Get(k) > 0 {
			return true
		}
	}
	return false
}

// pickVictims takes candidates in victim order until need is covered. It
// returns nil if the candidates cannot cover need at all, so that no task
// is preempted for nothing.
func pickVictims(cs []*taskState, need resources.Resources, filter func(*taskState) bool) []*taskState {
	var out []*taskState
	var freed resources.Resources
	for _, c := range cs {
		if covers(freed, need) {
			break
		}
		if !filter(c) || !helps(c.task.Resources, need.Sub(freed)) {
			continue
		}
		out = append(out, c)
		freed = freed.Add(c.task.Resources)
	}
	if !covers(freed, need) {
		return nil
	}
	return out
}

// planReclaim chooses the tasks that over-entitled leaf pools must give back
// because some other pool waits for capacity it is entitled to. A pool over
// its entitlement while nobody waits keeps its elastic capacity. Each victim
// pool loses just enough of its preemptible work (lowest priority, newest)
// to come back to its entitlement. Tasks already being preempted count as
// freed. Revocable tasks hold slack, not capacity (hostmgr/slack.go):
// taking them back frees nothing another pool could use, so they are
// neither counted nor chosen. Pure: it reads the tree and returns a
// decision.
func planReclaim(leaves []*Pool, waiting []*Pool) []Victim {
	if len(waiting) == 0 {
		return nil
	}
	var out []Victim
	for _, p := range leaves {
		held := p.Allocation.Sub(p.Revocable).Sub(p.preempting)
		excess := held.Sub(p.Entitlement)
		if excess.IsZero() {
			continue
		}
		cs := p.runningCandidates(func(ts *taskState) bool { return ts.task.Preemptible && !ts.task.Revocable })
		victimOrder(cs)
		picked := pickVictims(cs, excess, func(*taskState) bool { return true })
		if picked == nil {
			// Not enough preemptible work to come all the way back: take what helps.
			picked = greedy(cs, excess)
		}
		detail := "pool " + p.Path + " holds " + held.String() + ", over its entitlement " + p.Entitlement.String() + " while " + waiting[0].Path + " waits"
		for _, ts := range picked {
			out = append(out, Victim{Task: ts.task, Reason: ReasonReclaim, Detail: detail})
		}
	}
	return out
}

// greedy takes every preemptible candidate that frees a kind still in excess.
func greedy(cs []*taskState, need resources.Resources) []*taskState {
	var out []*taskState
	var freed resources.Resources
	for _, c := range cs {
		if !c.task.Preemptible || c.task.Revocable || !helps(c.task.Resources, need.Sub(freed)) {
			continue
		}
		out = append(out, c)
		freed = freed.Add(c.task.Resources)
	}
	return out
}

// planPriority chooses, inside one leaf pool, the lower-priority preemptible
// tasks that must make room for the pool's highest-priority waiting gang g
// that the pool cannot take now without going over ceiling (its
// entitlement, or its own limit). Only strictly lower priorities are
// displaced, and only if displacing them is enough to admit g.
func planPriority(p *Pool, g *Gang, ceiling resources.Resources) []Victim {
	held := p.Allocation.Sub(p.Revocable).Sub(p.preempting)
	need := held.Add(g.Resources).Sub(ceiling)
	if need.IsZero() {
		return nil
	}
	// Filter before sorting: this runs on every admission pass for every pool
	// whose best waiting gang its entitlement refuses, under the manager's
	// lock, and usually no running task has a lower priority at all.
	cs := p.runningCandidates(func(ts *taskState) bool {
		return ts.task.Preemptible && !ts.task.Revocable && ts.task.Priority < g.Priority
	})
	if len(cs) == 0 {
		return nil
	}
	victimOrder(cs)
	picked := pickVictims(cs, need, func(*taskState) bool { return true })
	var out []Victim
	for _, ts := range picked {
		out = append(out, Victim{Task: ts.task, Reason: ReasonPriority,
			Detail: "a task of priority " + itoa(g.Priority) + " in pool " + p.Path + " needs the room"})
	}
	return out
}

func itoa(n uint32) string {
	if n == 0 {
		return "0"
	}
	var b [10]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

// reclaimGate is the hysteresis of reclaim: a pool must have waited for its
// entitled share for at least delay before anyone is preempted for it, so a
// short burst of demand does not cause churn.
type reclaimGate struct {
	delay time.Duration
	since map[string]time.Time
}

// ready returns the waiting pools whose wait has lasted at least delay, and
// forgets pools that no longer wait.
func (g *reclaimGate) ready(waiting []*Pool, now time.Time) []*Pool {
	seen := make(map[string]bool, len(waiting))
	var out []*Pool
	for _, p := range waiting {
		seen[p.Path] = true
		t, ok := g.since[p.Path]
		if !ok {
			g.since[p.Path] = now
			t = now
		}
		if now.Sub(t) >= g.delay {
			out = append(out, p)
		}
	}
	for path := range g.since {
		if !seen[path] {
			delete(g.since, path)
		}
	}
	return out
}
