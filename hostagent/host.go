package hostagent

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Source names, as HostReader.Source and HostReader.MemorySource report them.
const (
	// SourceCgroup2 is the unified cgroup hierarchy at sys/fs/cgroup.
	SourceCgroup2 = "cgroup2"
	// SourceCgroup1 is the legacy hierarchy: sys/fs/cgroup/cpuacct and sys/fs/cgroup/memory.
	SourceCgroup1 = "cgroup1"
	// SourceProc is /proc/stat for CPU and /proc/meminfo for memory.
	SourceProc = "proc"
)

// userHZ is the unit of the tick counters in /proc/stat and /proc/<pid>/stat.
// The kernel converts its internal jiffies to USER_HZ before exporting them,
// and USER_HZ is 100 on every architecture Linux supports (the value is fixed
// by the ABI; sysconf(_SC_CLK_TCK) returns it). Hard-coding it avoids cgo
// for a constant that cannot change without breaking every tool that reads
// /proc.
const userHZ = 100

// Errors HostUsage returns when two samples cannot give a usage. Callers
// skip the interval and keep cur as the next prev.
var (
	// ErrNoInterval: prev is the zero Sample, or cur was not read after prev.
	ErrNoInterval = errors.New("no interval between samples")
	// ErrCounterReset: the CPU counter went down between samples (the cgroup
	// was re-created, a process in the tree exited unreaped, the host rebooted).
	ErrCounterReset = errors.New("cpu counter went down between samples")
)

// Sample is one reading of cumulative counters, from the host, a process
// tree or a cgroup. Only differences between two Samples of the same source
// mean anything for CPU; memory is a point-in-time value.
type Sample struct {
	// CPUSeconds is the CPU time used since the counter began (boot, cgroup
	// creation, process start), in seconds summed over all cores.
	CPUSeconds float64
	// MemUsed is memory in use in bytes, page cache that the kernel can drop
	// at once (inactive file pages) not counted.
	MemUsed uint64
	// MemAvailable is how many more bytes the source could use: for a host,
	// what is left of its memory; for a cgroup with a memory limit, limit −
	// used. It is 0 where the source does not know (a process tree, a cgroup
	// without a limit).
	MemAvailable uint64
	// Time is when the sample was read, as passed in by the caller.
	Time time.Time
	// Began is when the CPU counter began, where the source knows it (a
	// process tree: its earliest process's start), else zero. It lets a
	// run first seen in this reading be measured at once, from its start.
	Began time.Time
}

// Usage is what was used over the interval between two Samples.
type Usage struct {
	// CPUCores is the average CPU used over the interval, in cores
	// (1.5 = one and a half cores busy the whole time).
	CPUCores float64
	// MemUsed and MemAvailable are the later sample's values, in bytes.
	MemUsed      uint64
	MemAvailable uint64
	// Interval is the wall time between the samples.
	Interval time.Duration
}

// HostUsage returns the usage between prev and cur, two Samples from the same
// source (host, process tree or cgroup: the name is historical, the
// arithmetic is the same). CPU is delta CPU seconds over delta wall seconds.
//
// It returns an error instead of a number when there is no honest number:
// ErrNoInterval when prev is the zero Sample or cur is not later than prev,
// ErrCounterReset when the CPU counter went down. An error, not a zero Usage,
// because zero cores is a real reading (an idle task) and must not be
// confused with "unknown".
func HostUsage(prev, cur Sample) (Usage, error) {
	if prev.Time.IsZero() || !cur.Time.After(prev.Time) {
		return Usage{}, ErrNoInterval
	}
	if cur.CPUSeconds < prev.CPUSeconds {
		return Usage{}, ErrCounterReset
	}
	wall := cur.Time.Sub(prev.Time)
	return Usage{
		CPUCores:     (cur.CPUSeconds - prev.CPUSeconds) / wall.Seconds(),
		MemUsed:      cur.MemUsed,
		MemAvailable: cur.MemAvailable,
		Interval:     wall,
	}, nil
}

// HostReader reads host usage from the source detected under its root.
// Detection happens once, in NewHostReader; a Read after the files went away
// is an error, not a silent switch of source (numbers from two sources do not
// subtract).
type HostReader struct {
	root      string
	cpuSource string
	memSource string
}

// NewHostReader detects the usage source under root ("" means "/"). For CPU
// it tries, in order:
//
//  1. cgroup v2: sys/fs/cgroup/cgroup.controllers and sys/fs/cgroup/cpu.stat
//     exist (the root cgroup's cpu.stat carries usage_usec since kernel 5.x);
//  2. cgroup v1: sys/fs/cgroup/cpuacct/cpuacct.usage exists;
//  3. proc: proc/stat exists.
//
// cgroup v2 wins over v1 because on a hybrid host the v1 controllers may still
// be mounted beside v2, and v2 is what the kernel accounts into first. A
// hybrid host whose v2 tree sits at sys/fs/cgroup/unified has no
// cgroup.controllers at sys/fs/cgroup and so reads v1, where its controllers
// are.
//
// Memory comes from the same cgroup when its root has the accounting files
// (memory.current on v2, memory/memory.usage_in_bytes on v1), and from
// proc/meminfo otherwise: the v2 root cgroup has no memory.current on many
// kernels. proc/meminfo must exist in every case, since the host's total
// memory comes from it.
func NewHostReader(root string) (*HostReader, error) {
	if root == "" {
		root = "/"
	}
	r := &HostReader{root: root}
	switch {
	case exists(r.path("sys/fs/cgroup/cgroup.controllers")) && exists(r.path("sys/fs/cgroup/cpu.stat")):
		r.cpuSource = SourceCgroup2
		r.memSource = SourceProc
		if exists(r.path("sys/fs/cgroup/memory.current")) {
			r.memSource = SourceCgroup2
		}
	case exists(r.path("sys/fs/cgroup/cpuacct/cpuacct.usage")):
		r.cpuSource = SourceCgroup1
		r.memSource = SourceProc
		if exists(r.path("sys/fs/cgroup/memory/memory.usage_in_bytes")) {
			r.memSource = SourceCgroup1
		}
	case exists(r.path("proc/stat")):
		r.cpuSource = SourceProc
		r.memSource = SourceProc
	default:
		return nil, fmt.Errorf("hostagent: no usage source under %s: none of sys/fs/cgroup (v2), sys/fs/cgroup/cpuacct (v1), proc/stat", root)
	}
	if !exists(r.path("proc/meminfo")) {
		return nil, fmt.Errorf("hostagent: %s missing: host memory total unknown", r.path("proc/meminfo"))
	}
	return r, nil
}

// Source is where CPU is read from: SourceCgroup2, SourceCgroup1 or SourceProc.
func (r *HostReader) Source() string { return r.cpuSource }

// MemorySource is where memory is read from; SourceProc when the cgroup root
// has no memory accounting files.
func (r *HostReader) MemorySource() string { return r.memSource }

// Read reads one Sample from the detected source, stamped with now.
func (r *HostReader) Read(now time.Time) (Sample, error) {
	s := Sample{Time: now}
	var err error
	switch r.cpuSource {
	case SourceCgroup2:
		s.CPUSeconds, err = readCgroup2CPU(r.path("sys/fs/cgroup"))
	case SourceCgroup1:
		s.CPUSeconds, err = readCgroup1CPU(r.path("sys/fs/cgroup/cpuacct"))
	default:
		s.CPUSeconds, err = readProcStatCPU(r.path("proc/stat"))
	}
	if err != nil {
		return Sample{}, err
	}
	mi, err := readMeminfo(r.path("proc/meminfo"))
	if err != nil {
		return Sample{}, err
	}
	switch r.memSource {
	case SourceCgroup2:
		used, limit, err := readCgroup2Mem(r.path("sys/fs/cgroup"))
		if err != nil {
			return Sample{}, err
		}
		s.MemUsed, s.MemAvailable = hostMem(used, limit, mi.total)
	case SourceCgroup1:
		used, limit, err := readCgroup1Mem(r.path("sys/fs/cgroup/memory"))
		if err != nil {
			return Sample{}, err
		}
		s.MemUsed, s.MemAvailable = hostMem(used, limit, mi.total)
	default:
		// MemAvailable is the kernel's own estimate of what can be given to
		// a new workload without swapping (free plus reclaimable cache); it
		// is better than anything we could add up from the other lines.
		s.MemUsed = satSub(mi.total, mi.available)
		s.MemAvailable = mi.available
	}
	return s, nil
}

// Capacity is what the host has, as the usage Read returns is counted
// against: the CPUs online (the cpuN lines of proc/stat) and MemTotal of
// proc/meminfo, each bounded by the limits of the cgroup Read reads from
// (a CPU quota, cpu.max on v2 or cpu.cfs_quota_us on v1; a memory limit),
// so that an agent in a container with its own cgroup root measures use
// and capacity alike. runtime.NumCPU would count this process's CPU
// affinity instead, which is not the host's.
func (r *HostReader) Capacity() (Resources, error) {
	cpus, err := countCPUs(r.path("proc/stat"))
	if err != nil {
		return Resources{}, err
	}
	var quota float64
	switch r.cpuSource {
	case SourceCgroup2:
		quota, err = readCgroup2Quota(r.path("sys/fs/cgroup/cpu.max"))
	case SourceCgroup1:
		quota, err = readCgroup1Quota(r.path("sys/fs/cgroup/cpu"))
	}
	if err != nil {
		return Resources{}, err
	}
	c := Resources{CPU: float64(cpus)}
	if quota > 0 && quota < c.CPU {
		c.CPU = quota
	}
	mi, err := readMeminfo(r.path("proc/meminfo"))
	if err != nil {
		return Resources{}, err
	}
	var limit uint64
	switch r.memSource {
	case SourceCgroup2:
		limit, err = readLimit(r.path("sys/fs/cgroup/memory.max"))
	case SourceCgroup1:
		limit, err = readLimit(r.path("sys/fs/cgroup/memory/memory.limit_in_bytes"))
	}
	if err != nil {
		return Resources{}, err
	}
	used, avail := hostMem(0, limit, mi.total)
	c.MemoryMB = mib(used + avail)
	return c, nil
}

// countCPUs counts the per-CPU lines (cpu0, cpu1, ...) of /proc/stat: the
// CPUs online.
func countCPUs(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n := 0
	for line := range bytes.Lines(b) {
		name, _, _ := bytes.Cut(line, []byte(" "))
		if len(name) > 3 && bytes.HasPrefix(name, []byte("cpu")) {
			if _, err := strconv.Atoi(string(name[3:])); err == nil {
				n++
			}
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("hostagent: %s: no per-cpu lines", path)
	}
	return n, nil
}

// readCgroup2Quota reads a v2 cpu.max, "$MAX $PERIOD", in cores; 0 when it
// is "max" or absent (the root cgroup has none).
func readCgroup2Quota(path string) (float64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 || f[0] == "max" {
		return 0, nil
	}
	quota, err1 := strconv.ParseUint(f[0], 10, 64)
	period := uint64(100000) // the kernel's default when only the quota is written
	var err2 error
	if len(f) > 1 {
		period, err2 = strconv.ParseUint(f[1], 10, 64)
	}
	if err1 != nil || err2 != nil || period == 0 {
		return 0, fmt.Errorf("hostagent: %s: not a quota: %q", path, bytes.TrimSpace(b))
	}
	return float64(quota) / float64(period), nil
}

// readCgroup1Quota reads cpu.cfs_quota_us over cpu.cfs_period_us in dir, in
// cores; 0 when the quota is -1 (none) or the files are absent.
func readCgroup1Quota(dir string) (float64, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	q, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("hostagent: %s/cpu.cfs_quota_us: %q is not a quota", dir, bytes.TrimSpace(b))
	}
	if q <= 0 {
		return 0, nil
	}
	period, err := readUintFile(filepath.Join(dir, "cpu.cfs_period_us"))
	if err != nil {
		return 0, err
	}
	if period == 0 {
		return 0, fmt.Errorf("hostagent: %s/cpu.cfs_period_us: 0", dir)
	}
	return float64(q) / float64(period), nil
}

func (r *HostReader) path(rel string) string { return filepath.Join(r.root, rel) }

// hostMem turns a cgroup's working set and limit into host used/available.
// The root cgroup's limit is "unlimited" (v2: no memory.max; v1: a huge
// number), and inside a container it is the container's; the host cannot
// give more than its RAM either way, so the smaller of the two bounds it.
func hostMem(used, limit, total uint64) (uint64, uint64) {
	if limit == 0 || limit > total {
		limit = total
	}
	return used, satSub(limit, used)
}

// readCgroup2CPU reads usage_usec from dir/cpu.stat, in seconds.
func readCgroup2CPU(dir string) (float64, error) {
	usec, err := readKeyed(filepath.Join(dir, "cpu.stat"), "usage_usec")
	if err != nil {
		return 0, err
	}
	return float64(usec) / 1e6, nil
}

// readCgroup1CPU reads dir/cpuacct.usage (nanoseconds), in seconds.
func readCgroup1CPU(dir string) (float64, error) {
	ns, err := readUintFile(filepath.Join(dir, "cpuacct.usage"))
	if err != nil {
		return 0, err
	}
	return float64(ns) / 1e9, nil
}

// readCgroup2Mem returns the working set (memory.current − inactive_file)
// and the limit of a v2 cgroup, 0 when memory.max is "max" or absent.
//
// Inactive file pages are page cache the kernel drops first, without I/O
// and before it reclaims anything else; counting them would make every host
// with a warm cache look full. This is the same working set the kubelet and
// cAdvisor report, so numbers agree with what operators already see.
func readCgroup2Mem(dir string) (used, limit uint64, err error) {
	cur, err := readUintFile(filepath.Join(dir, "memory.current"))
	if err != nil {
		return 0, 0, err
	}
	inactive, err := readKeyed(filepath.Join(dir, "memory.stat"), "inactive_file")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, 0, err
	}
	limit, err = readLimit(filepath.Join(dir, "memory.max"))
	if err != nil {
		return 0, 0, err
	}
	return satSub(cur, inactive), limit, nil
}

// readCgroup1Mem is readCgroup2Mem for v1: memory.usage_in_bytes minus
// total_inactive_file (the hierarchical counter, so a parent cgroup
// subtracts its children's cache too), and memory.limit_in_bytes.
func readCgroup1Mem(dir string) (used, limit uint64, err error) {
	usage, err := readUintFile(filepath.Join(dir, "memory.usage_in_bytes"))
	if err != nil {
		return 0, 0, err
	}
	inactive, err := readKeyed(filepath.Join(dir, "memory.stat"), "total_inactive_file")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, 0, err
	}
	limit, err = readLimit(filepath.Join(dir, "memory.limit_in_bytes"))
	if err != nil {
		return 0, 0, err
	}
	return satSub(usage, inactive), limit, nil
}

// readLimit reads a memory limit file: a number, "max" (v2, no limit) or
// absent (the root cgroup). No limit is 0.
func readLimit(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("hostagent: %s: not a limit: %q", path, s)
	}
	return v, nil
}

// readProcStatCPU sums the busy columns of the aggregate "cpu" line of
// /proc/stat, in seconds.
//
// Busy is user + nice + system + irq + softirq. idle and iowait are not
// work; steal is time the hypervisor gave to someone else (and cgroup
// accounting, the other sources, does not count it either); guest and
// guest_nice are already inside user and nice, so adding them would count
// a VM's time twice.
func readProcStatCPU(path string) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || fields[0] != "cpu" {
			continue
		}
		// cpu user nice system idle iowait irq softirq ...; kernels before
		// 2.6.0 stop after idle, and those are long gone, so demand irq
		// and softirq.
		if len(fields) < 8 {
			return 0, fmt.Errorf("hostagent: %s: cpu line has %d columns, want at least 7", path, len(fields)-1)
		}
		var ticks uint64
		for _, i := range []int{1, 2, 3, 6, 7} {
			v, err := strconv.ParseUint(fields[i], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("hostagent: %s: cpu column %d: %q is not a number", path, i, fields[i])
			}
			ticks += v
		}
		return float64(ticks) / userHZ, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("hostagent: %s: no aggregate cpu line", path)
}

type meminfo struct {
	total, available uint64 // bytes
}

// readMeminfo reads MemTotal and MemAvailable (kB in the file) in bytes.
// MemAvailable exists since Linux 3.14; older kernels are an error rather
// than a guess.
func readMeminfo(path string) (meminfo, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return meminfo{}, err
	}
	var mi meminfo
	var haveTotal, haveAvail bool
	for line := range bytes.Lines(b) {
		key, rest, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		var dst *uint64
		switch string(key) {
		case "MemTotal":
			dst, haveTotal = &mi.total, true
		case "MemAvailable":
			dst, haveAvail = &mi.available, true
		default:
			continue
		}
		f := strings.Fields(string(rest))
		if len(f) == 0 {
			return meminfo{}, fmt.Errorf("hostagent: %s: %s has no value", path, key)
		}
		v, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return meminfo{}, fmt.Errorf("hostagent: %s: %s: %q is not a number", path, key, f[0])
		}
		mult := uint64(1)
		if len(f) > 1 && f[1] == "kB" {
			mult = 1024
		}
		*dst = satMul(v, mult)
	}
	switch {
	case !haveTotal:
		return meminfo{}, fmt.Errorf("hostagent: %s: no MemTotal", path)
	case !haveAvail:
		return meminfo{}, fmt.Errorf("hostagent: %s: no MemAvailable (kernel older than 3.14?)", path)
	}
	return mi, nil
}

// readKeyed returns the value of key in a "key value" per line file
// (cpu.stat, memory.stat). A missing key is an error wrapping fs.ErrNotExist
// so callers can tell "not accounted" from "unreadable".
func readKeyed(path, key string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for line := range bytes.Lines(b) {
		f := strings.Fields(string(line))
		if len(f) == 2 && f[0] == key {
			v, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("hostagent: %s: %s: %q is not a number", path, key, f[1])
			}
			return v, nil
		}
	}
	return 0, fmt.Errorf("hostagent: %s: no %s: %w", path, key, fs.ErrNotExist)
}

// readUintFile reads a file holding one unsigned number.
func readUintFile(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("hostagent: %s: %q is not a number", path, s)
	}
	return v, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func satSub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

func satMul(a, b uint64) uint64 {
	if a != 0 && b > math.MaxUint64/a {
		return math.MaxUint64
	}
	return a * b
}
