package jobmgr

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// DAEMON jobs run one instance on every host that matches the job's
// placement (partition and constraints), in any state: a host in
// maintenance keeps its daemon's slot, and the instance runs again when the
// host is back in service. Each instance is bound to its host (BoundHost).
// A host that leaves, or stops matching, has its instance stopped; the
// instance's slot is then free (stopped, bound to nothing) and the next new
// host takes it, so instance IDs stay dense. Trailing free slots are
// removed.

// HostsChanged tells jobmgr that hosts joined, left or changed labels: every
// DAEMON job is evaluated again to follow them. (The gauge loop also does
// so every few seconds, for backends that cannot say.)
func (m *Manager) HostsChanged() {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for id, j := range m.jobs {
		if j.typ == pelotonv1.JobType_DAEMON {
			m.queue.Add(id)
		}
	}
}

// freeSlot reports whether a DAEMON instance serves no host. Only DAEMON
// instances have slots: a stopped instance of another type is an instance
// that is down.
func freeSlot(rt *pelotonv1.TaskStatus) bool {
	return rt.BoundHost == "" && isTerminal(rt.State) && rt.GoalState == taskKilled
}

// daemonHosts is the sorted names of the hosts j's placement matches.
func (rc *reconcilers) daemonHosts(j *job) []string {
	m := rc.m
	p := j.spec().GetDefaultSpec().GetPlacement()
	var out []string
	for _, h := range m.hm.ListHosts() {
		if hostmgr.Matches(p, h.Partition, h.Labels) {
			out = append(out, h.Name)
		}
	}
	sort.Strings(out)
	return out
}

// daemonSlots is the instance count a DAEMON job needs now: one per
// matching host, plus the slots still held by instances being stopped.
func (rc *reconcilers) daemonSlots(j *job) uint32 {
	m := rc.m
	hosts := m.recs.daemonHosts(j)
	want := map[string]bool{}
	for _, h := range hosts {
		want[h] = true
	}
	busy := uint32(0) // one past the highest slot in use
	served, free := 0, 0
	for inst, t := range j.tasks() {
		if t == nil {
			busy = uint32(inst) + 1
			continue
		}
		tv := t.view()
		bound, isFree := tv.rt.BoundHost, freeSlot(tv.rt)
		if isFree {
			free++
			continue
		}
		if bound != "" && want[bound] {
			served++
		}
		busy = uint32(inst) + 1 // serving, being stopped, or not bound yet
	}
	missing := len(hosts) - served
	switch {
	case missing > free:
		return j.instanceCount() + uint32(missing-free)
	case missing > 0:
		return j.instanceCount() // free slots take the new hosts
	default:
		return busy
	}
}

// reconcileDaemon binds every matching host without an instance to a free
// slot and stops instances whose host left or no longer matches. It runs
// in the job's evaluation, after reconcileCount sized the slots.
func (rc *reconcilers) reconcileDaemon(ctx context.Context, j *job) error {
	m := rc.m
	if j.typ != pelotonv1.JobType_DAEMON || j.goalKilled.Load() {
		return nil
	}
	hosts := m.recs.daemonHosts(j)
	want := map[string]bool{}
	for _, h := range hosts {
		want[h] = true
	}
	served := map[string]bool{}
	var free []uint32
	var stop []uint32
	for inst, t := range j.tasks() {
		if t == nil {
			continue
		}
		tv := t.view()
		rt := tv.rt
		switch {
		case freeSlot(rt):
			free = append(free, uint32(inst))
		case rt.BoundHost == "" && rt.State == taskInitialized:
			free = append(free, uint32(inst)) // a new slot
		case rt.BoundHost != "" && want[rt.BoundHost] && !served[rt.BoundHost]:
			served[rt.BoundHost] = true
		default:
			stop = append(stop, uint32(inst))
		}
	}
	for _, inst := range stop {
		if err := m.recs.releaseSlot(ctx, j, inst); err != nil {
			return err
		}
	}
	for _, h := range hosts {
		if served[h] || len(free) == 0 {
			continue
		}
		inst := free[0]
		free = free[1:]
		err := m.updateTaskVolatile(j, inst, func(rt *pelotonv1.TaskStatus) error {
			rt.BoundHost, rt.GoalState = h, taskRunning
			if isTerminal(rt.State) {
				newRun(rt, rt.RunId+1, fmt.Sprintf("serving host %s", h))
			}
			return nil
		})
		if err != nil {
			return err
		}
		served[h] = true
	}
	// New slots left over (hosts went away meanwhile) become free slots.
	for _, inst := range free {
		if err := m.recs.releaseSlot(ctx, j, inst); err != nil {
			return err
		}
	}
	return nil
}

// releaseSlot stops a DAEMON instance that serves no matching host; once
// stopped, its slot is free.
func (rc *reconcilers) releaseSlot(ctx context.Context, j *job, inst uint32) error {
	m := rc.m
	var kill string
	var grace time.Duration
	err := m.updateTask(ctx, j, inst, func(rt *pelotonv1.TaskStatus) error {
		if freeSlot(rt) {
			return errSkip
		}
		rt.GoalState = taskKilled
		switch {
		case isTerminal(rt.State):
			if rt.BoundHost != "" {
				rt.Message = fmt.Sprintf("host %s left the job's hosts", rt.BoundHost)
			}
			rt.BoundHost = ""
		case isActive(rt.State):
			if rt.State == taskKilling {
				return errSkip
			}
			rt.State, rt.Reason, rt.Message = taskKilling, "host-removed", fmt.Sprintf("host %s left the job's hosts", rt.BoundHost)
			kill, grace = resmgr.RunTaskID(j.id, inst, rt.RunId), graceOf(j.version(rt.SpecVersion), inst)
		default:
			m.rm.Release(j.id, inst)
			if rt.BoundHost != "" {
				rt.Message = fmt.Sprintf("host %s left the job's hosts", rt.BoundHost)
			}
			rt.State, rt.Reason, rt.BoundHost = taskKilled, "host-removed", ""
		}
		return nil
	})
	return m.eng.killDecided(ctx, j, inst, kill, grace, err)
}
