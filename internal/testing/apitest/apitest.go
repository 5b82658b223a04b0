// Package apitest starts a cluster stack in a test's process: embedded
// etcd, the sim backend, the real managers and the API served over gRPC on
// a loopback port, optionally reading through an archive of finished jobs.
// It is for tests of what sits on the API (its handlers, the CLI); `peloton
// up` wires the same parts in cluster.Run.
package apitest

import (
	"context"
	"log/slog"
	"net"
	"testing"

	"github.com/peloton-sched/peloton/cluster/api"
	"github.com/peloton-sched/peloton/history"
	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/hostmgr/sim"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/jobmgr"
	"github.com/peloton-sched/peloton/placement"
	"github.com/peloton-sched/peloton/resmgr"
)

// Options configure a Stack.
type Options struct {
	// Logger is the stack's (required).
	Logger *slog.Logger
	// History, if set, is the archive the API reads through, under the
	// name Cluster.
	History history.Store
	Cluster string
	// Hosts is the number of simulated hosts (default 2).
	Hosts int
}

// Stack is a running stack; everything stops when the test ends.
type Stack struct {
	JM     *jobmgr.Manager
	Server *api.Server
	// Addr is the gRPC address of the API.
	Addr string
	// Store is the stack's store, to look at what it holds.
	Store store.Store
	// Sim is the stack's backend, to look at what its runs were given.
	Sim *sim.Backend
}

// Start starts a stack for t.
func Start(t testing.TB, o Options) *Stack {
	t.Helper()
	if o.Hosts == 0 {
		o.Hosts = 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	log := o.Logger
	_, st := storetest.StartEtcd(t)
	batch := store.NewBatcher(st, store.BatcherOptions{})
	t.Cleanup(func() { _ = batch.Close() })
	rm, err := resmgr.New(ctx, st, resmgr.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.New(sim.Config{Hosts: o.Hosts, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	hm := hostmgr.NewManager(b, hostmgr.Options{Logger: log, Store: st, OnCapacity: rm.SetPartitionCapacity})
	if err := hm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hm.Close() })
	rm.SetPartitionCapacity(hm.CapacityByPartition())
	jm := jobmgr.New(st, batch, rm, hm, jobmgr.Options{Logger: log})
	if err := jm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	go rm.Run(ctx)
	go placement.NewEngine(rm, hm, placement.EngineOptions{Logger: log}).Run(ctx)

	srv := api.NewServer(jm, rm, api.Hosts{Cache: hm, Maintenance: hm.Maintenance(), Usage: hm.Usage()}, log)
	if o.History != nil {
		srv.SetHistory(o.History, o.Cluster)
	}
	g := srv.GRPCServer()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return &Stack{JM: jm, Server: srv, Addr: lis.Addr().String(), Store: st, Sim: b}
}
