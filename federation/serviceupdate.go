package federation

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/peloton-sched/peloton/federation/split"
	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/metrics"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// maxRolloutHistory bounds the earlier rollouts a service keeps.
const maxRolloutHistory = 10

// UpdateService gives a federated service a new job spec and starts its
// rollout (see rollout.go). The name, type, pool and placement stay; a new
// instance count is split over the service's clusters in proportion to
// their parts.
//
// pl, when given, carries the clusters' new overrides: the rest of it must
// be the service's placement as it is. Without it the overrides stay.
func (sv *Services) UpdateService(ctx context.Context, id string, job *pelotonv1.JobSpec, pl *pelotonv1.ServicePlacement, rs *pelotonv1.RolloutSpec, expect uint64) (*pelotonv1.FederatedService, error) {
	cur, err := sv.GetService(id)
	if err != nil {
		return nil, err
	}
	if job != nil && job.Type == pelotonv1.JobType_JOB_TYPE_UNSPECIFIED {
		job = proto.Clone(job).(*pelotonv1.JobSpec)
		job.Type = cur.Spec.Job.Type
	}
	if err := validateServiceJob(job, "job"); err != nil {
		return nil, err
	}
	old := cur.Spec.Job
	switch {
	case job.Name != old.Name:
		return nil, apierr.Invalid("job.name", "cannot change (%s)", old.Name)
	case job.Pool != old.Pool:
		return nil, apierr.Invalid("job.pool", "cannot change (%s); a service moves to another pool by a new service", old.Pool)
	case job.Type != old.Type:
		return nil, apierr.Invalid("job.type", "cannot change (%s)", old.Type)
	case job.Type == pelotonv1.JobType_SERVICE && int(job.InstanceCount) < len(cur.Clusters):
		return nil, apierr.Invalid("job.instanceCount", "%d is fewer than the service's %d clusters (%s)", job.InstanceCount, len(cur.Clusters), partList(cur.Clusters))
	}
	overrides, err := sv.updateOverrides(cur, job, pl)
	if err != nil {
		return nil, err
	}
	inCluster := map[string]uint32{}
	for _, p := range cur.Clusters {
		if overrides[p.Cluster].GetResources() == nil {
			inCluster[p.Cluster] = 1 // the others' fit is their override's
		}
	}
	if err := sv.checkFits(job, inCluster, "job"); err != nil {
		return nil, err
	}
	rs = mergeRollout(cur.Spec.GetRollout(), rs)
	if err := validateRolloutSteps(rs, partNames(cur.Clusters), "rollout"); err != nil {
		return nil, err
	}
	order, groups, err := gatedOrder(cur.Clusters, rs.Steps)
	if err != nil {
		return nil, err
	}
	if len(rs.Steps) == 0 {
		if order, err = rolloutOrder(cur.Clusters, rs.GetOrder()); err != nil {
			return nil, err
		}
	}
	var out *pelotonv1.FederatedService
	err = sv.updateService(ctx, id, func(rec *pelotonv1.FederatedService) error {
		switch {
		case rec.Deleting:
			return apierr.FailedPrecondition("federated service %s is being deleted", id)
		case rolloutActive(rec.Rollout):
			return apierr.FailedPrecondition("federated service %s has rollout %d %s; pause, abort or roll it back, or wait for it",
				id, rec.Rollout.Id, rec.Rollout.State)
		case expect != 0 && rec.SpecVersion != expect:
			return apierr.Aborted("federated service %s is at spec version %d, not %d", id, rec.SpecVersion, expect)
		}
		parts, budgets, err := updatedParts(rec, job)
		if err != nil {
			return err
		}
		now := timestamppb.New(sv.f.opts.Now())
		from := rec.SpecVersion
		rec.SpecVersion++
		rec.Spec.Job = job
		if pl != nil {
			rec.Spec.Placement = pl
		}
		rec.Versions = append(rec.Versions, &pelotonv1.ServiceVersion{Version: rec.SpecVersion, Job: job, CreateTime: now,
			Overrides: overrides, Placement: rec.Spec.Placement})
		r := &pelotonv1.ServiceRollout{FromVersion: from, ToVersion: rec.SpecVersion, Spec: rs, State: pelotonv1.RolloutState_ROLLOUT_ROLLING, CreateTime: now}
		if r.Spec.StartPaused {
			r.State = pelotonv1.RolloutState_ROLLOUT_PAUSED
			r.Message = "created paused; fed service resume starts it"
		}
		if prev := rec.Rollout; prev != nil {
			r.Id = prev.Id + 1
			rec.History = append([]*pelotonv1.ServiceRollout{prev}, rec.History...)
			if len(rec.History) > maxRolloutHistory {
				rec.History = rec.History[:maxRolloutHistory]
			}
		} else {
			r.Id = 1
		}
		for i, name := range order {
			p := partOf(rec, name)
			st := &pelotonv1.RolloutStep{Cluster: name, State: pelotonv1.RolloutStepState_STEP_PENDING,
				Desired: parts[name], MaxUnavailable: budgets[name], FromDesired: p.Desired, FromMaxUnavailable: p.MaxUnavailable}
			if len(rs.Steps) > 0 {
				st.Group = groups[i]
			}
			r.Steps = append(r.Steps, st)
		}
		rec.Rollout = r
		pruneVersions(rec)
		out = rec
		return nil
	})
	if err != nil {
		return nil, err
	}
	sv.f.log.Info("federated service update", "service", id, "version", out.SpecVersion, "rollout", out.Rollout.Id, "order", order)
	metrics.FederationServices.WithLabelValues("rollout-started").Inc()
	sv.kickRollouts()
	return sv.GetService(id)
}

// updatedParts is each part's instances and budget under a service's new
// job spec: a new count over the same clusters, in proportion to their
// parts; a DAEMON's parts keep no count, each with the whole budget.
func updatedParts(rec *pelotonv1.FederatedService, job *pelotonv1.JobSpec) (map[string]uint32, map[string]uint32, error) {
	budget := max(job.GetSla().GetMaximumUnavailableInstances(), 1)
	if job.Type == pelotonv1.JobType_DAEMON {
		parts, budgets := map[string]uint32{}, map[string]uint32{}
		for _, p := range rec.Clusters {
			parts[p.Cluster], budgets[p.Cluster] = 0, budget
		}
		return parts, budgets, nil
	}
	shares := &pelotonv1.ServicePlacement{}
	var clusters []split.ServiceCluster
	for _, p := range rec.Clusters {
		shares.Clusters = append(shares.Clusters, &pelotonv1.ClusterShare{Name: p.Cluster, Weight: p.Desired})
		clusters = append(clusters, split.ServiceCluster{Name: p.Cluster})
	}
	parts, err := split.Service(job.InstanceCount, shares, clusters)
	if err != nil {
		return nil, nil, err
	}
	for _, p := range rec.Clusters {
		if parts[p.Cluster] == 0 {
			return nil, nil, apierr.Invalid("job.instanceCount", "%d leaves cluster %s no instance; every cluster of the service keeps one at least", job.InstanceCount, p.Cluster)
		}
	}
	return parts, split.Budget(budget, parts), nil
}

// updateOverrides is the overrides of an update of cur to job: pl's, when
// it gives a placement (the same as the service's but for its
// overrides), else those of cur's current version, checked again against
// the new job.
func (sv *Services) updateOverrides(cur *pelotonv1.FederatedService, job *pelotonv1.JobSpec, pl *pelotonv1.ServicePlacement) (map[string]*pelotonv1.ClusterOverride, error) {
	parts := map[string]uint32{}
	for _, p := range cur.Clusters {
		parts[p.Cluster] = max(p.Desired, 1)
	}
	if pl != nil {
		if !sameShares(pl, cur.Spec.Placement) {
			return nil, apierr.Invalid("placement", "an update may change the clusters' overrides only, not where the service runs; leave the rest as it is, or create a new service")
		}
		out, _, err := sv.overridesFor(pl, job, parts, "placement", "job")
		return out, err
	}
	if err := validateOverrides(cur.Spec.Placement, job, "placement"); err != nil {
		return nil, err
	}
	for _, v := range cur.Versions {
		if v.Version == cur.SpecVersion {
			return v.Overrides, nil
		}
	}
	return nil, nil
}

// versionPlacement is the placement given with a service's version v, if
// it is kept.
func versionPlacement(rec *pelotonv1.FederatedService, v uint64) *pelotonv1.ServicePlacement {
	for _, sv := range rec.Versions {
		if sv.Version == v {
			return sv.Placement
		}
	}
	return nil
}

// pruneVersions keeps the specs some part runs or may return to: the
// current one, those of the rollout, and each part's.
func pruneVersions(rec *pelotonv1.FederatedService) {
	keep := map[uint64]bool{rec.SpecVersion: true}
	if r := rec.Rollout; r != nil {
		keep[r.FromVersion], keep[r.ToVersion] = true, true
	}
	for _, p := range rec.Clusters {
		keep[p.SpecVersion] = true
	}
	kept := rec.Versions[:0]
	for _, v := range rec.Versions {
		if keep[v.Version] {
			kept = append(kept, v)
		}
	}
	rec.Versions = kept
}

// RolloutControl is a user's command to a service's current rollout.
type RolloutControl int

const (
	RolloutPause RolloutControl = iota
	RolloutResume
	RolloutAbort
	RolloutRollback
	// RolloutApprove lets a rollout waiting for approval of a gated step
	// go on.
	RolloutApprove
)

// ControlRollout pauses, resumes, aborts or rolls back a service's current
// rollout. A command the rollout's state does not allow is
// FailedPrecondition, naming the state.
func (sv *Services) ControlRollout(ctx context.Context, id string, c RolloutControl) (*pelotonv1.FederatedService, error) {
	if _, err := sv.GetService(id); err != nil {
		return nil, err
	}
	err := sv.updateService(ctx, id, func(rec *pelotonv1.FederatedService) error {
		r := rec.Rollout
		if r == nil {
			return apierr.FailedPrecondition("federated service %s has no rollout (it was never updated)", id)
		}
		refuse := func(what string) error {
			return apierr.FailedPrecondition("rollout %d of federated service %s is %s; %s", r.Id, id, r.State, what)
		}
		now := timestamppb.New(sv.f.opts.Now())
		switch c {
		case RolloutPause:
			if r.State != pelotonv1.RolloutState_ROLLOUT_ROLLING {
				return refuse("only a rolling rollout can be paused")
			}
			r.State, r.Message = pelotonv1.RolloutState_ROLLOUT_PAUSED, "paused by the user"
		case RolloutResume:
			if r.State != pelotonv1.RolloutState_ROLLOUT_PAUSED {
				return refuse("only a paused rollout can be resumed")
			}
			r.State, r.Message = pelotonv1.RolloutState_ROLLOUT_ROLLING, "resumed by the user"
		case RolloutAbort:
			if !rolloutActive(r) {
				return refuse("only a rollout in progress can be aborted")
			}
			r.State, r.Message, r.EndTime = pelotonv1.RolloutState_ROLLOUT_ABORTED, "aborted by the user; clusters keep the spec they run", now
			endGate(r)
		case RolloutRollback:
			switch r.State {
			case pelotonv1.RolloutState_ROLLOUT_ROLLING_BACK, pelotonv1.RolloutState_ROLLOUT_ROLLED_BACK:
				return refuse("it is rolled back already")
			}
			r.State, r.Message, r.EndTime = pelotonv1.RolloutState_ROLLOUT_ROLLING_BACK, "rolling back at the user's request", nil
			endGate(r)
		case RolloutApprove:
			if r.ApprovalSince == nil || (r.State != pelotonv1.RolloutState_ROLLOUT_ROLLING && r.State != pelotonv1.RolloutState_ROLLOUT_PAUSED) {
				return refuse("it waits for no approval (waiting for: " + waitingOr(r) + ")")
			}
			sv.f.log.Info("federated service rollout approved", "service", id, "rollout", r.Id, "step", r.GatesPassed+1)
			r.Message = fmt.Sprintf("step %d approved by the user", r.GatesPassed+1)
			setGate(r, gateState{passed: r.GatesPassed + 1})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sv.nudgeServiceClusters(id)
	sv.kickRollouts()
	return sv.GetService(id)
}

// endGate clears what a rollout that stops rolling forward waits for: no
// soak goes on and no approval is awaited.
func endGate(r *pelotonv1.ServiceRollout) {
	r.Waiting, r.WaitingSince, r.SoakStart, r.ApprovalSince = "", nil, nil, nil
}

// waitingOr is what rollout r waits for, or nothing.
func waitingOr(r *pelotonv1.ServiceRollout) string {
	if r.Waiting == "" {
		return "nothing"
	}
	return r.Waiting
}

// partNames is the clusters of a service's parts.
func partNames(parts []*pelotonv1.ServiceCluster) []string {
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		out = append(out, p.Cluster)
	}
	return out
}

func (sv *Services) nudgeServiceClusters(id string) {
	sv.f.mu.Lock()
	defer sv.f.mu.Unlock()
	if s := sv.f.services[id]; s != nil {
		for _, p := range s.rec.Clusters {
			if m := sv.f.clusters[p.Cluster]; m != nil {
				m.nudge()
			}
		}
	}
}

func (sv *Services) kickRollouts() {
	select {
	case sv.f.rolloutKick <- struct{}{}:
	default:
	}
}

// rolloutLoop moves every service's rollout along (planRollout), its
// parts across clusters when one is lost (planFailover) and to a new split
// when its clusters change (rebalance.go), when kicked and
// every CheckEvery; the steps themselves are carried out by their
// clusters' workers.
func (sv *Services) rolloutLoop(ctx context.Context) {
	t := time.NewTicker(sv.f.opts.CheckEvery)
	defer t.Stop()
	for {
		sv.f.mu.Lock()
		var ids []string
		for id, s := range sv.f.services {
			if st := s.rec.Rollout.GetState(); st == pelotonv1.RolloutState_ROLLOUT_ROLLING || st == pelotonv1.RolloutState_ROLLOUT_ROLLING_BACK {
				ids = append(ids, id)
			}
		}
		sv.f.mu.Unlock()
		sort.Strings(ids)
		for _, id := range ids {
			if err := sv.advanceRollout(ctx, id); err != nil && !errors.Is(err, errSkip) && ctx.Err() == nil {
				sv.f.log.Warn("cannot move a rollout along; retried", "service", id, "err", err)
			}
		}
		sv.failoverPass(ctx)
		sv.rebalancePass(ctx)
		sv.f.passes.rollout.Add(1)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-sv.f.rolloutKick:
		}
	}
}

// advanceRollout applies planRollout to a service's rollout.
func (sv *Services) advanceRollout(ctx context.Context, id string) error {
	changed := false
	err := sv.updateService(ctx, id, func(rec *pelotonv1.FederatedService) error {
		r := rec.Rollout
		if r == nil {
			return errSkip
		}
		at := sv.f.opts.Now()
		plan := planRollout(r, rec.Clusters, at)
		gateMoved := plan.gate != nil && !gateEqual(*plan.gate, gateOf(r))
		if len(plan.start) == 0 && len(plan.rollback) == 0 && len(plan.fail) == 0 && plan.state == r.State && !gateMoved {
			return errSkip
		}
		now := timestamppb.New(at)
		if plan.gate != nil {
			setGate(r, *plan.gate)
		}
		for _, i := range plan.fail {
			r.Steps[i].State, r.Steps[i].Message = pelotonv1.RolloutStepState_STEP_FAILED, plan.failMessage
			sv.f.log.Warn("federated service rollout: a step failed its soak", "service", id, "rollout", r.Id, "cluster", r.Steps[i].Cluster, "why", plan.failMessage)
		}
		if plan.state != pelotonv1.RolloutState_ROLLOUT_ROLLING {
			endGate(r)
		}
		for _, i := range plan.start {
			r.Steps[i].State, r.Steps[i].StartTime, r.Steps[i].Message = pelotonv1.RolloutStepState_STEP_UPDATING, now, "updating"
		}
		for _, i := range plan.rollback {
			r.Steps[i].State, r.Steps[i].Message = pelotonv1.RolloutStepState_STEP_ROLLING_BACK, "rolling back"
		}
		if plan.state != r.State {
			if cause, ok := strings.CutSuffix(r.Message, "; rolling back"); ok && plan.state == pelotonv1.RolloutState_ROLLOUT_ROLLED_BACK {
				plan.message += " (rolled back: " + cause + ")" // why stays in sight
			}
			sv.f.log.Info("federated service rollout", "service", id, "rollout", r.Id, "from", r.State, "to", plan.state, "why", plan.message)
			r.State, r.Message = plan.state, plan.message
			switch plan.state {
			case pelotonv1.RolloutState_ROLLOUT_SUCCEEDED, pelotonv1.RolloutState_ROLLOUT_FAILED, pelotonv1.RolloutState_ROLLOUT_ROLLED_BACK:
				r.EndTime = now
				metrics.FederationServices.WithLabelValues("rollout-" + map[pelotonv1.RolloutState]string{
					pelotonv1.RolloutState_ROLLOUT_SUCCEEDED: "succeeded", pelotonv1.RolloutState_ROLLOUT_FAILED: "failed",
					pelotonv1.RolloutState_ROLLOUT_ROLLED_BACK: "rolled-back"}[plan.state]).Inc()
			}
			if plan.state == pelotonv1.RolloutState_ROLLOUT_ROLLED_BACK {
				// The service's spec is the one before the rollout again.
				rec.SpecVersion = r.FromVersion
				rec.Spec.Job = versionSpec(rec, r.FromVersion)
				if pl := versionPlacement(rec, r.FromVersion); pl != nil {
					rec.Spec.Placement = pl
				}
			}
			pruneVersions(rec)
		}
		changed = true
		return nil
	})
	if err == nil && changed {
		sv.nudgeServiceClusters(id)
		sv.kickRollouts() // a failed soak turns to rolling back at once
	}
	return err
}

// stepFor is the step of cluster name in a service's current rollout.
func stepFor(rec *pelotonv1.FederatedService, name string) *pelotonv1.RolloutStep {
	if rec.Rollout == nil {
		return nil
	}
	for _, s := range rec.Rollout.Steps {
		if s.Cluster == name {
			return s
		}
	}
	return nil
}

// stepUpdateSpec is the update a step asks of its cluster, whose part has
// n instances at the spec it goes to: the rollout's, never created paused
// (the rollout pauses it if need be), its batch and unavailability bounded
// by the part (a part smaller than the batch is done in one).
func stepUpdateSpec(r *pelotonv1.ServiceRollout, back bool, n uint32) *pelotonv1.UpdateSpec {
	us := &pelotonv1.UpdateSpec{}
	if u := r.Spec.GetUpdate(); u != nil {
		us = proto.Clone(u).(*pelotonv1.UpdateSpec)
	}
	us.StartPaused = false
	us.BatchSize = min(us.BatchSize, n)
	us.MaxUnavailable = min(us.MaxUnavailable, n)
	if back {
		us.RollbackOnFailure = false // a rollback that fails is said so, not rolled forward again
	}
	return us
}

// inProgress reports whether a cluster's update still moves or waits.
func inProgress(st pelotonv1.UpdateState) bool {
	switch st {
	case pelotonv1.UpdateState_UPDATE_ROLLING_FORWARD, pelotonv1.UpdateState_UPDATE_PAUSED, pelotonv1.UpdateState_UPDATE_ROLLING_BACK:
		return true
	}
	return false
}

// stepSync is one pass over one cluster's step of a service's rollout:
// what syncStep was given, and the calls its steps share.
type stepSync struct {
	f       *Federation
	ctx     context.Context
	name    string
	cli     clusterClient
	rec     *pelotonv1.FederatedService
	p       *pelotonv1.ServiceCluster
	jobID   string
	js      *pelotonv1.JobStatus
	r       *pelotonv1.ServiceRollout
	s       *pelotonv1.RolloutStep
	forward bool // the step goes forward (else it rolls back)
}

// call bounds one call to the step's cluster.
func (ss *stepSync) call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(asFederation(ss.ctx, ss.rec.Id), ss.f.opts.CallTimeout)
}

// setStep changes the stored step and part, unless they changed since
// they were read, and wakes the rollouts. It reports a step under way.
func (ss *stepSync) setStep(change func(s *pelotonv1.RolloutStep, p *pelotonv1.ServiceCluster)) (bool, error) {
	err := ss.f.Services().updateService(ss.ctx, ss.rec.Id, func(cur *pelotonv1.FederatedService) error {
		cs, cp := stepFor(cur, ss.name), partOf(cur, ss.name)
		if cur.Rollout.GetId() != ss.r.Id || cs == nil || cp == nil || cs.State != ss.s.State || cp.ClusterJobId != ss.jobID {
			return errSkip // changed since it was read; the next pass looks again
		}
		change(cs, cp)
		return nil
	})
	if err == nil {
		ss.f.Services().kickRollouts()
	}
	return true, err
}

// getUpdate reads the cluster's update uid.
func (ss *stepSync) getUpdate(uid string) (*pelotonv1.Update, error) {
	cctx, cancel := ss.call()
	defer cancel()
	resp, err := ss.cli.Updates.GetUpdate(cctx, &pelotonv1.GetUpdateRequest{UpdateId: uid})
	return resp.GetUpdate(), err
}

// control pauses or resumes the cluster's update uid, now in state st, as
// the rollout is.
func (ss *stepSync) control(uid string, st pelotonv1.UpdateState) error {
	cctx, cancel := ss.call()
	defer cancel()
	var err error
	switch {
	case ss.r.State == pelotonv1.RolloutState_ROLLOUT_PAUSED && st == pelotonv1.UpdateState_UPDATE_ROLLING_FORWARD:
		_, err = ss.cli.Updates.PauseUpdate(cctx, &pelotonv1.PauseUpdateRequest{UpdateId: uid})
	case ss.r.State != pelotonv1.RolloutState_ROLLOUT_PAUSED && st == pelotonv1.UpdateState_UPDATE_PAUSED:
		_, err = ss.cli.Updates.ResumeUpdate(cctx, &pelotonv1.ResumeUpdateRequest{UpdateId: uid})
	}
	if refused(err) {
		return nil // it moved on meanwhile
	}
	return err
}

// abort stops the cluster's update uid, if there is one.
func (ss *stepSync) abort(uid string) error {
	if uid == "" {
		return nil
	}
	cctx, cancel := ss.call()
	defer cancel()
	_, err := ss.cli.Updates.AbortUpdate(cctx, &pelotonv1.AbortUpdateRequest{UpdateId: uid})
	if refused(err) {
		return nil // it had ended
	}
	return err
}

// now is the federation's clock as a timestamp.
func (ss *stepSync) now() *timestamppb.Timestamp { return timestamppb.New(ss.f.opts.Now()) }

// syncStep carries out cluster name's step of a service's current rollout,
// whose part there has job jobID, whose status js was just read. It
// reports whether a step was under way (the part's drift is then not
// looked at: the step changes its job).
func (sv *Services) syncStep(ctx context.Context, name string, cli clusterClient, rec *pelotonv1.FederatedService, p *pelotonv1.ServiceCluster, jobID string, js *pelotonv1.JobStatus) (bool, error) {
	r := rec.Rollout
	s := stepFor(rec, name)
	if r == nil || s == nil {
		return false, nil
	}
	forward := s.State == pelotonv1.RolloutStepState_STEP_UPDATING
	back := s.State == pelotonv1.RolloutStepState_STEP_ROLLING_BACK
	if !forward && !back {
		return false, nil
	}
	ss := &stepSync{f: sv.f, ctx: ctx, name: name, cli: cli, rec: rec, p: p, jobID: jobID, js: js, r: r, s: s, forward: forward}
	switch {
	case r.State == pelotonv1.RolloutState_ROLLOUT_ABORTED:
		return ss.aborted()
	case forward:
		return ss.goForward()
	default:
		return ss.rollBack()
	}
}

// follow looks at the step's update uid (what names it): once it
// succeeded the step is ok, once it ended otherwise the step failed;
// either way the part is at version v with the counts part gives. Under
// way, it is paused or resumed as the rollout is.
func (ss *stepSync) follow(uid, what string, ok pelotonv1.RolloutStepState, v uint64, part func(*pelotonv1.RolloutStep) (uint32, uint32)) (bool, error) {
	u, err := ss.getUpdate(uid)
	if err != nil {
		return true, err
	}
	st := u.GetStatus().GetState()
	if st == pelotonv1.UpdateState_UPDATE_SUCCEEDED && ss.forward && ss.js.GetHealthy() < ss.s.Desired {
		// The next cluster starts only once this part's instances
		// all serve, those the update did not touch included.
		ss.f.Services().observePart(ss.rec.Id, ss.name, func(q *pelotonv1.ServiceCluster) {
			q.Message = fmt.Sprintf("%s %s succeeded; waiting for its instances to be healthy (%d of %d)", what, u.Id, ss.js.GetHealthy(), ss.s.Desired)
		})
		return true, nil
	}
	if st == pelotonv1.UpdateState_UPDATE_SUCCEEDED || !inProgress(st) {
		return ss.setStep(func(cs *pelotonv1.RolloutStep, cp *pelotonv1.ServiceCluster) {
			cs.State, cs.EndTime, cs.Message = ok, ss.now(), what+" "+u.Id+" succeeded"
			if st != pelotonv1.UpdateState_UPDATE_SUCCEEDED {
				cs.State = pelotonv1.RolloutStepState_STEP_FAILED
				cs.Message = fmt.Sprintf("%s %s ended %s", what, u.Id, st)
				if m := u.GetStatus().GetMessage(); m != "" {
					cs.Message += ": " + m
				}
			}
			cp.SpecVersion = v
			cp.Desired, cp.MaxUnavailable = part(cs)
		})
	}
	ss.f.Services().observePart(ss.rec.Id, ss.name, func(q *pelotonv1.ServiceCluster) {
		q.Message = fmt.Sprintf("%s %s %s", what, u.Id, st)
		if m := u.GetStatus().GetMessage(); m != "" {
			q.Message += ": " + m
		}
	})
	return true, ss.control(u.Id, st)
}

// aborted stops the step's update of an aborted rollout and ends the step.
func (ss *stepSync) aborted() (bool, error) {
	r := ss.r
	uid := ss.s.UpdateId
	if !ss.forward {
		uid = ss.s.RollbackUpdateId
	}
	if err := ss.abort(uid); err != nil {
		return true, err
	}
	return ss.setStep(func(cs *pelotonv1.RolloutStep, cp *pelotonv1.ServiceCluster) {
		cs.State, cs.EndTime, cs.Message = pelotonv1.RolloutStepState_STEP_ABORTED, ss.now(), "its update there was stopped by the abort"
		if uid != "" {
			// The job's spec there moved; its instances are as the abort left them.
			if ss.forward {
				cp.SpecVersion, cp.Desired, cp.MaxUnavailable = r.ToVersion, cs.Desired, cs.MaxUnavailable
			} else {
				cp.SpecVersion, cp.Desired, cp.MaxUnavailable = r.FromVersion, cs.FromDesired, cs.FromMaxUnavailable
			}
		}
	})
}

// goForward starts the step's update to the rollout's new spec, or
// follows it once started.
func (ss *stepSync) goForward() (bool, error) {
	r, s := ss.r, ss.s
	if s.UpdateId != "" {
		return ss.follow(s.UpdateId, "update", pelotonv1.RolloutStepState_STEP_DONE, r.ToVersion,
			func(cs *pelotonv1.RolloutStep) (uint32, uint32) { return cs.Desired, cs.MaxUnavailable })
	}
	if ss.p.SpecVersion == r.ToVersion {
		return ss.setStep(func(cs *pelotonv1.RolloutStep, _ *pelotonv1.ServiceCluster) {
			cs.State, cs.EndTime, cs.Message = pelotonv1.RolloutStepState_STEP_DONE, ss.now(), "made at the new spec already"
		})
	}
	cctx, cancel := ss.call()
	up, err := ss.cli.Updates.CreateUpdate(cctx, &pelotonv1.CreateUpdateRequest{JobId: ss.jobID,
		Spec: partSpecAt(ss.rec, r.ToVersion, ss.name, s.Desired, s.MaxUnavailable), UpdateSpec: stepUpdateSpec(r, false, s.Desired),
		RequestId: fmt.Sprintf("fsvcu-%s-%d-%s", ss.rec.Id, r.Id, ss.name)})
	cancel()
	if err != nil {
		if refused(err) {
			return ss.setStep(func(cs *pelotonv1.RolloutStep, _ *pelotonv1.ServiceCluster) {
				cs.State, cs.EndTime = pelotonv1.RolloutStepState_STEP_FAILED, ss.now()
				cs.Message = "cluster " + ss.name + " refused the update: " + status.Convert(err).Message()
			})
		}
		return true, err
	}
	return ss.setStep(func(cs *pelotonv1.RolloutStep, cp *pelotonv1.ServiceCluster) {
		cs.UpdateId, cs.Message = up.Update.Id, "update "+up.Update.Id+" under way"
		cp.ClusterSpecVersion = up.Update.ToVersion
	})
}

// rollBack stops the step's forward update and starts the rollback update
// to the rollout's old spec, or follows it once started.
func (ss *stepSync) rollBack() (bool, error) {
	r, s := ss.r, ss.s
	if s.RollbackUpdateId != "" {
		return ss.follow(s.RollbackUpdateId, "rollback update", pelotonv1.RolloutStepState_STEP_ROLLED_BACK, r.FromVersion,
			func(cs *pelotonv1.RolloutStep) (uint32, uint32) { return cs.FromDesired, cs.FromMaxUnavailable })
	}
	if s.UpdateId == "" {
		return ss.setStep(func(cs *pelotonv1.RolloutStep, _ *pelotonv1.ServiceCluster) {
			cs.State, cs.EndTime, cs.Message = pelotonv1.RolloutStepState_STEP_ROLLED_BACK, ss.now(), "nothing had changed there"
		})
	}
	// The forward update first stops, if it still goes on.
	u, err := ss.getUpdate(s.UpdateId)
	if err != nil && status.Code(err) != codes.NotFound {
		return true, err
	}
	if u != nil && inProgress(u.GetStatus().GetState()) {
		if err := ss.abort(u.Id); err != nil {
			return true, err
		}
	}
	cctx, cancel := ss.call()
	up, err := ss.cli.Updates.CreateUpdate(cctx, &pelotonv1.CreateUpdateRequest{JobId: ss.jobID,
		Spec: partSpecAt(ss.rec, r.FromVersion, ss.name, s.FromDesired, s.FromMaxUnavailable), UpdateSpec: stepUpdateSpec(r, true, s.FromDesired),
		RequestId: fmt.Sprintf("fsvcr-%s-%d-%s", ss.rec.Id, r.Id, ss.name)})
	cancel()
	if err != nil {
		if status.Code(err) == codes.FailedPrecondition {
			ss.f.Services().observePart(ss.rec.Id, ss.name, func(q *pelotonv1.ServiceCluster) {
				q.Message = "rolling back waits: " + status.Convert(err).Message()
			})
			return true, nil // the aborted update is still winding down
		}
		return true, err
	}
	return ss.setStep(func(cs *pelotonv1.RolloutStep, cp *pelotonv1.ServiceCluster) {
		cs.RollbackUpdateId, cs.Message = up.Update.Id, "rollback update "+up.Update.Id+" under way"
		cp.ClusterSpecVersion = up.Update.ToVersion
	})
}
