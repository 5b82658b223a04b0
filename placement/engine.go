package placement

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/resmgr"
)

// Engine runs placement rounds until its context ends. Several engines may run
// at once: hostmgr leases keep them off each other's hosts.
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
	f := hostFilter(gangs, e.maxHosts)
	f.Revocable = revocable
	leaseID, offers := e.hm.AcquireHosts(f)
	// Place runs even without offers: it still tells the gangs that could
	// never run (judged against every host's class) from those that wait.
	cfg := Config{DomainLabel: e.domain, Catalog: e.hm.HostClasses()}
	if missing := notOffered(f.Hosts, offers); len(missing) > 0 {
		cfg.Bound = e.hm.HostStatuses(missing)
	}
	d := cfg.Place(gangs, offers)
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
// bound to, by name; up to max hosts of the partitions its other tasks ask
// for, with room for at least the smallest of them (none if every task is
// bound); and the per-host counts of the jobs that spread or cap instances
// per host.
func hostFilter(gangs []*resmgr.Gang, max int) hostmgr.HostFilter {
	var f hostmgr.HostFilter
	var named map[string]bool
	anyPartition := false
	first := true
	for _, g := range gangs {
		for _, t := range g.Tasks {
			if needsCounts(t) {
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
				f.MinFree, f.Max, first = t.Resources, max, false
			} else {
				f.MinFree = f.MinFree.Min(t.Resources)
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
	return f
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
