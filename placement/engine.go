package placement

import (
	"context"
	"log/slog"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/resmgr"
)

// Engine runs placement rounds until its context ends. Several engines may run
// at once: hostmgr leases keep them off each other's hosts.
type Engine struct {
	rm  *resmgr.Manager
	hm  *hostmgr.Manager
	log *slog.Logger

	batch    int
	maxHosts int
	wait     time.Duration
}

// EngineOptions tunes an Engine.
type EngineOptions struct {
	Logger *slog.Logger
	// BatchSize is the most gangs one round takes (default 1000).
	BatchSize int
	// MaxHosts is the most hosts one round leases (default 5000).
	MaxHosts int
}

// NewEngine builds an engine.
func NewEngine(rm *resmgr.Manager, hm *hostmgr.Manager, opts EngineOptions) *Engine {
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
		batch: opts.BatchSize, maxHosts: opts.MaxHosts, wait: time.Second}
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
func (e *Engine) round(gangs []*resmgr.Gang) {
	start := time.Now()
	defer func() { metrics.PlacementLatency.Observe(time.Since(start).Seconds()) }()
	leaseID, offers := e.hm.AcquireHosts(e.maxHosts)
	if len(offers) == 0 {
		for _, g := range gangs {
			e.rm.ReturnGang(g, ReasonNoCapacity)
		}
		metrics.Placements.WithLabelValues("unplaced").Add(float64(len(gangs)))
		return
	}
	d := Place(gangs, offers)
	as := make([]hostmgr.Assignment, len(d.Placed))
	for i, p := range d.Placed {
		as[i] = hostmgr.Assignment{TaskID: p.Task.RunTaskID(), Host: p.Host, Resources: p.Task.Resources}
	}
	if err := e.hm.Commit(leaseID, as); err != nil {
		e.log.Warn("placement commit refused; retrying the round's gangs", "err", err)
		for _, g := range gangs {
			e.rm.ReturnGang(g, ReasonCommitConflict)
		}
		return
	}
	for _, dropped := range e.rm.SetPlacements(d.Placed) {
		e.hm.ReleaseTask(dropped.Task.RunTaskID())
	}
	for _, u := range d.Unplaced {
		e.rm.ReturnGang(u.Gang, u.Reason)
	}
	metrics.Placements.WithLabelValues("placed").Add(float64(len(d.Placed)))
	metrics.Placements.WithLabelValues("unplaced").Add(float64(len(d.Unplaced)))
}
