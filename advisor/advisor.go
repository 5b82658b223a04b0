package advisor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/peloton-sched/peloton/internal/metrics"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Modes of the advisor.
const (
	// ModeAct moves hosts.
	ModeAct = "act"
	// ModeObserve decides as ModeAct would, and only says so: the moves
	// go into the stack's move history as OBSERVED, and nothing moves.
	ModeObserve = "observe"
)

// Options configure an Advisor.
type Options struct {
	Cluster Cluster
	Config  Config
	Mode    string
	// Interval is the time between rounds (default 10 s).
	Interval time.Duration
	Logger   *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Advisor runs rounds against a cluster.
type Advisor struct {
	o    Options
	id   string
	core *Core
	// observed are the moves last observed, so that observe mode records
	// each decision once, not every round it stands.
	observed map[string]string
	// gauged: the services whose latency gauges are set.
	gauged map[[2]string]bool
}

// New returns an advisor; it checks the options.
func New(o Options) (*Advisor, error) {
	if o.Mode != ModeAct && o.Mode != ModeObserve {
		return nil, fmt.Errorf("advisor mode %q: want act or observe", o.Mode)
	}
	if err := o.Config.Validate(); err != nil {
		return nil, err
	}
	if o.Cluster == nil {
		return nil, errors.New("advisor: no cluster")
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	// The move counters start at 0, both ways, in both modes: a
	// dashboard shows 0, not nothing, before the first move.
	for _, m := range []string{ModeAct, ModeObserve} {
		metrics.AdvisorMoves.WithLabelValues(o.Config.Batch, o.Config.Stateless, m)
		metrics.AdvisorMoves.WithLabelValues(o.Config.Stateless, o.Config.Batch, m)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Advisor{o: o, id: hex.EncodeToString(b[:]), core: NewCore(o.Config), observed: map[string]string{}, gauged: map[[2]string]bool{}}, nil
}

// DefaultInterval is the default time between rounds.
const DefaultInterval = 10 * time.Second

// Run runs a round every interval until ctx ends. A failed round is
// logged and counted; the next one tries again.
func (a *Advisor) Run(ctx context.Context) error {
	t := time.NewTicker(a.o.Interval)
	defer t.Stop()
	for {
		if _, err := a.Round(ctx); err != nil && ctx.Err() == nil {
			a.o.Logger.Warn("advisor round failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Round reads the cluster, decides, moves (in act mode) and publishes
// the advice.
func (a *Advisor) Round(ctx context.Context) (Decision, error) {
	in, err := a.o.Cluster.Input(ctx, a.o.Now())
	if err != nil {
		metrics.AdvisorRounds.WithLabelValues("error").Inc()
		return Decision{}, err
	}
	d := a.core.Round(in)
	req := &pelotonv1.PublishAdviceRequest{AdvisorId: a.id, Mode: a.o.Mode,
		TtlSeconds: uint32(min(600, max(1, math.Ceil(3*a.o.Interval.Seconds()))))}
	var moved []Move
	for _, mv := range d.Moves {
		if a.o.Mode == ModeObserve {
			a.core.Unmove(mv.Host) // nothing moved: the next round judges the same cluster
			if a.observed[mv.Host] != mv.To {
				req.ObservedMoves = append(req.ObservedMoves, &pelotonv1.PartitionMove{Host: mv.Host, From: mv.From, To: mv.To, Reason: mv.Reason})
				a.o.Logger.Info("advisor would move a host (observe mode)", "host", mv.Host, "from", mv.From, "to", mv.To, "reason", mv.Reason)
				metrics.AdvisorMoves.WithLabelValues(mv.From, mv.To, ModeObserve).Inc()
			}
			continue
		}
		if err := a.o.Cluster.MoveHost(ctx, mv); err != nil {
			a.core.Unmove(mv.Host)
			a.o.Logger.Warn("advisor could not move a host", "host", mv.Host, "to", mv.To, "err", err)
			continue
		}
		a.o.Logger.Info("advisor moves a host", "host", mv.Host, "from", mv.From, "to", mv.To, "drain", mv.Drain, "reason", mv.Reason)
		metrics.AdvisorMoves.WithLabelValues(mv.From, mv.To, ModeAct).Inc()
		moved = append(moved, mv)
	}
	if a.o.Mode == ModeObserve {
		a.observed = map[string]string{}
		for _, mv := range d.Moves {
			a.observed[mv.Host] = mv.To
		}
	}
	d.Moves = moved
	for _, h := range in.Hosts {
		req.Hosts = append(req.Hosts, &pelotonv1.HostAdvice{Host: h.Name, Zone: zoneProto(d.Zones[h.Name].Zone),
			OversubscriptionFactor: d.Factors[h.Name], Headroom: d.Headroom[h.Name]})
	}
	for name, p := range d.Pressures {
		req.Partitions = append(req.Partitions, &pelotonv1.PartitionAdvice{Partition: name, Pressure: p.Value,
			Services: uint32(p.Services), ServicesOverSlo: uint32(p.Over)})
	}
	a.gaugeServices(in.Services)
	if err := a.o.Cluster.Publish(ctx, req); err != nil {
		metrics.AdvisorRounds.WithLabelValues("error").Inc()
		return d, fmt.Errorf("advisor: publish advice: %w", err)
	}
	metrics.AdvisorRounds.WithLabelValues("ok").Inc()
	return d, nil
}

func (a *Advisor) gaugeServices(svcs []Service) {
	seen := map[[2]string]bool{}
	for _, s := range svcs {
		k := [2]string{s.Job, s.Partition}
		seen[k] = true
		metrics.ServiceLatencyP99.WithLabelValues(s.Job, s.Partition).Set(s.P99)
		metrics.ServiceLatencySLO.WithLabelValues(s.Job, s.Partition).Set(s.SLO)
	}
	for k := range a.gauged {
		if !seen[k] {
			metrics.ServiceLatencyP99.DeleteLabelValues(k[0], k[1])
			metrics.ServiceLatencySLO.DeleteLabelValues(k[0], k[1])
		}
	}
	a.gauged = seen
}

func zoneProto(z Zone) pelotonv1.HostZone {
	switch z {
	case Green:
		return pelotonv1.HostZone_HOST_ZONE_GREEN
	case Orange:
		return pelotonv1.HostZone_HOST_ZONE_ORANGE
	case Red:
		return pelotonv1.HostZone_HOST_ZONE_RED
	}
	return pelotonv1.HostZone_HOST_ZONE_UNKNOWN
}
