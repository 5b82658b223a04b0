package placement

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	"github.com/peloton-sched/peloton/resmgr"
)

// TestEngineBoundPlacement runs an Engine against a real resmgr (on embedded
// etcd) and a real hostmgr. The engine leases two hosts per round, so the
// bound hosts are reached only because it asks for them by name; each bound
// task lands on its host or waits with the reason `task get` shows, and
// goes there once the host has room again.
func TestEngineBoundPlacement(t *testing.T) {
	_, st := storetest.StartEtcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })

	var infos []hostmgr.HostInfo
	for i := range 20 {
		infos = append(infos, hostmgr.HostInfo{Name: fmt.Sprintf("h%02d", i), Capacity: resources.Resources{MilliCPU: 4000, MemoryMB: 4096},
			Labels: map[string]string{"zone": string(rune('a' + i%2))}})
	}
	hm := hostmgr.NewManager(&fixedBackend{infos}, hostmgr.Options{LeaseTTL: time.Hour, Logger: quiet})
	if err := hm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hm.Close() })
	rm, err := resmgr.New(ctx, st, resmgr.Options{Logger: quiet, BackoffBase: time.Millisecond, BackoffMax: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}

	// h15 is full, h18 draining, h19 leased by another engine, h12
	// moving to another partition (without Recovered, neither the drain
	// nor the move finishes).
	hm.Recover("other-0-1", "h15", resources.Resources{MilliCPU: 4000, MemoryMB: 1024})
	if _, err := hm.Maintenance().StartMaintenance(ctx, []string{"h18"}); err != nil {
		t.Fatal(err)
	}
	if _, err := hm.Maintenance().MoveHost(ctx, "h12", "stateless", ""); err != nil {
		t.Fatal(err)
	}
	foreign, _ := hm.AcquireHosts(hostmgr.HostFilter{Hosts: []string{"h19"}})
	rm.SetCapacity(hm.Capacity())

	tasks := []*resmgr.Task{
		MakeTask("batch", 0).Obj(), MakeTask("batch", 1).Obj(), MakeTask("batch", 2).Obj(),
		MakeTask("s", 0).Bound("h17").Obj(),
		MakeTask("s", 1).Bound("h18").Obj(),
		MakeTask("s", 2).Bound("gone").Obj(),
		MakeTask("s", 3).Bound("h19").Obj(),
		MakeTask("s", 4).Bound("h15").Obj(),
		MakeTask("s", 5).Bound("h12").Obj(),
		MakeTask("d", 0).Where("zone", opEq, "b").Bound("h16").Obj(),
		MakeTask("d", 1).Where("zone", opEq, "b").Bound("h13").Obj(),
	}
	var gangs []*resmgr.Gang
	for _, task := range tasks {
		task.Preemptible = true
		gangs = append(gangs, resmgr.NewGang(task))
	}
	if err := rm.Enqueue(gangs...); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	placedOn := map[string]string{}
	e := NewEngine(rm, hm, EngineOptions{Logger: quiet, MaxHosts: 2})
	wg.Add(3)
	go func() { defer wg.Done(); rm.Run(ctx) }()
	go func() { defer wg.Done(); e.Run(ctx) }()
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			for _, p := range rm.GetPlacements(ctx, 64) {
				mu.Lock()
				placedOn[p.Task.Key()] = p.Host
				mu.Unlock()
			}
		}
	}()

	// view renders each task as "key: host" once placed, else "key: state
	// reason", sorted.
	view := func() string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for _, task := range tasks {
			if h, ok := placedOn[task.Key()]; ok {
				out = append(out, task.Key()+": on "+h)
				continue
			}
			st, reason, _ := rm.TaskState(task.JobID, task.Instance)
			out = append(out, fmt.Sprintf("%s: %s %s", task.Key(), st, reason))
		}
		sort.Strings(out)
		return strings.Join(out, "\n")
	}
	waitFor := func(what string, ok func(string) bool) {
		t.Helper()
		testutil.Eventually(t, 20*time.Second, what, func() error {
			if v := view(); !ok(v) {
				return fmt.Errorf("tasks now:\n%s", v)
			}
			return nil
		})
	}
	has := func(lines ...string) func(string) bool {
		return func(v string) bool {
			for _, l := range lines {
				if !strings.Contains(v+"\n", l+"\n") {
					return false
				}
			}
			return true
		}
	}

	waitFor("bound tasks placed or waiting with their reasons", has(
		"s-0: on h17",
		"s-1: READY bound host in maintenance: h18 (HOST_DRAINING)",
		"s-2: PENDING cannot be placed: bound host is gone: gone; tried again when hosts change",
		"s-3: READY waiting for room on bound host: h19 (another placement engine holds it)",
		"s-4: READY waiting for room on bound host: h15 (needs cpu=1 memoryMb=128; has cpu=0 memoryMb=3072 free)",
		"s-5: READY bound host in maintenance: h12 (moving to partition stateless)",
		"d-0: PENDING cannot be placed: bound host does not match the task's placement: h16 fails zone EQUALS [b]; tried again when hosts change",
		"d-1: on h13",
	))
	for _, task := range tasks[:3] {
		waitFor("batch tasks placed", func(v string) bool { return strings.Contains(v, task.Key()+": on h") })
	}
	// hostmgr holds what placement committed.
	if !hm.HoldsExactly(tasks[3].RunTaskID(), tasks[3].Resources) {
		t.Fatalf("hostmgr holds nothing for %s", tasks[3].RunTaskID())
	}

	// Room comes back on each host: the waiting tasks go there.
	hm.ReleaseTask("other-0-1")
	hm.ReleaseLease(foreign)
	if _, err := hm.Maintenance().CompleteMaintenance(ctx, []string{"h18"}); err != nil {
		t.Fatal(err)
	}
	waitFor("waiting bound tasks placed on their hosts", has("s-1: on h18", "s-3: on h19", "s-4: on h15"))
}
