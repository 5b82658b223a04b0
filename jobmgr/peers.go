package jobmgr

import (
	"strconv"
	"strings"

	"github.com/peloton-sched/peloton/internal/apierr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// The environment every member of a gang gets at launch, so that the
// members of a distributed job (a TensorFlow or Horovod worker set) find
// each other without a discovery service of their own. A gang is placed
// whole, so where each member runs is known before any of them starts.
const (
	// EnvGangID names the gang: "<job>/gang-<index>".
	EnvGangID = "PELOTON_GANG_ID"
	// EnvGangSize is how many members the gang has.
	EnvGangSize = "PELOTON_GANG_SIZE"
	// EnvGangRank is the member's rank in the gang, 0..size-1.
	EnvGangRank = "PELOTON_GANG_RANK"
	// EnvGangMembers lists the members in rank order, comma-separated, each
	// as host:port of its first port when that port has a fixed number,
	// else as host alone: a port the backend picks (PortSpec value 0) is
	// chosen as the run starts, after its peers were told.
	EnvGangMembers = "PELOTON_GANG_MEMBERS"
)

// gangEnvKeys are the variables the stack alone sets: a user's own would
// tell a member a wrong peer.
var gangEnvKeys = []string{EnvGangID, EnvGangSize, EnvGangRank, EnvGangMembers}

// gangMember is where one member of a gang runs, as its peers are told.
type gangMember struct {
	inst, rank uint32
	host       string
	port       uint32 // 0: none, or one the backend picks
}

// addr is the member as EnvGangMembers lists it.
func (m gangMember) addr() string {
	if m.port == 0 {
		return m.host
	}
	return m.host + ":" + strconv.FormatUint(uint64(m.port), 10)
}

// gangMembers lists gang g of job j on version v in rank order. A member's
// host is placed's (the hosts of the members placed together with the one
// being launched) when it has one, else its current run's; empty when it
// has neither. The port is the first port of the member's spec when fixed.
func gangMembers(j *job, v *jobVersion, g uint32, placed map[uint32]string) []gangMember {
	first, end := gangLayoutOf(v.spec).members(g)
	out := make([]gangMember, 0, end-first)
	for inst := first; inst < end; inst++ {
		m := gangMember{inst: inst, rank: inst - first}
		if h, ok := placed[inst]; ok {
			m.host = h
		} else if t := j.task(inst); t != nil {
			m.host = t.status().GetHost()
		}
		if ps := v.sharedTaskSpec(inst).GetPorts(); len(ps) > 0 {
			m.port = ps[0].GetValue()
		}
		out = append(out, m)
	}
	return out
}

// setGangEnv sets the gang variables of instance inst, launched on host,
// in env: removed for an instance in no gang, the stack's for a member.
// placed is as gangMembers takes it.
func setGangEnv(env map[string]string, j *job, v *jobVersion, inst uint32, host string, placed map[uint32]string) {
	for _, k := range gangEnvKeys {
		delete(env, k)
	}
	g, rank, ok := gangLayoutOf(v.spec).of(inst)
	if !ok {
		return
	}
	members := gangMembers(j, v, g, placed)
	addrs := make([]string, len(members))
	for i, m := range members {
		if m.inst == inst {
			m.host = host // where this run goes, whatever the last one said
		}
		addrs[i] = m.addr()
	}
	env[EnvGangID] = gangID(j.id, int(g))
	env[EnvGangSize] = strconv.Itoa(len(members))
	env[EnvGangRank] = strconv.FormatUint(uint64(rank), 10)
	env[EnvGangMembers] = strings.Join(addrs, ",")
}

// GetGang returns gang g of job jobID with where each member runs now, as
// the members are told at launch (the ports of the current spec).
func (m *Manager) GetGang(jobID string, g uint32) (*pelotonv1.Gang, error) {
	j, err := m.getJob(jobID)
	if err != nil {
		return nil, err
	}
	v := j.current()
	l := gangLayoutOf(v.spec)
	switch {
	case !l.ganged():
		return nil, apierr.FailedPrecondition("job %s has no gangs: its spec sets neither gang.size nor sla.minimumRunningInstances above 1", jobID)
	case g >= l.count():
		return nil, apierr.NotFound("gang %d: job %s has gangs 0..%d", g, jobID, l.count()-1)
	}
	if first, _ := l.members(g); !v.hasInstance(first) {
		return nil, apierr.NotFound("gang %d: job %s has no gang %d: a scale removed it (spec.removedInstances)", g, jobID, g)
	}
	members := gangMembers(j, v, g, nil)
	out := &pelotonv1.Gang{Id: gangID(j.id, int(g)), Index: g, Size: uint32(len(members))}
	for _, mb := range members {
		gm := &pelotonv1.GangMember{Instance: mb.inst, Rank: mb.rank, Host: mb.host, Port: mb.port}
		if t := j.task(mb.inst); t != nil {
			rt := t.status()
			gm.RunId, gm.State = rt.GetRunId(), rt.GetState()
		}
		out.Members = append(out.Members, gm)
	}
	return out, nil
}
