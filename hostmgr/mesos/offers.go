package mesos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	mesosv1 "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/httpcli/apierrors"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// usable says whether an offered resource can back a run: not a
// persistent volume, not revocable.
func usable(r *mesosv1.Resource) bool {
	return r.Revocable == nil && (r.Disk == nil || r.Disk.Persistence == nil)
}

// sumOffers is what a set of offered resources amounts to.
func sumOffers(rs []mesosv1.Resource) resources.Resources {
	var out resources.Resources
	for i := range rs {
		r := &rs[i]
		if !usable(r) || r.Scalar == nil {
			continue
		}
		v := r.Scalar.GetValue()
		switch r.Name {
		case "cpus":
			out.MilliCPU += int64(math.Round(v * 1000))
		case "mem":
			out.MemoryMB += int64(v)
		case "disk":
			out.DiskMB += int64(v)
		case "gpus":
			out.GPU += int64(v)
		}
	}
	return out
}

// attrValue renders an attribute's value as a label value.
func attrValue(a *mesosv1.Attribute) string {
	switch {
	case a.Text != nil:
		return a.Text.GetValue()
	case a.Scalar != nil:
		return fmtFloat(a.Scalar.GetValue())
	case a.Ranges != nil:
		var parts []string
		for _, r := range a.Ranges.GetRange() {
			parts = append(parts, fmt.Sprintf("%d-%d", r.Begin, r.End))
		}
		return strings.Join(parts, ",")
	case a.Set != nil:
		return strings.Join(a.Set.GetItem(), ",")
	}
	return ""
}

// offers takes in an OFFERS event: each offer's agent becomes (or stays) a
// host, with what it offers plus what our runs hold as its capacity, its
// attributes as labels, its partition from PartitionAttribute. hostmgr is
// told only when a host appeared or what it knows of one changed: under a
// stream of launches most offers are the room runs left or freed on known
// agents, and a refresh of every host per offer was 6 % of the stack's CPU
// in the mesos bench.
func (b *Backend) offers(offers []mesosv1.Offer) {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	touched := map[*agent]bool{}
	changed := false
	for _, o := range offers {
		aid := o.AgentID.GetValue()
		a := b.agents[aid]
		if a == nil {
			if old := b.byHost[o.Hostname]; old != nil {
				// The agent on this host restarted with a new ID.
				delete(b.agents, old.id)
			}
			a = &agent{id: aid, host: o.Hostname, offers: map[string]*heldOffer{}, inverse: map[string]bool{}, vols: map[string]bool{}}
			b.agents[aid] = a
			b.byHost[o.Hostname] = a
			changed = true
		}
		labels := make(map[string]string, len(o.Attributes))
		for i := range o.Attributes {
			labels[o.Attributes[i].Name] = attrValue(&o.Attributes[i])
		}
		partition := DefaultPartition
		if p := labels[b.cfg.PartitionAttribute]; p != "" {
			partition = p
		}
		unavailable := o.Unavailability != nil
		if !maps.Equal(a.labels, labels) || a.partition != partition || a.unavailable != unavailable {
			changed = true
		}
		a.labels, a.partition, a.unavailable = labels, partition, unavailable
		a.offers[o.ID.GetValue()] = &heldOffer{offer: o, at: now}
		for _, r := range o.Resources {
			if r.Disk != nil && r.Disk.Persistence != nil {
				a.vols[r.Disk.Persistence.ID] = true
			}
		}
		touched[a] = true
	}
	for a := range touched {
		capacity := resources.Resources{}
		for _, h := range a.offers {
			capacity = capacity.Add(sumOffers(h.offer.Resources))
		}
		if u := b.held[a.id]; u != nil {
			capacity = capacity.Add(u.res)
		}
		if a.capacity != capacity {
			a.capacity, changed = capacity, true
		}
		b.noteMaintenance(a)
	}
	if changed || !b.offersSeen {
		signal(b.hostK)
	}
	b.offersSeen = true
	signal(b.kick)
}

func (b *Backend) rescind(offerID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, a := range b.agents {
		delete(a.offers, offerID)
	}
}

func (b *Backend) inverseOffers(ios []mesosv1.InverseOffer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, io := range ios {
		if io.AgentID == nil {
			continue
		}
		if a := b.agents[io.AgentID.GetValue()]; a != nil {
			a.inverse[io.OfferID.GetValue()] = true
			a.unavailable = true
			b.noteMaintenance(a)
		}
	}
	signal(b.hostK)
	signal(b.kick)
}

func (b *Backend) rescindInverse(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, a := range b.agents {
		if a.inverse[id] {
			delete(a.inverse, id)
			b.noteMaintenance(a)
			signal(b.hostK)
		}
	}
}

// pool is the offered resources of one agent, carved into runs.
type pool struct {
	res []mesosv1.Resource
	// known are the volumes the agent has (seen in its offers): one of
	// them not offered now is in use or offered later, never made again.
	known map[string]bool
}

func newPool(offers map[string]*heldOffer) *pool {
	p := &pool{}
	ids := make([]string, 0, len(offers))
	for id := range offers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		for _, r := range offers[id].offer.Resources {
			if r.Revocable != nil {
				continue
			}
			c := r
			if r.Scalar != nil {
				c.Scalar = &mesosv1.Value_Scalar{Value: r.Scalar.Value}
			}
			if r.Ranges != nil {
				c.Ranges = &mesosv1.Value_Ranges{Range: append([]mesosv1.Value_Range(nil), r.Ranges.Range...)}
			}
			p.res = append(p.res, c)
		}
	}
	return p
}

func (p *pool) clone() *pool {
	c := &pool{res: make([]mesosv1.Resource, len(p.res)), known: p.known}
	for i, r := range p.res {
		c.res[i] = r
		if r.Scalar != nil {
			c.res[i].Scalar = &mesosv1.Value_Scalar{Value: r.Scalar.Value}
		}
		if r.Ranges != nil {
			c.res[i].Ranges = &mesosv1.Value_Ranges{Range: append([]mesosv1.Value_Range(nil), r.Ranges.Range...)}
		}
	}
	return c
}

// scalar takes amount of the named scalar resource, from as many offered
// resources as it needs; false if there is not enough.
func (p *pool) scalar(name string, amount float64, out *[]mesosv1.Resource) bool {
	const eps = 0.0005 // Mesos scalars are fixed point with three decimals
	for i := range p.res {
		if amount < eps {
			break
		}
		r := &p.res[i]
		if r.Name != name || r.Scalar == nil || r.Scalar.Value < eps || !usable(r) {
			continue
		}
		take := math.Min(r.Scalar.Value, amount)
		take = math.Round(take*1000) / 1000
		c := *r
		c.Scalar = &mesosv1.Value_Scalar{Value: take}
		c.Ranges = nil
		*out = append(*out, c)
		r.Scalar.Value = math.Round((r.Scalar.Value-take)*1000) / 1000
		amount -= take
	}
	return amount < eps
}

// port takes one port: want if it is non-zero, else the lowest offered.
func (p *pool) port(want uint32, out *[]mesosv1.Resource) (uint32, bool) {
	for i := range p.res {
		r := &p.res[i]
		if r.Name != "ports" || r.Ranges == nil {
			continue
		}
		for j, rg := range r.Ranges.Range {
			v := uint64(want)
			if want == 0 {
				v = rg.Begin
			}
			if v < rg.Begin || v > rg.End || v == 0 {
				continue
			}
			// Split the range around v.
			var rest []mesosv1.Value_Range
			if v > rg.Begin {
				rest = append(rest, mesosv1.Value_Range{Begin: rg.Begin, End: v - 1})
			}
			if v < rg.End {
				rest = append(rest, mesosv1.Value_Range{Begin: v + 1, End: rg.End})
			}
			nr := append(append(append([]mesosv1.Value_Range(nil), r.Ranges.Range[:j]...), rest...), r.Ranges.Range[j+1:]...)
			r.Ranges.Range = nr
			c := *r
			c.Scalar = nil
			c.Ranges = &mesosv1.Value_Ranges{Range: []mesosv1.Value_Range{{Begin: v, End: v}}}
			*out = append(*out, c)
			return uint32(v), true
		}
	}
	return 0, false
}

// volume takes the run's persistent volume out of the pool: the volume
// itself if the agent offers it, else unreserved disk that the returned
// operations reserve for role and make into the volume (RESERVE, CREATE).
func (p *pool) volume(v *hostmgr.Volume, role, principal string, out *[]mesosv1.Resource) ([]mesosv1.Offer_Operation, bool) {
	if r, ok := p.takeVolume(v.ID); ok {
		*out = append(*out, r)
		return nil, true
	}
	if p.known[v.ID] {
		return nil, false
	}
	size := float64(max(v.SizeMB, 1))
	for i := range p.res {
		r := &p.res[i]
		if r.Name != "disk" || r.Scalar == nil || r.Disk != nil || r.Reservation != nil || len(r.Reservations) > 0 ||
			(r.GetRole() != "" && r.GetRole() != "*") || r.Scalar.Value < size {
			continue
		}
		r.Scalar.Value = math.Round((r.Scalar.Value-size)*1000) / 1000
		rsv := mesosv1.Resource{Name: "disk", Type: mesosv1.SCALAR.Enum(), Scalar: &mesosv1.Value_Scalar{Value: size},
			Role: &role, Reservation: &mesosv1.Resource_ReservationInfo{}}
		if principal != "" {
			rsv.Reservation.Principal = &principal
		}
		vol := rsv
		vol.Scalar = &mesosv1.Value_Scalar{Value: size}
		path := strings.TrimPrefix(v.MountPath, "/")
		if path == "" {
			path = "volume"
		}
		mode := mesosv1.RW
		vol.Disk = &mesosv1.Resource_DiskInfo{Persistence: &mesosv1.Resource_DiskInfo_Persistence{ID: v.ID},
			Volume: &mesosv1.Volume{Mode: &mode, ContainerPath: path}}
		if principal != "" {
			vol.Disk.Persistence.Principal = &principal
		}
		*out = append(*out, vol)
		return []mesosv1.Offer_Operation{calls.OpReserve(rsv), calls.OpCreate(vol)}, true
	}
	return nil, false
}

// takeVolume takes the offered persistent volume of that ID out of the pool.
func (p *pool) takeVolume(id string) (mesosv1.Resource, bool) {
	for i := range p.res {
		r := p.res[i]
		if r.Name == "disk" && r.Disk != nil && r.Disk.Persistence != nil && r.Disk.Persistence.ID == id {
			p.res = append(p.res[:i], p.res[i+1:]...)
			return r, true
		}
	}
	return mesosv1.Resource{}, false
}

// carve takes a run's resources and ports out of the pool, or nothing if
// they do not fit. With a volume it also returns the operations that make
// it, to go before the LAUNCH.
func (p *pool) carve(spec *hostmgr.LaunchSpec, role, principal string) ([]mesosv1.Resource, map[string]uint32, []mesosv1.Offer_Operation, bool) {
	saved := p.clone()
	var out []mesosv1.Resource
	rs := spec.Resources
	ok := p.scalar("cpus", float64(rs.MilliCPU)/1000, &out) &&
		p.scalar("mem", float64(rs.MemoryMB), &out) &&
		p.scalar("disk", float64(rs.DiskMB), &out) &&
		p.scalar("gpus", float64(rs.GPU), &out)
	var ports map[string]uint32
	if ok && len(spec.Ports) > 0 {
		ports = make(map[string]uint32, len(spec.Ports))
		// Fixed ports first, so that a chosen one never takes a fixed one's number.
		order := append([]hostmgr.Port(nil), spec.Ports...)
		sort.SliceStable(order, func(i, j int) bool { return order[i].Value != 0 && order[j].Value == 0 })
		for _, pt := range order {
			v, got := p.port(pt.Value, &out)
			if !got {
				ok = false
				break
			}
			ports[pt.Name] = v
		}
	}
	var ops []mesosv1.Offer_Operation
	if ok && spec.Volume != nil {
		ops, ok = p.volume(spec.Volume, role, principal, &out)
	}
	if !ok {
		*p = *saved
		return nil, nil, nil, false
	}
	return out, ports, ops, true
}

// taskInfo is the TaskInfo of a run: the command executor runs its argv
// (no shell) with its environment, resources carved from the offers.
func taskInfo(spec *hostmgr.LaunchSpec, agentID string, res []mesosv1.Resource, ports map[string]uint32) mesosv1.TaskInfo {
	env := []mesosv1.Environment_Variable{}
	add := func(k, v string) {
		v2 := v
		env = append(env, mesosv1.Environment_Variable{Name: k, Value: &v2})
	}
	add("PELOTON_TASK_ID", spec.TaskID)
	add("PELOTON_JOB_ID", spec.JobID)
	add("PELOTON_INSTANCE_ID", strconv.FormatUint(uint64(spec.InstanceID), 10))
	keys := make([]string, 0, len(spec.Env))
	for k := range spec.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		add(k, spec.Env[k])
	}
	names := make([]string, 0, len(ports))
	for n := range ports {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		add(hostmgr.PortEnvName(n), strconv.FormatUint(uint64(ports[n]), 10))
	}
	ti := mesosv1.TaskInfo{
		Name:      fmt.Sprintf("%s-%d", spec.JobID, spec.InstanceID),
		TaskID:    mesosv1.TaskID{Value: spec.TaskID},
		AgentID:   mesosv1.AgentID{Value: agentID},
		Resources: res,
		Command:   command(spec.Command),
		Labels: &mesosv1.Labels{Labels: []mesosv1.Label{
			{Key: "peloton.io/job", Value: &spec.JobID},
			{Key: "peloton.io/pool", Value: &spec.Pool},
		}},
	}
	ti.Command.Environment = &mesosv1.Environment{Variables: env}
	if spec.Image != "" {
		img := spec.Image
		ti.Container = &mesosv1.ContainerInfo{Type: mesosv1.ContainerInfo_MESOS.Enum(),
			Mesos: &mesosv1.ContainerInfo_MesosInfo{Image: &mesosv1.Image{Type: mesosv1.Image_DOCKER.Enum(),
				Docker: &mesosv1.Image_Docker{Name: img}}}}
	}
	if spec.KillGrace > 0 {
		ti.KillPolicy = &mesosv1.KillPolicy{GracePeriod: &mesosv1.DurationInfo{Nanoseconds: spec.KillGrace.Nanoseconds()}}
	}
	if hc := spec.HealthCheck; hc != nil {
		interval, timeout := float64(max(hc.IntervalSeconds, 1)), float64(max(hc.TimeoutSeconds, 1))
		delay, grace := float64(hc.InitialDelaySeconds), float64(hc.InitialDelaySeconds)
		failures := max(hc.FailureThreshold, 1)
		mh := &mesosv1.HealthCheck{DelaySeconds: &delay, IntervalSeconds: &interval, TimeoutSeconds: &timeout,
			ConsecutiveFailures: &failures, GracePeriodSeconds: &grace}
		if hc.Http != nil {
			port := ports[hc.Http.Port]
			if port == 0 {
				if n, err := strconv.ParseUint(hc.Http.Port, 10, 32); err == nil {
					port = uint32(n)
				}
			}
			path := hc.Http.Path
			mh.Type = mesosv1.HealthCheck_HTTP
			mh.HTTP = &mesosv1.HealthCheck_HTTPCheckInfo{Port: port, Path: &path}
		} else {
			mh.Type = mesosv1.HealthCheck_COMMAND
			mh.Command = command(hc.Command)
		}
		ti.HealthCheck = mh
	}
	return ti
}

// command runs argv as it is, without a shell (Mesos: shell=false, value
// the program, arguments the whole argv).
func command(argv []string) *mesosv1.CommandInfo {
	shell := false
	c := &mesosv1.CommandInfo{Shell: &shell, Arguments: append([]string(nil), argv...)}
	if len(argv) > 0 {
		v := argv[0]
		c.Value = &v
	}
	return c
}

// batch is one ACCEPT: runs launched on the offers of one agent.
type batch struct {
	agentID string
	offers  []mesosv1.OfferID
	pre     []mesosv1.Offer_Operation // volumes made or released, before the LAUNCH
	tasks   []mesosv1.TaskInfo        // one LAUNCH
	groups  []mesosv1.Offer_Operation // a LAUNCH_GROUP per gang
	reqs    []*launchReq
	rels    []*releaseReq
}

// Resources of the default executor that runs one task group: Mesos
// accounts them to the executor, on top of its tasks', for as long as one
// of the group's tasks lives. They are not counted as held by our runs, so
// an agent's capacity (offered plus held) leaves them out, as it leaves
// out what other frameworks use.
const (
	executorCPUs  = 0.1
	executorMemMB = 32
)

// gangKey keys the members of one gang waiting for one agent.
func gangKey(req *launchReq) string { return req.run.agentID + "\x00" + req.spec.Gang }

// executorInfo is the DEFAULT executor of a task group, with resources
// carved from the pool (false, taking nothing, if they do not fit). Its ID
// is the group's first task ID: task IDs are never reused, so it is
// unique in the framework, as Mesos requires.
func (p *pool) executorInfo(frameworkID, firstTask string) (mesosv1.ExecutorInfo, bool) {
	saved := p.clone()
	var res []mesosv1.Resource
	if !p.scalar("cpus", executorCPUs, &res) || !p.scalar("mem", executorMemMB, &res) {
		*p = *saved
		return mesosv1.ExecutorInfo{}, false
	}
	name := "peloton gang executor"
	return mesosv1.ExecutorInfo{Type: mesosv1.ExecutorInfo_DEFAULT, ExecutorID: mesosv1.ExecutorID{Value: "gang-" + firstTask},
		FrameworkID: &mesosv1.FrameworkID{Value: frameworkID}, Resources: res, Name: &name}, true
}

// launcher matches waiting launches with offers, ACCEPTs them in one call
// per agent, declines offers nothing needs, and suppresses or revives.
func (b *Backend) launcher() {
	defer b.wg.Done()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	sem := make(chan struct{}, 32)
	var inflight sync.WaitGroup
	defer inflight.Wait()
	for {
		full := false
		select {
		case <-b.kick:
		case <-tick.C:
			full = true
		case <-b.ctx.Done():
			return
		}
		batches, decline, inverse, revive, suppress := b.plan(time.Now(), full)
		for _, bt := range batches {
			select {
			case sem <- struct{}{}:
			case <-b.ctx.Done():
				b.requeue(bt.reqs)
				continue
			}
			inflight.Add(1)
			go func(bt *batch) {
				defer func() { <-sem; inflight.Done() }()
				b.accept(bt)
			}(bt)
		}
		ctx := b.ctx
		if len(decline) > 0 {
			refuse := b.cfg.DeclineFilter.Seconds()
			c := calls.Decline(decline...)
			c.Decline.Filters = &mesosv1.Filters{RefuseSeconds: &refuse}
			if err := b.call(ctx, c); err != nil && ctx.Err() == nil {
				b.log.Debug("mesos: decline failed", "err", err)
			}
		}
		if len(inverse) > 0 {
			if err := b.call(ctx, calls.AcceptInverseOffers(inverse...)); err != nil && ctx.Err() == nil {
				b.log.Debug("mesos: accepting inverse offers failed", "err", err)
			}
		}
		if revive {
			if err := b.call(ctx, calls.Revive()); err != nil && ctx.Err() == nil {
				b.log.Debug("mesos: revive failed", "err", err)
			}
		}
		if suppress {
			if err := b.call(ctx, calls.Suppress()); err != nil && ctx.Err() == nil {
				b.log.Debug("mesos: suppress failed", "err", err)
				b.mu.Lock()
				b.suppressed = false
				b.mu.Unlock()
			}
		}
	}
}

// plan decides, under the lock, what the launcher does now.
// Offers to decline, inverse offers to accept and suppression are looked
// at on the ticks (full) only, not on every launch.
func (b *Backend) plan(now time.Time, full bool) (batches []*batch, decline, inverse []mesosv1.OfferID, revive, suppress bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.connected {
		return
	}
	pl := &planned{byAgent: map[string]*batch{}, pools: map[string]*pool{}}
	waiting, inWindow := b.planLaunches(now, pl)
	relWaiting := b.planReleases(pl)
	for _, bt := range pl.batches {
		a := b.agents[bt.agentID]
		for id, h := range a.offers {
			bt.offers = append(bt.offers, h.offer.ID)
			delete(a.offers, id)
		}
	}
	b.queue, b.releases = waiting, relWaiting
	if len(waiting) > 0 || len(relWaiting) > 0 {
		b.lastDemand = now
		if (len(waiting) > inWindow || len(relWaiting) > 0) && (b.suppressed || now.Sub(b.lastRevive) >= time.Second) {
			revive, b.suppressed, b.lastRevive = true, false, now
		}
	}
	if !full {
		return pl.batches, nil, nil, revive, false
	}
	decline, inverse, reviveMaint, suppress := b.planOffers(now, waiting)
	return pl.batches, decline, inverse, revive || reviveMaint, suppress
}

// planned is what one plan has carved so far: a batch and a pool of
// offered resources per agent.
type planned struct {
	byAgent map[string]*batch
	pools   map[string]*pool
	batches []*batch
}

// batchOf is agent a's batch, made on first use.
func (pl *planned) batchOf(a *agent) *batch {
	bt := pl.byAgent[a.id]
	if bt == nil {
		bt = &batch{agentID: a.id}
		pl.byAgent[a.id] = bt
		pl.batches = append(pl.batches, bt)
	}
	return bt
}

// poolOf is what agent a offers, less what this plan carved already.
func (pl *planned) poolOf(a *agent) *pool {
	p := pl.pools[a.id]
	if p == nil {
		p = newPool(a.offers)
		p.known = a.vols
		pl.pools[a.id] = p
	}
	return p
}

// planLaunches carves the queued launches out of their agents' offers, a
// gang's members together once their window has passed (see enqueue). It
// returns the launches left waiting, and how many of them wait only for
// their gang's window (they have offers: no reason to revive).
func (b *Backend) planLaunches(now time.Time, pl *planned) (waiting []*launchReq, inWindow int) {
	gangs := map[string][]*launchReq{}
	for _, req := range b.queue {
		if req.spec.Gang != "" {
			gangs[gangKey(req)] = append(gangs[gangKey(req)], req)
		}
	}
	for k := range b.gangSince {
		if gangs[k] == nil {
			delete(b.gangSince, k) // its members were withdrawn or killed
		}
	}
	seen := map[string]bool{}
	for _, req := range b.queue {
		r := req.run
		a := b.agents[r.agentID]
		if a == nil || len(a.offers) == 0 {
			waiting = append(waiting, req)
			continue
		}
		p := pl.poolOf(a)
		if req.spec.Gang != "" {
			k := gangKey(req)
			if seen[k] {
				continue // taken, or left waiting, with its gang's first member
			}
			seen[k] = true
			members := gangs[k]
			if now.Before(b.gangSince[k].Add(b.cfg.GangWindow)) {
				waiting = append(waiting, members...)
				inWindow += len(members)
				continue
			}
			op, ops, ok := b.carveGroup(p, a.id, members)
			if !ok {
				waiting = append(waiting, members...)
				continue
			}
			delete(b.gangSince, k)
			bt := pl.batchOf(a)
			bt.pre = append(bt.pre, ops...)
			bt.groups = append(bt.groups, op)
			for _, m := range members {
				m.run.accepted = true
				b.count(m.run)
				bt.reqs = append(bt.reqs, m)
			}
			continue
		}
		res, ports, ops, ok := p.carve(&req.spec, b.cfg.Role, b.cfg.Principal)
		if !ok {
			waiting = append(waiting, req)
			continue
		}
		bt := pl.batchOf(a)
		bt.pre = append(bt.pre, ops...)
		r.ports = ports
		r.accepted = true
		b.count(r)
		bt.tasks = append(bt.tasks, taskInfo(&req.spec, a.id, res, ports))
		bt.reqs = append(bt.reqs, req)
	}
	return waiting, inWindow
}

// planReleases carves the volume releases asked for out of their agents'
// offers (destroy, then unreserve), and answers those that need nothing
// done. It returns the releases left waiting for an offer.
func (b *Backend) planReleases(pl *planned) (relWaiting []*releaseReq) {
	for _, rel := range b.releases {
		a := b.agents[rel.agentID]
		switch {
		case a == nil:
			rel.done <- fmt.Errorf("mesos: release volume %s: its agent is gone", rel.id)
			continue
		case len(a.offers) == 0:
			relWaiting = append(relWaiting, rel)
			continue
		}
		vol, ok := pl.poolOf(a).takeVolume(rel.id)
		if !ok && a.vols[rel.id] {
			relWaiting = append(relWaiting, rel) // offered later (it was just released by a run)
			continue
		}
		if !ok {
			rel.done <- nil // the agent offers everything it has free, and not this volume: it is gone
			continue
		}
		rsv := vol
		rsv.Disk = nil
		bt := pl.batchOf(a)
		bt.pre = append(bt.pre, calls.OpDestroy(vol), calls.OpUnreserve(rsv))
		delete(a.vols, rel.id)
		bt.rels = append(bt.rels, rel)
	}
	return relWaiting
}

// planOffers is the ticks' part of a plan: the offers held too long that
// nothing waiting needs (declined), the inverse offers of agents with
// nothing running (accepted), a revive for an inverse offer that came
// while offers were suppressed, and whether to suppress offers now.
func (b *Backend) planOffers(now time.Time, waiting []*launchReq) (decline, inverse []mesosv1.OfferID, revive, suppress bool) {
	if b.suppressed && b.anyInMaintenance() {
		revive, b.suppressed, b.lastRevive = true, false, now
	}
	needs := map[string]bool{}
	for _, req := range waiting {
		needs[req.run.agentID] = true
	}
	for _, a := range b.agents {
		for id, h := range a.offers {
			if !needs[a.id] && now.Sub(h.at) >= b.cfg.OfferHold {
				decline = append(decline, h.offer.ID)
				delete(a.offers, id)
			}
		}
		if len(a.inverse) > 0 && !b.busy(a.id) {
			for id := range a.inverse {
				inverse = append(inverse, mesosv1.OfferID{Value: id})
				delete(a.inverse, id)
			}
		}
	}
	// Offers are how the end of a maintenance window shows (they come
	// without an unavailability again), so they are not suppressed while
	// an agent is in one.
	if len(waiting) == 0 && !b.suppressed && now.Sub(b.lastDemand) >= b.cfg.IdleSuppress && !b.anyInMaintenance() {
		held := 0
		for _, a := range b.agents {
			held += len(a.offers)
		}
		if held == 0 {
			suppress, b.suppressed = true, true
		}
	}
	return decline, inverse, revive, suppress
}

// carveGroup carves a gang's members on one agent, and the default
// executor that runs them, out of the pool: all of them, or, leaving the
// pool as it was, none. It returns their LAUNCH_GROUP and the operations
// that make their volumes, to go before it. b.mu is held.
func (b *Backend) carveGroup(p *pool, agentID string, members []*launchReq) (mesosv1.Offer_Operation, []mesosv1.Offer_Operation, bool) {
	saved := p.clone()
	exec, ok := p.executorInfo(b.frameworkID, members[0].spec.TaskID)
	if !ok {
		return mesosv1.Offer_Operation{}, nil, false
	}
	var pre []mesosv1.Offer_Operation
	tasks := make([]mesosv1.TaskInfo, 0, len(members))
	ports := make([]map[string]uint32, 0, len(members))
	for _, m := range members {
		res, pts, ops, ok := p.carve(&m.spec, b.cfg.Role, b.cfg.Principal)
		if !ok {
			*p = *saved
			return mesosv1.Offer_Operation{}, nil, false
		}
		pre = append(pre, ops...)
		ports = append(ports, pts)
		tasks = append(tasks, taskInfo(&m.spec, agentID, res, pts))
	}
	for i, m := range members {
		m.run.ports = ports[i]
	}
	return calls.OpLaunchGroup(exec, tasks...), pre, true
}

// enqueue queues a launch for the launcher. A gang's member waits until
// GangWindow has passed since the first of its gang arrived for the same
// agent, so that the members jobmgr launches together (each on a launcher
// of its own, each after its own store write: a few milliseconds apart,
// never at one instant) go out in one LAUNCH_GROUP. A window, not a count:
// the backend cannot tell how many members were placed on an agent (a
// LaunchSpec names its gang, not where the others went), and a count that
// never completes (a member killed or its launch abandoned) would hold the
// rest. A member arriving after its window closed goes in a group of its
// own; it still runs, though not started atomically with the others.
// b.mu is held.
func (b *Backend) enqueue(req *launchReq) {
	b.queue = append(b.queue, req)
	if req.spec.Gang == "" {
		return
	}
	if k := gangKey(req); b.gangSince[k].IsZero() {
		b.gangSince[k] = time.Now()
		time.AfterFunc(b.cfg.GangWindow, func() { signal(b.kick) })
	}
}

// anyInMaintenance: some agent has a maintenance window. b.mu is held.
func (b *Backend) anyInMaintenance() bool {
	for _, a := range b.agents {
		if a.inMaintenance() {
			return true
		}
	}
	return false
}

// busy: the agent holds live runs of ours. b.mu is held.
func (b *Backend) busy(agentID string) bool {
	return b.held[agentID] != nil
}

// accept sends one ACCEPT with a LAUNCH of the batch's runs.
func (b *Backend) accept(bt *batch) {
	zero := 0.0
	ops := bt.pre
	if len(bt.tasks) > 0 {
		ops = append(ops, calls.OpLaunch(bt.tasks...))
	}
	ops = append(ops, bt.groups...)
	c := &scheduler.Call{Type: scheduler.Call_ACCEPT, Accept: &scheduler.Call_Accept{
		OfferIDs:   bt.offers,
		Operations: ops,
		Filters:    &mesosv1.Filters{RefuseSeconds: &zero},
	}}
	err := b.call(b.ctx, c)
	for _, rel := range bt.rels {
		rel.done <- err
	}
	var apiErr *apierrors.Error
	switch {
	case err == nil:
	case errors.Is(err, errNotSubscribed) || errors.As(err, &apiErr) || errors.Is(err, context.Canceled):
		// The master did not take it: the runs wait for the next offers.
		b.log.Debug("mesos: ACCEPT not taken; the runs wait for other offers", "agent", bt.agentID, "runs", len(bt.reqs), "err", err)
		b.requeue(bt.reqs)
		return
	default:
		// The call may or may not have reached the master: take the runs
		// as launched and ask the master what became of them.
		b.log.Warn("mesos: ACCEPT's outcome unknown; reconciling its runs", "agent", bt.agentID, "runs", len(bt.reqs), "err", err)
		tasks := map[string]string{}
		for _, req := range bt.reqs {
			tasks[req.run.id] = bt.agentID
		}
		b.wg.Add(1) // from a goroutine of b.wg, so never after Close's Wait began
		go func() { defer b.wg.Done(); b.reconcile(tasks) }()
	}
	b.mu.Lock()
	for _, req := range bt.reqs {
		req.run.pending = nil
		if !req.run.has {
			b.report(req.run, hostmgr.TaskEvent{State: pelotonv1.TaskState_LAUNCHED})
		}
	}
	b.mu.Unlock()
	for _, req := range bt.reqs {
		req.done <- nil
	}
}

// requeue puts launches back in the queue (or fails them once the backend
// is closing).
func (b *Backend) requeue(reqs []*launchReq) {
	b.mu.Lock()
	if b.closed || b.fatal != nil || b.ctx.Err() != nil {
		err := b.fatal
		if err == nil {
			err = errors.New("mesos: backend closed")
		}
		for _, req := range reqs {
			req.run.accepted = false
			b.uncount(req.run)
		}
		b.mu.Unlock()
		for _, req := range reqs {
			req.done <- err
		}
		return
	}
	for _, req := range reqs {
		req.run.accepted = false
		b.uncount(req.run)
		req.run.ports = nil
		if req.run.pending != nil && !req.run.ended {
			b.enqueue(req)
		}
	}
	b.mu.Unlock()
	signal(b.kick)
}
