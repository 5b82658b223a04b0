package placement

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// fixedBackend is a hostmgr backend with fixed hosts and no processes, so
// that the property test can check decisions with the real verifying
// applier (hostmgr.Commit).
type fixedBackend struct{ hosts []hostmgr.HostInfo }

func (f *fixedBackend) Name() string                                         { return "fixed" }
func (f *fixedBackend) Start(context.Context, func(hostmgr.TaskEvent)) error { return nil }
func (f *fixedBackend) Hosts() []hostmgr.HostInfo                            { return f.hosts }
func (f *fixedBackend) Launch(context.Context, hostmgr.LaunchSpec) error     { return nil }
func (f *fixedBackend) Kill(context.Context, string, time.Duration) error {
	return hostmgr.ErrUnknownTask
}
func (f *fixedBackend) Status(string) (hostmgr.TaskEvent, error) {
	return hostmgr.TaskEvent{}, hostmgr.ErrUnknownTask
}
func (f *fixedBackend) Logs(context.Context, string, hostmgr.LogOptions) (io.ReadCloser, error) {
	return nil, hostmgr.ErrUnknownTask
}
func (f *fixedBackend) Close() error { return nil }

var _ hostmgr.Backend = (*fixedBackend)(nil)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestPlaceProperties places random gangs on random clusters and checks what
// must hold whatever the strategy: no host over capacity, every placement
// satisfies its constraints, partition and maximum per host, a task bound
// to a host lands there or nowhere, gangs whole or absent, hostmgr.Commit
// accepts the decision, "unresolvable" only when no host of the cluster
// could ever take the gang (for a bound task: its host is gone, fails its
// filters or is too small), and "unschedulable" single tasks really have no
// host with room left (for a bound task: its host has none, is in
// maintenance or is leased elsewhere). Some hosts are in maintenance and
// some leased by another engine; the lease asks for bound hosts by name as
// the engine does.
func TestPlaceProperties(t *testing.T) {
	iterations := 300
	if testing.Short() {
		iterations = 50
	}
	defer func(n int) { privateAfter = n }(privateAfter)
	for seed := range iterations {
		// Odd seeds give capped jobs their own pack trees at once.
		privateAfter = 256
		if seed%2 == 1 {
			privateAfter = 0
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { checkRandomRound(t, uint64(seed)) })
	}
}

func checkRandomRound(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 42))
	pick := func(vs ...string) string { return vs[rng.IntN(len(vs))] }

	// A cluster of a few host shapes, labels and partitions.
	nHosts := 1 + rng.IntN(24)
	infos := make([]hostmgr.HostInfo, nHosts)
	for i := range infos {
		c := resources.Resources{MilliCPU: int64(1+rng.IntN(8)) * 1000, MemoryMB: int64(1+rng.IntN(8)) * 1024}
		if rng.IntN(4) == 0 {
			c.GPU = int64(1 + rng.IntN(4))
		}
		labels := map[string]string{}
		if z := pick("a", "b", "c", ""); z != "" {
			labels["zone"] = z
		}
		if d := pick("ssd", "hdd", ""); d != "" {
			labels["disk"] = d
		}
		infos[i] = hostmgr.HostInfo{Name: fmt.Sprintf("h%02d", i), Capacity: c, Labels: labels, Partition: pick("default", "default", "batch")}
	}
	hm := hostmgr.NewManager(&fixedBackend{infos}, hostmgr.Options{LeaseTTL: time.Hour, Logger: quiet})
	if err := hm.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hm.Close() })
	// Runs already on the hosts, of the jobs about to be placed.
	jobs := []string{"j0", "j1", "j2", "j3"}
	for i := range infos {
		used := resources.Resources{}
		for k := range rng.IntN(3) {
			r := resources.Resources{MilliCPU: 500, MemoryMB: 256}
			if used.Add(r).FitsIn(infos[i].Capacity) {
				used = used.Add(r)
				hm.Recover(resmgr.RunTaskID(pick(jobs...), uint32(1000+i*10+k), 1), infos[i].Name, r)
			}
		}
	}

	// One placement spec per job, shared by its tasks, as jobmgr does.
	specs := map[string]*pelotonv1.PlacementSpec{}
	strategies := map[string]pelotonv1.PlacementStrategy{}
	for _, j := range jobs {
		p := &pelotonv1.PlacementSpec{MaxInstancesPerHost: uint32(rng.IntN(4))}
		if rng.IntN(3) == 0 {
			p.Partition = pick("default", "batch", "nope")
		}
		for range rng.IntN(3) {
			c := &pelotonv1.Constraint{Label: pick("zone", "disk", "rack"), Op: pelotonv1.ConstraintOp(1 + rng.IntN(5))}
			switch c.Op {
			case opEq, opNe:
				c.Values = []string{pick("a", "b", "ssd", "x")}
			case opIn, opNotIn:
				c.Values = []string{pick("a", "b", "ssd"), pick("c", "hdd", "x")}
			}
			p.Constraints = append(p.Constraints, c)
		}
		specs[j] = p
		strategies[j] = pelotonv1.PlacementStrategy(1 + rng.IntN(2))
	}
	var gangs []*resmgr.Gang
	inst := map[string]uint32{}
	for range 1 + rng.IntN(40) {
		j := pick(jobs...)
		var ts []*resmgr.Task
		for range 1 + rng.IntN(1+3*rng.IntN(2)) {
			r := resources.Resources{MilliCPU: int64(1+rng.IntN(16)) * 250, MemoryMB: int64(1+rng.IntN(16)) * 256}
			if rng.IntN(6) == 0 {
				r.GPU = 1
			}
			task := &resmgr.Task{JobID: j, Instance: inst[j], RunID: 1, Resources: r, Strategy: strategies[j], Placement: specs[j]}
			if rng.IntN(5) == 0 {
				task.PrevHost = pick("h00", "h01", "h02", "gone")
			}
			if rng.IntN(4) == 0 {
				task.BoundHost = pick("h00", "h01", "h02", "h03", "gone")
			}
			inst[j]++
			ts = append(ts, task)
		}
		gangs = append(gangs, resmgr.NewGang(ts...))
	}

	// Some hosts in maintenance, some leased by another engine.
	inMaint := map[string]bool{}
	var drain, elsewhere []string
	for _, h := range infos {
		switch rng.IntN(8) {
		case 0:
			drain = append(drain, h.Name)
			inMaint[h.Name] = true
		case 1:
			elsewhere = append(elsewhere, h.Name)
		}
	}
	if len(drain) > 0 {
		if _, err := hm.Maintenance().StartMaintenance(context.Background(), drain); err != nil {
			t.Fatal(err)
		}
	}
	if len(elsewhere) > 0 {
		hm.AcquireHosts(hostmgr.HostFilter{Hosts: elsewhere})
	}

	want := map[string]bool{}
	for _, j := range jobs {
		want[j] = true
	}
	// Sometimes fewer hosts than the cluster: bound hosts come by name.
	maxHosts := nHosts
	if rng.IntN(3) == 0 {
		maxHosts = 1 + rng.IntN(nHosts)
	}
	f := hostmgr.HostFilter{Max: maxHosts, Jobs: want, Hosts: hostFilter(gangs, maxHosts).Hosts}
	lease, offers := hm.AcquireHosts(f)
	cfg := Config{Catalog: hm.HostClasses()}
	if missing := notOffered(f.Hosts, offers); len(missing) > 0 {
		cfg.Bound = hm.HostStatuses(missing)
	}
	before := fmt.Sprint(offers)
	d := cfg.Place(gangs, offers)
	if fmt.Sprint(offers) != before {
		t.Fatal("Place modified its input")
	}
	info := map[string]hostmgr.HostInfo{}
	for _, h := range infos {
		info[h.Name] = h
	}

	byName := map[string]hostmgr.HostOffer{}
	for _, o := range offers {
		byName[o.Name] = o
	}
	// Gangs whole or absent, each exactly once.
	placedGang := map[*resmgr.Gang]int{}
	taskGang := map[*resmgr.Task]*resmgr.Gang{}
	for _, g := range gangs {
		for _, task := range g.Tasks {
			taskGang[task] = g
		}
	}
	used := map[string]resources.Resources{}
	count := map[[2]string]int{}
	for _, p := range d.Placed {
		placedGang[taskGang[p.Task]]++
		o, ok := byName[p.Host]
		if !ok {
			t.Fatalf("placed on a host that was not offered: %s", p.Host)
		}
		if b := p.Task.BoundHost; b != "" && p.Host != b {
			t.Errorf("%s is bound to %s but placed on %s", p.Task.Key(), b, p.Host)
		}
		used[p.Host] = used[p.Host].Add(p.Task.Resources)
		count[[2]string{p.Host, p.Task.JobID}]++
		if !oracleMatches(p.Task.Placement, o) {
			t.Errorf("%s on %s (%v, %s) breaks %v", p.Task.Key(), p.Host, o.Labels, o.Partition, p.Task.Placement)
		}
		if m := p.Task.Placement.GetMaxInstancesPerHost(); m > 0 {
			if n := o.JobCounts[p.Task.JobID] + count[[2]string{p.Host, p.Task.JobID}]; n > int(m) {
				t.Errorf("%s holds %d runs of %s, max %d", p.Host, n, p.Task.JobID, m)
			}
		}
	}
	for name, u := range used {
		if !u.FitsIn(byName[name].Free) {
			t.Errorf("host %s over capacity: placed %s, had %s free", name, u, byName[name].Free)
		}
	}
	unplaced := map[*resmgr.Gang]bool{}
	for _, u := range d.Unplaced {
		if unplaced[u.Gang] || placedGang[u.Gang] > 0 {
			t.Errorf("gang of %s both placed and unplaced, or unplaced twice", u.Gang.Tasks[0].Key())
		}
		unplaced[u.Gang] = true
	}
	for _, g := range gangs {
		if n := placedGang[g]; n != 0 && n != len(g.Tasks) {
			t.Errorf("gang of %d placed %d members", len(g.Tasks), n)
		}
		if placedGang[g] == 0 && !unplaced[g] {
			t.Errorf("gang of %s neither placed nor unplaced", g.Tasks[0].Key())
		}
	}

	// Unresolvable only if some member fits no host of the cluster, even
	// empty, or the gang is wider than the matching hosts at max per host.
	for _, u := range d.Unplaced {
		// impossible: some member could never run, alone on an empty host.
		impossible := false
		for _, task := range u.Gang.Tasks {
			if task.BoundHost != "" {
				h, ok := info[task.BoundHost]
				impossible = impossible || !ok || !couldEverRun(task, h)
			} else if !slices.ContainsFunc(infos, func(h hostmgr.HostInfo) bool { return couldEverRun(task, h) }) {
				impossible = true
			}
		}
		together := boundTogetherTooMuch(u.Gang, info)
		if (impossible || together) && u.Code != Unresolvable {
			t.Errorf("gang of %s can never run whole but is %s (%s)", u.Gang.Tasks[0].Key(), u.Code, u.Reason)
		}
		switch u.Code {
		case Unresolvable:
			// A gang may also be wider than its hosts allow at max per host,
			// or hold members bound to one host that cannot take them all.
			if !impossible && !together &&
				(u.Gang.Tasks[0].Placement.GetMaxInstancesPerHost() == 0 || len(u.Gang.Tasks) == 1) {
				t.Errorf("gang of %s called unresolvable (%s) but every member fits some empty host", u.Gang.Tasks[0].Key(), u.Reason)
			}
		case Unschedulable:
			// Free only shrinks during a round, so a single task that found no
			// room then finds none in what is left at the end.
			if len(u.Gang.Tasks) != 1 {
				continue
			}
			task := u.Gang.Tasks[0]
			if b := task.BoundHost; b != "" {
				if _, offered := byName[b]; !offered {
					prefix := ReasonBoundNoRoom
					if inMaint[b] {
						prefix = ReasonBoundMaintenance
					}
					if !strings.HasPrefix(u.Reason, prefix+": "+b) {
						t.Errorf("%s bound to %s (not offered, maintenance %v): %q", task.Key(), b, inMaint[b], u.Reason)
					}
				}
			}
			for _, o := range offers {
				if task.BoundHost != "" && o.Name != task.BoundHost {
					continue
				}
				free := o.Free.Sub(used[o.Name])
				n := o.JobCounts[task.JobID] + count[[2]string{o.Name, task.JobID}]
				if oracleMatches(task.Placement, o) && hostmgr.Fits(task.Resources, task.Placement.GetMaxInstancesPerHost(), free, n) {
					t.Errorf("%s unplaced (%s) but %s has room: %s free", task.Key(), u.Reason, o.Name, free)
				}
			}
		default:
			t.Errorf("unplaced without a code: %+v", u)
		}
	}

	// The verifying applier agrees with every decision.
	as := make([]hostmgr.Assignment, len(d.Placed))
	for i, p := range d.Placed {
		as[i] = hostmgr.Assignment{TaskID: p.Task.RunTaskID(), JobID: p.Task.JobID, Host: p.Host,
			Resources: p.Task.Resources, MaxPerHost: p.Task.Placement.GetMaxInstancesPerHost()}
	}
	if lease != "" {
		if err := hm.Commit(lease, as); err != nil {
			t.Fatalf("hostmgr refused the decision: %v", err)
		}
	}
}

// oracleMatches is the constraint semantics written out independently of
// the code under test.
func oracleMatches(p *pelotonv1.PlacementSpec, o hostmgr.HostOffer) bool {
	return oracleMatchesLabels(p, o.Partition, o.Labels)
}

func oracleMatchesLabels(p *pelotonv1.PlacementSpec, partition string, labels map[string]string) bool {
	if p.GetPartition() != "" && p.GetPartition() != partition {
		return false
	}
	for _, c := range p.GetConstraints() {
		v, set := labels[c.Label]
		ok := false
		switch c.Op {
		case opEq:
			ok = set && v == c.Values[0]
		case opNe:
			ok = !set || v != c.Values[0]
		case opExist:
			ok = set
		case opIn:
			ok = set && slices.Contains(c.Values, v)
		case opNotIn:
			ok = !set || !slices.Contains(c.Values, v)
		}
		if !ok {
			return false
		}
	}
	return true
}

// boundTogetherTooMuch reports whether the gang's members bound to one host
// could never all be there: more than the host holds, or more instances of
// a job than its maximum per host.
func boundTogetherTooMuch(g *resmgr.Gang, info map[string]hostmgr.HostInfo) bool {
	sum := map[string]resources.Resources{}
	n := map[[2]string]uint32{}
	for _, t := range g.Tasks {
		if t.BoundHost == "" {
			continue
		}
		sum[t.BoundHost] = sum[t.BoundHost].Add(t.Resources)
		k := [2]string{t.BoundHost, t.JobID}
		n[k]++
		if m := t.Placement.GetMaxInstancesPerHost(); (m > 0 && n[k] > m) || !sum[t.BoundHost].FitsIn(info[t.BoundHost].Capacity) {
			return true
		}
	}
	return false
}

func couldEverRun(t *resmgr.Task, h hostmgr.HostInfo) bool {
	return oracleMatchesLabels(t.Placement, h.Partition, h.Labels) && t.Resources.FitsIn(h.Capacity)
}
