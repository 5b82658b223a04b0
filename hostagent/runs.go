package hostagent

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The environment variables every backend starts a run's processes with:
// the local backend on the processes it starts, the kubernetes backend on
// its containers (from the pod's metadata), which a host agent with
// hostPID sees in the node's /proc.
var (
	envTaskID = []byte("PELOTON_TASK_ID=")
	envHost   = []byte("PELOTON_HOST=")
)

// The environment variables the stack adds to a revocable run's (jobmgr's
// EnvRevocable and EnvPriority; the stack deletes a PELOTON_REVOCABLE the
// user set, so a run that is not revocable never starts with it).
var (
	envRevocable = []byte("PELOTON_REVOCABLE=")
	envPriority  = []byte("PELOTON_PRIORITY=")
)

// The environment variables the stack adds to the run of a task whose spec
// has metrics (jobmgr's EnvMetricsPort, EnvMetricsPath and
// EnvMetricsHistogram), and the one a backend adds where the run does not
// listen on the host's loopback (EnvMetricsHost: the kubernetes backend
// sets the pod's IP). The stack deletes any the user set.
var (
	envMetricsPort      = []byte("PELOTON_METRICS_PORT=")
	envMetricsPath      = []byte("PELOTON_METRICS_PATH=")
	envMetricsHistogram = []byte("PELOTON_METRICS_HISTOGRAM=")
	envMetricsHost      = []byte("PELOTON_METRICS_HOST=")
)

// metricsValueMax bounds each metrics variable's value, as the stack bounds
// the spec's path and histogram name: a longer one comes from a process
// that changed its environment, and is not copied into the agent's memory
// for every process of the run.
const metricsValueMax = 1024

// environMax bounds what is read of one process's environment. Both
// backends put the PELOTON_* variables after the task's own, and the
// kubelet appends its service-link variables (seven per service in the
// namespace, which can make the environment large) after those, so the
// head of the environment is where they are; a task whose own variables
// pass this bound hides its run from the agent.
const environMax = 256 << 10

// runIDMax bounds a run id taken from an environment: a task run id is a
// job id and two numbers, and a longer value is no Peloton run (a process
// may set what it likes) that would otherwise be copied into every report.
const runIDMax = 256

// EnvRuns finds a host's task runs without asking anyone: it reads
// /proc/<pid>/environ of every process and groups the processes whose
// PELOTON_HOST is Host by their PELOTON_TASK_ID. Children inherit their
// parent's environment, so a run's whole process tree is found, however
// it forks; a process that clears or replaces its environment when it
// execs (env -i, a daemon that scrubs it) escapes, and so does its time.
//
// The agent believes what the environment says: a process may claim to be
// another run of the same host. That moves usage between runs in a report,
// and makes the claimant one of the processes the QoS controller kills
// with that run; it cannot make a run revocable that is not (see RunInfo),
// so no process gets another's non-revocable work killed.
//
// Reading environ needs the right to inspect the process (same user, or
// CAP_SYS_PTRACE): an agent in a pod needs hostPID and that capability.
// Processes it may not inspect are skipped.
//
// Besides the Samples it says, per run, what the QoS controller needs and
// where the run serves its metrics (RunInfo), and kills a run (Kill), so it
// is the agent's RunInfoSource and QoSRuns too.
//
// An EnvRuns is for one goroutine (the agent's reading loop). Its zero value
// with Host set is ready to use.
type EnvRuns struct {
	// ProcRoot is where proc is mounted; "" means /proc.
	ProcRoot string
	// Host is the host whose runs to find; "" takes every process that
	// has a PELOTON_TASK_ID, whatever its host.
	Host string
	// CgroupRoot, if set, is where the host's cgroup hierarchies are
	// mounted (/sys/fs/cgroup): a run in a cgroup of its own is then read
	// from it rather than summed over its processes (see runCgroups).
	CgroupRoot string

	// cache holds each process's answer, so that environ is read once per
	// process rather than once per process per cycle.
	cache   map[int]envEntry
	scans   uint64 // scans so far; envEntry.seen is the last that saw the pid
	buf     []byte // environ read buffer, reused
	cgroups runCgroups
}

var (
	_ RunSource     = (*EnvRuns)(nil)
	_ RunInfoSource = (*EnvRuns)(nil)
	_ QoSRuns       = (*EnvRuns)(nil)
)

// envEntry is what a process's environment said, and which process it was.
type envEntry struct {
	// start, envStart and envEnd identify the process as it was when its
	// environ was read; see same.
	start, envStart, envEnd uint64
	env                     envRun // env.id "" when the process is no run of Host
	seen                    uint64
}

// same reports whether st is still the process, as exec'd, that the entry
// was read from.
//
// The start time (stat field 22) tells a reused pid from the process that
// had it. It does not change at exec, and exec is when a run's environment
// appears: the backend's child, between fork and exec, still has the
// backend's environment (and runc init, until it execs the container's
// entrypoint, runc's). A scan in that window must not be remembered for the
// life of the process, so the address of the environment block (stat fields
// 50 and 51), which every exec moves, is part of the key. The kernel shows
// those addresses as 0 when it has no memory map to show (a zombie, a
// kernel thread), to whoever may not read environ, and before Linux 3.5;
// then nothing says the process changed and the answer is kept. That keeps
// a zombie child in its run until its parent reaps it (see Runs).
func (e envEntry) same(st procStat) bool {
	if e.start != st.start {
		return false
	}
	if st.envEnd == 0 {
		return true
	}
	return e.envStart == st.envStart && e.envEnd == st.envEnd
}

// Runs reads every process under ProcRoot and returns the Sample of each run
// of Host, by run id (<job>-<instance>-<run>), stamped with now.
//
// A run's Sample sums its processes' counters as ProcSnapshot.Sample does,
// cutime and cstime included, and that is what keeps a run's CPU counter
// continuous while its processes come and go. A child of the run counts
// its own time while it lives, and while it is a zombie (see envEntry.same).
// When its parent, which is in the run too since the child inherited its
// environment, reaps it, the kernel adds the child's time, and that of the
// children it reaped in turn, to the parent's cutime and cstime: the time
// leaves one term of the sum for another, and the sum does not drop.
// Without the children's columns it would drop each time a task's shell
// finishes a command. It still drops when the reaper is outside the run (a
// double-forked daemon, orphaned to init or a subreaper), and for one cycle
// when a process is reaped while ReadProcs reads (the snapshot is not
// atomic); HostUsage then says ErrCounterReset and the run is skipped for
// that interval.
//
// Memory is the sum of the processes' RSS, shared pages counted once per
// process (see ProcSnapshot.Sample).
func (e *EnvRuns) Runs(now time.Time) (map[string]Sample, error) {
	snap, err := ReadProcs(e.procRoot(), now)
	if err != nil {
		return nil, err
	}
	groups := e.find(snap)
	runs := make(map[string]Sample, len(groups))
	e.cgroups.next()
	for id, pids := range groups {
		runs[id] = e.sample(snap, pids)
	}
	e.cgroups.forget()
	return runs, nil
}

// sample is the run's Sample: from its own cgroup if it has one and
// CgroupRoot is set, else summed over its processes pids (ascending).
// Either way it began when the run's earliest process started.
func (e *EnvRuns) sample(snap *ProcSnapshot, pids []int) Sample {
	s := snap.sum(pids)
	if e.CgroupRoot == "" {
		return s
	}
	first := pids[0]
	for _, pid := range pids {
		if snap.procs[pid].start < snap.procs[first].start {
			first = pid
		}
	}
	e.cgroups.root = e.CgroupRoot
	if cs, ok := e.cgroups.sample(e.procRoot(), procKey{pid: first, start: snap.procs[first].start}, pids, snap.time); ok {
		cs.Began = s.Began
		return cs
	}
	return s
}

// RunInfo is what EnvRuns found of one run in one scan: its counters, what
// the QoS controller chooses victims by, the processes it kills, and where
// the agent reads the run's latency.
type RunInfo struct {
	// Sample is the run's, as Runs returns it.
	Sample Sample
	// Revocable is whether every process of the run was started with
	// PELOTON_REVOCABLE=true. Every one, not some: a process can set the
	// variable in its own environment (and its children's), and neither it
	// nor a process that claims another run's id can thereby make work
	// the stack started as non-revocable killable.
	Revocable bool
	// Priority is the job's (PELOTON_PRIORITY) as the run's earliest
	// process has it, the one the backend started; higher runs first.
	Priority uint32
	// Started is when the run's earliest process started, as time since
	// the host booted (stat field 22): only the order of runs matters, and
	// boot time is the clock the kernel keeps it in.
	Started time.Duration
	// Procs are the run's processes, by ascending pid.
	Procs []RunProc
	// Metrics is where the run serves the histogram whose P99 is its
	// latency, as the environment of its earliest process says; nil when
	// the run declares no metrics (no PELOTON_METRICS_PORT).
	Metrics *MetricsTarget
}

// MetricsTarget is where a run serves its latency histogram.
type MetricsTarget struct {
	// URL is http://<host>:<port><path>: host is PELOTON_METRICS_HOST, an
	// IP address, or 127.0.0.1 without it (the local backend's runs listen
	// on the host's loopback); port is the number in the variable of the
	// port PELOTON_METRICS_PORT names (PELOTON_PORT_<NAME>); path is
	// PELOTON_METRICS_PATH, "/metrics" without it.
	URL string
	// Histogram is the histogram's name (PELOTON_METRICS_HISTOGRAM).
	Histogram string
	// Err, when not "", says why the environment names no endpoint,
	// although the run declares metrics; URL and Histogram are "" then.
	// The agent reports it as the run's latency error.
	Err string
}

// RunProc is one process of a run, as the scan saw it.
type RunProc struct {
	PID int
	// Started identifies the process: a pid reused since the scan has a
	// later start.
	Started time.Duration
	// GroupLeader: the process leads its process group (stat field 5,
	// pgrp, is its pid) and its parent is not in the run, so the group is
	// the run's. The local backend starts every run in a group of its own.
	GroupLeader bool
}

// RunInfo is Runs with, per run, what the QoS controller and the latency
// reader need: one scan of ProcRoot serves all three, so the agent calls
// this instead of Runs.
func (e *EnvRuns) RunInfo(now time.Time) (map[string]RunInfo, error) {
	snap, err := ReadProcs(e.procRoot(), now)
	if err != nil {
		return nil, err
	}
	groups := e.find(snap)
	infos := make(map[string]RunInfo, len(groups))
	e.cgroups.next()
	for id, pids := range groups {
		infos[id] = e.info(snap, pids)
	}
	e.cgroups.forget()
	return infos, nil
}

// info is the RunInfo of the run whose processes, all in snap and in the
// cache (find just put them there), are pids, ascending.
func (e *EnvRuns) info(snap *ProcSnapshot, pids []int) RunInfo {
	in := RunInfo{Sample: e.sample(snap, pids), Revocable: true, Procs: make([]RunProc, 0, len(pids))}
	first := -1 // the earliest process; the lowest pid of those started in the same tick
	for _, pid := range pids {
		st := snap.procs[pid]
		if first < 0 || st.start < snap.procs[first].start {
			first = pid
		}
		_, parentInRun := slices.BinarySearch(pids, st.ppid)
		in.Procs = append(in.Procs, RunProc{PID: pid, Started: ticks(st.start), GroupLeader: st.pgrp == pid && !parentInRun})
		in.Revocable = in.Revocable && e.cache[pid].env.revocable
	}
	in.Started = ticks(snap.procs[first].start)
	in.Priority = e.cache[first].env.priority
	if m := e.cache[first].env.metrics; m != (MetricsTarget{}) {
		in.Metrics = &m
	}
	return in
}

// ticks converts a count of USER_HZ ticks to a duration.
func ticks(n uint64) time.Duration { return time.Duration(n) * (time.Second / userHZ) }

// find returns the pids of each run of Host in snap, by run id, each list
// ascending. It reads the environ of the processes it has not seen as they
// are now, and forgets the processes gone.
func (e *EnvRuns) find(snap *ProcSnapshot) map[string][]int {
	if e.cache == nil {
		e.cache = make(map[int]envEntry, len(snap.procs))
	}
	e.scans++
	groups := make(map[string][]int)
	for pid, st := range snap.procs {
		ent, ok := e.cache[pid]
		if !ok || !ent.same(st) {
			env, err := e.readRun(pid)
			switch {
			case errors.Is(err, fs.ErrPermission):
				// Not ours to inspect; remembered as no run, and read
				// again only if the process execs (which may change
				// whether we may read it).
				env = envRun{}
			case err != nil:
				// Gone (ENOENT, ESRCH) or a transient fault: skip it
				// this time, read it again next time if it is still
				// there.
				continue
			}
			ent = envEntry{start: st.start, envStart: st.envStart, envEnd: st.envEnd, env: env}
		}
		ent.seen = e.scans
		e.cache[pid] = ent
		if ent.env.id != "" {
			groups[ent.env.id] = append(groups[ent.env.id], pid)
		}
	}
	for pid, ent := range e.cache {
		if ent.seen != e.scans {
			delete(e.cache, pid)
		}
	}
	for _, pids := range groups {
		slices.Sort(pids)
	}
	return groups
}

// readRun reads pid's environment, at most environMax bytes of it, and
// returns what it says of its run of Host, the zero envRun when it has none.
func (e *EnvRuns) readRun(pid int) (envRun, error) {
	f, err := os.Open(filepath.Join(e.procRoot(), strconv.Itoa(pid), "environ"))
	if err != nil {
		return envRun{}, err
	}
	defer f.Close()
	e.buf, err = readBounded(f, e.buf, environMax)
	if err != nil {
		return envRun{}, err
	}
	return runOf(e.buf, e.Host), nil
}

func (e *EnvRuns) procRoot() string {
	if e.ProcRoot == "" {
		return "/proc"
	}
	return e.ProcRoot
}

// envRun is what one process's environment says of the run it belongs to.
type envRun struct {
	id        string        // PELOTON_TASK_ID; "" for no run of Host
	revocable bool          // PELOTON_REVOCABLE=true
	priority  uint32        // PELOTON_PRIORITY; 0 when absent or not a number
	metrics   MetricsTarget // zero when no PELOTON_METRICS_PORT
}

// runOf returns the run env says it belongs to, NUL-terminated KEY=value
// entries as /proc/<pid>/environ holds them: its PELOTON_TASK_ID when its
// PELOTON_HOST is host (or host is ""), and the zero envRun otherwise or
// when the id is empty or longer than runIDMax.
//
// Of a variable set twice the first is taken: it is the one getenv, in C
// and in Go, gives the process itself. An entry without its NUL was cut by
// the read bound and is ignored, so a cut value is never taken for a whole
// one.
//
// Revocable is PELOTON_REVOCABLE exactly "true", what the stack writes. A
// priority that is absent or not a uint32 is 0, the lowest: the stack
// always writes one for a revocable run, so only a process that changed
// its own environment lacks it, and it goes first.
//
// The metrics variables make its metrics target (see metricsOf).
func runOf(env []byte, host string) envRun {
	vars := [...][]byte{envTaskID, envHost, envRevocable, envPriority, envMetricsPort, envMetricsPath, envMetricsHistogram, envMetricsHost}
	const (
		id = iota
		h
		rev
		prio
		mPort
		mPath
		mHist
		mHost
	)
	var val [len(vars)][]byte
	var have [len(vars)]bool
	all := env
	for {
		end := bytes.IndexByte(env, 0)
		if end < 0 {
			break
		}
		kv := env[:end]
		env = env[end+1:]
		if len(kv) < len("PELOTON_") || string(kv[:len("PELOTON_")]) != "PELOTON_" {
			continue // most of an environment: one comparison, not eight
		}
		for i, name := range vars {
			if !have[i] && bytes.HasPrefix(kv, name) {
				val[i], have[i] = kv[len(name):], true
				break
			}
		}
	}
	if len(val[id]) == 0 || len(val[id]) > runIDMax || (host != "" && string(val[h]) != host) {
		return envRun{}
	}
	r := envRun{id: string(val[id]), revocable: string(val[rev]) == "true"}
	if p, err := strconv.ParseUint(string(val[prio]), 10, 32); err == nil {
		r.priority = uint32(p)
	}
	if have[mPort] {
		r.metrics = metricsOf(all, val[mPort], val[mPath], val[mHist], val[mHost], have[mHost])
	}
	return r
}

// metricsOf is the metrics target of a run whose environment env names
// metrics port port, with the other metrics variables as given. The port's
// number is in the variable the port's name makes (PELOTON_PORT_<NAME>),
// looked up in env once the name is known.
//
// What the environment says is checked as the stack checks the spec, so a
// process that changed its own environment makes an error the run's
// latency reports, not a request: the host must be an IP address (the
// agent resolves no names a process gives it), the port a number, the path
// visible ASCII starting with "/", the histogram a metric name.
func metricsOf(env, port, path, hist, host []byte, haveHost bool) MetricsTarget {
	bad := func(format string, args ...any) MetricsTarget {
		return MetricsTarget{Err: fmt.Sprintf(format, args...)}
	}
	if len(port) == 0 || len(port) > metricsValueMax {
		return bad("PELOTON_METRICS_PORT: %d bytes, not a port's name", len(port))
	}
	portVar := portEnvName(port)
	var num []byte
	found := false
	key := append([]byte(portVar), '=')
	for !found {
		end := bytes.IndexByte(env, 0)
		if end < 0 {
			break
		}
		if kv := env[:end]; bytes.HasPrefix(kv, key) {
			num, found = kv[len(key):], true
		}
		env = env[end+1:]
	}
	if !found {
		return bad("%s, the number of metrics port %q, is not set", portVar, port)
	}
	n, err := strconv.ParseUint(string(num), 10, 16)
	if err != nil || n == 0 {
		return bad("%s=%.20q is not a port number", portVar, num)
	}
	addr := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	if haveHost {
		if addr, err = netip.ParseAddr(string(host)); err != nil || addr.Zone() != "" {
			return bad("PELOTON_METRICS_HOST=%.64q is not an IP address", host)
		}
	}
	if len(path) == 0 {
		path = []byte("/metrics")
	}
	if len(path) > metricsValueMax || path[0] != '/' || bytes.ContainsFunc(path, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		return bad("PELOTON_METRICS_PATH=%.64q is not a path (visible ASCII, starting with /)", path)
	}
	if len(hist) == 0 {
		return bad("PELOTON_METRICS_HISTOGRAM is not set")
	}
	if len(hist) > metricsValueMax || !validMetricName(hist) {
		return bad("PELOTON_METRICS_HISTOGRAM=%.64q is not a metric name", hist)
	}
	return MetricsTarget{
		URL:       "http://" + netip.AddrPortFrom(addr, uint16(n)).String() + string(path),
		Histogram: string(hist),
	}
}

// portEnvName is the variable that holds a port's number, as the backends
// name it (hostmgr.PortEnvName, which this package may not import; the
// names are part of every run's environment, the contract the agent reads
// and that does not change): PELOTON_PORT_ and the name upper-cased, each
// character other than an ASCII letter or digit an underscore.
func portEnvName(name []byte) string {
	b := make([]byte, 0, len("PELOTON_PORT_")+len(name))
	b = append(b, "PELOTON_PORT_"...)
	for _, c := range strings.ToUpper(string(name)) {
		if c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b = utf8.AppendRune(b, c)
		} else {
			b = append(b, '_')
		}
	}
	return string(b)
}

// validMetricName reports whether name is a classic Prometheus metric name,
// [a-zA-Z_:][a-zA-Z0-9_:]*, as the stack requires of the spec's.
func validMetricName(name []byte) bool {
	for i, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == ':' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return len(name) > 0
}
