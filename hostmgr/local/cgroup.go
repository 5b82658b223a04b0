package local

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Cgroups: each run's resources are enforced, where the machine lets us.
//
// At Start the backend looks for cgroups it may create (detectCgroups) and
// makes one parent cgroup for its runs, peloton-local-<hash of Dir> (a
// stable name, so a restarted backend over the same Dir finds the same
// parent). Every run then gets a child named after its task ID, with
//
//   - a memory limit of spec.Resources.MemoryMB MiB (v2 memory.max, with
//     memory.swap.max 0; v1 memory.limit_in_bytes, and
//     memory.memsw.limit_in_bytes where swap is accounted), so swap does not
//     stretch it;
//   - a CPU quota of MilliCPU/1000 cores: that many times the 100ms period
//     of CPU time per period, at least 1ms (v2 cpu.max "<quota> 100000",
//     v1 cpu.cfs_quota_us with cpu.cfs_period_us 100000). v1 refuses a
//     quota above an ancestor's; the run then has none of its own and is
//     held to the ancestor's, the most it can have;
//
// a resource left at 0 gets no limit of that kind. Detection prefers cgroup
// v2 when its hierarchy offers this process the memory and cpu controllers,
// and otherwise uses the v1 memory and cpu hierarchies (and cpuacct, when
// mounted, for usage). When neither can be used (nothing mounted, read-only,
// no permission, a controller missing) Start logs one warning saying why, and
// runs go unlimited, exactly as they did before cgroups.
//
// Where the parent goes. On v1 it is created under this process's own cgroup
// in each hierarchy. On v2 the no-internal-process rule forbids a non-root
// cgroup to both hold processes and hand controllers to children, and the
// control plane's own cgroup holds the control plane. So the parent is
// created under our own cgroup only when the memory and cpu controllers can
// be enabled there (the root cgroup, or a cgroup prepared that way); else it
// is created beside our cgroup, as a sibling in its parent, whose
// subtree_control already has both controllers (our cgroup could not list
// them otherwise). The backend never moves the control-plane process itself
// into a leaf: that would change the cgroup of every component of the
// process, and would not even suffice when other processes share our cgroup
// (a container's init, a shell). Under systemd, run the control plane in a
// leaf of the service's delegated cgroup (Delegate=yes) and the sibling, and
// so every run, stays inside the service's cgroup.
//
// Placing a run before it runs its first instruction. On v2 the process is
// cloned straight into its cgroup (clone3 with CLONE_INTO_CGROUP,
// SysProcAttr.UseCgroupFD). v1 has no such flag, but a child is born in the
// cgroups of the thread that forks it: the backend moves a fresh OS thread
// into the run's cgroups (v1 cgroups are per thread), forks from it, and
// lets the thread end (cgroup_linux.go). Either way there is no window in
// which the run runs unlimited. Only where clone3 is refused (a kernel before
// 5.7, or a seccomp profile) does a v2 run start outside and get moved by its
// pid as soon as os.StartProcess returns: its first instants after exec run
// unlimited.
//
// A run's end: the kernel's OOM killer ending it is reported as FAILED with
// ReasonOOMKilled (oomEnd). After the run's process is reaped, whatever
// still runs in its cgroup (processes that left its process group, which
// the group kill cannot reach) is SIGKILLed and the cgroup removed, before
// the terminal event. Adopted runs are cleaned up the same way when they
// end, using the dirs recorded with the run; Close removes the parent.

const (
	// cgroupPrefix starts the name of the backend's parent cgroup.
	cgroupPrefix = "peloton-local-"
	// cfsPeriodUS is the CFS period of every run, 100ms: the quota is the
	// run's cores times this, in microseconds.
	cfsPeriodUS = 100_000
	// minCFSQuotaUS is the smallest quota the kernel accepts (1ms).
	minCFSQuotaUS = 1_000
	// cgroupRemoveWait bounds how long removing a run's cgroup waits for
	// the processes killed in it to be gone.
	cgroupRemoveWait = 2 * time.Second
)

// cgroupParentName is the backend's parent cgroup for Dir: stable across
// restarts, distinct for two backends with different Dirs.
func cgroupParentName(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return cgroupPrefix + hex.EncodeToString(sum[:6])
}

// cgroups is where the backend makes its runs' cgroups.
type cgroups struct {
	version int // 1 or 2
	// memory, cpu and cpuacct are the backend's parent cgroup in the
	// hierarchy of each controller. On v2 all three are one directory; on
	// v1 cpu and cpuacct are one where mounted together, and cpuacct is ""
	// where it is not mounted.
	memory, cpu, cpuacct string
}

// parents lists the parent's distinct directories.
func (c *cgroups) parents() []string { return distinctDirs(c.memory, c.cpu, c.cpuacct) }

// makeParents creates the parent (again, when a backend over the same Dir
// removed it meanwhile) and, on v2, hands it the controllers for its
// children.
func (c *cgroups) makeParents() error {
	for _, p := range c.parents() {
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	if c.version == 2 {
		return enableControllers(c.memory)
	}
	return nil
}

// removeParents removes the parent where it is empty. A parent still
// holding runs (of this backend or of another over the same Dir) stays.
func (c *cgroups) removeParents() {
	for _, p := range c.parents() {
		_ = os.Remove(p)
	}
}

// enableControllers gives dir's children the memory and cpu controllers.
func enableControllers(dir string) error {
	return writeCgroupFile(filepath.Join(dir, "cgroup.subtree_control"), "+memory +cpu")
}

// detectCgroups finds where this process may create cgroups with memory
// and cpu controllers, and creates the backend's parent cgroup, name, there.
// The error says why runs cannot be limited. root prefixes every path it
// reads: "/" on a real machine, a fixture tree in tests.
func detectCgroups(root, name string) (*cgroups, error) {
	mi, err := os.ReadFile(filepath.Join(root, "proc/self/mountinfo"))
	if err != nil {
		return nil, fmt.Errorf("cannot read the mounts: %w", err)
	}
	pc, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return nil, fmt.Errorf("cannot read this process's cgroups: %w", err)
	}
	mounts, own := parseMountinfo(string(mi)), parseProcCgroup(string(pc))

	// A controller is in one hierarchy only: if v2 has memory and cpu, no
	// v1 hierarchy does, so a v2 failure is final.
	var why []string
	if dir, m, ok := ownDir(root, mounts, own, "cgroup2", ""); ok {
		ctrls, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
		have := strings.Fields(string(ctrls))
		switch {
		case err != nil:
			why = append(why, fmt.Sprintf("cgroup v2: %v", err))
		case slices.Contains(have, "memory") && slices.Contains(have, "cpu"):
			if m.ro {
				return nil, fmt.Errorf("cgroup v2: %s is mounted read-only", filepath.Join(root, m.point))
			}
			c, err := setupV2(dir, filepath.Join(root, m.point), name)
			if err != nil {
				return nil, fmt.Errorf("cgroup v2: %w", err)
			}
			return c, nil
		default:
			why = append(why, fmt.Sprintf("cgroup v2 at %s offers this process no memory and cpu controllers (it has %q)",
				filepath.Join(root, m.point), strings.Join(have, " ")))
		}
	}
	c, err := setupV1(root, mounts, own, name)
	if err == nil {
		return c, nil
	}
	return nil, errors.New(strings.Join(append(why, "cgroup v1: "+err.Error()), "; "))
}

// setupV2 creates the parent under own, this process's cgroup, if own can
// give controllers to children, and beside it otherwise (see the comment at
// the top of this file).
func setupV2(own, mountPoint, name string) (*cgroups, error) {
	base := own
	if err := enableControllers(own); err != nil {
		if own == mountPoint {
			return nil, fmt.Errorf("cannot enable the memory and cpu controllers in %s, the cgroup this process runs in (%v), "+
				"and it has no parent to create a cgroup beside it; start the control plane in a leaf cgroup", own, err)
		}
		base = filepath.Dir(own)
	}
	c := &cgroups{version: 2, memory: filepath.Join(base, name)}
	c.cpu, c.cpuacct = c.memory, c.memory
	if err := c.makeParents(); err != nil {
		c.removeParents()
		return nil, err
	}
	return c, nil
}

// setupV1 creates the parent under this process's cgroup in the memory
// and cpu hierarchies, and in cpuacct's when it is mounted apart from cpu.
func setupV1(root string, mounts []cgroupMount, own map[string]string, name string) (*cgroups, error) {
	dirs := map[string]string{}
	for _, ctl := range []string{"memory", "cpu", "cpuacct"} {
		dir, m, ok := ownDir(root, mounts, own, "cgroup", ctl)
		switch {
		case !ok && ctl == "cpuacct":
			continue // optional: only usage is read there
		case !ok:
			return nil, fmt.Errorf("no %s hierarchy is mounted where this process can see its own cgroup", ctl)
		case m.ro && ctl == "cpuacct":
			continue
		case m.ro:
			return nil, fmt.Errorf("the %s hierarchy at %s is mounted read-only", ctl, filepath.Join(root, m.point))
		}
		dirs[ctl] = dir
	}
	for _, f := range []string{filepath.Join(dirs["memory"], "memory.limit_in_bytes"), filepath.Join(dirs["cpu"], "cpu.cfs_quota_us")} {
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("the kernel offers no %s: %w", filepath.Base(f), err)
		}
	}
	c := &cgroups{version: 1, memory: filepath.Join(dirs["memory"], name), cpu: filepath.Join(dirs["cpu"], name)}
	if d, ok := dirs["cpuacct"]; ok {
		c.cpuacct = filepath.Join(d, name)
	}
	if err := c.makeParents(); err != nil {
		c.removeParents()
		return nil, err
	}
	return c, nil
}

// cgroupMount is one cgroup file system in /proc/self/mountinfo.
type cgroupMount struct {
	fstype string // "cgroup2" or "cgroup" (v1)
	root   string // the cgroup shown at the mount point
	point  string // where it is mounted
	ro     bool
	// super are the super options: for v1, the hierarchy's controllers.
	super []string
}

// parseMountinfo returns the cgroup mounts of a mountinfo file, whose lines
// read "36 35 0:30 <root> <point> <options> [optional fields...] - <fstype>
// <source> <super options>".
func parseMountinfo(data string) []cgroupMount {
	var out []cgroupMount
	for line := range strings.Lines(data) {
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		if sep < 6 || len(f) < sep+4 {
			continue
		}
		fstype := f[sep+1]
		if fstype != "cgroup" && fstype != "cgroup2" {
			continue
		}
		super := strings.Split(f[sep+3], ",")
		out = append(out, cgroupMount{fstype: fstype, root: unescapeMount(f[3]), point: unescapeMount(f[4]),
			ro: slices.Contains(strings.Split(f[5], ","), "ro") || slices.Contains(super, "ro"), super: super})
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				sb.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		sb.WriteByte(s[i])
	}
	return sb.String()
}

// parseProcCgroup maps each v1 controller to this process's cgroup in its
// hierarchy, and "" to its v2 cgroup, from lines "4:memory:/a/b" and
// "0::/a/b".
func parseProcCgroup(data string) map[string]string {
	own := map[string]string{}
	for line := range strings.Lines(data) {
		id, rest, ok := strings.Cut(strings.TrimRight(line, "\n"), ":")
		if !ok {
			continue
		}
		ctrls, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		if id == "0" && ctrls == "" {
			own[""] = path
			continue
		}
		for c := range strings.SplitSeq(ctrls, ",") {
			own[c] = path
		}
	}
	return own
}

// ownDir is the directory of this process's cgroup in the hierarchy of
// controller ctl ("" for v2) through a mount of type fstype that shows it,
// preferring a read-write mount.
func ownDir(root string, mounts []cgroupMount, own map[string]string, fstype, ctl string) (string, cgroupMount, bool) {
	path, ok := own[ctl]
	// A cgroup outside our cgroup namespace reads "/.."; a removed one
	// " (deleted)". Neither can be reached.
	if !ok || !strings.HasPrefix(path, "/") || strings.Contains(path+"/", "/../") || strings.HasSuffix(path, " (deleted)") {
		return "", cgroupMount{}, false
	}
	var found cgroupMount
	dir := ""
	for _, m := range mounts {
		if m.fstype != fstype || (ctl != "" && !slices.Contains(m.super, ctl)) {
			continue
		}
		rel := path
		if m.root != "/" {
			r, ok := strings.CutPrefix(path, m.root)
			if !ok || (r != "" && r[0] != '/') {
				continue
			}
			rel = r
		}
		if dir == "" || (found.ro && !m.ro) {
			dir, found = filepath.Join(root, m.point, rel), m
		}
	}
	return dir, found, dir != ""
}

// CgroupsUsable says why a backend started by this process would run its
// runs without cgroups of their own, nil when it would give each one: it
// creates a parent cgroup as Start does, under a name of its own, and
// removes it. Tests that need real cgroups ask it before they start a
// stack.
func CgroupsUsable() error {
	return cgroupsUsable(cgroupParentName(fmt.Sprintf("probe-%d-%d", os.Getpid(), time.Now().UnixNano())))
}

// cgroupsUsable is CgroupsUsable with the probe's parent cgroup named name.
func cgroupsUsable(name string) error {
	c, err := detectCgroups("/", name)
	if err != nil {
		return err
	}
	c.removeParents()
	return nil
}

// runCgroup is the cgroup of one run.
type runCgroup struct {
	version int
	// memory, cpu and cpuacct are the run's directory in the hierarchy of
	// each controller, as for cgroups.
	memory, cpu, cpuacct string
	// memoryMB is its memory limit, 0 for none.
	memoryMB int64
}

func (rc *runCgroup) dirs() []string { return distinctDirs(rc.memory, rc.cpu, rc.cpuacct) }

func distinctDirs(dirs ...string) []string {
	out := make([]string, 0, len(dirs))
	for _, d := range dirs {
		if d != "" && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// newRun creates the cgroup of run taskID with the limits of res.
func (c *cgroups) newRun(taskID string, res resources.Resources) (*runCgroup, error) {
	rc := &runCgroup{version: c.version, memory: filepath.Join(c.memory, taskID), cpu: filepath.Join(c.cpu, taskID), memoryMB: max(res.MemoryMB, 0)}
	if c.cpuacct != "" {
		rc.cpuacct = filepath.Join(c.cpuacct, taskID)
	}
	dirs := rc.dirs()
	for i, d := range dirs {
		err := os.Mkdir(d, 0o755)
		if errors.Is(err, fs.ErrNotExist) {
			// The parent was removed by the Close of another backend over
			// the same Dir (a crashed one, in tests).
			if err = c.makeParents(); err == nil {
				err = os.Mkdir(d, 0o755)
			}
		}
		if errors.Is(err, fs.ErrExist) {
			// Left by a run of this ID that ended unseen: its counters
			// (OOM kills) must not become this run's.
			if err = os.Remove(d); err == nil {
				err = os.Mkdir(d, 0o755)
			}
		}
		if err != nil {
			rmdirAll(dirs[:i])
			return nil, fmt.Errorf("cgroup: %w", err)
		}
	}
	if err := rc.setLimits(res); err != nil {
		rmdirAll(dirs)
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	return rc, nil
}

// setLimits writes the run's memory limit and CPU quota.
func (rc *runCgroup) setLimits(res resources.Resources) error {
	mem, quota := memoryLimitBytes(res.MemoryMB), cpuQuotaUS(res.MilliCPU)
	set := func(dir, file, value string) error { return writeCgroupFile(filepath.Join(dir, file), value) }
	if mem > 0 {
		v := strconv.FormatInt(mem, 10)
		memFile, swapFile, swap := "memory.max", "memory.swap.max", "0"
		if rc.version == 1 {
			memFile, swapFile, swap = "memory.limit_in_bytes", "memory.memsw.limit_in_bytes", v
		}
		if err := set(rc.memory, memFile, v); err != nil {
			return err
		}
		// Best effort: the file exists only where swap is accounted.
		if _, err := os.Stat(filepath.Join(rc.memory, swapFile)); err == nil {
			_ = set(rc.memory, swapFile, swap)
		}
	}
	if quota > 0 {
		if rc.version == 2 {
			return set(rc.cpu, "cpu.max", fmt.Sprintf("%d %d", quota, cfsPeriodUS))
		}
		if err := set(rc.cpu, "cpu.cfs_period_us", strconv.Itoa(cfsPeriodUS)); err != nil {
			return err
		}
		err := set(rc.cpu, "cpu.cfs_quota_us", strconv.FormatInt(quota, 10))
		if errors.Is(err, syscall.EINVAL) {
			// v1 refuses a quota above an ancestor's (the control plane
			// in a container with a CPU limit, say). The run is then held
			// to that smaller quota, which is the most it can have.
			return nil
		}
		return err
	}
	return nil
}

// memoryLimitBytes is the memory limit for mb MiB; 0 means none.
func memoryLimitBytes(mb int64) int64 {
	if mb <= 0 {
		return 0
	}
	return min(mb, math.MaxInt64>>20) << 20
}

// cpuQuotaUS is the CFS quota per cfsPeriodUS for milliCPU thousandths of
// a core, at least the kernel's minimum; 0 means none.
func cpuQuotaUS(milliCPU int64) int64 {
	if milliCPU <= 0 {
		return 0
	}
	// A million cores is beyond any machine and far from overflow.
	return max(min(milliCPU, 1<<30)*cfsPeriodUS/1000, minCFSQuotaUS)
}

// writeCgroupFile writes one value to a cgroup control file.
func writeCgroupFile(path, value string) error {
	return os.WriteFile(path, []byte(value), 0o644)
}

// cgroupOps bounds the cgroup work of ended runs under way at once
// (reading how a run's memory ended, removing its cgroup): each is a few
// blocking system calls, and the Go runtime keeps a thread for every one
// blocked at the same time, for good; a kill of 500 runs at once must not
// leave hundreds of threads behind.
var cgroupOps = make(chan struct{}, 4)

// remove kills whatever still runs in the run's cgroup and removes it,
// retrying while the kernel finishes the kills.
func (rc *runCgroup) remove() error {
	deadline := time.Now().Add(cgroupRemoveWait)
	delay := 2 * time.Millisecond
	for {
		cgroupOps <- struct{}{}
		for _, d := range rc.dirs() {
			killCgroupProcs(d)
		}
		err := rmdirAll(rc.dirs())
		<-cgroupOps
		if err == nil || !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(delay)
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// rmdirAll removes every dir (a cgroup is removed with rmdir, files and
// all) and returns the first error; one already gone is fine.
func rmdirAll(dirs []string) error {
	var first error
	for _, d := range dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) && first == nil {
			first = err
		}
	}
	return first
}

// memEnd is what the run's memory cgroup says about its end.
type memEnd struct {
	// oomKills counts the processes of the run the kernel's OOM killer
	// killed; -1 when the kernel does not count them (v1 before 4.13).
	oomKills int64
	// failcnt and maxUsage (v1) count how often usage hit the limit and
	// its peak in bytes: the evidence where oomKills is -1.
	failcnt, maxUsage int64
}

// readMemEnd reads memEnd from the run's memory cgroup.
func (rc *runCgroup) readMemEnd() memEnd {
	cgroupOps <- struct{}{}
	defer func() { <-cgroupOps }()
	if rc.version == 2 {
		return memEnd{oomKills: max(readKeyed(filepath.Join(rc.memory, "memory.events"), "oom_kill"), 0)}
	}
	return memEnd{
		oomKills: readKeyed(filepath.Join(rc.memory, "memory.oom_control"), "oom_kill"),
		failcnt:  readInt(filepath.Join(rc.memory, "memory.failcnt")),
		maxUsage: readInt(filepath.Join(rc.memory, "memory.max_usage_in_bytes")),
	}
}

// readKeyed reads the value of key in a file of "key value" lines, -1
// when absent.
func readKeyed(path, key string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}

// readInt reads a file holding one integer, 0 when it cannot.
func readInt(path string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return n
}

// oomEnd makes the end of a run that the kernel's OOM killer ended FAILED
// with ReasonOOMKilled. ev is the end as the exit status tells it; a run
// the backend killed (KILLED) or that succeeded keeps its end whatever the
// counters say. The OOM killer may have killed the run's main process
// (terminated by SIGKILL) or a child of it (a shell then exits with 137),
// so any failure with an OOM kill in the run's cgroup counts. Without the
// kernel's counter (old v1), the evidence is weaker: a death by SIGKILL the
// backend did not send, with the memory usage having hit the limit.
func oomEnd(ev hostmgr.TaskEvent, sigkilled bool, limitMB int64, m memEnd) hostmgr.TaskEvent {
	if ev.State != pelotonv1.TaskState_FAILED || (ev.Reason != "signaled" && ev.Reason != "exit-nonzero") {
		return ev
	}
	limit := memoryLimitBytes(limitMB)
	switch {
	case m.oomKills > 0:
	case m.oomKills < 0 && sigkilled && limit > 0 && m.failcnt > 0 && m.maxUsage >= limit-limit/64:
	default:
		return ev
	}
	ev.Reason = ReasonOOMKilled
	if limit > 0 {
		ev.Message = fmt.Sprintf("memory limit %d MiB exceeded: the kernel's OOM killer ended the run (%s)", limitMB, ev.Message)
	} else {
		ev.Message = "the kernel's OOM killer ended the run: the machine ran out of memory (" + ev.Message + ")"
	}
	return ev
}

// recordCgroup is a run's cgroup in its record (adopt.go), so that a
// restarted backend can report on and remove it.
type recordCgroup struct {
	Version int    `json:"version"`
	Memory  string `json:"memory"`
	CPU     string `json:"cpu"`
	CPUAcct string `json:"cpuacct,omitempty"`
}

func (rc *runCgroup) toRecord() *recordCgroup {
	if rc == nil {
		return nil
	}
	return &recordCgroup{Version: rc.version, Memory: rc.memory, CPU: rc.cpu, CPUAcct: rc.cpuacct}
}

// recordedCgroup is the cgroup recorded for run taskID, if it still exists
// and looks like one this package made: the run's directories are named
// after it, under parents named cgroupPrefix..., on a cgroup file system.
// A record is only a file, and what it names is killed and removed.
func recordedCgroup(rec *runRecord) *runCgroup {
	c := rec.Cgroup
	if c == nil || (c.Version != 1 && c.Version != 2) || c.Memory == "" || c.CPU == "" {
		return nil
	}
	rc := &runCgroup{version: c.Version, memory: c.Memory, cpu: c.CPU, cpuacct: c.CPUAcct, memoryMB: max(rec.Resources.MemoryMB, 0)}
	for _, d := range rc.dirs() {
		if !filepath.IsAbs(d) || filepath.Clean(d) != d || filepath.Base(d) != rec.TaskID ||
			!strings.HasPrefix(filepath.Base(filepath.Dir(d)), cgroupPrefix) || !isCgroupDir(d) {
			return nil
		}
	}
	return rc
}

// CgroupDirs is where a run's cgroup is, for reading its usage.
type CgroupDirs struct {
	// Version is 2 for the unified hierarchy, 1 for the v1 hierarchies.
	Version int
	// Memory holds the run's memory.* files, and CPU its CPU usage (v2
	// cpu.stat, v1 cpuacct.usage). On v2 both are the run's one cgroup;
	// on v1 they are its cgroups in the memory and cpuacct hierarchies,
	// and CPU is "" where cpuacct is not mounted.
	Memory, CPU string
}

// RunCgroup tells where the cgroup of a live run is (adopted runs
// included), so the host agent can read its usage; ok is false for a run
// that is unknown, has ended, or has no cgroup (cgroups are not usable
// here). The directory is removed when the run ends: a reader must expect
// it to vanish.
func (b *Backend) RunCgroup(taskID string) (dirs CgroupDirs, ok bool) {
	t, ok := b.lookup(taskID)
	if !ok {
		return CgroupDirs{}, false
	}
	t.mu.Lock()
	rc, removed := t.cg, t.removed
	t.mu.Unlock()
	if rc == nil || removed || isClosed(t.exited) {
		return CgroupDirs{}, false
	}
	cpu := rc.cpuacct
	if rc.version == 2 {
		cpu = rc.memory
	}
	return CgroupDirs{Version: rc.version, Memory: rc.memory, CPU: cpu}, true
}

// dropCgroup removes the cgroup of a run that has ended, killing what is
// left in it. The parent of a cgroup adopted from an earlier backend whose
// parent was elsewhere (its process ran in another cgroup) goes too, once
// empty.
func (b *Backend) dropCgroup(rc *runCgroup, taskID string) {
	if rc == nil {
		return
	}
	if err := rc.remove(); err != nil {
		b.log.Warn("could not remove a run's cgroup", "task", taskID, "err", err)
		return
	}
	var ours []string
	if b.cg != nil {
		ours = b.cg.parents()
	}
	cgroupOps <- struct{}{}
	defer func() { <-cgroupOps }()
	for _, d := range rc.dirs() {
		if p := filepath.Dir(d); !slices.Contains(ours, p) {
			_ = os.Remove(p)
		}
	}
}
