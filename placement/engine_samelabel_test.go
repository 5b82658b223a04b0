package placement

import (
	"context"
	"fmt"
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

// TestEngineSameLabel runs an Engine against a real resmgr (on embedded
// etcd) and a real hostmgr whose hosts are labelled by rack: a gang that
// no rack can hold whole waits with a reason that says what each rack
// could take, while a gang one rack can hold is placed on that rack, each
// placement naming where every member goes.
func TestEngineSameLabel(t *testing.T) {
	_, st := storetest.StartEtcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })

	var infos []hostmgr.HostInfo
	for i, rack := range []string{"r1", "r1", "r2", "r2", "r2", ""} {
		labels := map[string]string{}
		if rack != "" {
			labels["rack"] = rack
		}
		infos = append(infos, hostmgr.HostInfo{Name: fmt.Sprintf("h%d", i), Capacity: resources.Resources{MilliCPU: 4000, MemoryMB: 4096}, Labels: labels})
	}
	rackOf := map[string]string{}
	for _, h := range infos {
		rackOf[h.Name] = h.Labels["rack"]
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
	rm.SetCapacity(hm.Capacity())

	var mu sync.Mutex
	placed := map[string]resmgr.Placement{}
	e := NewEngine(rm, hm, EngineOptions{Logger: quiet})
	wg.Add(3)
	go func() { defer wg.Done(); rm.Run(ctx) }()
	go func() { defer wg.Done(); e.Run(ctx) }()
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			for _, p := range rm.GetPlacements(ctx, 64) {
				mu.Lock()
				placed[p.Task.Key()] = p
				mu.Unlock()
			}
		}
	}()
	enqueue := func(g *resmgr.Gang) {
		for _, task := range g.Tasks {
			task.Preemptible = true
		}
		if err := rm.Enqueue(g); err != nil {
			t.Fatal(err)
		}
	}

	wide := sameLabelGang("wide", 4, 3, "rack", false)
	enqueue(wide)
	testutil.Eventually(t, 20*time.Second, "the gang of 4 waiting with why", func() error {
		st, reason, _ := rm.TaskState("wide", 0)
		if want := "no rack value has room for the gang of 4 (rack=r1: 2 fit, rack=r2: 3 fit)"; !strings.Contains(reason, want) {
			return fmt.Errorf("wide-0 is %s %q, want the reason %q", st, reason, want)
		}
		return nil
	})

	train := sameLabelGang("train", 3, 3, "rack", false)
	enqueue(train)
	testutil.Eventually(t, 20*time.Second, "the gang of 3 placed on rack r2", func() error {
		mu.Lock()
		defer mu.Unlock()
		peers := map[uint32]string{}
		for _, task := range train.Tasks {
			p, ok := placed[task.Key()]
			if !ok {
				return fmt.Errorf("%s not placed yet", task.Key())
			}
			if rackOf[p.Host] != "r2" {
				return fmt.Errorf("%s on %s, rack %q; want r2", task.Key(), p.Host, rackOf[p.Host])
			}
			peers[task.Instance] = p.Host
		}
		for _, task := range train.Tasks {
			if got := placed[task.Key()].Peers; fmt.Sprint(got) != fmt.Sprint(peers) {
				return fmt.Errorf("%s placed with peers %v, want %v", task.Key(), got, peers)
			}
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	for _, task := range wide.Tasks {
		if p, ok := placed[task.Key()]; ok {
			t.Errorf("%s placed on %s; no rack has room for its gang", task.Key(), p.Host)
		}
	}
}
