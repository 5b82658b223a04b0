package hostagent

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// qosRun builds a QoSRun for the tables:
//
//	rev("a").prio(1).started(10).cpu(0.5).mem(100)
type qosRun QoSRun

func rev(id string) qosRun    { return qosRun{ID: id, Revocable: true} }
func nonRev(id string) qosRun { return qosRun{ID: id} }

func (r qosRun) prio(p uint32) qosRun { r.Priority = p; return r }

// started is in seconds since boot.
func (r qosRun) started(s int) qosRun { r.Started = time.Duration(s) * time.Second; return r }
func (r qosRun) cpu(c float64) qosRun { r.Use.CPU = c; return r }
func (r qosRun) mem(m int64) qosRun   { r.Use.MemoryMB = m; return r }
func runs(rs ...qosRun) (out []QoSRun) {
	for _, r := range rs {
		out = append(out, QoSRun(r))
	}
	return out
}

// testPolicy: hot at 90%, cooled below 75%, of 4 cores and 1000 MiB.
var (
	testPolicy   = QoSPolicy{CPUHigh: 0.9, CPULow: 0.75, MemHigh: 0.9, MemLow: 0.75, Samples: 2}
	testCapacity = Resources{CPU: 4, MemoryMB: 1000}
)

func TestQoSDecide(t *testing.T) {
	// Ordered a, b, c by priority then youth: b (prio 0, started 20 s) is
	// younger than a (prio 0, started 10 s); c has priority 1.
	abc := runs(
		rev("c").prio(1).started(5).cpu(2).mem(10),
		rev("a").prio(0).started(10).cpu(0.5).mem(10),
		nonRev("n").prio(0).started(30).cpu(1).mem(10),
		rev("b").prio(0).started(20).cpu(0.3).mem(10),
		rev("e").prio(2).started(1).cpu(1).mem(10),
	)
	tests := []struct {
		name        string
		policy      QoSPolicy // testPolicy when zero
		st          QoSState
		use         Resources
		stale       bool
		runs        []QoSRun
		wantState   QoSState
		wantVictims []string
	}{
		{
			name: "not hot: the count starts over",
			st:   QoSState{Hot: 1}, use: Resources{CPU: 3.5, MemoryMB: 899}, runs: abc,
		},
		{
			name: "hot once: counted, nothing killed",
			use:  Resources{CPU: 3.8, MemoryMB: 100}, runs: abc,
			wantState: QoSState{Hot: 1},
		},
		{
			name: "exactly at high is hot",
			use:  Resources{CPU: 3.6}, runs: abc,
			wantState: QoSState{Hot: 1},
		},
		{
			// 3.8 − b 0.3 = 3.5 − a 0.5 = 3.0, not below 3.0 − c 2 = 1.0:
			// enough; e (priority 2) is spared, n is not revocable.
			name: "hot twice: lowest priority, youngest first, just enough",
			st:   QoSState{Hot: 1}, use: Resources{CPU: 3.8, MemoryMB: 100}, runs: abc,
			wantVictims: []string{"b", "a", "c"},
		},
		{
			name: "hot twice, one victim is enough",
			st:   QoSState{Hot: 1}, use: Resources{CPU: 3.7}, runs: runs(rev("a").cpu(1), rev("b").prio(1).cpu(1)),
			// 3.7 − a 1 = 2.7 < 3.
			wantVictims: []string{"a"},
		},
		{
			name: "memory hot only: runs without memory passed over",
			st:   QoSState{Hot: 1}, use: Resources{CPU: 1, MemoryMB: 950},
			runs: runs(
				rev("x").prio(0).started(9).cpu(0.5), // no memory: killing it frees none
				rev("y").prio(0).started(1).mem(100),
				rev("z").prio(1).mem(150),
				rev("w").prio(2).mem(500),
			),
			// 950 − y 100 = 850 − z 150 = 700 < 750.
			wantVictims: []string{"y", "z"},
		},
		{
			// Youngest first would take b, a and c, all three: 950 − 50
			// − 100 = 800, still at or above 750.
			name: "memory hot: of equal priority, the largest first",
			st:   QoSState{Hot: 1}, use: Resources{CPU: 1, MemoryMB: 950},
			runs: runs(
				rev("a").prio(0).started(10).mem(100),
				rev("b").prio(0).started(20).mem(50),
				rev("c").prio(0).started(5).mem(300),
				rev("d").prio(1).started(1).mem(900), // larger, but of a higher priority
			),
			wantVictims: []string{"c"},
		},
		{
			name: "memory hot: priority before size",
			st:   QoSState{Hot: 1}, use: Resources{MemoryMB: 950},
			runs: runs(
				rev("big").prio(1).mem(400),
				rev("small").prio(0).started(3).mem(100),
				rev("mid").prio(0).started(9).mem(150),
			),
			// 950 − mid 150 − small 100 = 700 < 750.
			wantVictims: []string{"mid", "small"},
		},
		{
			name: "cpu hot only: youngest first, whatever the memory",
			st:   QoSState{Hot: 1}, use: Resources{CPU: 3.7, MemoryMB: 100},
			runs: runs(
				rev("old-big").started(1).cpu(1).mem(90),
				rev("young-small").started(9).cpu(1).mem(1),
			),
			wantVictims: []string{"young-small"},
		},
		{
			name: "both hot: until both are below low",
			st:   QoSState{Hot: 1}, use: Resources{CPU: 3.7, MemoryMB: 920},
			runs: runs(
				rev("m").prio(0).mem(300),           // memory 620: cool; cpu 3.7 still hot
				rev("c").prio(1).cpu(1),             // cpu 2.7: cool
				rev("spare").prio(2).cpu(1).mem(50), // not needed
			),
			wantVictims: []string{"m", "c"},
		},
		{
			name: "a kind cooled already: a run that only frees it is passed over",
			st:   QoSState{Hot: 1}, use: Resources{CPU: 3.7, MemoryMB: 920},
			runs: runs(
				rev("m").prio(0).mem(300),
				rev("m2").prio(1).mem(300), // memory is below low after m
				rev("c").prio(2).cpu(1),
			),
			wantVictims: []string{"m", "c"},
		},
		{
			name: "not enough: every revocable run, never the others",
			st:   QoSState{Hot: 1}, use: Resources{CPU: 4},
			runs:        runs(nonRev("n1").cpu(2), rev("r1").prio(5).cpu(0.5), nonRev("n2").cpu(1), rev("r2").prio(1).cpu(0.5)),
			wantVictims: []string{"r2", "r1"},
		},
		{
			name: "no revocable runs: nothing, and the count starts over",
			st:   QoSState{Hot: 1}, use: Resources{CPU: 4, MemoryMB: 1000},
			runs: runs(nonRev("n1").cpu(2).mem(500), nonRev("n2").cpu(2).mem(500)),
		},
		{
			name: "stale reading: nothing, and the count starts over",
			st:   QoSState{Hot: 1}, use: Resources{CPU: 4, MemoryMB: 1000}, stale: true, runs: abc,
		},
		{
			name: "stale and not hot",
			st:   QoSState{Hot: 5}, stale: true,
		},
		{
			name: "ties: same priority and start, by id",
			st:   QoSState{Hot: 1}, use: Resources{CPU: 3.7},
			runs: runs(rev("t3").started(7).cpu(0.3), rev("t1").started(7).cpu(0.3), rev("t2").started(7).cpu(0.3), rev("t0").started(7).cpu(0.3)),
			// 3.7 − 0.3 × 3 = 2.8 < 3.
			wantVictims: []string{"t0", "t1", "t2"},
		},
		{
			name:   "samples 1: the first hot reading acts",
			policy: QoSPolicy{CPUHigh: 0.9, CPULow: 0.75, Samples: 1},
			use:    Resources{CPU: 4}, runs: runs(rev("r").cpu(2)),
			wantVictims: []string{"r"},
		},
		{
			name:   "samples 0 is the default, 2",
			policy: QoSPolicy{CPUHigh: 0.9, CPULow: 0.75},
			use:    Resources{CPU: 4}, runs: runs(rev("r").cpu(2)),
			wantState: QoSState{Hot: 1},
		},
		{
			name:   "samples 3: a third hot reading",
			policy: QoSPolicy{CPUHigh: 0.9, CPULow: 0.75, Samples: 3},
			st:     QoSState{Hot: 1}, use: Resources{CPU: 4}, runs: runs(rev("r").cpu(2)),
			wantState: QoSState{Hot: 2},
		},
		{
			name:   "memory not watched",
			policy: QoSPolicy{CPUHigh: 0.9, CPULow: 0.75, Samples: 2},
			st:     QoSState{Hot: 1}, use: Resources{CPU: 1, MemoryMB: 1000}, runs: runs(rev("r").cpu(1).mem(1000)),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.policy
			if p == (QoSPolicy{}) {
				p = testPolicy
			}
			in := QoSInput{Capacity: testCapacity, Use: tt.use, Fresh: !tt.stale, Runs: slices.Clone(tt.runs)}
			st, victims := p.Decide(tt.st, in)
			if st != tt.wantState || !slices.Equal(victims, tt.wantVictims) {
				t.Errorf("Decide(%+v) = %+v, %q; want %+v, %q", tt.st, st, victims, tt.wantState, tt.wantVictims)
			}
			if !slices.Equal(in.Runs, tt.runs) {
				t.Error("Decide changed its input")
			}
		})
	}
}

// TestQoSDecideProperties checks, over random readings, what must hold of
// every answer: victims are revocable, distinct, in kill order; the answer
// does not depend on the order of the runs; when the revocable runs were
// enough, the projected use is below low in every hot kind, and without
// the last victim it would not be (just enough).
func TestQoSDecideProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	p := QoSPolicy{CPUHigh: 0.8, CPULow: 0.6, MemHigh: 0.85, MemLow: 0.7, Samples: 1}
	capacity := Resources{CPU: 8, MemoryMB: 16000}
	for i := range 2000 {
		var rs []QoSRun
		for j := range rng.IntN(12) {
			rs = append(rs, QoSRun{
				ID:        string(rune('a' + j)),
				Revocable: rng.IntN(2) == 0,
				Priority:  uint32(rng.IntN(3)),
				Started:   time.Duration(rng.IntN(4)) * time.Second,
				Use:       Resources{CPU: float64(rng.IntN(5)) / 2, MemoryMB: int64(rng.IntN(4)) * 1000},
			})
		}
		in := QoSInput{Capacity: capacity, Fresh: true, Runs: rs,
			Use: Resources{CPU: float64(rng.IntN(20)) / 2, MemoryMB: int64(rng.IntN(17)) * 1000}}
		_, victims := p.Decide(QoSState{}, in)

		byID := map[string]QoSRun{}
		for _, r := range rs {
			byID[r.ID] = r
		}
		for k, id := range victims {
			if !byID[id].Revocable {
				t.Fatalf("case %d: victim %s is not revocable (%+v)", i, id, in)
			}
			if k > 0 {
				a, b := byID[victims[k-1]], byID[id]
				memHot := float64(in.Use.MemoryMB) >= p.MemHigh*float64(capacity.MemoryMB)
				bigger := memHot && a.Use.MemoryMB > b.Use.MemoryMB
				smaller := memHot && a.Use.MemoryMB < b.Use.MemoryMB
				if a.Priority > b.Priority || (a.Priority == b.Priority && (smaller || (!bigger && a.Started < b.Started))) || a.ID == b.ID {
					t.Fatalf("case %d: victims %q out of order (%+v)", i, victims, in)
				}
			}
		}
		shuffled := slices.Clone(rs)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		in2 := in
		in2.Runs = shuffled
		if _, v2 := p.Decide(QoSState{}, in2); !slices.Equal(victims, v2) {
			t.Fatalf("case %d: %q, shuffled %q", i, victims, v2)
		}

		cpuHot := in.Use.CPU >= p.CPUHigh*capacity.CPU
		memHot := float64(in.Use.MemoryMB) >= p.MemHigh*float64(capacity.MemoryMB)
		if !cpuHot && !memHot {
			if victims != nil {
				t.Fatalf("case %d: not hot, victims %q", i, victims)
			}
			continue
		}
		projected := func(vs []string) (bool, bool) { // still at or above low, per hot kind
			cpu, mem := in.Use.CPU, float64(in.Use.MemoryMB)
			for _, id := range vs {
				cpu -= byID[id].Use.CPU
				mem -= float64(byID[id].Use.MemoryMB)
			}
			return cpuHot && cpu >= p.CPULow*capacity.CPU, memHot && mem >= p.MemLow*float64(capacity.MemoryMB)
		}
		var all []string
		for _, r := range rs {
			if r.Revocable {
				all = append(all, r.ID)
			}
		}
		if c, m := projected(all); c || m {
			continue // not enough even with every revocable run
		}
		if c, m := projected(victims); c || m {
			t.Fatalf("case %d: victims %q leave the host hot (%+v)", i, victims, in)
		}
		if len(victims) > 0 {
			if c, m := projected(victims[:len(victims)-1]); !c && !m {
				t.Fatalf("case %d: victims %q: the last was not needed (%+v)", i, victims, in)
			}
		}
	}
}

// TestQoSChooseResource: each victim names the kind it was chosen for:
// memory when memory needed cooling and the run frees some (memory first:
// it is the kind that kills), CPU otherwise.
func TestQoSChooseResource(t *testing.T) {
	tests := []struct {
		name string
		use  Resources
		runs []QoSRun
		want []QoSVictim
	}{
		{
			name: "cpu hot",
			use:  Resources{CPU: 3.8, MemoryMB: 100},
			runs: runs(rev("a").cpu(2).mem(50)),
			want: []QoSVictim{{"a", ResourceCPU}},
		},
		{
			name: "memory hot",
			use:  Resources{CPU: 1, MemoryMB: 950},
			runs: runs(rev("a").cpu(1).mem(300)),
			want: []QoSVictim{{"a", ResourceMemory}},
		},
		{
			// m frees both while both are needed: memory. Memory is cool
			// after m (920 − 400 = 520); c is taken for CPU.
			name: "both hot",
			use:  Resources{CPU: 3.9, MemoryMB: 920},
			runs: runs(rev("m").prio(0).cpu(0.5).mem(400), rev("c").prio(1).cpu(1).mem(10)),
			want: []QoSVictim{{"m", ResourceMemory}, {"c", ResourceCPU}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := QoSInput{Capacity: testCapacity, Use: tt.use, Fresh: true, Runs: tt.runs}
			_, got := testPolicy.Choose(QoSState{Hot: 1}, in)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Choose = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestQoSPolicyValidate(t *testing.T) {
	for _, tt := range []struct {
		name string
		p    QoSPolicy
		want string // in the error; "" for none
	}{
		{"both kinds", testPolicy, ""},
		{"cpu only", QoSPolicy{CPUHigh: 0.5, CPULow: 0.3}, ""},
		{"memory only", QoSPolicy{MemHigh: 1, MemLow: 0.9}, ""},
		{"nothing watched", QoSPolicy{Samples: 2}, "nothing to watch"},
		{"a percentage", QoSPolicy{CPUHigh: 90, CPULow: 75}, "qos.cpuHigh: 90 is not a fraction"},
		{"low above high", QoSPolicy{CPUHigh: 0.5, CPULow: 0.6}, "qos.cpuLow: 0.6 must be > 0 and below cpuHigh 0.5"},
		{"low equal to high", QoSPolicy{MemHigh: 0.5, MemLow: 0.5}, "qos.memLow"},
		{"no low", QoSPolicy{CPUHigh: 0.5}, "qos.cpuLow: 0 must be > 0"},
		{"low without high", QoSPolicy{CPUHigh: 0.5, CPULow: 0.3, MemLow: 0.3}, "qos.memLow: 0.3 set without memHigh"},
		{"negative samples", QoSPolicy{CPUHigh: 0.5, CPULow: 0.3, Samples: -1}, "qos.samples"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate = %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// TestEnvRunsInfo: what RunInfo says of each run, from one scan.
func TestEnvRunsInfo(t *testing.T) {
	revEnv := func(task, prio string) string {
		return runEnv(task, "h", "PELOTON_REVOCABLE=true", "PELOTON_PRIORITY="+prio)
	}
	tree := newTree(t).
		// j-0-1: revocable. 100 leads its group; 101 is in that group;
		// 102 leads a group of its own, but its parent is in the run.
		// 101 changed its priority; the run's is its first process's.
		proc(procStatFields{pid: 100, ppid: 1, pgrp: 100, start: 10, utime: 1, rss: 1}, revEnv("j-0-1", "3")).
		proc(procStatFields{pid: 101, ppid: 100, pgrp: 100, start: 11, utime: 1, rss: 1}, revEnv("j-0-1", "9")).
		proc(procStatFields{pid: 102, ppid: 101, pgrp: 102, start: 12, utime: 1, rss: 1}, revEnv("j-0-1", "3")).
		// j-1-1: not revocable, though a child says it is.
		proc(procStatFields{pid: 200, ppid: 1, pgrp: 200, start: 20}, runEnv("j-1-1", "h")).
		proc(procStatFields{pid: 201, ppid: 200, pgrp: 200, start: 21}, revEnv("j-1-1", "0")).
		// j-2-1: its earliest process is not its lowest pid (an orphan
		// adopted by init); 301 and 302 started in the same tick.
		proc(procStatFields{pid: 300, ppid: 1, start: 50}, revEnv("j-2-1", "1")).
		proc(procStatFields{pid: 302, ppid: 1, start: 40}, revEnv("j-2-1", "7")).
		proc(procStatFields{pid: 301, ppid: 1, start: 40}, revEnv("j-2-1", "6"))
	e := &EnvRuns{ProcRoot: tree.path("proc"), Host: "h"}
	infos, err := e.RunInfo(t0)
	if err != nil {
		t.Fatal(err)
	}
	samples, err := e.Runs(t0)
	if err != nil {
		t.Fatal(err)
	}
	tick := 10 * time.Millisecond
	want := map[string]RunInfo{
		"j-0-1": {Sample: samples["j-0-1"], Revocable: true, Priority: 3, Started: 10 * tick, Procs: []RunProc{
			{PID: 100, Started: 10 * tick, GroupLeader: true}, {PID: 101, Started: 11 * tick}, {PID: 102, Started: 12 * tick}}},
		"j-1-1": {Sample: samples["j-1-1"], Started: 20 * tick, Procs: []RunProc{
			{PID: 200, Started: 20 * tick, GroupLeader: true}, {PID: 201, Started: 21 * tick}}},
		"j-2-1": {Sample: samples["j-2-1"], Revocable: true, Priority: 6, Started: 40 * tick, Procs: []RunProc{
			{PID: 300, Started: 50 * tick}, {PID: 301, Started: 40 * tick}, {PID: 302, Started: 40 * tick}}},
	}
	if len(infos) != len(want) {
		t.Fatalf("RunInfo = %+v, want %+v", infos, want)
	}
	for id, w := range want {
		got := infos[id]
		if got.Sample != w.Sample || got.Revocable != w.Revocable || got.Priority != w.Priority ||
			got.Started != w.Started || !slices.Equal(got.Procs, w.Procs) {
			t.Errorf("%s = %+v\nwant   %+v", id, got, w)
		}
	}
}

func TestHostReaderCapacity(t *testing.T) {
	stat := procStatText(1, 0, 0, 0, 0, 0, 0) // two per-cpu lines
	for _, tt := range []struct {
		name string
		tree func(*fsTree)
		want Resources
	}{
		{"proc", func(f *fsTree) {}, Resources{CPU: 2, MemoryMB: 8192}},
		{"cgroup2 root: no limits", func(f *fsTree) {
			f.file("sys/fs/cgroup/cgroup.controllers", "cpu memory").file("sys/fs/cgroup/cpu.stat", "usage_usec 1\n").
				file("sys/fs/cgroup/memory.current", "1\n").file("sys/fs/cgroup/memory.stat", "inactive_file 0\n")
		}, Resources{CPU: 2, MemoryMB: 8192}},
		{"cgroup2 with a quota and a limit", func(f *fsTree) {
			f.file("sys/fs/cgroup/cgroup.controllers", "cpu memory").file("sys/fs/cgroup/cpu.stat", "usage_usec 1\n").
				file("sys/fs/cgroup/cpu.max", "150000 100000\n").
				file("sys/fs/cgroup/memory.current", "1\n").file("sys/fs/cgroup/memory.max", "1073741824\n")
		}, Resources{CPU: 1.5, MemoryMB: 1024}},
		{"cgroup2 quota above the cpus", func(f *fsTree) {
			f.file("sys/fs/cgroup/cgroup.controllers", "cpu").file("sys/fs/cgroup/cpu.stat", "usage_usec 1\n").
				file("sys/fs/cgroup/cpu.max", "800000 100000\n")
		}, Resources{CPU: 2, MemoryMB: 8192}},
		{"cgroup2 cpu.max max", func(f *fsTree) {
			f.file("sys/fs/cgroup/cgroup.controllers", "cpu").file("sys/fs/cgroup/cpu.stat", "usage_usec 1\n").
				file("sys/fs/cgroup/cpu.max", "max 100000\n")
		}, Resources{CPU: 2, MemoryMB: 8192}},
		{"cgroup1 with a quota; memory unlimited", func(f *fsTree) {
			f.file("sys/fs/cgroup/cpuacct/cpuacct.usage", "1\n").
				file("sys/fs/cgroup/cpu/cpu.cfs_quota_us", "50000\n").file("sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n").
				file("sys/fs/cgroup/memory/memory.usage_in_bytes", "1\n").
				file("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n")
		}, Resources{CPU: 0.5, MemoryMB: 8192}},
		{"cgroup1 without a quota", func(f *fsTree) {
			f.file("sys/fs/cgroup/cpuacct/cpuacct.usage", "1\n").file("sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n")
		}, Resources{CPU: 2, MemoryMB: 8192}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newTree(t).file("proc/stat", stat).file("proc/meminfo", meminfoText(8*giB, 5*giB))
			tt.tree(f)
			r, err := NewHostReader(f.root)
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.Capacity()
			if err != nil || got != tt.want {
				t.Errorf("Capacity = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestHostReaderCapacityThisMachine(t *testing.T) {
	needProc(t)
	r, err := NewHostReader("/")
	if err != nil {
		t.Skip(err)
	}
	c, err := r.Capacity()
	if err != nil {
		t.Fatal(err)
	}
	if c.CPU <= 0 || c.MemoryMB <= 0 {
		t.Errorf("Capacity = %+v, want some of each", c)
	}
	t.Logf("this machine: %+v (source %s/%s)", c, r.Source(), r.MemorySource())
}
