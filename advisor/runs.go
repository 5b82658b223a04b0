package advisor

import (
	"fmt"
	"slices"
	"time"
)

// Run is one non-revocable batch run a host holds: the work a move of the
// host throws away unless the run ends first.
type Run struct {
	// ID names the run (a task ID): the advisor learns a job's run times
	// from the runs it sees end.
	ID, Job string
	// Elapsed is how long it has run; CPU the cores it holds.
	Elapsed time.Duration
	CPU     float64
}

// runSeen is a run as the last round saw it.
type runSeen struct {
	job     string
	host    string
	elapsed time.Duration
}

// runTimes is a job's observed run times, the newest runTimesMax, in the
// order they ended; sorted a sorted copy (nil when stale).
type runTimes struct {
	seen   []time.Duration
	next   int
	sorted []time.Duration
}

// runTimesMax bounds what is kept of each job.
const runTimesMax = 512

// minRunTimes is how many ended runs of a job the advisor needs before it
// trusts their distribution.
const minRunTimes = 8

func (r *runTimes) add(d time.Duration) {
	if len(r.seen) < runTimesMax {
		r.seen = append(r.seen, d)
	} else {
		r.seen[r.next] = d
		r.next = (r.next + 1) % runTimesMax
	}
	r.sorted = nil
}

// remaining estimates how much longer a run of the job that has run for
// elapsed goes on: the median of the job's observed run times longer than
// elapsed, less elapsed. Without enough observations, or when the run has
// outlived most of them, it guesses as long again as it has run (ok false).
func (r *runTimes) remaining(elapsed time.Duration) (time.Duration, bool) {
	if r == nil || len(r.seen) < minRunTimes {
		return max(elapsed, time.Minute), false
	}
	if r.sorted == nil {
		r.sorted = slices.Clone(r.seen)
		slices.Sort(r.sorted)
	}
	i, _ := slices.BinarySearch(r.sorted, elapsed+1)
	longer := r.sorted[i:]
	if len(longer) < minRunTimes/2 {
		return max(elapsed, time.Minute), false
	}
	return longer[len(longer)/2] - elapsed, true
}

// learnRuns records the run times of the runs the last round saw that are
// gone now from a host that is not moving (ended, not drained), and
// remembers this round's runs.
func (c *Core) learnRuns(in Input) {
	now := make(map[string]runSeen, len(c.runs))
	movingOrGone := map[string]bool{}
	for _, h := range in.Hosts {
		if h.Target != "" || !h.InService {
			movingOrGone[h.Name] = true
		}
		for _, r := range h.Runs {
			now[r.ID] = runSeen{job: r.Job, host: h.Name, elapsed: r.Elapsed}
		}
	}
	present := make(map[string]bool, len(in.Hosts))
	for _, h := range in.Hosts {
		present[h.Name] = true
	}
	for id, r := range c.runs {
		if _, ok := now[id]; ok || movingOrGone[r.host] || !present[r.host] || c.movedAt(r.host, in.Now) {
			continue
		}
		t := c.runTimes[r.job]
		if t == nil {
			t = &runTimes{}
			c.runTimes[r.job] = t
		}
		t.add(r.elapsed)
	}
	c.runs = now
	if len(c.runTimes) > runJobsMax {
		live := map[string]bool{}
		for _, r := range now {
			live[r.job] = true
		}
		for job := range c.runTimes {
			if !live[job] {
				delete(c.runTimes, job)
			}
		}
	}
}

// runJobsMax is how many jobs' run times are kept before those of jobs
// with no run left are forgotten.
const runJobsMax = 4096

// movedAt says whether the advisor moved host within the last round or
// so: its runs are gone because they were drained.
func (c *Core) movedAt(host string, now time.Time) bool {
	t, ok := c.moved[host]
	return ok && now.Sub(t) < c.cfg.HoldDown
}

// moveCost is what moving a batch host costs with a drain window: the
// work (core-seconds) of the runs not expected to end within the window,
// which are drained at once, and when the host is expected to be free of
// the others, left to finish (finish; at most the window).
type moveCost struct {
	lost        float64
	ready       time.Duration
	runs, ended int // runs, and those expected to end within the window
	finish      []string
	learnt      bool
}

func (c *Core) cost(h Host) moveCost {
	window := c.cfg.MoveDrain
	mc := moveCost{runs: len(h.Runs), learnt: true}
	if len(h.Runs) == 0 && h.WorkAtRisk > 0 {
		return moveCost{lost: h.WorkAtRisk, runs: h.Tasks, ready: window} // runs not told: the old measure
	}
	for _, r := range h.Runs {
		left, ok := c.runTimes[r.Job].remaining(r.Elapsed)
		mc.learnt = mc.learnt && ok
		if left <= window {
			mc.ended++
			mc.ready = max(mc.ready, left)
			mc.finish = append(mc.finish, r.ID)
			continue
		}
		mc.lost += r.Elapsed.Seconds() * r.CPU
	}
	return mc
}

func (mc moveCost) String(window time.Duration) string {
	how := "from the job's observed run times"
	if !mc.learnt {
		how = "some guessed: too few run times observed"
	}
	return fmt.Sprintf("%d of %d runs expected to end within the %s drain window (%s) and left to finish, the rest drained at once: %.1f core-hours of batch work expected lost, free in %s",
		mc.ended, mc.runs, window, how, mc.lost/3600, mc.ready.Round(time.Second))
}
