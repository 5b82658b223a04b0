package bench

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// The rebalance phase of the federation scenario (--rebalance N): one
// federated service of N instances, placed by a label selector that the
// first three clusters match, all running; then a fourth cluster comes to
// match it (re-registered with the label: to the service, the same change
// as a new cluster's registration) and the service rebalances onto it
// within its budget (--rebalance-budget).
//
//   - rebalanceSec: from the re-registration until the rebalance is DONE
//     and the federation sees all N instances RUNNING.
//   - rebalanceMoved: instances the rebalance moved (N/4 for equal parts).
//   - rebalanceBudgetViolations: polls (every 100 ms, of every cluster's
//     job, the shrinking parts read first) where fewer than N less the
//     budget instances were RUNNING over all clusters; must be 0.
//   - rebalanceMinRunning: the fewest instances RUNNING in one poll.
//
// The service is deleted at the end, so the phases after it have the
// clusters' room.

const (
	rebalanceLabel = "bench-rebalance"
	// rebalanceClusters is how many clusters the service starts on; one
	// more joins.
	rebalanceClusters = 3
)

// rebalancePhase runs the rebalance phase (see above).
func (h *fedHarness) rebalancePhase(ctx context.Context, r *Result) error {
	n, budget := h.cfg.Rebalance, h.cfg.RebalanceBudget
	if len(h.members) <= rebalanceClusters {
		return fmt.Errorf("bench: the rebalance phase needs %d clusters, has %d", rebalanceClusters+1, len(h.members))
	}
	for _, m := range h.members[:rebalanceClusters] {
		if err := h.labelForRebalance(ctx, m); err != nil {
			return err
		}
	}
	spec := &pelotonv1.FederatedServiceSpec{
		Job: &pelotonv1.JobSpec{Name: "bench-rebalance", Type: pelotonv1.JobType_SERVICE, Pool: "/default", InstanceCount: uint32(n),
			Sla: &pelotonv1.SlaSpec{MaximumUnavailableInstances: uint32(budget)},
			DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "86400"},
				Resources: &pelotonv1.Resources{Cpu: fedServiceCPU, MemoryMb: fedServiceMemoryMB}}},
		Placement: &pelotonv1.ServicePlacement{Clusters: []*pelotonv1.ClusterShare{{Selector: map[string]string{rebalanceLabel: "on"}, Weight: 1}}},
	}
	h.env.progress("federation: a service of %d instances over %d clusters, then a fourth joins (budget %d)", n, rebalanceClusters, budget)
	id, get, err := h.createService(ctx, spec)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, fedServiceWait)
	defer cancel()
	if err := waitServiceRunning(wctx, get, n); err != nil {
		return err
	}

	watch := &rebalanceWatch{h: h, least: uint32(n - budget), fewest: uint32(n)}
	wctxR, stopWatch := context.WithCancel(wctx)
	var bg sync.WaitGroup
	bg.Go(func() { watch.run(wctxR, get) })
	joining := h.members[rebalanceClusters]
	start := time.Now()
	err = h.labelForRebalance(ctx, joining)
	var done *pelotonv1.FederatedService
	if err == nil {
		err = waitFor(wctx, fedServicePoll, "waiting for the rebalance", func() (bool, string, error) {
			s, err := get(wctx)
			if err != nil {
				return false, "", err
			}
			done = s
			rb := s.Rebalance
			return rb.GetState() == pelotonv1.RebalanceState_REBALANCE_DONE && s.Running == uint32(n),
				fmt.Sprintf("rebalance %s, %d moved, %d of %d running; waits for %q", rb.GetState(), rb.GetMoved(), s.Running, n, rb.GetWaiting()), nil
		})
	}
	elapsed := time.Since(start)
	stopWatch()
	bg.Wait()
	if err != nil {
		return err
	}
	r.add("rebalanceSec", elapsed.Seconds(), "s", fmt.Sprintf("a fourth cluster joins a service of %d instances over %d: until the rebalance is DONE and all run (budget %d, checks every %s)", n, rebalanceClusters, budget, h.cfg.CheckEvery))
	r.add("rebalanceMoved", float64(done.Rebalance.GetMoved()), "", fmt.Sprintf("instances moved, to %v", done.Rebalance.GetTo()))
	r.add("rebalanceBudgetViolations", float64(watch.violations), "", fmt.Sprintf("polls (every %s, %d in all) where fewer than %d instances (the count less the budget) were RUNNING over all clusters", fedServicePoll, watch.polls, n-budget))
	r.add("rebalanceMinRunning", float64(watch.fewest), "", "the fewest instances RUNNING in one poll during the rebalance")
	if _, err := h.fc.Services.DeleteFederatedService(ctx, &pelotonv1.DeleteFederatedServiceRequest{ServiceId: id}); err != nil {
		return fmt.Errorf("bench: DeleteFederatedService: %w", err)
	}
	return nil
}

// labelForRebalance registers member m again with the rebalance label
// added to its labels.
func (h *fedHarness) labelForRebalance(ctx context.Context, m fedMember) error {
	labels := map[string]string{"bench": "federation", rebalanceLabel: "on"}
	_, err := h.clusters.RegisterCluster(ctx, &pelotonv1.RegisterClusterRequest{Name: m.name, Endpoint: m.ready.GRPCAddr,
		HttpEndpoint: m.ready.HTTPAddr, Labels: labels, Replace: true})
	if err != nil {
		return fmt.Errorf("bench: RegisterCluster %s: %w", m.name, err)
	}
	return nil
}

// rebalanceWatch polls a rebalancing service's jobs in their clusters and
// counts the polls where fewer than least instances ran over all of them.
// The shrinking parts are read first: a part shrinks only once the growing
// ones run, so a poll that saw a part shrunk sees the growth before it.
type rebalanceWatch struct {
	h                         *fedHarness
	least                     uint32
	polls, violations, fewest uint32
}

func (w *rebalanceWatch) run(ctx context.Context, get func(context.Context) (*pelotonv1.FederatedService, error)) {
	t := time.NewTicker(fedServicePoll)
	defer t.Stop()
	for {
		if running, ok := w.poll(ctx, get); ok {
			w.polls++
			w.fewest = min(w.fewest, running)
			if running < w.least {
				w.violations++
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *rebalanceWatch) poll(ctx context.Context, get func(context.Context) (*pelotonv1.FederatedService, error)) (uint32, bool) {
	s, err := get(ctx)
	if err != nil {
		return 0, false
	}
	to := maps.Clone(s.GetRebalance().GetTo())
	var first, then []*pelotonv1.ServiceCluster
	for _, p := range s.Clusters {
		if want, ok := to[p.Cluster]; p.Retiring || (ok && p.Desired > want) || (!ok && to != nil) {
			first = append(first, p)
		} else {
			then = append(then, p)
		}
	}
	var running uint32
	for _, p := range append(first, then...) {
		j, err := w.h.partJob(ctx, p)
		if err != nil {
			return 0, false
		}
		running += j.GetStatus().GetTaskCounts()["RUNNING"]
	}
	return running, true
}
