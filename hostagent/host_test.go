package hostagent

import (
	"errors"
	"math"
	"os"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// Fixture host trees, one per source. Each is a complete host of its kind;
// tests add or remove files to build the in-between cases.

func cgroup2Host(t *testing.T) *fsTree {
	return newTree(t).
		file("sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n").
		file("sys/fs/cgroup/cpu.stat", "usage_usec 12345678\nuser_usec 10000000\nsystem_usec 2345678\nnr_periods 0\n").
		file("sys/fs/cgroup/memory.current", "3221225472\n").
		file("sys/fs/cgroup/memory.stat", "anon 1073741824\nfile 2147483648\ninactive_anon 0\nactive_file 1073741824\ninactive_file 1073741824\n").
		file("proc/stat", procStatText(1, 2, 3, 4, 5, 6, 7, 8, 0, 0)).
		file("proc/meminfo", meminfoText(8*giB, 5*giB))
}

func cgroup1Host(t *testing.T) *fsTree {
	return newTree(t).
		file("sys/fs/cgroup/cpuacct/cpuacct.usage", "2500000000\n").
		file("sys/fs/cgroup/memory/memory.usage_in_bytes", "3221225472\n").
		file("sys/fs/cgroup/memory/memory.stat", "cache 2147483648\nrss 1073741824\ninactive_file 5\ntotal_cache 2147483648\ntotal_inactive_file 1073741824\n").
		file("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n").
		file("proc/stat", procStatText(1, 2, 3, 4, 5, 6, 7, 8, 0, 0)).
		file("proc/meminfo", meminfoText(8*giB, 5*giB))
}

func procHost(t *testing.T) *fsTree {
	// busy = user 100 + nice 20 + system 30 + irq 5 + softirq 5 = 160 ticks;
	// idle 1000, iowait 50, steal 7, guest 11 must not count.
	return newTree(t).
		file("proc/stat", procStatText(100, 20, 30, 1000, 50, 5, 5, 7, 11, 0)).
		file("proc/meminfo", meminfoText(8*giB, 5*giB))
}

func TestNewHostReaderDetects(t *testing.T) {
	tests := []struct {
		name    string
		tree    func(t *testing.T) *fsTree
		cpu     string
		mem     string
		wantErr bool
	}{
		{name: "cgroup2 with root memory.current", tree: cgroup2Host, cpu: SourceCgroup2, mem: SourceCgroup2},
		{
			name: "cgroup2 root without memory.current falls back to meminfo",
			tree: func(t *testing.T) *fsTree {
				f := cgroup2Host(t)
				rm(t, f.path("sys/fs/cgroup/memory.current"))
				return f
			},
			cpu: SourceCgroup2, mem: SourceProc,
		},
		{
			name: "cgroup2 wins over cgroup1 mounted beside it",
			tree: func(t *testing.T) *fsTree {
				return cgroup2Host(t).file("sys/fs/cgroup/cpuacct/cpuacct.usage", "1\n")
			},
			cpu: SourceCgroup2, mem: SourceCgroup2,
		},
		{
			name: "cgroup2 root without cpu.stat (old kernel) falls to proc",
			tree: func(t *testing.T) *fsTree {
				f := cgroup2Host(t)
				rm(t, f.path("sys/fs/cgroup/cpu.stat"))
				return f
			},
			cpu: SourceProc, mem: SourceProc,
		},
		{name: "cgroup1", tree: cgroup1Host, cpu: SourceCgroup1, mem: SourceCgroup1},
		{
			name: "hybrid: v2 at sys/fs/cgroup/unified, controllers on v1",
			tree: func(t *testing.T) *fsTree {
				return cgroup1Host(t).file("sys/fs/cgroup/unified/cgroup.controllers", "\n")
			},
			cpu: SourceCgroup1, mem: SourceCgroup1,
		},
		{
			name: "cgroup1 cpuacct as a symlink to cpu,cpuacct",
			tree: func(t *testing.T) *fsTree {
				return newTree(t).
					file("sys/fs/cgroup/cpu,cpuacct/cpuacct.usage", "1\n").
					symlink("sys/fs/cgroup/cpuacct", "cpu,cpuacct").
					file("proc/meminfo", meminfoText(giB, giB))
			},
			cpu: SourceCgroup1, mem: SourceProc,
		},
		{
			name: "cgroup1 without memory controller",
			tree: func(t *testing.T) *fsTree {
				f := cgroup1Host(t)
				rm(t, f.path("sys/fs/cgroup/memory"))
				return f
			},
			cpu: SourceCgroup1, mem: SourceProc,
		},
		{name: "proc only", tree: procHost, cpu: SourceProc, mem: SourceProc},
		{
			name:    "nothing",
			tree:    func(t *testing.T) *fsTree { return newTree(t).file("proc/meminfo", meminfoText(giB, giB)) },
			wantErr: true,
		},
		{
			name: "no meminfo",
			tree: func(t *testing.T) *fsTree {
				f := cgroup2Host(t)
				rm(t, f.path("proc/meminfo"))
				return f
			},
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewHostReader(tt.tree(t).root)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("NewHostReader = %s/%s, want an error", r.Source(), r.MemorySource())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Source() != tt.cpu || r.MemorySource() != tt.mem {
				t.Errorf("sources = cpu %s, memory %s; want cpu %s, memory %s", r.Source(), r.MemorySource(), tt.cpu, tt.mem)
			}
		})
	}
}

func TestHostReaderRead(t *testing.T) {
	tests := []struct {
		name string
		tree func(t *testing.T) *fsTree
		want Sample
	}{
		{
			name: "cgroup2: usage_usec, memory.current minus inactive_file, total from meminfo",
			tree: cgroup2Host,
			want: Sample{CPUSeconds: 12.345678, MemUsed: 2 * giB, MemAvailable: 6 * giB},
		},
		{
			name: "cgroup2 without root memory.current: memory from meminfo",
			tree: func(t *testing.T) *fsTree {
				f := cgroup2Host(t)
				rm(t, f.path("sys/fs/cgroup/memory.current"))
				return f
			},
			want: Sample{CPUSeconds: 12.345678, MemUsed: 3 * giB, MemAvailable: 5 * giB},
		},
		{
			name: "cgroup2 without memory.stat: memory.current as is",
			tree: func(t *testing.T) *fsTree {
				f := cgroup2Host(t)
				rm(t, f.path("sys/fs/cgroup/memory.stat"))
				return f
			},
			want: Sample{CPUSeconds: 12.345678, MemUsed: 3 * giB, MemAvailable: 5 * giB},
		},
		{
			name: "cgroup1: cpuacct.usage ns, usage_in_bytes minus total_inactive_file, unlimited root",
			tree: cgroup1Host,
			want: Sample{CPUSeconds: 2.5, MemUsed: 2 * giB, MemAvailable: 6 * giB},
		},
		{
			name: "cgroup1 in a container: its limit bounds available",
			tree: func(t *testing.T) *fsTree {
				return cgroup1Host(t).file("sys/fs/cgroup/memory/memory.limit_in_bytes", "4294967296\n")
			},
			want: Sample{CPUSeconds: 2.5, MemUsed: 2 * giB, MemAvailable: 2 * giB},
		},
		{
			name: "cgroup1 working set above the limit: available 0, not a wrap-around",
			tree: func(t *testing.T) *fsTree {
				return cgroup1Host(t).file("sys/fs/cgroup/memory/memory.limit_in_bytes", "1073741824\n")
			},
			want: Sample{CPUSeconds: 2.5, MemUsed: 2 * giB, MemAvailable: 0},
		},
		{
			name: "proc: busy ticks at USER_HZ, MemTotal − MemAvailable",
			tree: procHost,
			want: Sample{CPUSeconds: 1.6, MemUsed: 3 * giB, MemAvailable: 5 * giB},
		},
		{
			name: "proc: a kernel with fewer columns (no steal, no guest)",
			tree: func(t *testing.T) *fsTree {
				return procHost(t).file("proc/stat", procStatText(100, 20, 30, 1000, 50, 5, 5))
			},
			want: Sample{CPUSeconds: 1.6, MemUsed: 3 * giB, MemAvailable: 5 * giB},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewHostReader(tt.tree(t).root)
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.Read(t0)
			if err != nil {
				t.Fatal(err)
			}
			tt.want.Time = t0
			if !sampleEqual(got, tt.want) {
				t.Errorf("Read = %+v\nwant   %+v", got, tt.want)
			}
		})
	}
}

func TestHostReaderReadErrors(t *testing.T) {
	tests := []struct {
		name  string
		tree  func(t *testing.T) *fsTree
		after func(t *testing.T, f *fsTree) // breaks the tree after detection
	}{
		{
			name:  "cgroup2 cpu.stat without usage_usec",
			tree:  cgroup2Host,
			after: func(t *testing.T, f *fsTree) { f.file("sys/fs/cgroup/cpu.stat", "nr_periods 0\n") },
		},
		{
			name:  "cgroup2 memory.current not a number",
			tree:  cgroup2Host,
			after: func(t *testing.T, f *fsTree) { f.file("sys/fs/cgroup/memory.current", "lots\n") },
		},
		{
			name:  "cgroup2 memory.current gone after detection: no silent switch",
			tree:  cgroup2Host,
			after: func(t *testing.T, f *fsTree) { rm(t, f.path("sys/fs/cgroup/memory.current")) },
		},
		{
			name:  "cgroup1 cpuacct.usage empty",
			tree:  cgroup1Host,
			after: func(t *testing.T, f *fsTree) { f.file("sys/fs/cgroup/cpuacct/cpuacct.usage", "") },
		},
		{
			name:  "cgroup1 limit garbage",
			tree:  cgroup1Host,
			after: func(t *testing.T, f *fsTree) { f.file("sys/fs/cgroup/memory/memory.limit_in_bytes", "-1\n") },
		},
		{
			name:  "proc stat without aggregate line",
			tree:  procHost,
			after: func(t *testing.T, f *fsTree) { f.file("proc/stat", "cpu0 1 2 3 4 5 6 7\n") },
		},
		{
			name:  "proc stat cpu line too short",
			tree:  procHost,
			after: func(t *testing.T, f *fsTree) { f.file("proc/stat", "cpu 1 2 3 4\n") },
		},
		{
			name:  "proc stat column not a number",
			tree:  procHost,
			after: func(t *testing.T, f *fsTree) { f.file("proc/stat", "cpu 1 2 x 4 5 6 7 8\n") },
		},
		{
			name:  "meminfo without MemAvailable (kernel < 3.14)",
			tree:  procHost,
			after: func(t *testing.T, f *fsTree) { f.file("proc/meminfo", "MemTotal: 1024 kB\nMemFree: 512 kB\n") },
		},
		{
			name:  "meminfo without MemTotal",
			tree:  procHost,
			after: func(t *testing.T, f *fsTree) { f.file("proc/meminfo", "MemAvailable: 1024 kB\n") },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.tree(t)
			r, err := NewHostReader(f.root)
			if err != nil {
				t.Fatal(err)
			}
			tt.after(t, f)
			if s, err := r.Read(t0); err == nil {
				t.Fatalf("Read = %+v, want an error", s)
			}
		})
	}
}

// TestHostReaderRealRoot reads the machine the test runs on, whatever it
// has: detection must find something on any Linux, and the numbers must be
// plausible. It checks no source in particular.
func TestHostReaderRealRoot(t *testing.T) {
	if _, err := os.Stat("/proc/meminfo"); err != nil {
		t.Skip("no /proc on this machine")
	}
	r, err := NewHostReader("")
	if err != nil {
		t.Fatal(err)
	}
	s1, err := r.Read(t0)
	if err != nil {
		t.Fatalf("source %s/%s: %v", r.Source(), r.MemorySource(), err)
	}
	if s1.CPUSeconds <= 0 || s1.MemUsed == 0 || s1.MemAvailable == 0 {
		t.Errorf("source %s/%s: implausible sample %+v", r.Source(), r.MemorySource(), s1)
	}
	s2, err := r.Read(t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := HostUsage(s1, s2); err != nil {
		t.Errorf("HostUsage over two real reads: %v", err)
	}
	t.Logf("source cpu %s, memory %s: %+v", r.Source(), r.MemorySource(), s1)
}

func TestHostUsage(t *testing.T) {
	at := func(d time.Duration, cpu float64) Sample {
		return Sample{CPUSeconds: cpu, MemUsed: 3 * giB, MemAvailable: 5 * giB, Time: t0.Add(d)}
	}
	tests := []struct {
		name      string
		prev, cur Sample
		want      Usage
		wantErr   error
	}{
		{
			name: "two cores busy for 5 s",
			prev: at(0, 100), cur: at(5*time.Second, 110),
			want: Usage{CPUCores: 2, MemUsed: 3 * giB, MemAvailable: 5 * giB, Interval: 5 * time.Second},
		},
		{
			name: "idle is zero cores, not an error",
			prev: at(0, 100), cur: at(2*time.Second, 100),
			want: Usage{CPUCores: 0, MemUsed: 3 * giB, MemAvailable: 5 * giB, Interval: 2 * time.Second},
		},
		{
			name: "sub-second interval",
			prev: at(0, 1), cur: at(250*time.Millisecond, 1.125),
			want: Usage{CPUCores: 0.5, MemUsed: 3 * giB, MemAvailable: 5 * giB, Interval: 250 * time.Millisecond},
		},
		{
			name: "memory is the later sample's",
			prev: Sample{CPUSeconds: 1, MemUsed: 1, MemAvailable: 9, Time: t0},
			cur:  Sample{CPUSeconds: 2, MemUsed: 7, MemAvailable: 3, Time: t0.Add(time.Second)},
			want: Usage{CPUCores: 1, MemUsed: 7, MemAvailable: 3, Interval: time.Second},
		},
		{name: "zero interval", prev: at(0, 100), cur: at(0, 101), wantErr: ErrNoInterval},
		{name: "clock went back", prev: at(time.Second, 100), cur: at(0, 101), wantErr: ErrNoInterval},
		{name: "no previous sample", prev: Sample{}, cur: at(time.Second, 101), wantErr: ErrNoInterval},
		{name: "counter reset", prev: at(0, 100), cur: at(5*time.Second, 3), wantErr: ErrCounterReset},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := HostUsage(tt.prev, tt.cur)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("HostUsage = %+v, %v; want error %v", got, err, tt.wantErr)
				}
				if got != (Usage{}) {
					t.Errorf("HostUsage with error returned %+v, want zero Usage", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(got.CPUCores-tt.want.CPUCores) > 1e-9 {
				t.Errorf("CPUCores = %v, want %v", got.CPUCores, tt.want.CPUCores)
			}
			got.CPUCores = tt.want.CPUCores
			if got != tt.want {
				t.Errorf("HostUsage = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// sampleEqual compares Samples, CPU seconds within float rounding.
func sampleEqual(a, b Sample) bool {
	return math.Abs(a.CPUSeconds-b.CPUSeconds) < 1e-9 &&
		a.MemUsed == b.MemUsed && a.MemAvailable == b.MemAvailable && a.Time.Equal(b.Time) && a.Began.Equal(b.Began)
}

func rm(t *testing.T, path string) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
}
