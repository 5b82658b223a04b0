package jobmgr

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/store/storetest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// TestGangPeerEnv: every member of a gang starts knowing its gang, its
// rank and where every member runs (host:port of a fixed first port), the
// user's own values of those variables dropped; an instance in no gang
// gets none of them; and a member that runs again alone is told where its
// peers run now.
func TestGangPeerEnv(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	s := newSandboxes(3)
	p := startProcess(t, e, s)
	spec := &pelotonv1.JobSpec{Name: "peers", Type: pelotonv1.JobType_BATCH, Pool: resmgr.DefaultPoolPath, InstanceCount: 4,
		Sla: &pelotonv1.SlaSpec{MinimumRunningInstances: 3},
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"work"}, Resources: &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 8},
			Env:           map[string]string{EnvGangRank: "9", EnvGangMembers: "evil:1", "A": "1"},
			Ports:         []*pelotonv1.PortSpec{{Name: "rpc", Value: 7070}, {Name: "other"}},
			RestartPolicy: &pelotonv1.RestartPolicy{MaxFailures: 5}}}
	id, err := p.jm.CreateJob(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every instance launched", 20*time.Second, func() (bool, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.runs) == 4, fmt.Sprintf("%d of 4 launched", len(s.runs))
	})
	check := func(run map[uint32]uint32) {
		t.Helper()
		s.mu.Lock()
		defer s.mu.Unlock()
		var addrs []string
		for inst := range uint32(3) {
			addrs = append(addrs, s.runs[resmgr.RunTaskID(id, inst, run[inst])].host+":7070")
		}
		for inst := range uint32(4) {
			r := s.runs[resmgr.RunTaskID(id, inst, run[inst])]
			want := map[string]string{"A": "1"}
			if inst < 3 {
				want[EnvGangID], want[EnvGangSize], want[EnvGangRank] = id+"/gang-0", "3", fmt.Sprint(inst)
				want[EnvGangMembers] = strings.Join(addrs, ",")
			}
			if !maps.Equal(r.env, want) {
				t.Errorf("instance %d run %d env %v, want %v", inst, run[inst], r.env, want)
			}
		}
	}
	check(map[uint32]uint32{0: 1, 1: 1, 2: 1, 3: 1})

	s.finish(resmgr.RunTaskID(id, 1, 1), pelotonv1.TaskState_FAILED, false)
	waitFor(t, "member 1 running again", 20*time.Second, func() (bool, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		r := s.runs[resmgr.RunTaskID(id, 1, 2)]
		return r != nil, "not yet"
	})
	check(map[uint32]uint32{0: 1, 1: 2, 2: 1, 3: 1})
}

// TestGangMembersOfGangSpec: with spec.gang, each gang of size
// consecutive instances lists its own members; a member without a fixed
// first port is listed by host alone.
func TestGangMembersOfGangSpec(t *testing.T) {
	spec := MakeJob("x").Instances(5).With(func(s *pelotonv1.JobSpec) {
		s.Gang = &pelotonv1.GangSpec{Size: 2, AllowPartialLast: true}
	}).Ports(&pelotonv1.PortSpec{Name: "rpc"}).Obj()
	if err := validateJobSpec(spec, bigHost); err != nil {
		t.Fatal(err)
	}
	v, err := newJobVersion(1, spec, time.Unix(0, 0), "test")
	if err != nil {
		t.Fatal(err)
	}
	j := &job{id: "j"}
	j.taskSlice.Store(&[]*task{})
	for _, tc := range []struct {
		inst uint32
		want map[string]string
	}{
		{0, map[string]string{EnvGangID: "j/gang-0", EnvGangSize: "2", EnvGangRank: "0", EnvGangMembers: "h0,h1"}},
		{3, map[string]string{EnvGangID: "j/gang-1", EnvGangSize: "2", EnvGangRank: "1", EnvGangMembers: "h2,h3"}},
		{4, map[string]string{EnvGangID: "j/gang-2", EnvGangSize: "1", EnvGangRank: "0", EnvGangMembers: "h4"}},
	} {
		env := map[string]string{}
		setGangEnv(env, j, v, tc.inst, fmt.Sprintf("h%d", tc.inst), map[uint32]string{0: "h0", 1: "h1", 2: "h2", 3: "h3", 4: "h4"})
		if !maps.Equal(env, tc.want) {
			t.Errorf("instance %d: env %v, want %v", tc.inst, env, tc.want)
		}
	}
}
