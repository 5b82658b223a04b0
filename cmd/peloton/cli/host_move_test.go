package cli

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// moveFake is a HostService whose host local-0 moves from batch to the
// partition asked for in steps: each ListHosts after MoveHost shows the next
// step of the move, the last one settled.
type moveFake struct {
	pelotonv1.UnimplementedHostServiceServer

	mu     sync.Mutex
	moves  []string // "local-0 stateless"
	steps  []*pelotonv1.Host
	listed int
}

func (f *moveFake) MoveHost(_ context.Context, req *pelotonv1.MoveHostRequest) (*pelotonv1.MoveHostResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.moves = append(f.moves, req.GetHost()+" "+req.GetPartition())
	if req.GetDrainSeconds() > 0 {
		f.moves[len(f.moves)-1] += fmt.Sprintf(" drain %ds finish %v", req.GetDrainSeconds(), req.GetFinishTaskIds())
	}
	switch {
	case req.GetHost() != "local-0":
		return nil, status.Errorf(codes.NotFound, "host: host %s does not exist", req.GetHost())
	case req.GetPartition() == "":
		return nil, status.Error(codes.InvalidArgument, "partition: required")
	}
	to := req.GetPartition()
	moving := func(msg string, st pelotonv1.PartitionMoveState) *pelotonv1.Host {
		return &pelotonv1.Host{Name: "local-0", State: pelotonv1.HostState_HOST_UP, Partition: "batch",
			PartitionState: st, TargetPartition: to, PartitionMessage: msg, TaskCount: 2}
	}
	f.steps = []*pelotonv1.Host{
		moving("moving to partition "+to+": draining 2 tasks", pelotonv1.PartitionMoveState_PARTITION_MOVING),
		moving("moving to partition "+to+": draining 1 task; instance 3 of job j waits for its SLA", pelotonv1.PartitionMoveState_PARTITION_MOVING),
		moving("moving to partition "+to+": draining 1 task; instance 3 of job j waits for its SLA", pelotonv1.PartitionMoveState_PARTITION_MOVING),
		moving("moving to partition "+to+": drained; applying the partition", pelotonv1.PartitionMoveState_PARTITION_MOVE_DRAINED),
		{Name: "local-0", State: pelotonv1.HostState_HOST_UP, Partition: to, PartitionState: pelotonv1.PartitionMoveState_PARTITION_SETTLED},
	}
	f.listed = 0
	return &pelotonv1.MoveHostResponse{Host: f.steps[0]}, nil
}

func (f *moveFake) ListHosts(context.Context, *pelotonv1.ListHostsRequest) (*pelotonv1.ListHostsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := min(f.listed, len(f.steps)-1)
	f.listed++
	return &pelotonv1.ListHostsResponse{Hosts: []*pelotonv1.Host{f.steps[i],
		{Name: "local-1", State: pelotonv1.HostState_HOST_UP, Partition: "batch", PartitionState: pelotonv1.PartitionMoveState_PARTITION_SETTLED}}}, nil
}

func startMoveFake(t *testing.T, f *moveFake) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	pelotonv1.RegisterHostServiceServer(s, f)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func TestHostMoveShowsProgressUntilDone(t *testing.T) {
	f := &moveFake{}
	addr := startMoveFake(t, f)
	r := runCLI(t, "", "--server", addr, "host", "move", "local-0", "--partition", "stateless")
	if r.code != exitOK || r.stderr != "" {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	// Each change once, in order, ending with the host settled.
	want := "host local-0 moving to partition stateless: draining 2 tasks\n" +
		"host local-0 moving to partition stateless: draining 1 task; instance 3 of job j waits for its SLA\n" +
		"host local-0 moving to partition stateless: drained; applying the partition\n" +
		"host local-0 is in partition stateless\n"
	if r.stdout != want {
		t.Fatalf("stdout:\n%s\nwant:\n%s", r.stdout, want)
	}
}

func TestHostMoveNoWaitAndList(t *testing.T) {
	f := &moveFake{}
	addr := startMoveFake(t, f)
	r := runCLI(t, "", "--server", addr, "host", "move", "local-0", "--partition", "stateless", "--no-wait")
	if r.code != exitOK || !strings.Contains(r.stdout, "batch->stateless") ||
		!strings.Contains(r.stdout, "moving to partition stateless: draining 2 tasks") {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "", "--server", addr, "host", "list")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != exitOK || len(lines) != 3 || !strings.Contains(lines[0], "PARTITION") ||
		!strings.Contains(lines[1], "batch->stateless") || !strings.Contains(lines[2], "batch") {
		t.Fatalf("host list:\n%s", r.stdout)
	}
	r = runCLI(t, "", "--server", addr, "host", "move", "local-0", "--partition", "stateless", "--no-wait", "-o", "json")
	if r.code != exitOK || !strings.Contains(r.stdout, `"partitionState": "PARTITION_MOVING"`) || !strings.Contains(r.stdout, `"targetPartition": "stateless"`) {
		t.Fatalf("json: exit %d, stdout %q", r.code, r.stdout)
	}
}

func TestHostMoveErrors(t *testing.T) {
	f := &moveFake{}
	addr := startMoveFake(t, f)
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"host", "move", "nope", "--partition", "x"}, exitError, "Error: NotFound: host: host nope does not exist\n"},
		{[]string{"host", "move", "local-0"}, exitError, "Error: InvalidArgument: partition: required\n"},
		{[]string{"host", "move", "--partition", "x"}, exitUsage, "Error: missing HOST\n"},
	} {
		r := runCLI(t, "", append([]string{"--server", addr}, tc.args...)...)
		if r.code != tc.code || !strings.HasPrefix(r.stderr, tc.stderr) {
			t.Errorf("%v: exit %d, stderr %q, want %d %q", tc.args, r.code, r.stderr, tc.code, tc.stderr)
		}
	}
}

// TestHostMoveDrainWindow: --drain-seconds and --finish reach the request.
func TestHostMoveDrainWindow(t *testing.T) {
	f := &moveFake{}
	addr := startMoveFake(t, f)
	runCLI(t, "", "--server", addr, "host", "move", "local-0", "--partition", "stateless", "--no-wait",
		"--drain-seconds", "120", "--finish", "j-1-1,j-2-1")
	f.mu.Lock()
	defer f.mu.Unlock()
	if want := "local-0 stateless drain 120s finish [j-1-1 j-2-1]"; len(f.moves) != 1 || f.moves[0] != want {
		t.Errorf("moves = %q, want [%q]", f.moves, want)
	}
}
