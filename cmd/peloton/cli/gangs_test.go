package cli

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/hostmgr/mesos/mesostest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// freePort is a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestJobGangs runs a gang on the local backend (real processes): each
// member prints the gang variables it was started with, and they say what
// `job gangs` (gRPC), -o json and GET /v1/jobs/{id}/gangs/{gang} say: the
// gang, the member's rank, and every member's host:port in rank order. An
// instance outside the gang gets none; a gang past the job's, a job
// without gangs and an unknown job are refused with the field named.
func TestJobGangs(t *testing.T) {
	s := startStack(t)
	p0, p1 := freePort(t), freePort(t)
	spec := writeSpec(t, "gang.yaml", fmt.Sprintf(`name: peers
type: BATCH
pool: /default
instanceCount: 3
sla: {minimumRunningInstances: 2}
defaultSpec:
  command: ["sh", "-c", "env | grep ^PELOTON_GANG_ | sort; echo done; sleep 300"]
  resources: {cpu: 0.1, memoryMb: 16}
  killGracePeriodSeconds: 1
instanceSpecs:
  "0": {ports: [{name: rpc, value: %d}]}
  "1": {ports: [{name: rpc, value: %d}]}
`, p0, p1))
	id := strings.TrimSpace(s.ok("job", "create", "-f", spec))
	ts := s.waitRunning(id, 3)
	host := func(inst uint32) string {
		for _, tk := range ts {
			if tk.GetInstanceId() == inst {
				return tk.GetStatus().GetHost()
			}
		}
		t.Fatalf("no instance %d in %v", inst, ts)
		return ""
	}
	members := fmt.Sprintf("%s:%d,%s:%d", host(0), p0, host(1), p1)

	for inst, want := range []string{
		fmt.Sprintf("PELOTON_GANG_ID=%s/gang-0\nPELOTON_GANG_MEMBERS=%s\nPELOTON_GANG_RANK=0\nPELOTON_GANG_SIZE=2\ndone\n", id, members),
		fmt.Sprintf("PELOTON_GANG_ID=%s/gang-0\nPELOTON_GANG_MEMBERS=%s\nPELOTON_GANG_RANK=1\nPELOTON_GANG_SIZE=2\ndone\n", id, members),
		"done\n",
	} {
		s.waitFor(30*time.Second, fmt.Sprintf("instance %d's output", inst), func() (bool, string) {
			out := s.ok("task", "logs", id, fmt.Sprint(inst))
			return out == want, fmt.Sprintf("%q, want %q", out, want)
		})
	}

	table := fmt.Sprintf("GANG   RANK   INSTANCE   STATE     HOST:PORT\n0      0      0          RUNNING   %s:%d\n0      1      1          RUNNING   %s:%d\n",
		host(0), p0, host(1), p1)
	if out := s.ok("job", "gangs", id); out != table {
		t.Errorf("job gangs:\n%s\nwant:\n%s", out, table)
	}
	if out := s.ok("job", "gangs", id, "0"); out != table {
		t.Errorf("job gangs 0:\n%s\nwant:\n%s", out, table)
	}
	var g pelotonv1.Gang
	s.get(&g, "job", "gangs", id, "0")
	if g.GetId() != id+"/gang-0" || g.GetSize() != 2 || len(g.GetMembers()) != 2 ||
		g.GetMembers()[1].GetHost() != host(1) || g.GetMembers()[1].GetPort() != uint32(p1) || g.GetMembers()[1].GetRunId() != 1 {
		t.Errorf("job gangs -o json: %v", &g)
	}
	if out := s.ok("job", "gangs", id, "-o", "jsonpath={.gangs[0].members[1].host}"); out != host(1) {
		t.Errorf("job gangs -o jsonpath: %q, want %q", out, host(1))
	}

	resp, err := http.Get("http://" + s.http + "/v1/jobs/" + id + "/gangs/0")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var rest pelotonv1.Gang
	if err := protojson.Unmarshal(body, &rest); resp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("GET /v1/jobs/%s/gangs/0: %d %s (%v)", id, resp.StatusCode, body, err)
	}
	if !proto.Equal(&rest, &g) {
		t.Errorf("REST gang %v, CLI gang %v", &rest, &g)
	}

	s.fails(exitError, fmt.Sprintf("Error: NotFound: gang 1: job %s has gangs 0..0", id), "job", "gangs", id, "1")
	s.fails(exitUsage, `Error: invalid GANG "x": a gang index, 0 or more`, "job", "gangs", id, "x")
	s.fails(exitError, "Error: NotFound: ...", "job", "gangs", "nosuch")
	alone := writeSpec(t, "alone.yaml", serviceYAML("300", 1))
	other := strings.TrimSpace(s.ok("job", "create", "-f", alone))
	s.fails(exitError, "Error: FailedPrecondition: job "+other+" has no gangs: its spec sets neither gang.size nor sla.minimumRunningInstances above 1",
		"job", "gangs", other)
}

// TestJobGangsOnMesos: on the mesos backend (against mesostest, the
// in-process master speaking the Mesos v1 scheduler protocol), each member
// of a gang is launched with the gang variables in its TaskInfo's command
// environment, listing the members `job gangs` lists.
func TestJobGangsOnMesos(t *testing.T) {
	agents := make([]mesostest.AgentSpec, 2)
	for i := range agents {
		agents[i] = mesostest.AgentSpec{CPUs: 2, MemMB: 2048}
	}
	master, err := mesostest.New(mesostest.Config{Agents: agents, Heartbeat: 500 * time.Millisecond, Redeliver: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(master.Close)
	s := startStack(t, func(c *cluster.Config) {
		c.Backend, c.Mesos = "mesos", cluster.MesosConfig{Master: master.URL(), Role: "peloton"}
	})
	spec := writeSpec(t, "gang.yaml", `name: peers
type: BATCH
pool: /default
instanceCount: 3
sla: {minimumRunningInstances: 3}
defaultSpec:
  command: ["sleep", "300"]
  resources: {cpu: 0.5, memoryMb: 64}
instanceSpecs:
  "0": {ports: [{name: rpc, value: 31500}]}
  "1": {ports: [{name: rpc, value: 31501}]}
  "2": {ports: [{name: rpc, value: 31502}]}
`)
	id := strings.TrimSpace(s.ok("job", "create", "-f", spec))
	ts := s.waitRunning(id, 3)
	var g pelotonv1.Gang
	s.get(&g, "job", "gangs", id, "0")
	var addrs []string
	for _, m := range g.GetMembers() {
		addrs = append(addrs, fmt.Sprintf("%s:%d", m.GetHost(), m.GetPort()))
	}
	for _, tk := range ts {
		env, ok := master.Env(tk.GetTaskId())
		if !ok {
			t.Fatalf("the master does not know %s", tk.GetTaskId())
		}
		want := map[string]string{"PELOTON_GANG_ID": id + "/gang-0", "PELOTON_GANG_SIZE": "3",
			"PELOTON_GANG_RANK": fmt.Sprint(tk.GetInstanceId()), "PELOTON_GANG_MEMBERS": strings.Join(addrs, ",")}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("%s: %s=%q in its TaskInfo, want %q (env %v)", tk.GetTaskId(), k, env[k], v, env)
			}
		}
		if h := g.GetMembers()[tk.GetInstanceId()].GetHost(); h != tk.GetStatus().GetHost() || h == "" {
			t.Errorf("instance %d runs on %q, the gang says %q", tk.GetInstanceId(), tk.GetStatus().GetHost(), h)
		}
	}
}
