package cli

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/cluster"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestNewcomerFirstService: on a fresh `peloton up` a non-preemptible
// SERVICE in /default runs, because /default reserves what the hosts have;
// and when a pool reserves too little, `job get` says which pool, which
// resource and how much is missing, in cores.
func TestNewcomerFirstService(t *testing.T) {
	const specText = `
name: first
type: SERVICE
pool: /default
instanceCount: 1
sla: {preemptible: false}
defaultSpec:
  command: ["/bin/sh", "-c", "exec sleep 600"]
  resources: {cpu: 1, memoryMb: 64}
`
	s := startStack(t, func(c *cluster.Config) { c.DefaultReservesHosts = true })
	var def pelotonv1.Pool
	s.get(&def, "pool", "get", "/default")
	if r := def.GetSpec().GetReservation(); r.GetCpu() != 4 || r.GetMemoryMb() != 4096 {
		t.Errorf("/default of a fresh stack should reserve the two hosts (4 cpu, 4096 MiB): %v", r)
	}
	id := strings.TrimSpace(s.ok("job", "create", "-f", writeSpec(t, "svc.yaml", specText)))
	s.waitRunning(id, 1)

	// A pool that reserves less than the job needs: job get says why it waits.
	s.ok("pool", "create", "/small", "-f", writeSpec(t, "small.yaml", "reservation: {cpu: 0.5, memoryMb: 512}\n"))
	big := strings.NewReplacer("first", "big", "/default", "/small", "cpu: 1,", "cpu: 1.5,").Replace(specText)
	bid := strings.TrimSpace(s.ok("job", "create", "-f", writeSpec(t, "big.yaml", big)))
	want := "message: instance 0 waits: waiting for admission: non-preemptible work runs only inside the reservation of pool /small, " +
		"which lacks 1 cpu (reserves 0.5, 0 in use by non-preemptible tasks, this task needs 1.5)"
	s.waitFor(30*time.Second, "job get to say why the job waits", func() (bool, string) {
		out := s.ok("job", "get", bid)
		return strings.Contains(out, want), out
	})
	var j pelotonv1.Job
	s.get(&j, "job", "get", bid)
	if !strings.Contains(j.GetStatus().GetMessage(), "lacks 1 cpu") {
		t.Errorf("job get -o json message: %q", j.GetStatus().GetMessage())
	}

	// The README's first pool: without --parents the error says what to do,
	// and amounts are in the units of the spec (cpu: 2, not 2000).
	s.fails(exitError, "Error: NotFound: path: parent pool /org does not exist; create /org first (pools are created parent first); "+
		"or pass --parents to create the missing ancestors", "pool", "create", "/org/team", "-f", "../../../examples/pool.yaml")
	s.ok("pool", "create", "/org", "-f", writeSpec(t, "empty.yaml", "{}\n"))
	s.fails(exitError, "Error: InvalidArgument: spec.reservation.cpu: children of /org would reserve 2 cpu in all, "+
		"more than its reservation of 0 cpu; raise the reservation of /org first", "pool", "create", "/org/team", "-f", "../../../examples/pool.yaml")
	s.ok("pool", "create", "/ml/research/team", "-f", "../../../examples/pool.yaml", "--parents")
	var anc pelotonv1.Pool
	s.get(&anc, "pool", "get", "/ml/research")
	if anc.GetSpec().GetReservation().GetCpu() != 2 {
		t.Errorf("--parents ancestor: %v", anc.GetSpec())
	}
}

// TestReadmePoolYAMLIsTheExample: the pool spec the README shows is
// examples/pool.yaml, byte for byte.
func TestReadmePoolYAMLIsTheExample(t *testing.T) {
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("../../../examples/pool.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```yaml\n"+string(example)+"```\n") {
		t.Errorf("README.md does not show examples/pool.yaml as it is:\n%s", example)
	}
}
