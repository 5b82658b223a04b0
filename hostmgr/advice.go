package hostmgr

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/quarantine"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Advice and the move history: the host advisor (package advisor) reads
// the hosts through the API, and publishes each round's advice here
// (PublishAdvice): hosts' zones and oversubscription factors, partitions'
// pressure. hostmgr shows it (ListHosts, ListPartitions), exports it as
// metrics, and takes the factors into the slack of batch hosts
// (slack.go). Advice lives in memory and lapses when the advisor stops
// renewing it: a stack without a live advisor oversubscribes nothing.
//
// Every move of a host between partitions, by whoever asked, is kept in
// the move history with the reason its caller gave, and so is every move
// an advisor in observe mode would have made:
//
//	partition-moves/<unix nanos, 20 digits>-<host>  JSON moveRecord
//
// written in the same transaction as the move it records; the newest
// moveHistoryMax are kept.

// moveHistoryMax bounds the move history.
const moveHistoryMax = 1000

// moveReasonMax bounds a move's reason.
const moveReasonMax = 512

// advice is the advisor's last word, with when it lapses.
type advice struct {
	mu        sync.Mutex
	id, mode  string
	published time.Time
	until     time.Time
	hosts     map[string]*pelotonv1.HostAdvice
	parts     map[string]*pelotonv1.PartitionAdvice
	// gauged: the hosts and partitions whose advice gauges are set.
	gaugedHosts, gaugedParts map[string]bool
}

// moveRecord is one entry of the move history.
type moveRecord struct {
	Host   string    `json:"host"`
	From   string    `json:"from"`
	To     string    `json:"to"`
	Reason string    `json:"reason,omitempty"`
	State  string    `json:"state"` // recordStarted or recordObserved
	Time   time.Time `json:"time"`
	key    string
}

const (
	recordStarted  = "started"
	recordObserved = "observed"
	// recordCancelled is the cancel of a move: From the partition the
	// host stayed in, To the one it no longer moves to.
	recordCancelled = "cancelled"
)

func moveKey(t time.Time, host string) string {
	return fmt.Sprintf("partition-moves/%020d-%s", t.UnixNano(), host)
}

// historyOps returns the ops that add rec to the history and drop
// the oldest beyond moveHistoryMax, and applies them to memory once the
// caller's transaction succeeds (commit). Caller holds mt.mu.
func (mt *Maintenance) historyOps(recs ...moveRecord) (ops []store.Op, commit func()) {
	for i := range recs {
		recs[i].key = moveKey(recs[i].Time, recs[i].Host)
		b, _ := json.Marshal(recs[i])
		ops = append(ops, store.Put(recs[i].key, b, store.AnyRevision))
	}
	mt.histMu.Lock()
	drop := max(0, len(mt.history)+len(recs)-moveHistoryMax)
	old := slices.Clone(mt.history[:min(drop, len(mt.history))])
	mt.histMu.Unlock()
	for _, r := range old {
		ops = append(ops, store.Delete(r.key, store.AnyRevision))
	}
	return ops, func() {
		mt.histMu.Lock()
		defer mt.histMu.Unlock()
		mt.history = append(mt.history, recs...)
		slices.SortFunc(mt.history, func(a, b moveRecord) int { return strings.Compare(a.key, b.key) })
		if n := len(mt.history) - moveHistoryMax; n > 0 {
			mt.history = slices.Delete(mt.history, 0, n)
		}
	}
}

// recordObserved adds moves an advisor in observe mode would have made to
// the history, in one transaction.
func (mt *Maintenance) recordObserved(ctx context.Context, recs []moveRecord) error {
	if len(recs) == 0 {
		return nil
	}
	mt.mu.Lock()
	defer mt.mu.Unlock()
	ops, commit := mt.historyOps(recs...)
	if _, err := mt.persist(ctx, ops); err != nil {
		return err
	}
	commit()
	return nil
}

// loadHistory reads the move history at Start.
func (mt *Maintenance) loadHistory(ctx context.Context) error {
	if mt.store == nil {
		return nil
	}
	kvs, err := mt.store.List(ctx, "partition-moves/")
	if err != nil {
		return fmt.Errorf("hostmgr: load the partition move history: %w", err)
	}
	hist := make([]moveRecord, 0, len(kvs))
	for _, kv := range kvs {
		var r moveRecord
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			// History only: the stack does without it.
			if _, err := quarantine.Move(ctx, mt.store, mt.log, kv, err); err != nil {
				return fmt.Errorf("hostmgr: %w", err)
			}
			continue
		}
		r.key = kv.Key
		hist = append(hist, r)
	}
	mt.histMu.Lock()
	mt.history = hist
	mt.histMu.Unlock()
	return nil
}

// PublishAdvice takes an advisor's advice of one round.
func (us *Usage) PublishAdvice(ctx context.Context, req *pelotonv1.PublishAdviceRequest) error {
	switch {
	case req.GetAdvisorId() == "":
		return apierr.Invalid("advisorId", "required")
	case req.GetMode() != "act" && req.GetMode() != "observe":
		return apierr.Invalid("mode", "%q: want act or observe", req.GetMode())
	case req.GetTtlSeconds() < 1 || req.GetTtlSeconds() > 600:
		return apierr.Invalid("ttlSeconds", "%d: want 1 to 600", req.GetTtlSeconds())
	}
	us.hm.mu.Lock()
	for i, h := range req.GetHosts() {
		switch {
		case us.hm.hosts[h.GetHost()] == nil:
			us.hm.mu.Unlock()
			return apierr.Invalid(fmt.Sprintf("hosts[%d].host", i), "host %q does not exist", h.GetHost())
		case h.GetZone() < pelotonv1.HostZone_HOST_ZONE_UNKNOWN || h.GetZone() > pelotonv1.HostZone_HOST_ZONE_RED:
			us.hm.mu.Unlock()
			return apierr.Invalid(fmt.Sprintf("hosts[%d].zone", i), "unknown zone %d", h.GetZone())
		case !(h.GetOversubscriptionFactor() >= 1 && h.GetOversubscriptionFactor() <= 10):
			us.hm.mu.Unlock()
			return apierr.Invalid(fmt.Sprintf("hosts[%d].oversubscriptionFactor", i), "%g: want 1 to 10", h.GetOversubscriptionFactor())
		case !(h.GetHeadroom() >= 0 && h.GetHeadroom() <= 1):
			us.hm.mu.Unlock()
			return apierr.Invalid(fmt.Sprintf("hosts[%d].headroom", i), "%g: want 0 to 1", h.GetHeadroom())
		}
	}
	now := us.hm.now()
	var recs []moveRecord
	for i, mv := range req.GetObservedMoves() {
		h := us.hm.hosts[mv.GetHost()]
		switch {
		case h == nil:
			us.hm.mu.Unlock()
			return apierr.Invalid(fmt.Sprintf("observedMoves[%d].host", i), "host %q does not exist", mv.GetHost())
		case ValidatePartition(mv.GetTo()) != nil:
			us.hm.mu.Unlock()
			return apierr.Invalid(fmt.Sprintf("observedMoves[%d].to", i), "%v", ValidatePartition(mv.GetTo()))
		case len(mv.GetReason()) > moveReasonMax:
			us.hm.mu.Unlock()
			return apierr.Invalid(fmt.Sprintf("observedMoves[%d].reason", i), "longer than %d bytes", moveReasonMax)
		}
		recs = append(recs, moveRecord{Host: mv.GetHost(), From: h.info.Partition, To: mv.GetTo(), Reason: mv.GetReason(),
			State: recordObserved, Time: now.Add(time.Duration(i))})
	}
	us.hm.mu.Unlock()
	if err := us.hm.maint.recordObserved(ctx, recs); err != nil {
		return apierr.Unavailable("store the observed moves: %v", err)
	}
	a := &us.advice
	a.mu.Lock()
	a.id, a.mode, a.published = req.GetAdvisorId(), req.GetMode(), now
	a.until = now.Add(time.Duration(req.GetTtlSeconds()) * time.Second)
	a.hosts = make(map[string]*pelotonv1.HostAdvice, len(req.GetHosts()))
	for _, h := range req.GetHosts() {
		a.hosts[h.GetHost()] = h
	}
	a.parts = make(map[string]*pelotonv1.PartitionAdvice, len(req.GetPartitions()))
	for _, p := range req.GetPartitions() {
		a.parts[p.GetPartition()] = p
	}
	a.mu.Unlock()
	us.gaugeAdvice()
	return nil
}

// live says whether the advice has not lapsed at now. Caller holds a.mu.
func (a *advice) live(now time.Time) bool { return a.mode != "" && now.Before(a.until) }

// hostAdvice is the live advice of host name: its zone and factor.
func (us *Usage) hostAdvice(name string, now time.Time) (pelotonv1.HostZone, float64) {
	h := us.liveHostAdvice(name, now)
	if h == nil {
		return pelotonv1.HostZone_HOST_ZONE_UNKNOWN, 1
	}
	return h.GetZone(), max(1, h.GetOversubscriptionFactor())
}

// hostHeadroom is the live advice's headroom of host name (0: none).
func (us *Usage) hostHeadroom(name string, now time.Time) float64 {
	return us.liveHostAdvice(name, now).GetHeadroom()
}

// liveHostAdvice is the live advice of host name, nil without one.
func (us *Usage) liveHostAdvice(name string, now time.Time) *pelotonv1.HostAdvice {
	a := &us.advice
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.live(now) {
		return nil
	}
	return a.hosts[name]
}

// zoneName is a zone as metrics and ListPartitions name it.
func zoneName(z pelotonv1.HostZone) string {
	switch z {
	case pelotonv1.HostZone_HOST_ZONE_GREEN:
		return "green"
	case pelotonv1.HostZone_HOST_ZONE_ORANGE:
		return "orange"
	case pelotonv1.HostZone_HOST_ZONE_RED:
		return "red"
	}
	return "unknown"
}

var zoneNames = []string{"green", "orange", "red", "unknown"}

// gaugeAdvice sets the partitions' and hosts' advice gauges from
// ListPartitions and the live advice (lapsed advice: zones unknown,
// factors 1), and drops those of hosts and partitions gone.
func (us *Usage) gaugeAdvice() {
	parts, _ := us.ListPartitions()
	hosts := us.hm.ListHosts()
	a := &us.advice
	a.mu.Lock()
	defer a.mu.Unlock()
	seenP, seenH := map[string]bool{}, map[string]bool{}
	for _, p := range parts {
		seenP[p.Name] = true
		for _, z := range zoneNames {
			metrics.PartitionHosts.WithLabelValues(p.Name, z).Set(float64(p.Zones[z]))
		}
		metrics.PartitionPressure.WithLabelValues(p.Name).Set(p.Pressure)
		metrics.PartitionOversubscription.WithLabelValues(p.Name).Set(p.OversubscriptionFactor)
	}
	for _, h := range hosts {
		seenH[h.Name] = true
		for _, z := range zoneNames {
			v := 0.0
			if zoneName(h.Zone) == z {
				v = 1
			}
			metrics.HostZone.WithLabelValues(h.Name, z).Set(v)
		}
		metrics.HostOversubscription.WithLabelValues(h.Name).Set(max(1, h.OversubscriptionFactor))
	}
	for name := range a.gaugedParts {
		if !seenP[name] {
			for _, z := range zoneNames {
				metrics.PartitionHosts.DeleteLabelValues(name, z)
			}
			metrics.PartitionPressure.DeleteLabelValues(name)
			metrics.PartitionOversubscription.DeleteLabelValues(name)
		}
	}
	for name := range a.gaugedHosts {
		if !seenH[name] {
			for _, z := range zoneNames {
				metrics.HostZone.DeleteLabelValues(name, z)
			}
			metrics.HostOversubscription.DeleteLabelValues(name)
		}
	}
	a.gaugedParts, a.gaugedHosts = seenP, seenH
}

// ListPartitions summarizes every partition, with the advisor's status.
func (us *Usage) ListPartitions() ([]*pelotonv1.Partition, *pelotonv1.AdvisorStatus) {
	hosts := us.hm.ListHosts()
	now := us.hm.now()
	parts := map[string]*pelotonv1.Partition{}
	get := func(name string) *pelotonv1.Partition {
		p := parts[name]
		if p == nil {
			p = &pelotonv1.Partition{Name: name, Zones: map[string]uint32{}}
			parts[name] = p
		}
		return p
	}
	sum := func(a *pelotonv1.Resources, b *pelotonv1.Resources) *pelotonv1.Resources {
		ra, _ := resources.FromProto(a, "")
		rb, _ := resources.FromProto(b, "")
		return ra.Add(rb).ToProto()
	}
	factors := map[string]float64{}
	for _, h := range hosts {
		p := get(h.Partition)
		p.Hosts++
		if h.TargetPartition != "" {
			p.MovingOut++
			get(h.TargetPartition).MovingIn++
		}
		p.Capacity = sum(p.Capacity, h.Capacity)
		p.Allocated = sum(p.Allocated, h.Allocated)
		p.Revocable = sum(p.Revocable, h.Revocable)
		p.Slack = sum(p.Slack, h.Slack)
		if u := h.Usage; u != nil && now.Sub(u.GetReceiveTime().AsTime()) <= us.staleAfter {
			p.CpuUsed += u.GetCpu()
			p.MemoryUsedMb += u.GetMemoryUsedMb()
		}
		p.Zones[zoneName(h.Zone)]++
		factors[h.Partition] += max(1, h.OversubscriptionFactor)
	}
	a := &us.advice
	a.mu.Lock()
	live := a.live(now)
	st := &pelotonv1.AdvisorStatus{}
	if live {
		st.Mode, st.AdvisorId, st.Published = a.mode, a.id, timestamppb.New(a.published)
		for name, pa := range a.parts {
			p := get(name)
			p.Pressure, p.Services, p.ServicesOverSlo = pa.GetPressure(), pa.GetServices(), pa.GetServicesOverSlo()
		}
	}
	a.mu.Unlock()
	out := make([]*pelotonv1.Partition, 0, len(parts))
	for _, name := range slices.Sorted(maps.Keys(parts)) {
		p := parts[name]
		p.OversubscriptionFactor = 1
		if p.Hosts > 0 {
			p.OversubscriptionFactor = factors[name] / float64(p.Hosts)
		}
		out = append(out, p)
	}
	return out, st
}

// ListPartitionMoves returns the move history, newest first: of host
// only, if set, and at most limit (default 100, at most 1000).
func (mt *Maintenance) ListPartitionMoves(host string, limit uint32) ([]*pelotonv1.PartitionMove, error) {
	switch {
	case limit == 0:
		limit = 100
	case limit > moveHistoryMax:
		return nil, apierr.Invalid("limit", "%d: at most %d", limit, moveHistoryMax)
	}
	mt.histMu.Lock()
	hist := slices.Clone(mt.history)
	mt.histMu.Unlock()
	mt.hm.mu.Lock()
	defer mt.hm.mu.Unlock()
	if host != "" && mt.hm.hosts[host] == nil && !slices.ContainsFunc(hist, func(r moveRecord) bool { return r.Host == host }) {
		return nil, apierr.NotFound("host: host %s does not exist", host)
	}
	// The newest started move of each host is the one that may be under way.
	newest := map[string]int{}
	for i, r := range hist {
		if r.State == recordStarted {
			newest[r.Host] = i
		}
	}
	var out []*pelotonv1.PartitionMove
	for i := len(hist) - 1; i >= 0 && len(out) < int(limit); i-- {
		r := hist[i]
		if host != "" && r.Host != host {
			continue
		}
		state := "OBSERVED"
		switch r.State {
		case recordCancelled:
			state = "CANCELLED"
		case recordStarted:
			state = mt.moveStateLocked(hist, i, newest[r.Host] == i)
		}
		out = append(out, &pelotonv1.PartitionMove{Host: r.Host, From: r.From, To: r.To, Reason: r.Reason, State: state,
			Time: timestamppb.New(r.Time)})
	}
	return out, nil
}

// moveStateLocked is what became of the started move hist[i]: MOVING
// while the host still moves there, DONE once it is there (or, for an
// older move, once the host's next move left from there), SUPERSEDED
// when the host was sent elsewhere first. Caller holds hm.mu.
func (mt *Maintenance) moveStateLocked(hist []moveRecord, i int, newest bool) string {
	r := hist[i]
	for _, next := range hist[i+1:] {
		if next.Host == r.Host && next.State == recordStarted {
			break
		}
		if next.Host == r.Host && next.State == recordCancelled && next.To == r.To {
			return "CANCELLED"
		}
	}
	if newest {
		h := mt.hm.hosts[r.Host]
		switch {
		case h == nil:
			return "SUPERSEDED"
		case h.moving() && h.target == r.To:
			return "MOVING"
		case h.info.Partition == r.To:
			return "DONE"
		}
		return "SUPERSEDED"
	}
	for _, next := range hist[i+1:] {
		if next.Host == r.Host && next.State == recordStarted {
			if next.From == r.To {
				return "DONE"
			}
			return "SUPERSEDED"
		}
	}
	return "SUPERSEDED"
}
