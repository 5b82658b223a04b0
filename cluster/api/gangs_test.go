package api_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/internal/testing/apitest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestGetGangOnSim: on the sim backend, GetGang lists a gang's members
// where they run, and each member's run was launched with the gang
// variables naming those same members; bad requests are refused with the
// code and the field.
func TestGetGangOnSim(t *testing.T) {
	st := apitest.Start(t, apitest.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Hosts: 3})
	conn, err := grpc.NewClient(st.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	jobs := pelotonv1.NewJobServiceClient(conn)
	ctx := context.Background()
	res := &pelotonv1.Resources{Cpu: 0.5, MemoryMb: 64}
	created, err := jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: &pelotonv1.JobSpec{Name: "g", Type: pelotonv1.JobType_BATCH,
		Pool: "/default", InstanceCount: 4, Sla: &pelotonv1.SlaSpec{MinimumRunningInstances: 3},
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "300"}, Resources: res,
			Ports: []*pelotonv1.PortSpec{{Name: "rpc", Value: 7070}}}}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.JobId
	var g *pelotonv1.Gang
	testutil.Eventually(t, 30*time.Second, "every member running", func() error {
		if g, err = jobs.GetGang(ctx, &pelotonv1.GetGangRequest{JobId: id}); err != nil {
			return err
		}
		for _, m := range g.Members {
			if m.State != pelotonv1.TaskState_RUNNING || m.Host == "" {
				return fmt.Errorf("member %v", m)
			}
		}
		return nil
	})
	if g.Id != id+"/gang-0" || g.Index != 0 || g.Size != 3 || len(g.Members) != 3 {
		t.Fatalf("gang %v", g)
	}
	var addrs []string
	for i, m := range g.Members {
		if m.Instance != uint32(i) || m.Rank != uint32(i) || m.Port != 7070 || m.RunId != 1 {
			t.Errorf("member %d: %v", i, m)
		}
		addrs = append(addrs, fmt.Sprintf("%s:%d", m.Host, m.Port))
	}
	for _, m := range g.Members {
		env, err := st.Sim.Env(fmt.Sprintf("%s-%d-%d", id, m.Instance, m.RunId))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"PELOTON_GANG_ID": g.Id, "PELOTON_GANG_SIZE": "3", "PELOTON_GANG_RANK": fmt.Sprint(m.Rank),
			"PELOTON_GANG_MEMBERS": strings.Join(addrs, ",")}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("instance %d launched with %s=%q, want %q", m.Instance, k, env[k], v)
			}
		}
	}

	plain, err := jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: &pelotonv1.JobSpec{Name: "p", Type: pelotonv1.JobType_BATCH,
		Pool: "/default", InstanceCount: 1, DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "300"}, Resources: res}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		req  *pelotonv1.GetGangRequest
		code codes.Code
		msg  string
	}{
		{&pelotonv1.GetGangRequest{JobId: id, Gang: 1}, codes.NotFound, "gang 1: job " + id + " has gangs 0..0"},
		{&pelotonv1.GetGangRequest{JobId: plain.JobId}, codes.FailedPrecondition, "job " + plain.JobId + " has no gangs"},
		{&pelotonv1.GetGangRequest{JobId: "nosuch"}, codes.NotFound, "nosuch"},
		{&pelotonv1.GetGangRequest{}, codes.InvalidArgument, "jobId"},
	} {
		_, err := jobs.GetGang(ctx, c.req)
		if s := status.Convert(err); s.Code() != c.code || !strings.Contains(s.Message(), c.msg) {
			t.Errorf("GetGang(%v): %v, want %s with %q", c.req, err, c.code, c.msg)
		}
	}
}
