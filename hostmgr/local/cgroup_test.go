package local

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// fsTree builds a fixture file system for cgroup detection:
// proc/self/mountinfo, proc/self/cgroup and the cgroup directories.
type fsTree struct {
	t    *testing.T
	root string
}

func newTree(t *testing.T) *fsTree { return &fsTree{t: t, root: t.TempDir()} }

func (f *fsTree) file(path, content string) *fsTree {
	f.t.Helper()
	p := filepath.Join(f.root, path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
	return f
}

func (f *fsTree) dir(path string) *fsTree {
	f.t.Helper()
	if err := os.MkdirAll(filepath.Join(f.root, path), 0o755); err != nil {
		f.t.Fatal(err)
	}
	return f
}

// The mountinfo lines of the fixtures.
const (
	miRootFS  = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
	miTmpfs   = "31 22 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
	miUnified = "30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
	miHybrid2 = "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw\n"
	miMemory  = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime shared:7 - cgroup cgroup rw,memory\n"
	miCPUBoth = "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:5 - cgroup cgroup rw,cpu,cpuacct\n"
	miCPU     = "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
	miCPUAcct = "33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n"
)

func TestDetectCgroups(t *testing.T) {
	t.Parallel()
	const name = "peloton-local-test"
	for _, tc := range []struct {
		name string
		tree func(t *testing.T) *fsTree
		// want: the version and the parent dirs (memory, cpu, cpuacct)
		// relative to the fixture root; or wantErr, a part of the error.
		version              int
		memory, cpu, cpuacct string
		wantErr              string
	}{{
		name: "v2 only, controllers can be enabled in our own cgroup",
		tree: func(t *testing.T) *fsTree {
			return newTree(t).file("proc/self/mountinfo", miRootFS+miUnified).
				file("proc/self/cgroup", "0::/system.slice/peloton.service\n").
				file("sys/fs/cgroup/system.slice/peloton.service/cgroup.controllers", "cpuset cpu io memory pids\n").
				file("sys/fs/cgroup/system.slice/peloton.service/cgroup.subtree_control", "")
		},
		version: 2,
		memory:  "sys/fs/cgroup/system.slice/peloton.service/" + name,
		cpu:     "sys/fs/cgroup/system.slice/peloton.service/" + name,
		cpuacct: "sys/fs/cgroup/system.slice/peloton.service/" + name,
	}, {
		// The no-internal-process rule refuses the controllers to our own
		// cgroup's children (here: its subtree_control cannot be written),
		// so the parent goes beside it.
		name: "v2 only, our cgroup holds processes: the parent is a sibling",
		tree: func(t *testing.T) *fsTree {
			return newTree(t).file("proc/self/mountinfo", miRootFS+miUnified).
				file("proc/self/cgroup", "0::/system.slice/peloton.service\n").
				file("sys/fs/cgroup/system.slice/peloton.service/cgroup.controllers", "cpu memory\n").
				dir("sys/fs/cgroup/system.slice/peloton.service/cgroup.subtree_control")
		},
		version: 2,
		memory:  "sys/fs/cgroup/system.slice/" + name,
		cpu:     "sys/fs/cgroup/system.slice/" + name,
		cpuacct: "sys/fs/cgroup/system.slice/" + name,
	}, {
		name: "v2, our cgroup is the mount's root and holds processes",
		tree: func(t *testing.T) *fsTree {
			return newTree(t).file("proc/self/mountinfo", miRootFS+miUnified).
				file("proc/self/cgroup", "0::/\n").
				file("sys/fs/cgroup/cgroup.controllers", "cpu memory\n").
				dir("sys/fs/cgroup/cgroup.subtree_control")
		},
		wantErr: "start the control plane in a leaf cgroup",
	}, {
		name: "v1 only, cpu and cpuacct mounted together, a container's mount root",
		tree: func(t *testing.T) *fsTree {
			// The memory mount shows /docker/abc at its mount point, as
			// in a container without a cgroup namespace.
			mem := "35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
			return newTree(t).file("proc/self/mountinfo", miRootFS+miTmpfs+mem+miCPUBoth).
				file("proc/self/cgroup", "4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n1:name=systemd:/\n").
				file("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n").
				file("sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n")
		},
		version: 1,
		memory:  "sys/fs/cgroup/memory/" + name,
		cpu:     "sys/fs/cgroup/cpu,cpuacct/docker/abc/" + name,
		cpuacct: "sys/fs/cgroup/cpu,cpuacct/docker/abc/" + name,
	}, {
		// This machine's layout at the time of writing: v1 for every
		// controller, cgroup2 beside it with none of them.
		name: "hybrid: v2 without the controllers, v1 with cpuacct apart",
		tree: func(t *testing.T) *fsTree {
			return newTree(t).file("proc/self/mountinfo", miRootFS+miTmpfs+miCPU+miCPUAcct+miMemory+miHybrid2).
				file("proc/self/cgroup", "4:memory:/jobs/j1\n2:cpuacct:/\n1:cpu:/\n0::/\n").
				file("sys/fs/cgroup/unified/cgroup.controllers", "hugetlb\n").
				file("sys/fs/cgroup/memory/jobs/j1/memory.limit_in_bytes", "9223372036854771712\n").
				file("sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n").
				dir("sys/fs/cgroup/cpuacct")
		},
		version: 1,
		memory:  "sys/fs/cgroup/memory/jobs/j1/" + name,
		cpu:     "sys/fs/cgroup/cpu/" + name,
		cpuacct: "sys/fs/cgroup/cpuacct/" + name,
	}, {
		name: "v1 without cpuacct: usage is not offered, limits are",
		tree: func(t *testing.T) *fsTree {
			return newTree(t).file("proc/self/mountinfo", miRootFS+miTmpfs+miCPU+miMemory).
				file("proc/self/cgroup", "4:memory:/\n1:cpu:/\n").
				file("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n").
				file("sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n")
		},
		version: 1,
		memory:  "sys/fs/cgroup/memory/" + name,
		cpu:     "sys/fs/cgroup/cpu/" + name,
	}, {
		name: "v1 memory mounted read-only",
		tree: func(t *testing.T) *fsTree {
			mem := "35 31 0:32 / /sys/fs/cgroup/memory ro,relatime - cgroup cgroup ro,memory\n"
			return newTree(t).file("proc/self/mountinfo", miRootFS+miTmpfs+miCPUBoth+mem).
				file("proc/self/cgroup", "4:memory:/\n2:cpu,cpuacct:/\n").
				file("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n").
				file("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n")
		},
		wantErr: "memory hierarchy at " + "%ROOT%/sys/fs/cgroup/memory is mounted read-only",
	}, {
		name: "v2 mounted read-only",
		tree: func(t *testing.T) *fsTree {
			ro := "30 22 0:26 / /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw\n"
			return newTree(t).file("proc/self/mountinfo", miRootFS+ro).
				file("proc/self/cgroup", "0::/\n").
				file("sys/fs/cgroup/cgroup.controllers", "cpu memory\n")
		},
		wantErr: "cgroup v2: %ROOT%/sys/fs/cgroup is mounted read-only",
	}, {
		name: "v1 without a cpu hierarchy",
		tree: func(t *testing.T) *fsTree {
			return newTree(t).file("proc/self/mountinfo", miRootFS+miTmpfs+miMemory).
				file("proc/self/cgroup", "4:memory:/\n").
				file("sys/fs/cgroup/memory/memory.limit_in_bytes", "1\n")
		},
		wantErr: "no cpu hierarchy is mounted",
	}, {
		name: "v1 kernel without CFS bandwidth control",
		tree: func(t *testing.T) *fsTree {
			return newTree(t).file("proc/self/mountinfo", miRootFS+miTmpfs+miCPU+miMemory).
				file("proc/self/cgroup", "4:memory:/\n1:cpu:/\n").
				file("sys/fs/cgroup/memory/memory.limit_in_bytes", "1\n").
				dir("sys/fs/cgroup/cpu")
		},
		wantErr: "the kernel offers no cpu.cfs_quota_us",
	}, {
		name: "no cgroups mounted",
		tree: func(t *testing.T) *fsTree {
			return newTree(t).file("proc/self/mountinfo", miRootFS).file("proc/self/cgroup", "0::/\n")
		},
		wantErr: "no memory hierarchy is mounted",
	}, {
		name: "our cgroup is outside the cgroup namespace",
		tree: func(t *testing.T) *fsTree {
			return newTree(t).file("proc/self/mountinfo", miRootFS+miUnified).
				file("proc/self/cgroup", "0::/../other\n").
				file("sys/fs/cgroup/cgroup.controllers", "cpu memory\n")
		},
		wantErr: "no memory hierarchy is mounted",
	}, {
		name:    "no /proc",
		tree:    newTree,
		wantErr: "cannot read the mounts",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := tc.tree(t)
			c, err := detectCgroups(f.root, name)
			if tc.wantErr != "" {
				want := strings.ReplaceAll(tc.wantErr, "%ROOT%", f.root)
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("detectCgroups = %+v, %v; want an error containing %q", c, err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("detectCgroups: %v", err)
			}
			rel := func(p string) string {
				if p == "" {
					return ""
				}
				return strings.TrimPrefix(p, f.root+"/")
			}
			if c.version != tc.version || rel(c.memory) != tc.memory || rel(c.cpu) != tc.cpu || rel(c.cpuacct) != tc.cpuacct {
				t.Fatalf("detectCgroups = v%d memory %s cpu %s cpuacct %s; want v%d %s %s %s",
					c.version, rel(c.memory), rel(c.cpu), rel(c.cpuacct), tc.version, tc.memory, tc.cpu, tc.cpuacct)
			}
			for _, p := range c.parents() {
				if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
					t.Errorf("parent %s not created: %v", p, err)
				}
			}
			if c.version == 2 {
				got, err := os.ReadFile(filepath.Join(c.memory, "cgroup.subtree_control"))
				if err != nil || string(got) != "+memory +cpu" {
					t.Errorf("parent's subtree_control = %q, %v; want the memory and cpu controllers enabled", got, err)
				}
			}
		})
	}
}

// TestRunCgroupLimits checks the limit files written for a run, on fixture
// trees (v2 cannot be tried for real where v1 holds the controllers).
func TestRunCgroupLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		version int
		res     resources.Resources
		want    map[string]string // file in the run's cgroup -> content; "" = not written
	}{
		{"v2 both", 2, resources.Resources{MilliCPU: 200, MemoryMB: 32},
			map[string]string{"memory.max": "33554432", "cpu.max": "20000 100000"}},
		{"v2 neither", 2, resources.Resources{}, map[string]string{"memory.max": "", "cpu.max": ""}},
		{"v2 memory only", 2, resources.Resources{MemoryMB: 64}, map[string]string{"memory.max": "67108864", "cpu.max": ""}},
		{"v1 both", 1, resources.Resources{MilliCPU: 2500, MemoryMB: 1},
			map[string]string{"memory.limit_in_bytes": "1048576", "cpu.cfs_quota_us": "250000", "cpu.cfs_period_us": "100000"}},
		{"v1 cpu only", 1, resources.Resources{MilliCPU: 1},
			map[string]string{"memory.limit_in_bytes": "", "cpu.cfs_quota_us": "1000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			c := &cgroups{version: tc.version, memory: filepath.Join(dir, "p"), cpu: filepath.Join(dir, "p"), cpuacct: filepath.Join(dir, "p")}
			if tc.version == 1 {
				c.cpu, c.cpuacct = filepath.Join(dir, "cpu"), filepath.Join(dir, "cpu")
			}
			if err := c.makeParents(); err != nil {
				t.Fatal(err)
			}
			rc, err := c.newRun("job-0-1", tc.res)
			if err != nil {
				t.Fatal(err)
			}
			if rc.memory != filepath.Join(c.memory, "job-0-1") || rc.cpu != filepath.Join(c.cpu, "job-0-1") {
				t.Fatalf("run dirs %s %s", rc.memory, rc.cpu)
			}
			for file, want := range tc.want {
				d := rc.cpu
				if strings.HasPrefix(file, "memory.") {
					d = rc.memory
				}
				got, err := os.ReadFile(filepath.Join(d, file))
				if want == "" {
					if err == nil {
						t.Errorf("%s written (%q), want no limit", file, got)
					}
					continue
				}
				if err != nil || string(got) != want {
					t.Errorf("%s = %q, %v; want %q", file, got, err, want)
				}
			}
		})
	}
}

func TestOOMEnd(t *testing.T) {
	t.Parallel()
	failed := func(reason, msg string) hostmgr.TaskEvent {
		return hostmgr.TaskEvent{State: pelotonv1.TaskState_FAILED, ExitCode: 137, Reason: reason, Message: msg}
	}
	killed := hostmgr.TaskEvent{State: pelotonv1.TaskState_KILLED, ExitCode: 137, Reason: "killed"}
	ok := hostmgr.TaskEvent{State: pelotonv1.TaskState_SUCCEEDED}
	const mb = 64
	limit := int64(mb << 20)
	for _, tc := range []struct {
		name      string
		ev        hostmgr.TaskEvent
		sigkilled bool
		limitMB   int64
		m         memEnd
		oom       bool
	}{
		{"OOM-killed main process", failed("signaled", "terminated by signal: killed"), true, mb, memEnd{oomKills: 1}, true},
		{"OOM-killed child, shell exits 137", failed("exit-nonzero", "exited with code 137"), true, mb, memEnd{oomKills: 1}, true},
		{"failure without OOM kill", failed("exit-nonzero", "exited with code 1"), false, mb, memEnd{}, false},
		{"SIGKILL from someone else", failed("signaled", "terminated by signal: killed"), true, mb, memEnd{}, false},
		{"killed by the backend, OOM counted", killed, true, mb, memEnd{oomKills: 1}, false},
		{"succeeded after a child was OOM-killed", ok, false, mb, memEnd{oomKills: 2}, false},
		{"launch failure", failed("launch-failed", "x"), false, mb, memEnd{oomKills: 1}, false},
		{"no memory limit, host out of memory", failed("signaled", "terminated by signal: killed"), true, 0, memEnd{oomKills: 1}, true},
		// Old v1 kernels count no OOM kills: the limit was hit and the run
		// died by a SIGKILL nobody here sent.
		{"v1 without counter: at the limit, SIGKILL", failed("signaled", "x"), true, mb, memEnd{oomKills: -1, failcnt: 9, maxUsage: limit}, true},
		{"v1 without counter: at the limit, exit 1", failed("exit-nonzero", "x"), false, mb, memEnd{oomKills: -1, failcnt: 9, maxUsage: limit}, false},
		{"v1 without counter: far below the limit", failed("signaled", "x"), true, mb, memEnd{oomKills: -1, failcnt: 9, maxUsage: limit / 2}, false},
		{"v1 without counter: never hit", failed("signaled", "x"), true, mb, memEnd{oomKills: -1, maxUsage: limit}, false},
	} {
		got := oomEnd(tc.ev, tc.sigkilled, tc.limitMB, tc.m)
		if isOOM := got.Reason == ReasonOOMKilled; isOOM != tc.oom {
			t.Errorf("%s: reason %q, want oom %v", tc.name, got.Reason, tc.oom)
			continue
		}
		if !tc.oom {
			if got.State != tc.ev.State || got.Reason != tc.ev.Reason || got.Message != tc.ev.Message {
				t.Errorf("%s: changed to %+v", tc.name, got)
			}
			continue
		}
		if got.State != pelotonv1.TaskState_FAILED || got.ExitCode != tc.ev.ExitCode || !strings.Contains(got.Message, tc.ev.Message) {
			t.Errorf("%s: %+v, want FAILED with the exit code and message kept", tc.name, got)
		}
		if tc.limitMB > 0 && !strings.Contains(got.Message, "memory limit 64 MiB exceeded") {
			t.Errorf("%s: message %q, want it to name the limit", tc.name, got.Message)
		}
	}
}

func TestParseCgroupFiles(t *testing.T) {
	t.Parallel()
	mounts := parseMountinfo(miRootFS + miTmpfs + miCPUBoth + miHybrid2 +
		`50 31 0:40 / /mnt/with\040space rw - cgroup cgroup ro,memory` + "\n" + "garbage\n")
	if len(mounts) != 3 {
		t.Fatalf("parsed %d cgroup mounts, want 3: %+v", len(mounts), mounts)
	}
	if m := mounts[2]; m.point != "/mnt/with space" || !m.ro || m.fstype != "cgroup" {
		t.Errorf("escaped read-only mount = %+v", m)
	}
	own := parseProcCgroup("12:cpu,cpuacct:/a\n4:memory:/b/c\n1:name=systemd:/\n0::/d\n")
	for k, want := range map[string]string{"cpu": "/a", "cpuacct": "/a", "memory": "/b/c", "": "/d"} {
		if own[k] != want {
			t.Errorf("own[%q] = %q, want %q", k, own[k], want)
		}
	}
}

// logCounter counts the records logged at each level with each message.
type logCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (l *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCounter) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n[r.Level.String()+" "+r.Message]++
	return nil
}
func (l *logCounter) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCounter) WithGroup(string) slog.Handler      { return l }

// TestNoCgroupsWarnsOnce: where cgroups cannot be had, Start says so once,
// and runs launch and end as they did before cgroups, without one.
func TestNoCgroupsWarnsOnce(t *testing.T) {
	t.Parallel()
	tree := newTree(t).file("proc/self/mountinfo", miRootFS).file("proc/self/cgroup", "0::/\n")
	logs := &logCounter{n: map[string]int{}}
	b, err := New(Config{Dir: t.TempDir(), HostCapacity: resources.Resources{MilliCPU: 4000, MemoryMB: 4096},
		Logger: slog.New(logs), cgroupRoot: tree.root})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	rec := newRecorder()
	if err := b.Start(context.Background(), rec.sink); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"nocg-0-1", "nocg-1-1"} {
		s := spec(id, "sh", "-c", "exit 0")
		s.Resources = resources.Resources{MilliCPU: 100, MemoryMB: 32}
		launch(t, b, s)
		if ev := rec.waitTerminal(t, id); ev.State != pelotonv1.TaskState_SUCCEEDED {
			t.Fatalf("%s ended %+v, want SUCCEEDED", id, ev)
		}
		if _, ok := b.RunCgroup(id); ok {
			t.Errorf("RunCgroup(%s) ok without cgroups", id)
		}
	}
	logs.mu.Lock()
	defer logs.mu.Unlock()
	if n := logs.n["WARN run limits are not enforced: runs get no memory limit and no CPU quota"]; n != 1 {
		t.Errorf("logged the warning %d times, want once; logs: %v", n, logs.n)
	}
}
