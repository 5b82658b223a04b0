package bench

// The fair-share phase of the federation scenario (--fair-share-window):
// two global pools with equal shares over the registered clusters. The
// flooding pool keeps a whole capacity's worth of jobs queued at the
// federation from the start; once it holds nearly every cluster, the other
// pool starts to submit the same way. Every second the phase reads both
// pools' global standing (GetFederatedPool: the federation's entitlement,
// what dispatched jobs hold, and the sum of the clusters' allocation of the
// pool's parts) and reports the other pool's share of the dispatched work
// against its entitlement. Goal: within 10 % of its entitlement after 60 s.

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/peloton-sched/peloton/cluster/client"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Fixed parts of the fair-share phase, said in its notes.
const (
	fairFloodPool = "/bench-fair-flood"
	fairOtherPool = "/bench-fair-other"
	// fairSample is how often the pools' standing is read; fairTopUp how
	// often each pool's queue at the federation is topped up, by at most
	// fairTopUpMax creates, fairCreateConcurrency at once.
	fairSample            = time.Second
	fairTopUp             = 250 * time.Millisecond
	fairTopUpMax          = 512
	fairCreateConcurrency = 16
	// fairFillWait bounds the wait for the flooding pool to hold
	// fairFilled of the capacity before the other pool starts.
	fairFillWait = 2 * time.Minute
	fairFilled   = 0.9
	// fairJobsPerFill is about how many jobs fill every cluster: each job's
	// one task asks capacity/fairJobsPerFill CPUs (0.1 to 16).
	fairJobsPerFill = 64
	// fairTail is how many of the last samples the figures average.
	fairTail = 10
)

// fairPair is one reading of both pools.
type fairPair struct{ other, flood fairStanding }

// fairStanding is one reading of a global pool's standing, in CPUs.
type fairStanding struct {
	ent, held, running, capacity float64
	queuedJobs                   int
}

func (h *fedHarness) fairStanding(ctx context.Context, path string) (fairStanding, error) {
	resp, err := h.pools.GetFederatedPool(ctx, &pelotonv1.GetFederatedPoolRequest{Path: path})
	if err != nil {
		return fairStanding{}, fmt.Errorf("bench: GetFederatedPool %s: %w", path, err)
	}
	g := resp.Pool.GetGlobal()
	return fairStanding{ent: g.GetEntitlement().GetCpu(), held: g.GetAllocation().GetCpu(), running: resp.Pool.GetTotal().GetAllocation().GetCpu(),
		capacity: g.GetCapacity().GetCpu(), queuedJobs: int(g.GetQueuedJobs())}, nil
}

// fairFeeder keeps about keep jobs of one pool queued at the federation
// until ctx ends, and remembers every job it created.
type fairFeeder struct {
	h       *fedHarness
	pool    string
	keep    int
	taskCPU float64
	task    time.Duration

	mu  sync.Mutex
	ids []string
	err error
}

// submitted is how many jobs the feeder has created so far.
func (fd *fairFeeder) submitted() int {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	return len(fd.ids)
}

func (fd *fairFeeder) run(ctx context.Context) {
	t := time.NewTicker(fairTopUp)
	defer t.Stop()
	for n := 0; ; {
		st, err := fd.h.fairStanding(ctx, fd.pool)
		if err == nil {
			n = fd.topUp(ctx, min(fd.keep-st.queuedJobs, fairTopUpMax), n)
		}
		if err != nil && ctx.Err() == nil {
			fd.fail(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// topUp creates want jobs (none if want <= 0), numbered from n, and
// returns the next number.
func (fd *fairFeeder) topUp(ctx context.Context, want, n int) int {
	sem := make(chan struct{}, fairCreateConcurrency)
	var wg sync.WaitGroup
	for i := range max(want, 0) {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			spec := &pelotonv1.FederatedJobSpec{Job: &pelotonv1.JobSpec{
				Name: fmt.Sprintf("bench-fair-%s-%d", strings.TrimPrefix(fd.pool, "/bench-fair-"), n+i), Type: pelotonv1.JobType_BATCH,
				Pool: fd.pool, InstanceCount: 1,
				DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", fmt.Sprint(fd.task.Seconds())},
					Resources: &pelotonv1.Resources{Cpu: fd.taskCPU, MemoryMb: fedTaskMemoryMB}},
			}}
			resp, err := fd.h.jobs.CreateFederatedJob(ctx, &pelotonv1.CreateFederatedJobRequest{Spec: spec, RequestId: client.NewRequestID()})
			if err != nil {
				if ctx.Err() == nil {
					fd.fail(fmt.Errorf("bench: CreateFederatedJob %s: %w", spec.Job.Name, err))
				}
				return
			}
			fd.mu.Lock()
			fd.ids = append(fd.ids, resp.JobId)
			fd.mu.Unlock()
		})
	}
	wg.Wait()
	return n + max(want, 0)
}

func (fd *fairFeeder) fail(err error) {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	if fd.err == nil {
		fd.err = err
	}
}

func (fd *fairFeeder) failed() error {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	return fd.err
}

// fairSharePhase runs the flood and measures the other pool's share.
func (h *fedHarness) fairSharePhase(ctx context.Context, r *Result) error {
	resp, err := h.clusters.ListClusters(ctx, &pelotonv1.ListClustersRequest{})
	if err != nil {
		return fmt.Errorf("bench: ListClusters: %w", err)
	}
	var capacity float64
	for _, c := range resp.Clusters {
		if h.registered[c.Name] {
			capacity += c.GetCapacity().GetCpu()
		}
	}
	taskCPU := math.Max(0.1, math.Min(16, math.Floor(capacity/fairJobsPerFill*10)/10))
	fill := int(math.Ceil(capacity / taskCPU))
	for _, p := range []string{fairFloodPool, fairOtherPool} {
		if err := h.createPool(ctx, p, &pelotonv1.FederatedPoolSpec{}); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	var bg sync.WaitGroup
	flood := &fairFeeder{h: h, pool: fairFloodPool, keep: fill, taskCPU: taskCPU, task: h.cfg.FairShareTask}
	other := &fairFeeder{h: h, pool: fairOtherPool, keep: fill, taskCPU: taskCPU, task: h.cfg.FairShareTask}
	defer func() {
		cancel()
		bg.Wait()
		h.killAll(context.WithoutCancel(ctx), append(flood.ids, other.ids...))
	}()
	h.env.progress("federation: fair share: %s floods %.0f CPUs over %d clusters with jobs of one %g-CPU task (sleep %s), keeping %d queued",
		fairFloodPool, capacity, len(h.registered), taskCPU, h.cfg.FairShareTask, fill)
	bg.Go(func() { flood.run(ctx) })
	wctx, wcancel := context.WithTimeout(ctx, fairFillWait)
	err = waitFor(wctx, 100*time.Millisecond, "waiting for "+fairFloodPool+" to fill the clusters", func() (bool, string, error) {
		st, err := h.fairStanding(wctx, fairFloodPool)
		if err == nil {
			err = flood.failed()
		}
		return err == nil && st.held >= fairFilled*capacity, fmt.Sprintf("it holds %.1f of %.0f CPUs", st.held, capacity), err
	})
	wcancel()
	if err != nil {
		return err
	}
	h.env.progress("federation: fair share: %s holds the clusters; %s starts to submit; sampling both every %s for %s", fairFloodPool, fairOtherPool, fairSample, h.cfg.FairShareWindow)
	start := time.Now()
	bg.Go(func() { other.run(ctx) })
	var series []string
	within := -1.0
	var last, lastFlood fairStanding
	// The figures are means over the window's last fairTail samples: one
	// reading falls between a job's end and the next dispatch.
	var tail []fairPair
	t := time.NewTicker(fairSample)
	defer t.Stop()
	// The window's figures are those of samples taken once the other
	// pool has its whole fill queued (asking for more than its share), so
	// a slow machine's creates do not show as a smaller entitlement; the
	// window runs on until there is one such sample (bounded).
	sampling := func() bool {
		since := time.Since(start)
		return since < h.cfg.FairShareWindow || (len(tail) == 0 && since < h.cfg.FairShareWindow+fairFillWait)
	}
	for i := 1; sampling(); i++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if err := cmpOrErr(flood.failed(), other.failed()); err != nil {
			return err
		}
		if last, err = h.fairStanding(ctx, fairOtherPool); err != nil {
			return err
		}
		if lastFlood, err = h.fairStanding(ctx, fairFloodPool); err != nil {
			return err
		}
		if other.submitted() >= fill {
			tail = append(tail, fairPair{last, lastFlood})
		}
		if len(tail) > fairTail {
			tail = tail[1:]
		}
		if within < 0 && last.ent > 0 && last.held >= 0.9*last.ent {
			within = time.Since(start).Seconds()
		}
		if i%10 == 0 {
			series = append(series, fmt.Sprintf("%ds %.0f%%/%.0f%%", i, pct(last.held, last.ent), pct(last.running, last.ent)))
		}
	}
	mean := func(f func(fairPair) float64) float64 {
		sum := 0.0
		for _, p := range tail {
			sum += f(p)
		}
		return sum / float64(max(len(tail), 1))
	}
	r.add("fairShareOtherEntitledPct", mean(func(p fairPair) float64 { return pct(p.other.ent, p.other.capacity) }), "%",
		"the other pool's global entitlement, % of the clusters' capacity (equal shares: 50)")
	r.add("fairShareOtherDispatchedPct", mean(func(p fairPair) float64 { return pct(p.other.held, p.other.ent) }), "%",
		fmt.Sprintf("what the other pool's dispatched jobs hold, %% of its entitlement, over the last %d s of the %s after it began to submit; goal >= 90", len(tail), h.cfg.FairShareWindow))
	r.add("fairShareOtherRunningPct", mean(func(p fairPair) float64 { return pct(p.other.running, p.other.ent) }), "%",
		"the clusters' allocation of the other pool's parts, % of its entitlement, over the same seconds")
	r.add("fairShareFloodDispatchedPct", mean(func(p fairPair) float64 { return pct(p.flood.held, p.flood.ent) }), "%",
		"what the flooding pool's dispatched jobs hold, % of its entitlement, over the same seconds")
	r.add("fairShareWithin10PctSec", within, "s", "from the other pool's first submit until its dispatched jobs first held 90% of its entitlement (-1: never in the window)")
	r.note("fair-share phase: %s and %s, equal shares, no reservation; jobs of one %g-CPU task (sleep %s), each pool keeping %d queued at the federation (topped up every %s); the other pool starts once the flood holds %.0f%% of the %.0f CPUs; every 10 s its dispatched/running share of its entitlement: %s",
		fairFloodPool, fairOtherPool, taskCPU, h.cfg.FairShareTask, fill, fairTopUp, 100*fairFilled, capacity, strings.Join(series, ", "))
	return nil
}

// killAll kills federated jobs ids, a few at a time, and waits for their
// ends, so that no phase after this one finds the clusters full; errors
// are logged only.
func (h *fedHarness) killAll(ctx context.Context, ids []string) {
	h.env.progress("federation: killing the %d jobs of the fair-share phase", len(ids))
	sem := make(chan struct{}, fairCreateConcurrency)
	var wg sync.WaitGroup
	for _, id := range ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := h.jobs.KillFederatedJob(ctx, &pelotonv1.KillFederatedJobRequest{JobId: id}); err != nil {
				h.env.logger().Warn("cannot kill a fair-share job", "job", id, "err", err)
			}
		})
	}
	wg.Wait()
	// Wait, not measured, until the clusters confirmed every kill, so
	// that the next phase finds them empty.
	wctx, cancel := context.WithTimeout(ctx, fedEndWait)
	defer cancel()
	err := waitFor(wctx, 100*time.Millisecond, "", func() (bool, string, error) {
		held := 0
		for _, p := range []string{fairFloodPool, fairOtherPool} {
			resp, err := h.pools.GetFederatedPool(wctx, &pelotonv1.GetFederatedPoolRequest{Path: p})
			if err != nil {
				return false, "", err
			}
			held += int(resp.Pool.GetGlobal().GetDispatchedJobs())
		}
		return held == 0, "", nil
	})
	if err != nil {
		h.env.progress("federation: the fair-share jobs did not all end within %s; going on", fedEndWait)
	}
}

// pct is part as a percentage of whole (0 when whole is 0).
func pct(part, whole float64) float64 {
	if whole <= 0 {
		return 0
	}
	return 100 * part / whole
}

// cmpOrErr is the first non-nil error.
func cmpOrErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
