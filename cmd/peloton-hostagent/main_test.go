package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/cmd/peloton/hostagentcmd"
)

// The agent's binary is small because it links nothing of the control
// plane: no Kubernetes client, no etcd, no scheduler component. A new
// import that pulls one in fails here, not in a fleet's memory. The API
// client (cluster/client, which dials with TLS and a token) is allowed:
// it imports only the protos, tlsfiles and reload, and those it pulls in
// are listed here too, so checked like any other.
func TestLinksNoControlPlane(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to list the binary's packages: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	forbidden := []string{"k8s.io/", "sigs.k8s.io/", "go.etcd.io/",
		"github.com/prometheus/client_golang",
		"github.com/peloton-sched/peloton/cluster", "github.com/peloton-sched/peloton/federation",
		"github.com/peloton-sched/peloton/jobmgr", "github.com/peloton-sched/peloton/resmgr",
		"github.com/peloton-sched/peloton/placement", "github.com/peloton-sched/peloton/hostmgr",
		"github.com/peloton-sched/peloton/internal/store", "github.com/peloton-sched/peloton/cmd/peloton/cli"}
	allowed := map[string]bool{"github.com/peloton-sched/peloton/cluster/client": true}
	for _, p := range strings.Fields(string(out)) {
		if allowed[p] {
			continue
		}
		for _, f := range forbidden {
			if strings.HasPrefix(p, f) {
				t.Errorf("peloton-hostagent links %s", p)
			}
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "missing --server"},
		{[]string{"--server", "nohost"}, `invalid --server "nohost": want host:port`},
		{[]string{"--server", "127.0.0.1:1", "--interval", "1ms"}, "invalid --interval 1ms"},
		{[]string{"--server", "127.0.0.1:1", "--virtual"}, "missing --capacity-cpu and --capacity-memory-mb"},
		{[]string{"--server", "127.0.0.1:1", "--qos-cpu-high", "0.5", "--qos-cpu-low", "0.6"}, "invalid --qos-cpu-high 0.5 / --qos-cpu-low 0.6"},
		{[]string{"--bogus"}, "unknown flag: --bogus"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		var out, errb bytes.Buffer
		if code := hostagentcmd.Main("peloton-hostagent", tc.args, &out, &errb); code != 2 {
			t.Errorf("%q: exit %d; want 2 (usage)", tc.args, code)
		}
		if !strings.Contains(errb.String(), tc.want) || !strings.Contains(errb.String(), "Run 'peloton-hostagent --help' for usage.") {
			t.Errorf("%q: stderr %q; want %q and the help hint", tc.args, errb.String(), tc.want)
		}
	}
}
