package hostagent

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// runCgroups reads a run's usage from its own cgroup where it has one (a
// Kubernetes container, a local run with limits): the kernel accounts
// every process that ever ran in it, reaped or not, and counts shared pages
// once, where the process tree's sum does neither.
//
// A run's cgroup is the one its earliest process is in, as
// /proc/<pid>/cgroup says, and it is the run's own only when every process
// in it is one of the run's: a run in a cgroup it shares (a session's, the
// root) is measured by its processes as before. Paths a cgroup namespace
// hides ("/.."), and the root cgroup, are never a run's own.
type runCgroups struct {
	// root is where the cgroup hierarchies are mounted (/sys/fs/cgroup
	// under the agent's root).
	root string
	// dirs caches, by the run's earliest process, where its cgroup is;
	// an entry with no dirs says it has none of its own.
	dirs map[procKey]runCgroup
	seen uint64
}

// procKey identifies a process across pid reuse.
type procKey struct {
	pid   int
	start uint64
}

// runCgroup is where one run's counters are: v2 has one directory; v1
// one per controller.
type runCgroup struct {
	v2              string
	cpuacct, memory string
	seen            uint64
}

func (c runCgroup) none() bool { return c.v2 == "" && (c.cpuacct == "" || c.memory == "") }

// procsDir is the directory whose cgroup.procs lists the cgroup's members.
func (c runCgroup) procsDir() string {
	if c.v2 != "" {
		return c.v2
	}
	return c.cpuacct
}

// sample reads the run with processes pids (ascending), the earliest
// first, from its cgroup; ok is false when it has none of its own or the
// cgroup could not be read.
func (r *runCgroups) sample(procRoot string, first procKey, pids []int, now time.Time) (Sample, bool) {
	if r.dirs == nil {
		r.dirs = make(map[procKey]runCgroup)
	}
	cg, ok := r.dirs[first]
	if !ok {
		cg = r.resolve(procRoot, first.pid)
	}
	cg.seen = r.seen
	r.dirs[first] = cg
	if cg.none() || !onlyMembers(filepath.Join(cg.procsDir(), "cgroup.procs"), pids) {
		return Sample{}, false
	}
	var s Sample
	var err error
	if cg.v2 != "" {
		s, err = ReadCgroup2(cg.v2, now)
	} else {
		s, err = ReadCgroup1(cg.cpuacct, cg.memory, now)
	}
	return s, err == nil
}

// next starts a reading cycle; forget drops what the cycle did not use.
func (r *runCgroups) next() { r.seen++ }

func (r *runCgroups) forget() {
	for k, c := range r.dirs {
		if c.seen != r.seen {
			delete(r.dirs, k)
		}
	}
}

// resolve finds pid's cgroup directories under r.root from
// /proc/<pid>/cgroup: the v2 line ("0::/path") where the unified
// hierarchy has a cpu.stat there, else the v1 cpuacct and memory lines.
func (r *runCgroups) resolve(procRoot string, pid int) runCgroup {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "cgroup"))
	if err != nil || len(b) > 64<<10 {
		return runCgroup{}
	}
	var cg runCgroup
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		id, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		controllers, path, ok := strings.Cut(rest, ":")
		if !ok || path == "/" || !strings.HasPrefix(path, "/") || strings.Contains(path, "/..") {
			continue
		}
		switch {
		case id == "0" && controllers == "":
			for _, mount := range []string{r.root, filepath.Join(r.root, "unified")} {
				dir := filepath.Join(mount, path)
				if exists(filepath.Join(dir, "cpu.stat")) && exists(filepath.Join(dir, "memory.current")) {
					cg.v2 = dir
					break
				}
			}
		case hasController(controllers, "cpuacct"):
			for _, mount := range []string{controllers, "cpuacct", "cpu,cpuacct"} {
				dir := filepath.Join(r.root, mount, path)
				if exists(filepath.Join(dir, "cpuacct.usage")) {
					cg.cpuacct = dir
					break
				}
			}
		case hasController(controllers, "memory"):
			if dir := filepath.Join(r.root, "memory", path); exists(filepath.Join(dir, "memory.usage_in_bytes")) {
				cg.memory = dir
			}
		}
	}
	if cg.v2 != "" {
		cg.cpuacct, cg.memory = "", ""
	}
	return cg
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// cgroupProcsMax bounds what is read of a cgroup.procs: a run's own cgroup
// lists its few processes, and a longer list is a cgroup it shares.
const cgroupProcsMax = 64 << 10

// onlyMembers says whether the cgroup.procs file at path lists at least one
// process and none but pids (ascending).
func onlyMembers(path string, pids []int) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n, size := 0, 0
	for sc.Scan() {
		size += len(sc.Bytes()) + 1
		if size > cgroupProcsMax {
			return false
		}
		pid, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
		if err != nil {
			return false
		}
		if _, ok := slices.BinarySearch(pids, pid); !ok {
			return false
		}
		n++
	}
	return sc.Err() == nil && n > 0
}
