package cluster_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// api is the gRPC services of one replica.
type api struct {
	jobs  pelotonv1.JobServiceClient
	pools pelotonv1.PoolServiceClient
	hosts pelotonv1.HostServiceClient
}

func dial(t *testing.T, addr string) api {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return api{pelotonv1.NewJobServiceClient(conn), pelotonv1.NewPoolServiceClient(conn), pelotonv1.NewHostServiceClient(conn)}
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func hostStates(t *testing.T, c api) map[string]pelotonv1.HostState {
	t.Helper()
	resp, err := c.hosts.ListHosts(callCtx(t), &pelotonv1.ListHostsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]pelotonv1.HostState{}
	for _, h := range resp.GetHosts() {
		out[h.GetName()] = h.GetState()
	}
	return out
}

// TestTwoClustersOnOneEtcd runs two clusters, east and west, in this
// process on one etcd, each leader-elected, and shows that neither sees
// the other's leader, pools, jobs or host state, though they use the same
// pool path and host names.
func TestTwoClustersOnOneEtcd(t *testing.T) {
	e, s := storetest.StartEtcd(t)
	east := startReplicaOf(t, "east", "east-1", 2, e.Endpoints())
	west := startReplicaOf(t, "west", "west-1", 3, e.Endpoints())
	// Separate elections: both lead at once.
	waitLeader(t, 30*time.Second, nil, east)
	waitLeader(t, 30*time.Second, nil, west)
	if !east.leading.Load() || !west.leading.Load() {
		t.Fatal("east and west do not both lead")
	}
	// A second replica of east follows east's leader, never west's: what
	// it forwards to has east's 2 hosts, not west's 3.
	east2 := startReplicaOf(t, "east", "east-2", 2, e.Endpoints())
	testutil.Eventually(t, 10*time.Second, "east-2 forwards gRPC", func() error { return listHosts(east2.grpc, 2) })
	if east2.leads.Load() != 0 {
		t.Fatal("a second replica of east led while east-1 did")
	}
	ctx := callCtx(t)
	for name, want := range map[string]int64{"east": 2, "west": 1} {
		key := cluster.ClusterPrefix(name) + cluster.LeaderKey + "/"
		resp, err := s.Client().Get(ctx, key, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || resp.Count != want {
			t.Fatalf("candidates under %s: %v, %v; want %d", key, resp, err, want)
		}
	}

	ce, cw := dial(t, east.grpc), dial(t, west.grpc)
	// The same pool path in both, with different limits.
	limits := map[*api]float64{&ce: 3, &cw: 7}
	for c, cpu := range limits {
		if _, err := c.pools.CreatePool(callCtx(t), &pelotonv1.CreatePoolRequest{Path: "/team",
			Spec: &pelotonv1.PoolSpec{Limit: &pelotonv1.Resources{Cpu: cpu, MemoryMb: 4096}}}); err != nil {
			t.Fatalf("CreatePool /team: %v", err)
		}
	}
	for c, cpu := range limits {
		p, err := c.pools.GetPool(callCtx(t), &pelotonv1.GetPoolRequest{Path: "/team"})
		if err != nil || p.GetPool().GetSpec().GetLimit().GetCpu() != cpu {
			t.Fatalf("GetPool /team = %v, %v; want its own cpu limit %g", p, err, cpu)
		}
	}

	// A job in each; each runs to the end in its own cluster.
	ids := map[*api]string{}
	for c, name := range map[*api]string{&ce: "in-east", &cw: "in-west"} {
		resp, err := c.jobs.CreateJob(callCtx(t), &pelotonv1.CreateJobRequest{Spec: &pelotonv1.JobSpec{
			Name: name, Type: pelotonv1.JobType_BATCH, Pool: "/team", InstanceCount: 2,
			DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "1"}, Resources: &pelotonv1.Resources{Cpu: 0.5, MemoryMb: 16}}}})
		if err != nil {
			t.Fatalf("CreateJob %s: %v", name, err)
		}
		ids[c] = resp.GetJobId()
	}
	for c, id := range ids {
		testutil.Eventually(t, 30*time.Second, "the job succeeds", func() error {
			j, err := c.jobs.GetJob(callCtx(t), &pelotonv1.GetJobRequest{JobId: id})
			if err != nil {
				return err
			}
			if st := j.GetJob().GetStatus().GetState(); st != pelotonv1.JobState_JOB_SUCCEEDED {
				return fmt.Errorf("job %s (%s) is %s", id, j.GetJob().GetSpec().GetName(), st)
			}
			return nil
		})
	}
	for c, other := range map[*api]*api{&ce: &cw, &cw: &ce} {
		list, err := c.jobs.ListJobs(callCtx(t), &pelotonv1.ListJobsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.GetJobs()) != 1 || list.GetJobs()[0].GetId() != ids[c] {
			t.Fatalf("ListJobs = %v; want only the cluster's own job %s", list.GetJobs(), ids[c])
		}
		if _, err := c.jobs.GetJob(callCtx(t), &pelotonv1.GetJobRequest{JobId: ids[other]}); status.Code(err) != codes.NotFound {
			t.Fatalf("GetJob of the other cluster's job: %v, want NotFound", err)
		}
	}

	// Host state is per cluster too: draining east's first host leaves
	// west's host of the same name in service.
	eastHosts := hostStates(t, ce)
	var names []string
	for h := range eastHosts {
		names = append(names, h)
	}
	sort.Strings(names)
	host := names[0]
	if _, ok := hostStates(t, cw)[host]; !ok {
		t.Fatalf("west has no host %s; the test needs a name both have", host)
	}
	if _, err := ce.hosts.StartMaintenance(callCtx(t), &pelotonv1.StartMaintenanceRequest{Hosts: []string{host}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the host drained on east", func() error {
		if st := hostStates(t, ce)[host]; st != pelotonv1.HostState_HOST_DRAINED {
			return fmt.Errorf("east's %s is %s", host, st)
		}
		return nil
	})
	if st := hostStates(t, cw)[host]; st != pelotonv1.HostState_HOST_UP {
		t.Fatalf("west's %s is %s after east drained its own", host, st)
	}

	// Everything either wrote lives under its own prefix.
	resp, err := s.Client().Get(callCtx(t), "/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	perCluster := map[string]int{}
	for _, kv := range resp.Kvs {
		k := string(kv.Key)
		switch {
		case strings.HasPrefix(k, cluster.ClusterPrefix("east")):
			perCluster["east"]++
		case strings.HasPrefix(k, cluster.ClusterPrefix("west")):
			perCluster["west"]++
		default:
			t.Errorf("key %s is under neither cluster's prefix", k)
		}
	}
	if perCluster["east"] == 0 || perCluster["west"] == 0 {
		t.Errorf("keys per cluster: %v", perCluster)
	}
}
