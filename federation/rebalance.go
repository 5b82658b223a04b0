package federation

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/peloton-sched/peloton/federation/split"
	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/metrics"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Rebalancing federated services when their clusters change. A service's
// split is made over the clusters its placement covers (split.Shares: the
// named ones and the ones its selectors match that are not cordoned), and
// the record keeps that set (placedOn). When the set differs - a cluster
// registered or deregistered, cordoned or uncordoned, its labels changed -
// the split is made again over the new set (split.Service) and kept as a
// rebalance (ServiceRebalance) in the record. A MANUAL service's waits as
// PENDING for `fed service rebalance`; an AUTO one's moves at once.
//
// Moving is a sequence of steps, each written before the workers act on
// it, so a restarted federation reads where it was and goes on:
//
//   - grow: the parts below their new count are given up to as many new
//     instances as the budget has room for now (the budget less what is
//     unavailable: the global evaluator's count, or the parts' instances
//     not running, whichever is more - a new instance counts until it
//     runs); a cluster without a part gets one. The step's count is
//     recorded (growing).
//   - shrink: once every part that is not shrinking runs in full, as many
//     instances are taken from the parts above their new count; a part
//     left with none retires (its job is removed there).
//
// So the service never has more of its instances unavailable than its
// budget allows, and never fewer running than before a step. A part whose
// cluster was deregistered cannot be reached: it is dropped at once, and
// its instances are grown elsewhere in steps like the others.
//
// A rebalance waits while a rollout is under way (the rollout drives the
// parts' jobs) and while a part is failed over (failover decides where its
// instances run until its cluster is back); a failover that retires a
// part (moveBack false) cancels it, since it keeps the instances where
// they went. The parts' budgets are split again (rebudget) once it is
// done; meanwhile a new part has none of its own, so the shares never add
// up to more than the budget.

// rebalanceMove is the next move of a rebalance, as planRebalance decides.
type rebalanceMove struct {
	drop    []string          // parts whose cluster is no longer registered
	grow    map[string]uint32 // instances added (a new part where there is none)
	shrink  map[string]uint32 // instances taken away
	done    bool
	waiting string
}

// planRebalance is the next move of rebalance rb of a service whose parts
// are parts (their running counts observed), with unavailable of its
// instances unavailable now and a budget of budget. registered says
// which clusters are registered. It is pure.
func planRebalance(rb *pelotonv1.ServiceRebalance, parts []*pelotonv1.ServiceCluster, registered map[string]bool, unavailable, budget int) rebalanceMove {
	var m rebalanceMove
	cur := map[string]*pelotonv1.ServiceCluster{}
	for _, p := range parts {
		switch {
		case p.Retiring:
		case !registered[p.Cluster]:
			m.drop = append(m.drop, p.Cluster)
		default:
			cur[p.Cluster] = p
		}
	}
	deficit, excess := map[string]uint32{}, map[string]uint32{}
	var short, over uint32
	for name, want := range rb.To {
		if have := cur[name].GetDesired(); want > have {
			deficit[name] = want - have
			short += want - have
		}
	}
	for name, p := range cur {
		if want := rb.To[name]; p.Desired > want {
			excess[name] = p.Desired - want
			over += p.Desired - want
		}
	}
	if rb.Growing > 0 {
		// The step's new instances run before as many old ones go.
		for _, name := range sortedKeys(cur) {
			p := cur[name]
			if excess[name] > 0 {
				continue
			}
			if p.ClusterJobId == "" || p.Running < p.Desired {
				m.waiting = fmt.Sprintf("cluster %s to run its %d instances (%d running)", name, p.Desired, p.Running)
				return m
			}
		}
		m.shrink = take(excess, min(rb.Growing, over))
		return m
	}
	switch {
	case short == 0 && over == 0:
		m.done = true
		return m
	case short == 0:
		// Only instances to remove: that takes none of the service down.
		m.shrink = excess
		return m
	}
	free := budget - unavailable
	if free <= 0 {
		m.waiting = fmt.Sprintf("budget: %d of its budget of %d instances are unavailable", unavailable, budget)
		return m
	}
	m.grow = take(deficit, min(uint32(free), short))
	return m
}

// take spreads n over the entries of from, each time to the one with the
// most left (ties by name), never more than an entry has.
func take(from map[string]uint32, n uint32) map[string]uint32 {
	left := maps.Clone(from)
	out := map[string]uint32{}
	names := sortedKeys(left)
	for ; n > 0; n-- {
		best := ""
		for _, name := range names {
			if left[name] > 0 && (best == "" || left[name] > left[best]) {
				best = name
			}
		}
		if best == "" {
			break
		}
		left[best]--
		out[best]++
	}
	return out
}

// noticeRebalance compares the clusters rec's placement covers now (of
// clusters, the registered ones) with those of its last split, and plans,
// replans or cancels its rebalance; it reports whether rec changed. It is
// pure.
func noticeRebalance(rec *pelotonv1.FederatedService, clusters []split.ServiceCluster, now time.Time) bool {
	if rec.Deleting || rec.Spec.GetJob().GetType() == pelotonv1.JobType_DAEMON {
		return false
	}
	pl := rec.Spec.GetPlacement()
	shares, err := split.Shares(pl, clusters)
	rb := rec.Rebalance
	if err != nil {
		// The placement covers no cluster that takes work now: nothing
		// to move to. Said while a rebalance moves; otherwise the
		// parts stay as they are.
		return rb.GetState() == pelotonv1.RebalanceState_REBALANCE_MOVING && setWaiting(rb, "the placement: "+errText(err), now)
	}
	covered := sortedKeys(shares)
	if len(rec.PlacedOn) == 0 {
		rec.PlacedOn = covered // a record made before rebalancing: its split is the one it has
		return true
	}
	total := versionSpec(rec, rec.SpecVersion).GetInstanceCount()
	moving := rb.GetState() == pelotonv1.RebalanceState_REBALANCE_MOVING
	pending := rb.GetState() == pelotonv1.RebalanceState_REBALANCE_PENDING
	switch {
	case moving && slices.Equal(covered, rb.Clusters) && sumCounts(rb.To) == total:
		return false
	case !moving && slices.Equal(covered, rec.PlacedOn):
		if !pending {
			return false
		}
		rb.State, rb.EndTime = pelotonv1.RebalanceState_REBALANCE_CANCELLED, timestamppb.New(now)
		rb.Waiting, rb.WaitingSince = "", nil
		rb.Reason += "; cancelled: the clusters are those of its last split again"
		return true
	case pending && slices.Equal(covered, rb.Clusters) && sumCounts(rb.To) == total:
		return false
	}
	to, err := split.Service(total, pl, clusters)
	if err != nil {
		if rb != nil && (moving || pending) {
			return setWaiting(rb, "the placement: "+errText(err), now)
		}
		return false
	}
	why := coverChange(rec.PlacedOn, covered)
	overrideJoining(rec, pl, shares)
	if moving {
		// The clusters changed again (or an update changed the count):
		// go on from where the parts are, to the new split.
		rb.To, rb.Clusters = to, covered
		if why != "" {
			rb.Reason += "; then " + why
		}
		rec.PlacedOn = covered
		return true
	}
	from := map[string]uint32{}
	for _, p := range rec.Clusters {
		if !p.Retiring {
			from[p.Cluster] = p.Desired
		}
	}
	next := &pelotonv1.ServiceRebalance{Id: rb.GetId() + 1, Reason: why, From: from, To: to, Clusters: covered, CreateTime: timestamppb.New(now)}
	if pending {
		next.Id = rb.Id // the pending one, made again over the clusters now
	}
	rec.Rebalance = next
	if pl.GetRebalance() == pelotonv1.RebalanceMode_MANUAL {
		next.State = pelotonv1.RebalanceState_REBALANCE_PENDING
		next.Waiting, next.WaitingSince = "`peloton fed service rebalance "+rec.Id+"` (placement.rebalance is MANUAL)", timestamppb.New(now)
		return true
	}
	next.State = pelotonv1.RebalanceState_REBALANCE_MOVING
	rec.PlacedOn = covered
	return true
}

// overrideJoining gives a cluster that joins a service (it has no part
// yet) the override of the placement's share that covers it, at the
// service's current spec version, as the create gave the clusters it
// covered then.
func overrideJoining(rec *pelotonv1.FederatedService, pl *pelotonv1.ServicePlacement, shares map[string]int) {
	for _, v := range rec.Versions {
		if v.Version != rec.SpecVersion {
			continue
		}
		for name, i := range shares {
			if i < 0 || partOf(rec, name) != nil || pl.Clusters[i].GetOverride() == nil {
				continue
			}
			if v.Overrides == nil {
				v.Overrides = map[string]*pelotonv1.ClusterOverride{}
			}
			v.Overrides[name] = pl.Clusters[i].Override
		}
	}
}

// errText is the message of an API error, without its code.
func errText(err error) string { return status.Convert(err).Message() }

// coverChange says which clusters joined the covered set and which
// left it, e.g. "cluster d joins; cluster c leaves".
func coverChange(before, after []string) string {
	var joins, leaves []string
	for _, n := range after {
		if !slices.Contains(before, n) {
			joins = append(joins, n)
		}
	}
	for _, n := range before {
		if !slices.Contains(after, n) {
			leaves = append(leaves, n)
		}
	}
	var out []string
	if len(joins) > 0 {
		out = append(out, "cluster "+strings.Join(joins, ", ")+" joins")
	}
	if len(leaves) > 0 {
		out = append(out, "cluster "+strings.Join(leaves, ", ")+" leaves")
	}
	return strings.Join(out, "; ")
}

func sumCounts(m map[string]uint32) uint32 {
	var n uint32
	for _, v := range m {
		n += v
	}
	return n
}

// setWaiting says what rb waits for, keeping the time it began while the
// wait is the same; it reports whether anything changed.
func setWaiting(rb *pelotonv1.ServiceRebalance, what string, now time.Time) bool {
	if rb.Waiting == what {
		return false
	}
	rb.Waiting = what
	rb.WaitingSince = nil
	if what != "" {
		rb.WaitingSince = timestamppb.New(now)
	}
	return true
}

// advanceRebalance applies the next move of rec's rebalance, if it moves;
// unavailable is how many of its instances are unavailable now. It
// reports whether rec changed. It is pure.
func advanceRebalance(rec *pelotonv1.FederatedService, registered map[string]bool, unavailable int, now time.Time) bool {
	rb := rec.Rebalance
	if rb.GetState() != pelotonv1.RebalanceState_REBALANCE_MOVING || rec.Deleting {
		return false
	}
	if r := rec.Rollout; rolloutActive(r) {
		return setWaiting(rb, fmt.Sprintf("rollout %d (%s)", r.Id, r.State), now)
	}
	for _, p := range rec.Clusters {
		if p.Retiring && p.Desired > 0 {
			rb.State, rb.EndTime = pelotonv1.RebalanceState_REBALANCE_CANCELLED, timestamppb.New(now)
			rb.Reason += "; cancelled: failover keeps cluster " + p.Cluster + "'s instances where they went (moveBack is false)"
			setWaiting(rb, "", now)
			return true
		}
		if p.FailedOver {
			return setWaiting(rb, "cluster "+p.Cluster+", failed over, to be back", now)
		}
	}
	budget := int(max(versionSpec(rec, rec.SpecVersion).GetSla().GetMaximumUnavailableInstances(), 1))
	m := planRebalance(rb, rec.Clusters, registered, unavailable, budget)
	changed := applyRebalance(rec, m)
	if m.done {
		rb.State, rb.EndTime = pelotonv1.RebalanceState_REBALANCE_DONE, timestamppb.New(now)
		rebudget(rec)
		setWaiting(rb, "", now)
		return true
	}
	return setWaiting(rb, m.waiting, now) || changed
}

// applyRebalance writes move m on rec's parts; it reports whether it
// changed any.
func applyRebalance(rec *pelotonv1.FederatedService, m rebalanceMove) bool {
	rb := rec.Rebalance
	changed := false
	if len(m.drop) > 0 {
		kept := rec.Clusters[:0]
		for _, p := range rec.Clusters {
			if slices.Contains(m.drop, p.Cluster) {
				rb.Moved += p.Desired
				continue
			}
			kept = append(kept, p)
		}
		rec.Clusters, changed = kept, true
	}
	for name, n := range m.grow {
		p := partOf(rec, name)
		if p == nil || p.Retiring {
			if p != nil {
				// Still removing its job from an earlier move: a new
				// part waits until that one is gone.
				continue
			}
			// Its generation names its job's create (partRequestID):
			// one of its own, so that a cluster that had a part before
			// (moved out by an earlier rebalance) makes a new job, not
			// the answer of the old create.
			p = &pelotonv1.ServiceCluster{Cluster: name, Generation: rb.Id*1000 + 1, SpecVersion: rec.SpecVersion,
				Message: fmt.Sprintf("rebalance %d: making its job there", rb.Id)}
			rec.Clusters = append(rec.Clusters, p)
		}
		p.Desired += n
		rb.Growing += n
		changed = true
	}
	if m.shrink != nil {
		for name, n := range m.shrink {
			p := partOf(rec, name)
			p.Desired -= n
			rb.Moved += n
			if p.Desired == 0 {
				p.Retiring = true
				p.Message = fmt.Sprintf("rebalance %d: its instances moved to other clusters; removing its job there", rb.Id)
			}
		}
		rb.Growing, changed = 0, true
	}
	sort.Slice(rec.Clusters, func(a, b int) bool { return rec.Clusters[a].Cluster < rec.Clusters[b].Cluster })
	return changed
}

// rebalancePass looks at every federated service and moves its
// rebalance along.
func (sv *Services) rebalancePass(ctx context.Context) {
	sv.f.mu.Lock()
	var ids []string
	for id, s := range sv.f.services {
		if !s.rec.Deleting && s.rec.Spec.GetJob().GetType() != pelotonv1.JobType_DAEMON {
			ids = append(ids, id)
		}
	}
	sv.f.mu.Unlock()
	sort.Strings(ids)
	for _, id := range ids {
		if err := sv.rebalanceService(ctx, id); err != nil && !errors.Is(err, errSkip) && ctx.Err() == nil {
			sv.f.log.Warn("federated service rebalance: cannot record a move; retried", "service", id, "err", err)
		}
	}
}

func (sv *Services) rebalanceService(ctx context.Context, id string) error {
	clusters := sv.registeredClusters()
	registered := map[string]bool{}
	for _, c := range clusters {
		registered[c.Name] = true
	}
	var before, after *pelotonv1.ServiceRebalance
	err := sv.updateService(ctx, id, func(rec *pelotonv1.FederatedService) error {
		now := sv.f.opts.Now()
		unavailable := sv.observeForRebalance(id, rec, registered)
		before = nil
		if rec.Rebalance != nil {
			before = proto.Clone(rec.Rebalance).(*pelotonv1.ServiceRebalance)
		}
		noticed := noticeRebalance(rec, clusters, now)
		moved := advanceRebalance(rec, registered, unavailable, now)
		if !noticed && !moved {
			return errSkip
		}
		after = rec.Rebalance
		return nil
	})
	if err != nil {
		return err
	}
	sv.logRebalance(id, before, after)
	sv.nudgeServiceClusters(id)
	return nil
}

// observeForRebalance gives rec the running counts last observed (kept in
// memory, on the live record) and says how many of its instances are
// unavailable now: the global evaluator's count (down or held by grants),
// or the instances of its parts in registered clusters that do not run,
// whichever is more.
func (sv *Services) observeForRebalance(id string, rec *pelotonv1.FederatedService, registered map[string]bool) int {
	sv.f.mu.Lock()
	defer sv.f.mu.Unlock()
	s := sv.f.services[id]
	if s == nil {
		return 0
	}
	notRunning := 0
	for _, p := range rec.Clusters {
		if q := partOf(s.rec, p.Cluster); q != nil {
			p.Running = q.Running
		}
		if !p.Retiring && registered[p.Cluster] && p.Running < p.Desired {
			notRunning += int(p.Desired - p.Running)
		}
	}
	sl := sv.f.SLA()
	if !sv.f.sla.loaded {
		return notRunning
	}
	sl.expireGrantsLocked(sv.f.opts.Now())
	u, _ := sl.unavailableLocked(s)
	return max(len(u), notRunning)
}

// logRebalance says what a pass did to a service's rebalance.
func (sv *Services) logRebalance(id string, before, after *pelotonv1.ServiceRebalance) {
	if after == nil {
		return
	}
	switch {
	case before.GetId() != after.Id || before.GetState() != after.State:
		sv.f.log.Info("federated service rebalance", "service", id, "rebalance", after.Id, "state", after.State,
			"reason", after.Reason, "from", after.From, "to", after.To)
		countRebalance(after.State)
	case before.GetMoved() != after.Moved || before.GetGrowing() != after.Growing:
		sv.f.log.Debug("federated service rebalance step", "service", id, "rebalance", after.Id, "moved", after.Moved, "growing", after.Growing)
	}
}

// Rebalance starts the pending rebalance of a service whose placement's
// rebalance is MANUAL. An AUTO service's is refused (FailedPrecondition):
// it rebalances by itself, and the command would do nothing.
func (sv *Services) Rebalance(ctx context.Context, id string) (*pelotonv1.FederatedService, error) {
	if _, err := sv.GetService(id); err != nil {
		return nil, err
	}
	err := sv.updateService(ctx, id, func(rec *pelotonv1.FederatedService) error {
		rb := rec.Rebalance
		switch {
		case rec.Deleting:
			return apierr.FailedPrecondition("federated service %s is being deleted", id)
		case rec.Spec.GetPlacement().GetRebalance() != pelotonv1.RebalanceMode_MANUAL:
			return apierr.FailedPrecondition("federated service %s rebalances by itself (spec.placement.rebalance is AUTO); `fed service get` shows its rebalance", id)
		case rb.GetState() == pelotonv1.RebalanceState_REBALANCE_MOVING:
			return apierr.FailedPrecondition("rebalance %d of federated service %s is under way already", rb.Id, id)
		case rb.GetState() != pelotonv1.RebalanceState_REBALANCE_PENDING:
			return apierr.FailedPrecondition("federated service %s has no rebalance pending: its clusters are those of its last split (%s)", id, strings.Join(rec.PlacedOn, ", "))
		}
		rb.State = pelotonv1.RebalanceState_REBALANCE_MOVING
		rb.Waiting, rb.WaitingSince = "", nil
		rec.PlacedOn = rb.Clusters
		return nil
	})
	if err != nil {
		return nil, err
	}
	sv.f.log.Info("federated service rebalance started by the user", "service", id)
	sv.kickRollouts()
	return sv.GetService(id)
}

// countRebalance counts a rebalance's change of state in
// peloton_federation_services_total.
func countRebalance(st pelotonv1.RebalanceState) {
	switch st {
	case pelotonv1.RebalanceState_REBALANCE_PENDING:
		metrics.FederationServices.WithLabelValues("rebalance-pending").Inc()
	case pelotonv1.RebalanceState_REBALANCE_MOVING:
		metrics.FederationServices.WithLabelValues("rebalance-moving").Inc()
	case pelotonv1.RebalanceState_REBALANCE_DONE:
		metrics.FederationServices.WithLabelValues("rebalance-done").Inc()
	case pelotonv1.RebalanceState_REBALANCE_CANCELLED:
		metrics.FederationServices.WithLabelValues("rebalance-cancelled").Inc()
	}
}
