package placement

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// Engine runs placement rounds until its context ends. Several engines may run
// at once: hostmgr leases keep them off each other's hosts, and each round
// leases in proportion to its demand (hostFilter), so they work side by side.
type Engine struct {
	rm  *resmgr.Manager
	hm  Hosts
	log *slog.Logger

	batch    int
	maxHosts int
	wait     time.Duration
	domain   string
}

// EngineOptions tunes an Engine.
type EngineOptions struct {
	Logger *slog.Logger
	// BatchSize is the most gangs one round takes (default 1000).
	BatchSize int
	// MaxHosts is the most hosts one round leases (default 5000).
	MaxHosts int
	// DomainLabel is the host label SPREAD balances across (default "zone").
	DomainLabel string
}

// NewEngine builds an engine.
func NewEngine(rm *resmgr.Manager, hm Hosts, opts EngineOptions) *Engine {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.BatchSize == 0 {
		opts.BatchSize = 1000
	}
	if opts.MaxHosts == 0 {
		opts.MaxHosts = 5000
	}
	return &Engine{rm: rm, hm: hm, log: opts.Logger.With("component", "placement"),
		batch: opts.BatchSize, maxHosts: opts.MaxHosts, wait: time.Second, domain: opts.DomainLabel}
}

// Run places gangs until ctx ends.
func (e *Engine) Run(ctx context.Context) {
	for ctx.Err() == nil {
		gangs := e.rm.DequeueGangs(ctx, e.batch, e.wait)
		if len(gangs) == 0 {
			continue
		}
		e.round(gangs)
	}
}

// round places one batch of gangs. Every gang ends either placed (committed
// in hostmgr and handed to resmgr) or returned to resmgr with a reason.
// Revocable gangs are placed on their own, on hosts' slack rather than
// their free capacity (hostmgr/slack.go).
func (e *Engine) round(gangs []*resmgr.Gang) {
	var regular, revocable []*resmgr.Gang
	for _, g := range gangs {
		if g.Tasks[0].Revocable {
			revocable = append(revocable, g)
		} else {
			regular = append(regular, g)
		}
	}
	if len(regular) > 0 {
		e.placeRound(regular, false)
	}
	if len(revocable) > 0 {
		e.placeRound(revocable, true)
	}
}

func (e *Engine) placeRound(gangs []*resmgr.Gang, revocable bool) {
	start := time.Now()
	defer func() { metrics.PlacementLatency.Observe(time.Since(start).Seconds()) }()
	cfg := Config{DomainLabel: e.domain, Catalog: e.hm.HostClasses()}
	f := hostFilter(gangs, e.maxHosts)
	f.Revocable = revocable
	var rs *reserving // revocable work holds slack, which reservations do not hold
	if !revocable {
		rs = newReserving(e.rm.HostReservations())
		for _, h := range rs.hosts() {
			if !slices.Contains(f.Hosts, h) {
				f.Hosts = append(f.Hosts, h)
			}
		}
	}
	if !f.Demand.IsZero() && spreadsOverDomains(gangs, cfg.Catalog, cmp.Or(e.domain, DefaultDomainLabel)) {
		// hostmgr's rotation knows nothing of failure domains: a lease
		// in proportion to the demand could hold hosts of one domain
		// only, and SPREAD would put every instance there. Such a round
		// leases as many hosts as it may.
		f.Demand, f.MinHosts, f.FillFirst = resources.Resources{}, 0, false
	}
	leaseID, offers := e.hm.AcquireHosts(f)
	// Place runs even without offers: it still tells the gangs that could
	// never run (judged against every host's class) from those that wait.
	missing := notOffered(f.Hosts, offers)
	if len(missing) > 0 {
		cfg.Bound = e.hm.HostStatuses(missing)
	}
	added := rs.grow(cfg, offers)
	d := rs.place(cfg, gangs, offers)
	leased := len(offers)
	if leaseID != "" && !f.Demand.IsZero() {
		scanned := len(offers) - (len(f.Hosts) - len(missing))
		var more int
		d, more = e.placeMore(cfg, rs, f.Max-scanned, revocable, leaseID, offers, d)
		leased += more
	}
	metrics.PlacementHostsLeased.Observe(float64(leased))
	if leaseID != "" {
		as := make([]hostmgr.Assignment, len(d.Placed))
		for i, p := range d.Placed {
			as[i] = hostmgr.Assignment{TaskID: p.Task.RunTaskID(), JobID: p.Task.JobID, Host: p.Host,
				Resources: p.Task.Resources, MaxPerHost: p.Task.Placement.GetMaxInstancesPerHost(), Revocable: revocable}
		}
		if err := e.hm.Commit(leaseID, as); err != nil {
			e.log.Debug("placement commit refused; retrying the round's gangs", "err", err)
			metrics.PlacementConflicts.Inc()
			for _, g := range gangs {
				e.rm.ReturnGang(g, ReasonCommitConflict)
			}
			return
		}
	}
	for _, dropped := range e.rm.SetPlacements(d.Placed) {
		e.hm.ReleaseTask(dropped.Task.RunTaskID())
	}
	rs.report(e.rm, cfg, offers, d.Placed, added)
	unresolvable := 0
	for _, u := range d.Unplaced {
		if u.Code == Unresolvable {
			unresolvable++
		}
		e.returnGang(u)
	}
	metrics.Placements.WithLabelValues("placed").Add(float64(len(d.Placed)))
	metrics.Placements.WithLabelValues("unplaced").Add(float64(len(d.Unplaced) - unresolvable))
	metrics.Placements.WithLabelValues("unresolvable").Add(float64(unresolvable))
}

// placeMore gives the gangs that found no room in a lease taken in
// proportion to the round's demand a second try in the same round: on the
// lease's hosts, less what the round placed there, and on up to maxHosts
// hosts added to the lease, as many as a lease without a demand would
// take. Without it such a gang would wait for a round whose lease happens
// to hold a host for it: a task that only few hosts match, a large task
// where the free is in small pieces, a gang wider than the lease. It
// costs a second Place only in rounds where something did not fit; gangs
// whose every member is bound to a host are not tried again, as more
// hosts do them no good. It returns the decision and how many hosts it
// added.
func (e *Engine) placeMore(cfg Config, rs *reserving, maxHosts int, revocable bool, leaseID string, offers []hostmgr.HostOffer, d Decision) (Decision, int) {
	var retry []*resmgr.Gang
	for _, u := range d.Unplaced {
		if u.Code == Unschedulable && slices.ContainsFunc(u.Gang.Tasks, func(t *resmgr.Task) bool { return t.BoundHost == "" }) {
			retry = append(retry, u.Gang)
		}
	}
	if len(retry) == 0 || maxHosts <= 0 {
		return d, 0
	}
	f := hostFilter(retry, maxHosts)
	f.Hosts, f.Demand, f.MinHosts = nil, resources.Resources{}, 0
	f.Revocable, f.Lease = revocable, leaseID
	_, extra := e.hm.AcquireHosts(f)
	if len(extra) == 0 {
		return d, 0
	}
	again := rs.place(cfg, retry, append(leftover(offers, d.Placed), extra...))
	// The gangs still unplaced keep their order, which is the order
	// resmgr gets them back in: a gang retried takes its second answer.
	answer := make(map[*resmgr.Gang]Unplaced, len(again.Unplaced))
	for _, u := range again.Unplaced {
		answer[u.Gang] = u
	}
	tried := make(map[*resmgr.Gang]bool, len(retry))
	for _, g := range retry {
		tried[g] = true
	}
	unplaced := d.Unplaced[:0]
	for _, u := range d.Unplaced {
		if !tried[u.Gang] {
			unplaced = append(unplaced, u)
		} else if v, ok := answer[u.Gang]; ok {
			unplaced = append(unplaced, v)
		}
	}
	return Decision{Placed: append(d.Placed, again.Placed...), Unplaced: unplaced}, len(extra)
}

// leftover is offers with what placed holds taken off: each host's free,
// and its counts of the jobs that need them. offers are not modified.
func leftover(offers []hostmgr.HostOffer, placed []resmgr.Placement) []hostmgr.HostOffer {
	out := slices.Clone(offers)
	at := make(map[string]int, len(out))
	for i, o := range out {
		at[o.Name] = i
	}
	copied := map[int]bool{}
	for _, p := range placed {
		i, ok := at[p.Host]
		if !ok {
			continue
		}
		o := &out[i]
		o.Free = o.Free.Sub(p.Task.Resources)
		if needsCounts(p.Task) {
			if !copied[i] {
				o.JobCounts, copied[i] = maps.Clone(o.JobCounts), true
				if o.JobCounts == nil {
					o.JobCounts = map[string]int{}
				}
			}
			o.JobCounts[p.Task.JobID]++
		}
	}
	return out
}

// spreadsOverDomains reports whether a task of the round that is not bound
// to a host spreads, in a cluster whose hosts are in more than one failure
// domain (values of label, hosts without it being one domain together).
func spreadsOverDomains(gangs []*resmgr.Gang, catalog []hostmgr.HostClass, label string) bool {
	if len(catalog) < 2 || !slices.ContainsFunc(catalog, func(c hostmgr.HostClass) bool { return c.Labels[label] != catalog[0].Labels[label] }) {
		return false
	}
	for _, g := range gangs {
		for _, t := range g.Tasks {
			if t.BoundHost == "" && t.Strategy == pelotonv1.PlacementStrategy_SPREAD {
				return true
			}
		}
	}
	return false
}

// returnGang hands an unplaced gang back to resmgr. An unresolvable gang
// should go back flagged, so that resmgr parks it and shows the reason
// instead of retrying it hot; until resmgr has that call it backs off like
// any other.
func (e *Engine) returnGang(u Unplaced) {
	if u.Code == Unresolvable {
		e.rm.ReturnGangUnresolvable(u.Gang, u.Reason)
		return
	}
	e.rm.ReturnGang(u.Gang, u.Reason)
}

// hostFilter leases only what the round can use: the hosts its tasks are
// bound to, and then those its other tasks ran on before, by name; up to
// maxHosts hosts of the partitions its other tasks ask for, with room for
// at least the smallest of them (none if every task is bound), and only as
// many as those tasks need (Demand, MinHosts), from the first hosts if
// some of them pack (FillFirst: PACK keeps whole hosts free by filling
// those in use, which it can only do if successive rounds see them); and
// the per-host counts of the jobs that spread or cap instances per host.
func hostFilter(gangs []*resmgr.Gang, maxHosts int) hostmgr.HostFilter {
	var f hostmgr.HostFilter
	var named map[string]bool
	// perJob counts the unbound tasks of each job that spreads or caps its
	// instances per host, for MinHosts.
	var perJob map[string]*jobNeed
	// prev are the previous hosts of the tasks not bound to one.
	var prev []string
	anyPartition := false
	first := true
	for _, g := range gangs {
		for _, t := range g.Tasks {
			counts := needsCounts(t)
			if counts {
				if f.Jobs == nil {
					f.Jobs = map[string]bool{}
				}
				f.Jobs[t.JobID] = true
			}
			if t.BoundHost != "" {
				if !named[t.BoundHost] {
					if named == nil {
						named = map[string]bool{}
					}
					named[t.BoundHost] = true
					f.Hosts = append(f.Hosts, t.BoundHost)
				}
				continue
			}
			if first {
				f.MinFree, f.Max, first = t.Resources, maxHosts, false
			} else {
				f.MinFree = f.MinFree.Min(t.Resources)
			}
			f.Demand = f.Demand.Add(t.Resources)
			if t.PrevHost != "" {
				prev = append(prev, t.PrevHost)
			}
			f.FillFirst = f.FillFirst || t.Strategy != pelotonv1.PlacementStrategy_SPREAD
			if counts {
				if perJob == nil {
					perJob = map[string]*jobNeed{}
				}
				n := perJob[t.JobID]
				if n == nil {
					n = &jobNeed{}
					perJob[t.JobID] = n
				}
				n.add(t)
			}
			switch p := t.Placement.GetPartition(); {
			case p == "":
				anyPartition = true
			case !anyPartition && !slices.Contains(f.Partitions, p):
				f.Partitions = append(f.Partitions, p)
			}
		}
	}
	if anyPartition {
		f.Partitions = nil
	}
	for _, n := range perJob {
		f.MinHosts = max(f.MinHosts, n.hosts())
	}
	// Place sends a task back to its previous host if it fits there. A
	// lease in proportion to the demand would seldom hold that host, so
	// previous hosts are asked for by name too, after the bound ones (so
	// that notOffered still walks names and offers together).
	for _, name := range prev {
		if !named[name] {
			if named == nil {
				named = map[string]bool{}
			}
			named[name] = true
			f.Hosts = append(f.Hosts, name)
		}
	}
	return f
}

// jobNeed is what one job's unbound tasks in a round need of hosts apart
// from resources: a job that spreads wants each instance on a host of its
// own, and a job capped per host cannot put more than its cap on one. Jobs
// that do neither can share hosts as resources allow, and need nothing here.
type jobNeed struct {
	tasks  int
	spread bool
	// perHost is the smallest cap per host among the tasks (0: none).
	perHost uint32
}

func (n *jobNeed) add(t *resmgr.Task) {
	n.tasks++
	n.spread = n.spread || t.Strategy == pelotonv1.PlacementStrategy_SPREAD
	if c := t.Placement.GetMaxInstancesPerHost(); c > 0 && (n.perHost == 0 || c < n.perHost) {
		n.perHost = c
	}
}

// hosts is how many hosts the job's tasks need at least. Hosts that already
// hold instances of the job may take fewer; the lease's headroom covers
// some of that, and what still does not fit gets hosts added (placeMore).
func (n *jobNeed) hosts() int {
	if n.spread || n.perHost == 0 {
		return n.tasks
	}
	return (n.tasks + int(n.perHost) - 1) / int(n.perHost)
}

// notOffered returns the names the offers lack. AcquireHosts offers the
// hosts asked for by name first, in the order asked, so one walk does.
func notOffered(names []string, offers []hostmgr.HostOffer) []string {
	var out []string
	j := 0
	for _, name := range names {
		if j < len(offers) && offers[j].Name == name {
			j++
			continue
		}
		out = append(out, name)
	}
	return out
}
