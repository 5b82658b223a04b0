package hostagent

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

func TestParseStat(t *testing.T) {
	tests := []struct {
		name string
		line string
		want procStat
	}{
		{
			name: "as the kernel writes it (cat reading its own stat)",
			line: "7191 (cat) R 7185 7185 3868 0 -1 4194304 99 0 0 0 3 4 5 6 20 0 1 0 83894 3133440 389 18446744073709551615 93948696481792 93948696501673 140733301790384 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 93948696517680 93948696519296 93949614960640 140733301791418 140733301791438 140733301791438 140733301792747 0\n",
			want: procStat{pid: 7191, comm: "cat", ppid: 7185, pgrp: 7185, utime: 3, stime: 4, cutime: 5, cstime: 6, start: 83894, rss: 389,
				envStart: 140733301791438, envEnd: 140733301792747},
		},
		{
			name: "comm with spaces and parentheses",
			line: statLine(42, "my (weird) proc", 7, 10, 20, 30, 40, 50),
			want: procStat{pid: 42, pgrp: 7, comm: "my (weird) proc", ppid: 7, utime: 10, stime: 20, cutime: 30, cstime: 40, rss: 50, start: 83894},
		},
		{
			name: "comm that looks like the fields after it",
			line: statLine(43, "a) S 1 2 3", 8, 11, 12, 13, 14, 15),
			want: procStat{pid: 43, pgrp: 8, comm: "a) S 1 2 3", ppid: 8, utime: 11, stime: 12, cutime: 13, cstime: 14, rss: 15, start: 83894},
		},
		{
			name: "comm of parentheses only",
			line: statLine(44, ") )(", 9, 1, 2, 3, 4, 5),
			want: procStat{pid: 44, pgrp: 9, comm: ") )(", ppid: 9, utime: 1, stime: 2, cutime: 3, cstime: 4, rss: 5, start: 83894},
		},
		{
			name: "empty comm, no trailing newline",
			line: strings.TrimSuffix(statLine(45, "", 1, 1, 2, 3, 4, 5), "\n"),
			want: procStat{pid: 45, pgrp: 1, comm: "", ppid: 1, utime: 1, stime: 2, cutime: 3, cstime: 4, rss: 5, start: 83894},
		},
		{
			name: "a kernel before 3.5: 44 fields, no environment addresses",
			line: "7191 (cat) R 7185 7185 3868 0 -1 4194304 99 0 0 0 3 4 5 6 20 0 1 0 83894 3133440 389 18446744073709551615 93948696481792 93948696501673 140733301790384 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n",
			want: procStat{pid: 7191, comm: "cat", ppid: 7185, pgrp: 7185, utime: 3, stime: 4, cutime: 5, cstime: 6, start: 83894, rss: 389},
		},
		{
			name: "a kernel thread: ppid 2, no rss",
			line: statLine(9, "kworker/0:1-events", 2, 0, 77, 0, 0, 0),
			want: procStat{pid: 9, pgrp: 2, comm: "kworker/0:1-events", ppid: 2, stime: 77, start: 83894},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStat([]byte(tt.line))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("parseStat = %+v\nwant        %+v", got, tt.want)
			}
		})
	}
}

func TestParseStatErrors(t *testing.T) {
	full := statLine(42, "sh", 1, 1, 2, 3, 4, 5)
	for _, tt := range []struct{ name, line string }{
		{"empty", ""},
		{"no comm", "42 sh S 1 1 1"},
		{"no closing parenthesis", "42 (sh S 1 1 1"},
		{"pid not a number", strings.Replace(full, "42", "x", 1)},
		{"truncated before rss", full[:strings.Index(full, " 20 0 1 ")]},
		{"utime not a number", strings.Replace(statLine(42, "sh", 1, 987654, 2, 3, 4, 5), "987654", "9x", 1)},
		{"negative cutime", strings.Replace(statLine(42, "sh", 1, 1, 2, 987654, 4, 5), "987654", "-3", 1)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := parseStat([]byte(tt.line)); err == nil {
				t.Errorf("parseStat(%q) = %+v, want an error", tt.line, got)
			}
		})
	}
}

// FuzzParseStat: any line either parses or is an error; none panics.
func FuzzParseStat(f *testing.F) {
	f.Add(statLine(42, "my (weird) proc", 7, 10, 20, 30, 40, 50))
	f.Add("1 () R")
	f.Add(")(")
	f.Fuzz(func(t *testing.T, line string) {
		_, _ = parseStat([]byte(line))
	})
}

// procFixture is a proc tree:
//
//	1 init
//	├── 100 task root
//	│   ├── 101 worker
//	│   │   └── 102 "my (weird) proc"
//	│   └── 103 sidecar
//	└── 200 unrelated
//
// plus entries ReadProcs must skip: self, meminfo, a pid directory whose
// stat vanished, a non-pid directory.
func procFixture(t *testing.T) *fsTree {
	return newTree(t).
		file("proc/1/stat", statLine(1, "init", 0, 1000, 1000, 1000, 1000, 1000)).
		file("proc/100/stat", statLine(100, "task", 1, 100, 50, 20, 10, 1000)).
		file("proc/101/stat", statLine(101, "worker", 100, 30, 20, 0, 0, 2000)).
		file("proc/102/stat", statLine(102, "my (weird) proc", 101, 7, 3, 0, 0, 300)).
		file("proc/103/stat", statLine(103, "sidecar", 100, 0, 10, 0, 0, 100)).
		file("proc/200/stat", statLine(200, "unrelated", 1, 5000, 5000, 0, 0, 9000)).
		symlink("proc/self", "100").
		file("proc/meminfo", meminfoText(giB, giB)).
		file("proc/uptime", "1000.50 1900.25\n").
		dir("proc/999").
		dir("proc/sys/kernel")
}

func TestProcSnapshotTreeAndSample(t *testing.T) {
	s, err := ReadProcs(procFixture(t).path("proc"), t0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Tree(100), []int{100, 101, 103, 102}; !slices.Equal(got, want) {
		t.Errorf("Tree(100) = %v, want %v (root, then breadth first)", got, want)
	}
	if got := s.Tree(102); !slices.Equal(got, []int{102}) {
		t.Errorf("Tree(102) = %v, want [102]", got)
	}
	if got := s.Tree(999); got != nil {
		t.Errorf("Tree(999) (stat vanished) = %v, want nil", got)
	}

	got, err := s.Sample(100)
	if err != nil {
		t.Fatal(err)
	}
	// (100+50+20+10) + (30+20) + (7+3) + 10 = 250 ticks; 1000+2000+300+100 pages.
	// Every process started 838.94 s after a boot 1000.5 s before t0.
	began := t0.Add(-161560 * time.Millisecond)
	want := Sample{CPUSeconds: 2.5, MemUsed: 3400 * uint64(os.Getpagesize()), Time: t0, Began: began}
	if !sampleEqual(got, want) {
		t.Errorf("Sample(100) = %+v, want %+v", got, want)
	}

	if _, err := s.Sample(4242); err == nil {
		t.Error("Sample of a missing pid: no error")
	}

	one, err := ReadProcessTree(procFixture(t).path("proc"), 101, t0)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Sample{CPUSeconds: 0.6, MemUsed: 2300 * uint64(os.Getpagesize()), Time: t0, Began: began}); !sampleEqual(one, want) {
		t.Errorf("ReadProcessTree(101) = %+v, want %+v", one, want)
	}
}

// A snapshot is not atomic: a pid reused while /proc is read can make two
// processes each other's parent. Tree must still end.
func TestProcSnapshotTreeParentCycle(t *testing.T) {
	root := newTree(t).
		file("proc/300/stat", statLine(300, "a", 301, 1, 0, 0, 0, 1)).
		file("proc/301/stat", statLine(301, "b", 300, 1, 0, 0, 0, 1)).
		path("proc")
	s, err := ReadProcs(root, t0)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Tree(300); !slices.Equal(got, []int{300, 301}) {
		t.Errorf("Tree(300) = %v, want [300 301]", got)
	}
}

func TestReadProcsErrors(t *testing.T) {
	if _, err := ReadProcs(newTree(t).path("no-such-proc"), t0); err == nil {
		t.Error("ReadProcs of a missing root: no error")
	}
	garbage := newTree(t).file("proc/5/stat", "garbage\n").path("proc")
	if _, err := ReadProcs(garbage, t0); err == nil {
		t.Error("ReadProcs with an unparsable stat: no error")
	}
}

func TestReadCgroup2(t *testing.T) {
	base := func(t *testing.T) *fsTree {
		return newTree(t).
			file("task/cpu.stat", "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n").
			file("task/memory.current", "314572800\n"). // 300 MiB
			file("task/memory.stat", "anon 209715200\nfile 104857600\ninactive_file 104857600\n")
	}
	tests := []struct {
		name string
		tree func(t *testing.T) *fsTree
		want Sample
	}{
		{
			name: "with a limit",
			tree: func(t *testing.T) *fsTree { return base(t).file("task/memory.max", "536870912\n") },
			want: Sample{CPUSeconds: 1.5, MemUsed: 200 * miB, MemAvailable: 312 * miB},
		},
		{
			name: "memory.max is max: available unknown",
			tree: func(t *testing.T) *fsTree { return base(t).file("task/memory.max", "max\n") },
			want: Sample{CPUSeconds: 1.5, MemUsed: 200 * miB},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadCgroup2(tt.tree(t).path("task"), t0)
			if err != nil {
				t.Fatal(err)
			}
			tt.want.Time = t0
			if !sampleEqual(got, tt.want) {
				t.Errorf("ReadCgroup2 = %+v, want %+v", got, tt.want)
			}
		})
	}
	t.Run("not a cgroup", func(t *testing.T) {
		if s, err := ReadCgroup2(newTree(t).dir("empty").path("empty"), t0); err == nil {
			t.Errorf("ReadCgroup2 of an empty directory = %+v, want an error", s)
		}
	})
	t.Run("v1 directory is not v2", func(t *testing.T) {
		dir := newTree(t).file("cpu/cpu.stat", "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n").path("cpu")
		if s, err := ReadCgroup2(dir, t0); err == nil {
			t.Errorf("ReadCgroup2 of a v1 cpu directory = %+v, want an error", s)
		}
	})
}

func TestReadCgroup1(t *testing.T) {
	base := func(t *testing.T) *fsTree {
		return newTree(t).
			file("cpuacct/task/cpuacct.usage", "750000000\n").
			file("memory/task/memory.usage_in_bytes", "314572800\n").
			file("memory/task/memory.stat", "cache 104857600\nrss 209715200\ninactive_file 1\ntotal_inactive_file 104857600\n")
	}
	tests := []struct {
		name string
		tree func(t *testing.T) *fsTree
		want Sample
	}{
		{
			name: "with a limit",
			tree: func(t *testing.T) *fsTree { return base(t).file("memory/task/memory.limit_in_bytes", "536870912\n") },
			want: Sample{CPUSeconds: 0.75, MemUsed: 200 * miB, MemAvailable: 312 * miB},
		},
		{
			name: "unlimited (v1 writes the largest page-aligned int64)",
			tree: func(t *testing.T) *fsTree {
				return base(t).file("memory/task/memory.limit_in_bytes", "9223372036854771712\n")
			},
			want: Sample{CPUSeconds: 0.75, MemUsed: 200 * miB},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.tree(t)
			got, err := ReadCgroup1(f.path("cpuacct/task"), f.path("memory/task"), t0)
			if err != nil {
				t.Fatal(err)
			}
			tt.want.Time = t0
			if !sampleEqual(got, tt.want) {
				t.Errorf("ReadCgroup1 = %+v, want %+v", got, tt.want)
			}
		})
	}
	t.Run("missing memory directory", func(t *testing.T) {
		f := base(t)
		if s, err := ReadCgroup1(f.path("cpuacct/task"), f.path("memory/gone"), t0); err == nil {
			t.Errorf("ReadCgroup1 = %+v, want an error", s)
		}
	})
}

// startGroup starts cmd in its own process group and kills the whole group
// when the test ends: killing only the root would leave its children
// spinning on a shared machine.
func startGroup(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
}

func needProc(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("needs Linux /proc")
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc on this machine")
	}
}

// TestProcessTreeRealBusyLoop measures a real process tree: a shell whose
// child shell runs a busy loop in a grandchild shell. The grandchild must be
// found, and the tree must be seen using CPU.
func TestProcessTreeRealBusyLoop(t *testing.T) {
	needProc(t)
	// root sh ─ sh (waits) ─ sh (spins). Each middle shell backgrounds and
	// waits, so none execs away its level.
	cmd := exec.Command("sh", "-c", `sh -c "sh -c 'while :; do :; done' & wait" & wait`)
	startGroup(t, cmd)
	root := cmd.Process.Pid

	// The shells start in a few milliseconds; wait (bounded) until the
	// grandchild is there.
	var snap *ProcSnapshot
	var grandchild int
	testutil.Eventually(t, 2*time.Second, fmt.Sprintf("a grandchild of %d", root), func() error {
		var err error
		if snap, err = ReadProcs("/proc", time.Now()); err != nil {
			t.Fatal(err)
		}
		for _, p := range snap.Tree(root) {
			if pp := snap.procs[p].ppid; p != root && pp != root {
				grandchild = p
				return nil
			}
		}
		return fmt.Errorf("tree %v", snap.Tree(root))
	})

	s1, err := snap.Sample(root)
	if err != nil {
		t.Fatal(err)
	}
	// The loop wants one full core. The bound is loose on purpose: the
	// machine's two cores are shared with other builds and the race
	// detector, so the loop may get much less than a core; 0.3 still
	// separates a spinning tree from an idle one (≈0) without flaking.
	// The kernel counts CPU time in ticks (10 ms), so the tree is read
	// again until 0.3 cores show over at least 200 ms: an idle tree never
	// gets there, a spinning one does as soon as it has had the time.
	var u Usage
	testutil.Eventually(t, 10*time.Second, "the busy tree uses > 0.3 cores", func() error {
		s2, err := ReadProcessTree("/proc", root, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if u, err = HostUsage(s1, s2); err != nil {
			t.Fatal(err)
		}
		if u.Interval < 200*time.Millisecond || u.CPUCores < 0.3 {
			return fmt.Errorf("%.2f cores over %v", u.CPUCores, u.Interval)
		}
		return nil
	})
	t.Logf("tree %v (grandchild %d): %.2f cores over %v", snap.Tree(root), grandchild, u.CPUCores, u.Interval)
}

// helperEnv makes the test binary, re-executed, act as a helper process
// instead of running tests (see TestMain).
const helperEnv = "HOSTAGENT_TEST_HELPER"

// allocHelper allocates 64 MiB, writes to every page so that it is
// resident (untouched pages of a fresh mapping are not), says "ready" and
// waits to be killed. It exits on its own when its stdin ends, in case the
// test that started it died without killing it (its end closes the pipe).
func allocHelper() {
	b := make([]byte, 64*miB)
	for i := 0; i < len(b); i += os.Getpagesize() {
		b[i] = 1
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	runtime.KeepAlive(b)
}

func TestProcessTreeRealRSS(t *testing.T) {
	needProc(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=alloc")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cmd.StdinPipe(); err != nil { // held open until the test ends
		t.Fatal(err)
	}
	startGroup(t, cmd)

	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("helper said %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("helper not ready within 10 s")
	}

	s, err := ReadProcessTree("/proc", cmd.Process.Pid, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if s.MemUsed < 50*miB {
		t.Errorf("helper holding 64 MiB has RSS %d MiB, want ≥ 50", s.MemUsed/miB)
	}
	t.Logf("helper RSS %d MiB", s.MemUsed/miB)
}

func TestReadProcessTreeGoneProcess(t *testing.T) {
	needProc(t)
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	// The pid is reaped; unless the kernel already reused it, it is gone.
	_, err := ReadProcessTree("/proc", cmd.Process.Pid, time.Now())
	if err == nil {
		t.Skip("pid reused already")
	}
	if errors.Is(err, os.ErrNotExist) {
		t.Errorf("error %v leaks a file error; want a process error", err)
	}
}
