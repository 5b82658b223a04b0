package federation

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/peloton-sched/peloton/federation/split"
	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Failover of federated services. A service whose placement has a
// failover policy has the part of a cluster that stays UNREACHABLE past
// the toleration run by its other clusters, in proportion to their parts
// and within the room their pools have (what does not fit is said, not
// forced). The lost part is marked failed over, and each part that took
// some of it records how many it covers, so nothing is placed twice if
// another cluster fails meanwhile. When the lost cluster answers again,
// with moveBack its part runs there again and, once it runs in full, the
// covering instances are removed; without it, the part is retired: its
// job is removed there and the others keep what they run.
//
// At no moment does the service run more than its desired total plus the
// lost part: the covering instances are added while the lost cluster's
// copy may still run (it was only unreachable), and removed only once the
// part runs there again in full.

// defaultToleration is how long a cluster may be away before its parts
// fail over, when the policy does not say.
const defaultToleration = 60 * time.Second

// clusterView is one cluster as failover sees it.
type clusterView struct {
	ready bool
	// away is how long the cluster has answered no check (0 if it answers).
	away time.Duration
	// room is how many more instances of the service fit its pool there.
	room uint32
}

// failoverChange is one move planFailover decides.
type failoverChange struct {
	// lost is failed over to cover (cluster -> instances); back is moved
	// back (its covering instances removed); retire is retired.
	lost   string
	cover  map[string]uint32
	short  uint32 // instances of lost that fit nowhere
	back   string
	retire string
}

// planFailover is the next failover move of service rec, one at a time. It
// is pure.
func planFailover(rec *pelotonv1.FederatedService, views map[string]clusterView) (failoverChange, bool) {
	pol := rec.Spec.GetPlacement().GetFailover()
	if pol == nil || rec.Deleting || rolloutActive(rec.Rollout) {
		return failoverChange{}, false
	}
	tol := time.Duration(pol.TolerationSeconds) * time.Second
	if tol == 0 {
		tol = defaultToleration
	}
	parts := append([]*pelotonv1.ServiceCluster(nil), rec.Clusters...)
	sort.Slice(parts, func(a, b int) bool { return parts[a].Cluster < parts[b].Cluster })
	// A cluster back: move back, or retire.
	for _, p := range parts {
		v := views[p.Cluster]
		if !p.FailedOver || p.Retiring || !v.ready {
			continue
		}
		if !pol.MoveBack {
			return failoverChange{retire: p.Cluster}, true
		}
		if p.Running >= p.Desired && p.ClusterJobId != "" {
			return failoverChange{back: p.Cluster}, true
		}
	}
	// A cluster away past the toleration: its part to the others.
	for _, p := range parts {
		v := views[p.Cluster]
		if p.FailedOver || p.Retiring || v.ready || v.away < tol {
			continue
		}
		var names []string
		weights := map[string]uint32{}
		for _, q := range parts {
			if q.Cluster != p.Cluster && !q.FailedOver && !q.Retiring && views[q.Cluster].ready {
				names = append(names, q.Cluster)
				weights[q.Cluster] = max(q.Desired, 1)
			}
		}
		if len(names) == 0 {
			continue // nowhere to go; it waits
		}
		cover := spread(p.Desired, names, weights, views)
		var given uint32
		for _, n := range cover {
			given += n
		}
		return failoverChange{lost: p.Cluster, cover: cover, short: p.Desired - given}, true
	}
	return failoverChange{}, false
}

// spread divides n instances over names by weight (largest remainder), no
// cluster taking more than its room; what one cannot take goes to the
// others while they have room.
func spread(n uint32, names []string, weights map[string]uint32, views map[string]clusterView) map[string]uint32 {
	out := map[string]uint32{}
	left := n
	for left > 0 {
		var open []string
		var sum uint64
		for _, name := range names {
			if out[name] < views[name].room {
				open = append(open, name)
				sum += uint64(weights[name])
			}
		}
		if len(open) == 0 || sum == 0 {
			break
		}
		type rem struct {
			name string
			frac uint64
		}
		var rems []rem
		gave := uint32(0)
		for _, name := range open {
			share := uint64(left) * uint64(weights[name])
			give := min(uint32(share/sum), views[name].room-out[name])
			out[name] += give
			gave += give
			rems = append(rems, rem{name, share % sum})
		}
		sort.SliceStable(rems, func(a, b int) bool { return rems[a].frac > rems[b].frac })
		for _, r := range rems {
			if gave == left {
				break
			}
			if out[r.name] < views[r.name].room {
				out[r.name]++
				gave++
			}
		}
		if gave == 0 {
			break
		}
		left -= gave
	}
	for name, v := range out {
		if v == 0 {
			delete(out, name)
		}
	}
	return out
}

// failoverPass looks at every service with a failover policy and applies
// the next move of each.
func (sv *Services) failoverPass(ctx context.Context) {
	sv.f.mu.Lock()
	var ids []string
	for id, s := range sv.f.services {
		if s.rec.Spec.GetPlacement().GetFailover() != nil && !s.rec.Deleting {
			ids = append(ids, id)
		}
	}
	sv.f.mu.Unlock()
	sort.Strings(ids)
	for _, id := range ids {
		if err := sv.failoverService(ctx, id); err != nil && !errors.Is(err, errSkip) && ctx.Err() == nil {
			sv.f.log.Warn("federated service failover: cannot record a move; retried", "service", id, "err", err)
		}
	}
}

// viewsLocked is how failover sees the clusters of rec. Caller holds mu.
func (sv *Services) viewsLocked(rec *pelotonv1.FederatedService) map[string]clusterView {
	now := sv.f.opts.Now()
	job := rec.Spec.GetJob()
	per, _ := resources.FromProto(job.GetDefaultSpec().GetResources(), "")
	views := map[string]clusterView{}
	for _, p := range rec.Clusters {
		m := sv.f.clusters[p.Cluster]
		if m == nil {
			views[p.Cluster] = clusterView{away: time.Duration(math.MaxInt64)}
			continue
		}
		v := clusterView{ready: m.rec.Health != pelotonv1.ClusterState_CLUSTER_UNREACHABLE && m.checked}
		if !v.ready {
			since := m.lastSeen
			if since.IsZero() {
				since = sv.f.startedAt
			}
			v.away = now.Sub(since)
		}
		if pool := m.pools[job.GetPool()]; pool != nil {
			ent, _ := resources.FromProto(pool.GetStatus().GetEntitlement(), "")
			alloc, _ := resources.FromProto(pool.GetStatus().GetAllocation(), "")
			fits := timesFits(ent.Sub(alloc), per)
			switch {
			case math.IsInf(fits, 1) || fits > math.MaxUint32:
				v.room = math.MaxUint32
			case fits > 0:
				v.room = uint32(fits)
			}
		}
		views[p.Cluster] = v
	}
	return views
}

func (sv *Services) failoverService(ctx context.Context, id string) error {
	var change failoverChange
	err := sv.updateService(ctx, id, func(rec *pelotonv1.FederatedService) error {
		sv.f.mu.Lock()
		views := sv.viewsLocked(rec)
		sv.f.mu.Unlock()
		// Running counts are observed, kept in memory: take them from
		// the live record.
		sv.f.mu.Lock()
		if s := sv.f.services[id]; s != nil {
			for _, p := range rec.Clusters {
				if q := partOf(s.rec, p.Cluster); q != nil {
					p.Running = q.Running
				}
			}
		}
		sv.f.mu.Unlock()
		c, ok := planFailover(rec, views)
		if !ok {
			return errSkip
		}
		change = c
		switch {
		case c.lost != "":
			lost := partOf(rec, c.lost)
			lost.FailedOver = true
			lost.Message = fmt.Sprintf("cluster %s unreachable past the toleration: its %d instances run elsewhere (%s)", c.lost, lost.Desired, splitCover(c.cover))
			if c.short > 0 {
				lost.Message += fmt.Sprintf("; %d fit nowhere", c.short)
			}
			for name, n := range c.cover {
				q := partOf(rec, name)
				q.Desired += n
				if q.Covering == nil {
					q.Covering = map[string]uint32{}
				}
				q.Covering[c.lost] += n
			}
		case c.back != "":
			for _, q := range rec.Clusters {
				if n := q.Covering[c.back]; n > 0 {
					q.Desired -= n
					delete(q.Covering, c.back)
				}
			}
			partOf(rec, c.back).FailedOver = false
		case c.retire != "":
			p := partOf(rec, c.retire)
			p.Retiring = true
			p.Message = "cluster " + c.retire + " is back; its instances stay where they went (failover.moveBack is false): removing its job there"
			for _, q := range rec.Clusters {
				delete(q.Covering, c.retire) // theirs for good now
			}
		}
		rebudget(rec)
		return nil
	})
	if err != nil {
		return err
	}
	switch {
	case change.lost != "":
		sv.f.log.Warn("federated service: cluster away past the toleration; its part runs elsewhere", "service", id, "cluster", change.lost, "cover", change.cover, "fit-nowhere", change.short)
		metrics.FederationServices.WithLabelValues("failover").Inc()
	case change.back != "":
		sv.f.log.Info("federated service: cluster back; its part runs there again, the covering instances go", "service", id, "cluster", change.back)
		metrics.FederationServices.WithLabelValues("move-back").Inc()
	case change.retire != "":
		sv.f.log.Info("federated service: cluster back; its part is retired", "service", id, "cluster", change.retire)
	}
	sv.nudgeServiceClusters(id)
	return nil
}

func splitCover(cover map[string]uint32) string {
	out := ""
	for _, name := range sortedKeys(cover) {
		if out != "" {
			out += " "
		}
		out += fmt.Sprintf("%s=%d", name, cover[name])
	}
	if out == "" {
		return "none fit"
	}
	return out
}

// rebudget splits the service's budget again over the parts that run its
// instances (neither failed over nor retiring), in proportion to their
// instances, so a part covering for a lost cluster may take down its share
// of what it covers too, and gives it back when they move back. A part
// failed over keeps the share it had: it cannot be told otherwise while
// away, and its instances, run elsewhere too, are beyond the service's
// count until it is back. The sync loop carries a changed budget to the
// part's job (partSync.rebudget).
func rebudget(rec *pelotonv1.FederatedService) {
	if rec.Spec.GetJob().GetType() == pelotonv1.JobType_DAEMON {
		return // each part has the whole budget
	}
	budget := max(versionSpec(rec, rec.SpecVersion).GetSla().GetMaximumUnavailableInstances(), 1)
	active := map[string]uint32{}
	for _, p := range rec.Clusters {
		if !p.FailedOver && !p.Retiring {
			active[p.Cluster] = p.Desired
		}
	}
	shares := split.Budget(budget, active)
	for _, p := range rec.Clusters {
		if n, ok := shares[p.Cluster]; ok {
			p.MaxUnavailable = n
		}
	}
}
