package federation

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// observation is what one health check of a cluster saw.
type observation struct {
	// answered: the cluster's API answered (possibly with an error).
	answered bool
	// err is the error it answered with, or why it did not answer.
	err     string
	latency time.Duration
	// pools is the cluster's pool tree when the check succeeded.
	pools []*pelotonv1.Pool
	// largest is the cluster's largest host, when it reported one
	// (knowsLargest).
	largest      resources.Resources
	knowsLargest bool
}

// probe checks a cluster once: its pool tree, which is both the proof that
// the whole stack answers (the API, resmgr) and what the pool reconciler
// and the dispatcher need, in one call.
func (f *Federation) probe(ctx context.Context, cli *client.Client) observation {
	ctx, cancel := context.WithTimeout(ctx, f.opts.CallTimeout)
	defer cancel()
	start := time.Now()
	resp, err := cli.Pools.ListPools(ctx, &pelotonv1.ListPoolsRequest{})
	obs := observation{latency: time.Since(start)}
	if err == nil {
		obs.answered, obs.pools = true, resp.Pools
		if resp.LargestHost != nil {
			obs.largest, _ = resources.FromProto(resp.LargestHost, "")
			obs.knowsLargest = true
		}
		return obs
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		obs.err = status.Convert(err).Message()
	default:
		// It answered, with an error: up, but not well.
		obs.answered, obs.err = true, fmt.Sprintf("%s: %s", status.Code(err), status.Convert(err).Message())
	}
	return obs
}

// healthInput is what nextHealth decides from.
type healthInput struct {
	current  pelotonv1.ClusterState
	obs      observation
	lastSeen time.Time // the last check answered without error (zero: none since start)
	since    time.Time // when the current health began, or this process started watching
	now      time.Time
}

// nextHealth is a cluster's health after a check, and why. It is pure.
//
//   - answered promptly without error: READY;
//   - answered slowly (over slowAfter) or with an error: DEGRADED;
//   - did not answer: DEGRADED at first (one lost check is not an outage),
//     UNREACHABLE once nothing was answered for unreachableAfter. A cluster
//     already UNREACHABLE stays so until it answers.
func nextHealth(in healthInput, slowAfter, unreachableAfter time.Duration) (pelotonv1.ClusterState, string) {
	o := in.obs
	switch {
	case o.answered && o.err == "" && o.latency <= slowAfter:
		return pelotonv1.ClusterState_CLUSTER_READY, ""
	case o.answered && o.err == "":
		return pelotonv1.ClusterState_CLUSTER_DEGRADED, fmt.Sprintf("answered in %s, slower than %s", o.latency.Round(time.Millisecond), slowAfter)
	case o.answered:
		return pelotonv1.ClusterState_CLUSTER_DEGRADED, "answered with an error: " + o.err
	}
	if in.current == pelotonv1.ClusterState_CLUSTER_UNREACHABLE {
		return in.current, "no answer: " + o.err
	}
	last := in.lastSeen
	if last.IsZero() || last.Before(in.since) {
		last = in.since
	}
	if silent := in.now.Sub(last); silent >= unreachableAfter {
		return pelotonv1.ClusterState_CLUSTER_UNREACHABLE, fmt.Sprintf("no answer for %s: %s", silent.Round(time.Second), o.err)
	}
	return pelotonv1.ClusterState_CLUSTER_DEGRADED, "no answer: " + o.err
}

// observe records what an answered check saw. Caller holds mu.
func (m *member) observe(o observation, now time.Time) {
	m.latency = o.latency
	m.message = o.err
	if o.err != "" {
		return
	}
	m.lastSeen = now
	m.checked = true
	m.pools = make(map[string]*pelotonv1.Pool, len(o.pools))
	var capacity, alloc resources.Resources
	for _, p := range o.pools {
		m.pools[p.Path] = p
		if p.Path == "/" && p.Status != nil {
			// The root's entitlement is the capacity of the hosts in
			// service; its allocation is what every pool uses.
			capacity, _ = resources.FromProto(p.Status.Entitlement, "")
			alloc, _ = resources.FromProto(p.Status.Allocation, "")
		}
	}
	m.capacity, m.alloc = capacity, alloc
	m.largest, m.knowsLargest = o.largest, o.knowsLargest
	m.assumed = nil
}
