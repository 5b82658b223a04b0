package hostagent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// procStat is what we use of one /proc/<pid>/stat line.
type procStat struct {
	pid, ppid      int
	pgrp           int // process group id
	comm           string
	utime, stime   uint64 // ticks (USER_HZ) spent by the process itself
	cutime, cstime uint64 // ticks of its waited-for children
	start          uint64 // ticks after boot when the process was forked
	rss            uint64 // pages
	// envStart and envEnd are the addresses of the environment block the
	// process was exec'd with (0 on kernels before 3.5, for kernel threads
	// and zombies, and where the reader may not see them: the kernel shows
	// them only to who may read /proc/<pid>/environ too).
	envStart, envEnd uint64
}

// Field numbers of /proc/<pid>/stat (proc(5), counted from 1).
const (
	statPPID   = 4
	statPgrp   = 5
	statUtime  = 14
	statStime  = 15
	statCutime = 16
	statCstime = 17
	statStart  = 22
	statRSS    = 24
	// Since Linux 3.5; optional.
	statEnvStart = 50
	statEnvEnd   = 51
)

// parseStat parses one /proc/<pid>/stat line.
//
// Field 2, comm, is the executable name in parentheses, and the name is
// whatever the process chose: it may hold spaces and ')' ("(my (weird)
// proc)"). Splitting on spaces, or cutting at the first ')', misreads every
// later field for such a process. The kernel never puts ')' after comm, so
// the last ')' on the line closes it; fields 3 onward follow it, separated
// by single spaces.
func parseStat(line []byte) (procStat, error) {
	open := bytes.IndexByte(line, '(')
	closing := bytes.LastIndexByte(line, ')')
	if open < 0 || closing < open {
		return procStat{}, fmt.Errorf("stat line has no (comm): %.80q", line)
	}
	var st procStat
	pid, err := strconv.Atoi(string(bytes.TrimSpace(line[:open])))
	if err != nil {
		return procStat{}, fmt.Errorf("stat line: pid %q is not a number", bytes.TrimSpace(line[:open]))
	}
	st.pid = pid
	st.comm = string(line[open+1 : closing])

	// rest[0] is field 3 (state). The fields we read end at statEnvEnd;
	// a fixed array rather than bytes.Fields keeps a cycle over every
	// process on the host from allocating a slice per process.
	var restArr [statEnvEnd - 2][]byte
	rest := restArr[:0]
	for f := range bytes.FieldsSeq(line[closing+1:]) {
		if len(rest) == len(restArr) {
			break
		}
		rest = append(rest, f)
	}
	num := func(n int) (uint64, error) {
		if n-3 >= len(rest) {
			return 0, fmt.Errorf("stat line of pid %d has %d fields, want at least %d", pid, len(rest)+2, n)
		}
		// utime and stime are %lu; ppid, cutime, cstime and rss are %ld in
		// proc(5), but none is ever negative, so a negative one means we
		// are not reading what we think we are.
		v, err := strconv.ParseUint(string(rest[n-3]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("stat line of pid %d: field %d: %q is not a count", pid, n, rest[n-3])
		}
		return v, nil
	}
	var ppid, pgrp uint64
	for _, f := range []struct {
		n   int
		dst *uint64
	}{
		{statPPID, &ppid},
		{statPgrp, &pgrp},
		{statUtime, &st.utime},
		{statStime, &st.stime},
		{statCutime, &st.cutime},
		{statCstime, &st.cstime},
		{statStart, &st.start},
		{statRSS, &st.rss},
	} {
		if *f.dst, err = num(f.n); err != nil {
			return procStat{}, err
		}
	}
	st.ppid, st.pgrp = int(ppid), int(pgrp)
	if len(rest) > statEnvEnd-3 {
		if st.envStart, err = num(statEnvStart); err != nil {
			return procStat{}, err
		}
		if st.envEnd, err = num(statEnvEnd); err != nil {
			return procStat{}, err
		}
	}
	return st, nil
}

// ProcSnapshot is one pass over every process under a proc root: each
// process's stat line, indexed by pid and by parent. Read it once per
// reporting cycle and ask it for as many task trees as there are tasks on
// the host; reading /proc once per task instead would cost tasks × processes
// file reads each cycle.
type ProcSnapshot struct {
	procs    map[int]procStat
	children map[int][]int
	time     time.Time
	// boot is when the host booted, by the wall clock (now less the
	// uptime the proc root says), zero where it does not say: processes'
	// start times are kept in time since boot.
	boot time.Time
}

// ReadProcs reads /proc/<pid>/stat for every process under procRoot (usually
// "/proc") and stamps the snapshot with now.
//
// Processes come and go while we read: one that vanished between listing
// the directory and opening its stat file is skipped, not an error. Only
// thread-group leaders are listed in /proc, and a leader's stat already
// holds all its threads' times, so threads are neither missed nor counted
// twice.
func ReadProcs(procRoot string, now time.Time) (*ProcSnapshot, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("hostagent: read %s: %w", procRoot, err)
	}
	s := &ProcSnapshot{
		procs:    make(map[int]procStat, len(entries)),
		children: make(map[int][]int, len(entries)),
		time:     now,
		boot:     bootTime(procRoot, now),
	}
	// One buffer for every stat file, rather than one allocation per
	// process per cycle: a stat line is a few hundred bytes.
	buf := make([]byte, 0, 1024)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue // self, meminfo, sys, ...
		}
		path := filepath.Join(procRoot, e.Name(), "stat")
		buf, err = readFileInto(path, buf[:0], statMax)
		if err != nil {
			// ENOENT: gone before we opened it; ESRCH: gone while we
			// read it.
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
				continue
			}
			return nil, fmt.Errorf("hostagent: %w", err)
		}
		st, err := parseStat(buf)
		if err != nil {
			return nil, fmt.Errorf("hostagent: %s: %w", path, err)
		}
		s.procs[pid] = st
		s.children[st.ppid] = append(s.children[st.ppid], pid)
	}
	return s, nil
}

// Tree returns pid and all its descendants, pid first, then breadth first
// with siblings in pid order, or nil when pid is not in the snapshot.
func (s *ProcSnapshot) Tree(pid int) []int {
	if _, ok := s.procs[pid]; !ok {
		return nil
	}
	tree := []int{pid}
	// A pid is only ever added once: parent links form a tree in a
	// consistent snapshot, but a snapshot is not atomic (a pid may be
	// reused while we read), so guard against a cycle anyway.
	seen := map[int]bool{pid: true}
	for i := 0; i < len(tree); i++ {
		kids := slices.Clone(s.children[tree[i]])
		slices.Sort(kids)
		for _, k := range kids {
			if !seen[k] {
				seen[k] = true
				tree = append(tree, k)
			}
		}
	}
	return tree
}

// Sample sums CPU and RSS over pid's process tree. It is an error when pid is
// not in the snapshot (the task's root process is gone).
//
// CPU is utime + stime + cutime + cstime of every process in the tree. The
// children's columns hold the time of children that exited and were
// waited for; without them the tree's counter would drop each time a
// short-lived child (a shell's command, a worker) exits, and HostUsage
// would see a reset every cycle for a task that runs commands. A child
// that exits and is reaped by a process outside the tree (orphaned to init)
// still takes its time away; HostUsage reports that as ErrCounterReset.
//
// Memory is the sum of RSS (field 24 of stat, the same counter as the
// second field of statm and VmRSS in status, read from the line we already
// have). Pages shared between processes of the tree (after fork, shared
// libraries, shared memory) are counted once per process, so this
// over-counts; a task with its own cgroup is measured exactly with
// ReadCgroup2/ReadCgroup1. MemAvailable is 0: a process tree has no limit
// of its own.
func (s *ProcSnapshot) Sample(pid int) (Sample, error) {
	tree := s.Tree(pid)
	if tree == nil {
		return Sample{}, fmt.Errorf("hostagent: process %d not found", pid)
	}
	return s.sum(tree), nil
}

// sum is the Sample of the processes pids, those not in the snapshot
// skipped. See Sample for what is counted.
func (s *ProcSnapshot) sum(pids []int) Sample {
	var cpuTicks, pages uint64
	first := uint64(math.MaxUint64)
	for _, p := range pids {
		st, ok := s.procs[p]
		if !ok {
			continue
		}
		cpuTicks += st.ticks()
		pages += st.rss
		first = min(first, st.start)
	}
	sample := Sample{
		CPUSeconds: float64(cpuTicks) / userHZ,
		MemUsed:    satMul(pages, uint64(os.Getpagesize())),
		Time:       s.time,
	}
	if !s.boot.IsZero() && first != math.MaxUint64 {
		sample.Began = s.boot.Add(ticks(first))
	}
	return sample
}

// bootTime is when the host booted by the wall clock, from the proc root's
// uptime file read at now; zero when there is no such file or it says
// nothing readable.
func bootTime(procRoot string, now time.Time) time.Time {
	b, err := os.ReadFile(filepath.Join(procRoot, "uptime"))
	if err != nil {
		return time.Time{}
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return time.Time{}
	}
	up, err := strconv.ParseFloat(f[0], 64)
	if err != nil || up <= 0 {
		return time.Time{}
	}
	return now.Add(-time.Duration(up * float64(time.Second)))
}

// ticks is the CPU time of the process and of the children it waited for.
func (st procStat) ticks() uint64 { return st.utime + st.stime + st.cutime + st.cstime }

// statMax bounds a stat line: 52 numbers of at most 20 digits and a comm of
// at most 64 bytes (TASK_COMM_LEN is 16; kernel threads show longer names)
// fit in well under 2 KiB, so a longer file is not a stat line.
const statMax = 4 << 10

// readFileInto reads path into buf (reusing its capacity) and returns it.
// limit bytes or more is an error: the file is not what we expect, and we
// do not hold an arbitrary amount of it in memory.
func readFileInto(path string, buf []byte, limit int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return buf, err
	}
	defer f.Close()
	buf, err = readBounded(f, buf, limit)
	if err != nil {
		return buf, err
	}
	if len(buf) == limit {
		return buf, fmt.Errorf("%s: %d bytes or more", path, limit)
	}
	return buf, nil
}

// readBounded reads what r holds, up to limit bytes, into buf[:0], growing
// buf as needed, and returns it. It stops at EOF or at limit bytes,
// whichever comes first; a caller that must know whether there was more
// compares len with limit.
func readBounded(r io.Reader, buf []byte, limit int) ([]byte, error) {
	buf = buf[:0]
	for len(buf) < limit {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(limit, max(2*cap(buf), 512))-len(buf))
		}
		n, err := r.Read(buf[len(buf):min(cap(buf), limit)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// ReadProcessTree reads the snapshot and samples pid's tree in one call, for
// a caller that measures a single task.
func ReadProcessTree(procRoot string, pid int, now time.Time) (Sample, error) {
	s, err := ReadProcs(procRoot, now)
	if err != nil {
		return Sample{}, err
	}
	return s.Sample(pid)
}

// ReadCgroup2 reads a task's Sample from its cgroup v2 directory: CPU from
// cpu.stat usage_usec, memory from memory.current minus inactive_file (see
// readCgroup2Mem for why), available = memory.max − used when the cgroup
// has a limit.
//
// Prefer it to the process tree when the task has a cgroup: the kernel
// accounts every process that ever ran in it, reaped or not, and counts
// shared pages once.
func ReadCgroup2(dir string, now time.Time) (Sample, error) {
	cpu, err := readCgroup2CPU(dir)
	if err != nil {
		return Sample{}, fmt.Errorf("hostagent: cgroup %s: %w", dir, err)
	}
	used, limit, err := readCgroup2Mem(dir)
	if err != nil {
		return Sample{}, fmt.Errorf("hostagent: cgroup %s: %w", dir, err)
	}
	return cgroupSample(cpu, used, limit, now), nil
}

// ReadCgroup1 is ReadCgroup2 for cgroup v1, where a task's cgroup is one
// directory per controller: cpuacctDir holds cpuacct.usage (ns), memoryDir
// memory.usage_in_bytes, memory.stat and memory.limit_in_bytes.
func ReadCgroup1(cpuacctDir, memoryDir string, now time.Time) (Sample, error) {
	cpu, err := readCgroup1CPU(cpuacctDir)
	if err != nil {
		return Sample{}, fmt.Errorf("hostagent: cgroup %s: %w", cpuacctDir, err)
	}
	used, limit, err := readCgroup1Mem(memoryDir)
	if err != nil {
		return Sample{}, fmt.Errorf("hostagent: cgroup %s: %w", memoryDir, err)
	}
	return cgroupSample(cpu, used, limit, now), nil
}

// cgroupUnlimited is the smallest v1 memory.limit_in_bytes we treat as "no
// limit": v1 writes "unlimited" as the largest page-aligned int64
// (9223372036854771712), and no machine has 2^62 bytes.
const cgroupUnlimited = 1 << 62

func cgroupSample(cpu float64, used, limit uint64, now time.Time) Sample {
	s := Sample{CPUSeconds: cpu, MemUsed: used, Time: now}
	if limit != 0 && limit < cgroupUnlimited {
		s.MemAvailable = satSub(limit, used)
	}
	return s
}
