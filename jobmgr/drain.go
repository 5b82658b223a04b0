package jobmgr

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/metrics"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// Host drains. hostmgr asks, through Drains, to move the runs off a host in
// maintenance; jobmgr preempts each of them through the same path as
// resmgr's preemption: PREEMPTING, a kill, then a new run that queues again
// with no failure counted. A draining host is offered to no placement
// engine, so the new run lands elsewhere.

// drainReason is the preemption reason of a drain; tasks show it as
// "preempted-host-drain", and peloton_preemptions_total counts it.
const drainReason = "host-drain"

// drainRetry is how soon a drain that had to leave runs on its host looks
// at them again.
const drainRetry = 2 * time.Second

// drainRun is one instance's current run as the drain planner sees it.
type drainRun struct {
	inst, run uint32
	host      string
	state     taskState
}

// drainVictim is a run to preempt, with the message its task will show.
type drainVictim struct {
	inst, run uint32
	detail    string
}

// planDrain chooses the runs of one job to preempt to move its work off
// host: every run on the host that is not being stopped already, and, for
// each gang (gangs, the job's layout) with a member among them, every other
// running member of that gang too: a gang runs whole or not at all, so it
// moves together, as it does when resmgr preempts it; the job's other
// gangs stay. runs are the instances the request named plus, for a gang
// member, all its gang's members. It is pure.
func planDrain(host string, gangs gangLayout, runs []drainRun) []drainVictim {
	movable := func(r drainRun) bool {
		return isActive(r.state) && r.state != taskKilling && r.state != taskPreempting
	}
	var out []drainVictim
	onHost := map[uint32]uint32{} // gang -> its first member on the host
	for _, r := range runs {
		if r.host != host || !isActive(r.state) {
			continue
		}
		if g, _, ok := gangs.of(r.inst); ok {
			if _, seen := onHost[g]; !seen {
				onHost[g] = r.inst
			}
		}
		if movable(r) {
			out = append(out, drainVictim{r.inst, r.run, fmt.Sprintf("host %s is draining for maintenance", host)})
		}
	}
	for _, r := range runs {
		g, _, ok := gangs.of(r.inst)
		if !ok || r.host == host || !movable(r) {
			continue
		}
		if by, moves := onHost[g]; moves {
			out = append(out, drainVictim{r.inst, r.run,
				fmt.Sprintf("its gang moves with instance %d, on host %s, which is draining for maintenance", by, host)})
		}
	}
	return out
}

// drainLoop carries out hostmgr's drain requests until ctx ends. It runs
// once recovery is done and tells hostmgr so first: only then does hostmgr
// know every run a host holds, ask again for the drains a restart cut
// short, and declare empty hosts drained.
func (rc *reconcilers) drainLoop(ctx context.Context) {
	m := rc.m
	m.hm.Recovered()
	for ctx.Err() == nil {
		for _, req := range m.hm.Drains(ctx) {
			m.recs.drain(ctx, req, 0)
		}
	}
}

// drain preempts the runs one request names that are still on its host.
// failures is how many passes in a row the SLA evaluator failed to answer
// (not refused); the next pass backs off by it.
func (rc *reconcilers) drain(ctx context.Context, req hostmgr.DrainRequest, failures int) {
	m := rc.m
	if !m.hm.Draining(req.Host) {
		return // maintenance was completed since the request was made
	}
	byJob := map[string][]uint32{}
	for _, id := range req.TaskIDs {
		if jobID, inst, _, ok := parseTaskID(id); ok {
			byJob[jobID] = append(byJob[jobID], inst)
		}
	}
	var vs []resmgr.Victim
	var notes []string
	retry, evaluatorDown := false, false
	for jobID, insts := range byJob {
		m.mu.RLock()
		j := m.jobs[jobID]
		m.mu.RUnlock()
		if j == nil {
			continue // deleted
		}
		for _, v := range planDrain(req.Host, j.gangs(), m.recs.drainRuns(j, insts)) {
			switch j.typ {
			case pelotonv1.JobType_STATEFUL:
				// Its volume is on this host: only its owner can move it.
				notes = append(notes, fmt.Sprintf("STATEFUL instance %d of job %s holds its volume here: kill it or delete the job", v.inst, j.id))
				retry = true
				continue
			case pelotonv1.JobType_DAEMON:
				// It serves this host and no other; it runs again when the host is back.
			case pelotonv1.JobType_SERVICE:
				// Moved one SLA grant at a time; the rest wait for a later
				// pass. An evaluator that does not answer grants nothing.
				if err := m.recs.disrupt(ctx, j, v.inst, "drain/"+req.Host, fmt.Sprintf("host %s is draining", req.Host), defaultMinReady); err != nil {
					if isRefusal(err) {
						notes = append(notes, fmt.Sprintf("instance %d of job %s waits for its SLA (%v)", v.inst, j.id, err))
					} else {
						notes = append(notes, fmt.Sprintf("instance %d of job %s waits for the SLA evaluator, which did not answer (%v)", v.inst, j.id, err))
						evaluatorDown = true
					}
					retry = true
					continue
				}
			}
			if req.Why != "" {
				// A partition move drains as maintenance does; say which.
				v.detail = strings.Replace(v.detail, "for maintenance", req.Why, 1)
			}
			vs = append(vs, resmgr.Victim{Task: &resmgr.Task{JobID: j.id, Instance: v.inst, RunID: v.run},
				Reason: drainReason, Detail: v.detail})
		}
	}
	sort.Strings(notes)
	if len(notes) > 3 {
		notes = append(notes[:3], fmt.Sprintf("and %d more", len(notes)-3))
	}
	m.hm.SetDrainNote(req.Host, strings.Join(notes, "; "))
	if retry {
		// Ask again later: a service's budget frees up as its moved
		// instances come back; a stateful instance's owner may act; an
		// evaluator that failed is given more time on each failure.
		delay, next := drainRetry, 0
		if evaluatorDown {
			next = failures + 1
			delay = max(delay, slaBackoff(next))
		}
		m.after(delay, func(ctx context.Context) {
			m.recs.drain(ctx, req, next)
		})
	}
	if len(vs) == 0 {
		return
	}
	m.log.Info("draining host", "host", req.Host, "runs", len(vs))
	metrics.Preemptions.WithLabelValues(drainReason).Add(float64(len(vs)))
	idx := make([]uint32, len(vs))
	for i := range idx {
		idx[i] = uint32(i)
	}
	// Concurrently, so the group committer packs the PREEMPTING writes.
	_ = parallel(idx, func(i uint32) error {
		m.eng.preempt(ctx, vs[i])
		return nil
	})
}

// drainRuns snapshots the current runs of the given instances of j and,
// when one is a gang member, of the whole gang.
func (rc *reconcilers) drainRuns(j *job, insts []uint32) []drainRun {
	tasks := j.tasks()
	want := map[uint32]bool{}
	for _, inst := range insts {
		if inst >= uint32(len(tasks)) {
			continue
		}
		want[inst] = true
		if g, _, ok := j.gangs().of(inst); ok {
			first, end := j.gangs().members(g)
			for m := first; m < end && m < uint32(len(tasks)); m++ {
				want[m] = true
			}
		}
	}
	out := make([]drainRun, 0, len(want))
	for inst := range want {
		t := tasks[inst]
		if t == nil {
			continue
		}
		tv := t.view()
		out = append(out, drainRun{inst: inst, run: tv.rt.RunId, host: tv.rt.Host, state: tv.rt.State})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].inst < out[b].inst })
	return out
}
