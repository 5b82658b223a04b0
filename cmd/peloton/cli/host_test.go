package cli

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// maintFake is a HostService that records the maintenance calls it gets and
// answers as a server whose hosts local-0 and local-1 are up with tasks.
type maintFake struct {
	pelotonv1.UnimplementedHostServiceServer

	mu    sync.Mutex
	calls []string // "start local-0 local-1", "complete local-0"
	err   error
	// substrate, if set, is what ListHosts says of the substrate, with
	// no hosts (none was ever seen).
	substrate *pelotonv1.Substrate
}

func (f *maintFake) record(op string, hosts []string) ([]*pelotonv1.Host, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, strings.Join(append([]string{op}, hosts...), " "))
	if f.err != nil {
		return nil, f.err
	}
	var out []*pelotonv1.Host
	for _, h := range hosts {
		st, msg := pelotonv1.HostState_HOST_DRAINING, "draining: 3 tasks left"
		if op == "complete" {
			st, msg = pelotonv1.HostState_HOST_UP, ""
		}
		out = append(out, &pelotonv1.Host{Name: h, State: st, TaskCount: 3, MaintenanceMessage: msg})
	}
	return out, nil
}

// take returns the calls recorded so far and forgets them.
func (f *maintFake) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	calls := f.calls
	f.calls = nil
	return calls
}

func (f *maintFake) StartMaintenance(_ context.Context, req *pelotonv1.StartMaintenanceRequest) (*pelotonv1.StartMaintenanceResponse, error) {
	hs, err := f.record("start", req.GetHosts())
	if err != nil {
		return nil, err
	}
	return &pelotonv1.StartMaintenanceResponse{Hosts: hs}, nil
}

func (f *maintFake) CompleteMaintenance(_ context.Context, req *pelotonv1.CompleteMaintenanceRequest) (*pelotonv1.CompleteMaintenanceResponse, error) {
	hs, err := f.record("complete", req.GetHosts())
	if err != nil {
		return nil, err
	}
	return &pelotonv1.CompleteMaintenanceResponse{Hosts: hs}, nil
}

func (f *maintFake) ListHosts(context.Context, *pelotonv1.ListHostsRequest) (*pelotonv1.ListHostsResponse, error) {
	if f.substrate != nil {
		return &pelotonv1.ListHostsResponse{Substrate: f.substrate}, nil
	}
	return &pelotonv1.ListHostsResponse{Hosts: []*pelotonv1.Host{
		{Name: "local-0", State: pelotonv1.HostState_HOST_DRAINED, MaintenanceMessage: "drained: holds no tasks"},
		{Name: "local-1", State: pelotonv1.HostState_HOST_UP, TaskCount: 4},
	}}, nil
}

func startMaintFake(t *testing.T, f *maintFake) string {
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

func TestHostMaintenanceCommands(t *testing.T) {
	f := &maintFake{}
	addr := startMaintFake(t, f)
	for _, tc := range []struct {
		args []string
		call string
		out  []string // substrings of stdout
	}{
		{[]string{"host", "drain", "local-0", "local-1"}, "start local-0 local-1",
			[]string{"local-0   HOST_DRAINING", "local-1   HOST_DRAINING", "draining: 3 tasks left"}},
		{[]string{"host", "maintenance", "start", "local-0"}, "start local-0",
			[]string{"local-0   HOST_DRAINING"}},
		{[]string{"host", "maintenance", "complete", "local-0"}, "complete local-0",
			[]string{"local-0   HOST_UP"}},
		{[]string{"host", "drain", "local-1", "-o", "json"}, "start local-1",
			[]string{`"maintenanceMessage": "draining: 3 tasks left"`, `"state": "HOST_DRAINING"`}},
	} {
		r := runCLI(t, "", append([]string{"--server", addr}, tc.args...)...)
		if r.code != exitOK || r.stderr != "" {
			t.Fatalf("%v: exit %d, stderr %q", tc.args, r.code, r.stderr)
		}
		if calls := f.take(); !slices.Equal(calls, []string{tc.call}) {
			t.Errorf("%v: server got %q, want %q", tc.args, calls, tc.call)
		}
		for _, want := range tc.out {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("%v: stdout %q lacks %q", tc.args, r.stdout, want)
			}
		}
	}
}

func TestHostListShowsMaintenance(t *testing.T) {
	addr := startMaintFake(t, &maintFake{})
	r := runCLI(t, "", "--server", addr, "host", "list")
	if r.code != exitOK {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "STATE") || !strings.HasSuffix(lines[0], "MESSAGE") ||
		!strings.Contains(lines[1], "HOST_DRAINED") || !strings.HasSuffix(lines[1], "drained: holds no tasks") ||
		!strings.Contains(lines[2], "HOST_UP") {
		t.Fatalf("host list:\n%s", r.stdout)
	}
}

// TestHostListSaysSubstrateUnreachable: while the backend does not reach
// its substrate, host list says so first, with the reason the server
// gives, and -o json carries the status.
func TestHostListSaysSubstrateUnreachable(t *testing.T) {
	addr := startMaintFake(t, &maintFake{substrate: &pelotonv1.Substrate{Backend: "mesos", Name: "mesos master http://127.0.0.1:5050",
		Since: timestamppb.New(time.Now().Add(-25 * time.Second)), Reason: "HTTP 404 Not Found: <!DOCTYPE html>"}})
	r := runCLI(t, "", "--server", addr, "host", "list")
	if r.code != exitOK || r.stderr != "" {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "the mesos master http://127.0.0.1:5050 is not reachable (since 2") ||
		!strings.Contains(lines[0], "s ago): HTTP 404 Not Found: <!DOCTYPE html>; the hosts are as last seen, and new work waits") ||
		!strings.HasPrefix(lines[1], "NAME") {
		t.Fatalf("host list:\n%s", r.stdout)
	}
	r = runCLI(t, "", "--server", addr, "host", "list", "-o", "json")
	for _, want := range []string{`"hosts": []`, `"reachable": false`, `"reason": "HTTP 404 Not Found: <!DOCTYPE html>"`} {
		if r.code != exitOK || !strings.Contains(r.stdout, want) {
			t.Fatalf("host list -o json lacks %s: exit %d\n%s", want, r.code, r.stdout)
		}
	}
}

func TestHostMaintenanceErrors(t *testing.T) {
	f := &maintFake{err: status.Error(codes.FailedPrecondition,
		"hosts[0]: host local-0 is HOST_UP; completing maintenance needs HOST_DRAINING or HOST_DRAINED")}
	addr := startMaintFake(t, f)
	r := runCLI(t, "", "--server", addr, "host", "maintenance", "complete", "local-0")
	if r.code != exitError || r.stdout != "" ||
		r.stderr != "Error: FailedPrecondition: hosts[0]: host local-0 is HOST_UP; completing maintenance needs HOST_DRAINING or HOST_DRAINED\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	f.mu.Lock()
	f.err = status.Error(codes.NotFound, "hosts[1]: host nope does not exist")
	f.mu.Unlock()
	r = runCLI(t, "", "--server", addr, "host", "drain", "local-0", "nope")
	if r.code != exitError || r.stderr != "Error: NotFound: hosts[1]: host nope does not exist\n" {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
	// No host named: a usage error, and no call.
	f.take()
	for _, args := range [][]string{{"host", "drain"}, {"host", "maintenance", "start"}, {"host", "maintenance", "complete"}} {
		r = runCLI(t, "", append([]string{"--server", addr}, args...)...)
		if r.code != exitUsage || !strings.HasPrefix(r.stderr, "Error: missing HOST\n") {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	r = runCLI(t, "", "--server", addr, "host", "maintenance", "stop", "local-0")
	if r.code != exitUsage || !strings.Contains(r.stderr, `unknown command "stop"`) {
		t.Errorf("maintenance stop: exit %d, stderr %q", r.code, r.stderr)
	}
	if calls := f.take(); len(calls) != 0 {
		t.Errorf("usage errors reached the server: %q", calls)
	}
}
