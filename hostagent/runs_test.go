package hostagent

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

// environ is a /proc/<pid>/environ: each entry NUL-terminated.
func environ(kv ...string) string {
	var b strings.Builder
	for _, e := range kv {
		b.WriteString(e)
		b.WriteByte(0)
	}
	return b.String()
}

// proc writes proc/<pid>/stat from p and proc/<pid>/environ from env.
func (f *fsTree) proc(p procStatFields, env string) *fsTree {
	f.t.Helper()
	return f.file(fmt.Sprintf("proc/%d/stat", p.pid), p.line()).
		file(fmt.Sprintf("proc/%d/environ", p.pid), env)
}

func runEnv(task, host string, more ...string) string {
	return environ(append([]string{"PATH=/usr/bin:/bin", "PELOTON_TASK_ID=" + task, "PELOTON_HOST=" + host}, more...)...)
}

// runsFixture is a proc tree with runs of hosts h and g:
//
//	1   init, no PELOTON_* variables
//	100 j-0-1 on h
//	├── 101 j-0-1 on h (inherited)
//	│   └── 102 j-0-1 on h, "my (weird) proc"
//	200 j-1-1 on g
//	300 PELOTON_HOST=h and no PELOTON_TASK_ID
//	400 j-2-1 on h, the variables in the other order
//	500 stat but no environ (gone between the two reads)
//	600 PELOTON_TASK_ID twice: j-3-1 first
//	700 PELOTON_TASK_ID=j-9-1 cut by the read bound
//	701 PELOTON_TASK_ID empty
//	702 PELOTON_TASK_ID longer than runIDMax
func runsFixture(t *testing.T) *fsTree {
	// 700: PELOTON_HOST first, then padding that makes the read bound fall
	// inside "PELOTON_TASK_ID=j-9-1", after "j-9-".
	cutID := "PELOTON_TASK_ID=j-9-1"
	head := environ("PELOTON_HOST=h")
	pad := "PAD=" + strings.Repeat("x", environMax-len(head)-len("PAD=")-1-len("PELOTON_TASK_ID=j-9-"))
	cut := head + environ(pad, cutID)
	if cut[:environMax] != head+environ(pad)+"PELOTON_TASK_ID=j-9-" {
		t.Fatal("fixture: the bound does not cut where intended")
	}
	tree := newTree(t).
		proc(procStatFields{pid: 1, comm: "init", start: 1, utime: 1000, rss: 1000}, environ("HOME=/", "TERM=linux")).
		proc(procStatFields{pid: 100, comm: "task", ppid: 1, start: 10, utime: 100, stime: 50, cutime: 20, cstime: 10, rss: 1000}, runEnv("j-0-1", "h")).
		proc(procStatFields{pid: 101, comm: "worker", ppid: 100, start: 11, utime: 30, stime: 20, rss: 2000}, runEnv("j-0-1", "h")).
		proc(procStatFields{pid: 102, comm: "my (weird) proc", ppid: 101, start: 12, utime: 7, stime: 3, rss: 300}, runEnv("j-0-1", "h", "X=1")).
		proc(procStatFields{pid: 200, comm: "other", ppid: 1, start: 20, utime: 5000, rss: 9000}, runEnv("j-1-1", "g")).
		proc(procStatFields{pid: 300, comm: "noid", ppid: 1, start: 30, utime: 5000, rss: 9000}, environ("PELOTON_HOST=h", "PELOTON_JOB_ID=j")).
		proc(procStatFields{pid: 400, comm: "reversed", ppid: 1, start: 40, utime: 1, stime: 1, rss: 1}, environ("PELOTON_HOST=h", "PELOTON_TASK_ID=j-2-1")).
		file("proc/500/stat", procStatFields{pid: 500, comm: "gone", ppid: 1, start: 50, utime: 5000}.line()).
		proc(procStatFields{pid: 600, comm: "twice", ppid: 1, start: 60, utime: 2}, environ("PELOTON_TASK_ID=j-3-1", "PELOTON_HOST=h", "PELOTON_TASK_ID=j-0-1")).
		proc(procStatFields{pid: 700, comm: "cut", ppid: 1, start: 70, utime: 5000}, cut).
		proc(procStatFields{pid: 701, comm: "empty", ppid: 1, start: 71, utime: 5000}, environ("PELOTON_TASK_ID=", "PELOTON_HOST=h")).
		proc(procStatFields{pid: 702, comm: "long", ppid: 1, start: 72, utime: 5000}, environ("PELOTON_TASK_ID="+strings.Repeat("j", runIDMax+1), "PELOTON_HOST=h")).
		file("proc/meminfo", meminfoText(giB, giB)).
		symlink("proc/self", "100")
	return tree
}

func TestEnvRunsFind(t *testing.T) {
	root := runsFixture(t).path("proc")
	for _, tt := range []struct {
		host string
		want map[string][]int
	}{
		{"h", map[string][]int{"j-0-1": {100, 101, 102}, "j-2-1": {400}, "j-3-1": {600}}},
		{"g", map[string][]int{"j-1-1": {200}}},
		{"nowhere", map[string][]int{}},
		{"", map[string][]int{"j-0-1": {100, 101, 102}, "j-1-1": {200}, "j-2-1": {400}, "j-3-1": {600}}},
	} {
		t.Run("host="+tt.host, func(t *testing.T) {
			snap, err := ReadProcs(root, t0)
			if err != nil {
				t.Fatal(err)
			}
			e := &EnvRuns{ProcRoot: root, Host: tt.host}
			if got := e.find(snap); !maps.EqualFunc(got, tt.want, slices.Equal) {
				t.Errorf("find = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestEnvRunsSample(t *testing.T) {
	root := runsFixture(t).path("proc")
	e := &EnvRuns{ProcRoot: root, Host: "h"}
	runs, err := e.Runs(t0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := slices.Sorted(maps.Keys(runs)), []string{"j-0-1", "j-2-1", "j-3-1"}; !slices.Equal(got, want) {
		t.Fatalf("runs = %v, want %v", got, want)
	}
	page := uint64(os.Getpagesize())
	// (100+50+20+10) + (30+20) + (7+3) = 240 ticks; 1000+2000+300 pages.
	if got, want := runs["j-0-1"], (Sample{CPUSeconds: 2.4, MemUsed: 3300 * page, Time: t0}); got != want {
		t.Errorf("j-0-1 = %+v, want %+v", got, want)
	}
	if got, want := runs["j-2-1"], (Sample{CPUSeconds: 0.02, MemUsed: page, Time: t0}); got != want {
		t.Errorf("j-2-1 = %+v, want %+v", got, want)
	}
}

// TestEnvRunsCache: environ is read once per process as exec'd, and the
// processes gone are forgotten. Rewriting a process's environ file stands
// in for "the agent must not read it again": a second read would see the
// new run id.
func TestEnvRunsCache(t *testing.T) {
	tree := newTree(t).
		proc(procStatFields{pid: 100, comm: "task", ppid: 1, start: 10, utime: 1, envStart: 1000, envEnd: 2000}, runEnv("j-0-1", "h")).
		proc(procStatFields{pid: 101, comm: "old-kernel", ppid: 100, start: 11, utime: 1}, runEnv("j-0-1", "h"))
	root := tree.path("proc")
	e := &EnvRuns{ProcRoot: root, Host: "h"}
	scan := func(step string, want map[string][]int) {
		t.Helper()
		snap, err := ReadProcs(root, t0)
		if err != nil {
			t.Fatal(err)
		}
		if got := e.find(snap); !maps.EqualFunc(got, want, slices.Equal) {
			t.Errorf("%s: find = %v, want %v", step, got, want)
		}
	}
	scan("first scan", map[string][]int{"j-0-1": {100, 101}})

	tree.file("proc/100/environ", runEnv("j-5-1", "h"))
	tree.file("proc/101/environ", runEnv("j-5-1", "h"))
	scan("environ rewritten, processes the same", map[string][]int{"j-0-1": {100, 101}})

	tree.file("proc/100/stat", procStatFields{pid: 100, comm: "task", ppid: 1, start: 10, utime: 1, envStart: 3000, envEnd: 4500}.line())
	scan("100 exec'd (its environment moved)", map[string][]int{"j-0-1": {101}, "j-5-1": {100}})

	tree.file("proc/100/stat", procStatFields{pid: 100, comm: "task", ppid: 1, start: 10, utime: 1}.line())
	tree.file("proc/100/environ", "")
	scan("100 a zombie (no environment to show)", map[string][]int{"j-0-1": {101}, "j-5-1": {100}})

	tree.file("proc/101/stat", procStatFields{pid: 101, comm: "reused", ppid: 1, start: 99, utime: 1}.line())
	scan("pid 101 reused (start time changed)", map[string][]int{"j-5-1": {100, 101}})

	if err := os.RemoveAll(tree.path("proc/101")); err != nil {
		t.Fatal(err)
	}
	scan("101 gone", map[string][]int{"j-5-1": {100}})
	if _, ok := e.cache[101]; ok || len(e.cache) != 1 {
		t.Errorf("cache = %v, want only pid 100: a process gone is forgotten", e.cache)
	}
}

func TestRunOf(t *testing.T) {
	for _, tt := range []struct {
		name, env, host string
		want            envRun
	}{
		{"empty", "", "h", envRun{}},
		{"match", runEnv("j-0-1", "h"), "h", envRun{id: "j-0-1"}},
		{"other host", runEnv("j-0-1", "g"), "h", envRun{}},
		{"any host", runEnv("j-0-1", "g"), "", envRun{id: "j-0-1"}},
		{"no host variable, host asked", environ("PELOTON_TASK_ID=j-0-1"), "h", envRun{}},
		{"no host variable, any host", environ("PELOTON_TASK_ID=j-0-1"), "", envRun{id: "j-0-1"}},
		{"host a prefix of the variable's", runEnv("j-0-1", "hh"), "h", envRun{}},
		{"a longer name ending like ours", environ("XPELOTON_TASK_ID=j-0-1", "PELOTON_HOST=h"), "h", envRun{}},
		{"last entry without its NUL", "PELOTON_HOST=h\x00PELOTON_TASK_ID=j-0-1", "h", envRun{}},
		{"value with '='", environ("PELOTON_TASK_ID=a=b", "PELOTON_HOST=h"), "h", envRun{id: "a=b"}},
		{"revocable", runEnv("j-0-1", "h", "PELOTON_REVOCABLE=true", "PELOTON_PRIORITY=7"), "h",
			envRun{id: "j-0-1", revocable: true, priority: 7}},
		{"revocable, the variables first", environ("PELOTON_PRIORITY=4294967295", "PELOTON_REVOCABLE=true", "PELOTON_TASK_ID=j-0-1", "PELOTON_HOST=h"), "h",
			envRun{id: "j-0-1", revocable: true, priority: 4294967295}},
		{"revocable only as the stack writes it", runEnv("j-0-1", "h", "PELOTON_REVOCABLE=1", "PELOTON_PRIORITY=7"), "h",
			envRun{id: "j-0-1", priority: 7}},
		{"revocable set twice: the first", runEnv("j-0-1", "h", "PELOTON_REVOCABLE=false", "PELOTON_REVOCABLE=true"), "h",
			envRun{id: "j-0-1"}},
		{"priority not a number", runEnv("j-0-1", "h", "PELOTON_REVOCABLE=true", "PELOTON_PRIORITY=high"), "h",
			envRun{id: "j-0-1", revocable: true}},
		{"priority above uint32", runEnv("j-0-1", "h", "PELOTON_REVOCABLE=true", "PELOTON_PRIORITY=4294967296"), "h",
			envRun{id: "j-0-1", revocable: true}},
		{"revocable, no run", environ("PELOTON_HOST=h", "PELOTON_REVOCABLE=true"), "h", envRun{}},
		{"metrics", runEnv("j-0-1", "h", "PELOTON_METRICS_PORT=http", "PELOTON_METRICS_PATH=/m", "PELOTON_METRICS_HISTOGRAM=lat_seconds", "PELOTON_PORT_HTTP=8080"), "h",
			envRun{id: "j-0-1", metrics: MetricsTarget{URL: "http://127.0.0.1:8080/m", Histogram: "lat_seconds"}}},
		{"metrics, the port's number before its name", environ("PELOTON_PORT_ADMIN_PORT=9", "PELOTON_METRICS_HISTOGRAM=l", "PELOTON_METRICS_PORT=admin-port", "PELOTON_TASK_ID=j-0-1"), "",
			envRun{id: "j-0-1", metrics: MetricsTarget{URL: "http://127.0.0.1:9/metrics", Histogram: "l"}}},
		{"metrics of another host's run", runEnv("j-0-1", "g", "PELOTON_METRICS_PORT=http", "PELOTON_METRICS_HISTOGRAM=l", "PELOTON_PORT_HTTP=1"), "h", envRun{}},
		{"metrics without the port's number", runEnv("j-0-1", "h", "PELOTON_METRICS_PORT=http", "PELOTON_METRICS_HISTOGRAM=l"), "h",
			envRun{id: "j-0-1", metrics: MetricsTarget{Err: `PELOTON_PORT_HTTP, the number of metrics port "http", is not set`}}},
		{"metrics variables set twice: the first", runEnv("j-0-1", "h", "PELOTON_METRICS_PORT=a", "PELOTON_METRICS_HISTOGRAM=l", "PELOTON_PORT_A=1",
			"PELOTON_METRICS_PORT=b", "PELOTON_PORT_B=2", "PELOTON_PORT_A=3", "PELOTON_METRICS_HISTOGRAM=m"), "h",
			envRun{id: "j-0-1", metrics: MetricsTarget{URL: "http://127.0.0.1:1/metrics", Histogram: "l"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := runOf([]byte(tt.env), tt.host); got != tt.want {
				t.Errorf("runOf(%q, %q) = %+v, want %+v", tt.env, tt.host, got, tt.want)
			}
		})
	}
}

// TestMetricsOf: what a run's environment says of its metrics endpoint,
// and every way it can say it wrong.
func TestMetricsOf(t *testing.T) {
	const hist = "PELOTON_METRICS_HISTOGRAM=lat_seconds"
	for _, tt := range []struct {
		name    string
		env     []string
		want    MetricsTarget
		wantErr string
	}{
		{"defaults", []string{"PELOTON_METRICS_PORT=http", "PELOTON_PORT_HTTP=31000", hist},
			MetricsTarget{URL: "http://127.0.0.1:31000/metrics", Histogram: "lat_seconds"}, ""},
		{"pod IP and a path with a query", []string{"PELOTON_METRICS_PORT=http", "PELOTON_PORT_HTTP=8080", hist,
			"PELOTON_METRICS_HOST=10.1.2.3", "PELOTON_METRICS_PATH=/stats?format=prometheus"},
			MetricsTarget{URL: "http://10.1.2.3:8080/stats?format=prometheus", Histogram: "lat_seconds"}, ""},
		{"IPv6 pod IP", []string{"PELOTON_METRICS_PORT=http", "PELOTON_PORT_HTTP=8080", hist, "PELOTON_METRICS_HOST=fd00::1"},
			MetricsTarget{URL: "http://[fd00::1]:8080/metrics", Histogram: "lat_seconds"}, ""},
		{"empty port name", []string{"PELOTON_METRICS_PORT=", hist}, MetricsTarget{}, "PELOTON_METRICS_PORT"},
		{"port name too long", []string{"PELOTON_METRICS_PORT=" + strings.Repeat("p", metricsValueMax+1), hist}, MetricsTarget{}, "PELOTON_METRICS_PORT"},
		{"port not a number", []string{"PELOTON_METRICS_PORT=http", "PELOTON_PORT_HTTP=eighty", hist}, MetricsTarget{}, "is not a port number"},
		{"port 0", []string{"PELOTON_METRICS_PORT=http", "PELOTON_PORT_HTTP=0", hist}, MetricsTarget{}, "is not a port number"},
		{"port above 65535", []string{"PELOTON_METRICS_PORT=http", "PELOTON_PORT_HTTP=65536", hist}, MetricsTarget{}, "is not a port number"},
		{"host a name", []string{"PELOTON_METRICS_PORT=http", "PELOTON_PORT_HTTP=1", hist, "PELOTON_METRICS_HOST=metadata.example"}, MetricsTarget{}, "is not an IP address"},
		{"host empty", []string{"PELOTON_METRICS_PORT=http", "PELOTON_PORT_HTTP=1", hist, "PELOTON_METRICS_HOST="}, MetricsTarget{}, "is not an IP address"},
		{"host with a zone", []string{"PELOTON_METRICS_PORT=http", "PELOTON_PORT_HTTP=1", hist, "PELOTON_METRICS_HOST=fe80::1%eth0"}, MetricsTarget{}, "is not an IP address"},
		{"host with a port", []string{"PELOTON_METRICS_PORT=http", "PELOTON_PORT_HTTP=1", hist, "PELOTON_METRICS_HOST=10.0.0.1:80"}, MetricsTarget{}, "is not an IP address"},
		{"relative path", []string{"PELOTON_METRICS_PORT=http", "PELOTON_PORT_HTTP=1", hist, "PELOTON_METRICS_PATH=metrics"}, MetricsTarget{}, "PELOTON_METRICS_PATH"},
		{"path with a space", []string{"PELOTON_METRICS_PORT=http", "PELOTON_PORT_HTTP=1", hist, "PELOTON_METRICS_PATH=/a b"}, MetricsTarget{}, "PELOTON_METRICS_PATH"},
		{"path with a host", []string{"PELOTON_METRICS_PORT=http", "PELOTON_PORT_HTTP=1", hist, "PELOTON_METRICS_PATH=@evil/"}, MetricsTarget{}, "PELOTON_METRICS_PATH"},
		{"path not UTF-8", []string{"PELOTON_METRICS_PORT=http", "PELOTON_PORT_HTTP=1", hist, "PELOTON_METRICS_PATH=/\xff"}, MetricsTarget{}, "PELOTON_METRICS_PATH"},
		{"no histogram", []string{"PELOTON_METRICS_PORT=http", "PELOTON_PORT_HTTP=1"}, MetricsTarget{}, "PELOTON_METRICS_HISTOGRAM is not set"},
		{"histogram not a name", []string{"PELOTON_METRICS_PORT=http", "PELOTON_PORT_HTTP=1", "PELOTON_METRICS_HISTOGRAM=lat{le=\"1\"}"}, MetricsTarget{}, "is not a metric name"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := runOf([]byte(runEnv("j-0-1", "h", tt.env...)), "h").metrics
			if tt.wantErr != "" {
				if got.URL != "" || got.Histogram != "" || !strings.Contains(got.Err, tt.wantErr) {
					t.Errorf("metrics = %+v, want only an error saying %q", got, tt.wantErr)
				}
				if len(got.Err) > 200 {
					t.Errorf("error of %d bytes: the environment's values must be quoted short", len(got.Err))
				}
				return
			}
			if got != tt.want {
				t.Errorf("metrics = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestPortEnvName: the agent names a port's variable as the backends do
// (hostmgr.PortEnvName, which it may not import).
func TestPortEnvName(t *testing.T) {
	for name, want := range map[string]string{
		"http":       "PELOTON_PORT_HTTP",
		"admin-port": "PELOTON_PORT_ADMIN_PORT",
		"Grpc_2":     "PELOTON_PORT_GRPC_2",
		"é":          "PELOTON_PORT__",
		"a.b c":      "PELOTON_PORT_A_B_C",
	} {
		if got := portEnvName([]byte(name)); got != want {
			t.Errorf("portEnvName(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestEnvRunsRunInfoMetrics: a run's metrics are what its earliest process
// was started with; a child that changed its environment changes nothing.
func TestEnvRunsRunInfoMetrics(t *testing.T) {
	metrics := func(port string) []string {
		return []string{"PELOTON_METRICS_PORT=http", "PELOTON_METRICS_HISTOGRAM=lat_seconds", "PELOTON_PORT_HTTP=" + port}
	}
	root := newTree(t).
		proc(procStatFields{pid: 200, comm: "child", ppid: 100, start: 20}, runEnv("j-0-1", "h", metrics("6666")...)).
		proc(procStatFields{pid: 100, comm: "server", ppid: 1, start: 10}, runEnv("j-0-1", "h", metrics("8080")...)).
		proc(procStatFields{pid: 300, comm: "plain", ppid: 1, start: 30}, runEnv("j-1-1", "h")).
		path("proc")
	infos, err := (&EnvRuns{ProcRoot: root, Host: "h"}).RunInfo(t0)
	if err != nil {
		t.Fatal(err)
	}
	if m := infos["j-0-1"].Metrics; m == nil || *m != (MetricsTarget{URL: "http://127.0.0.1:8080/metrics", Histogram: "lat_seconds"}) {
		t.Errorf("j-0-1 metrics = %+v, want its first process's, port 8080", m)
	}
	if m := infos["j-1-1"].Metrics; m != nil {
		t.Errorf("j-1-1 declares no metrics, got %+v", m)
	}
}

// TestEnvRunsRealProc finds a real run, a shell and its busy child, by the
// environment they were started with.
func TestEnvRunsRealProc(t *testing.T) {
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("no /proc:", err)
	}
	// A host name no other test on the machine uses.
	host := fmt.Sprintf("hostagent-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	// The root execs sleep 30, which bounds everything: the busy child
	// loops only while its parent lives.
	cmd := exec.Command("sh", "-c", `sh -c 'while kill -0 $PPID 2>/dev/null; do :; done' & echo $!; exec sleep 30`)
	cmd.Env = append(os.Environ(), "PELOTON_TASK_ID=j-0-1", "PELOTON_HOST="+host)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
	}()
	var busy int
	select {
	case s := <-line:
		if busy, err = strconv.Atoi(strings.TrimSpace(s)); err != nil {
			t.Fatalf("busy child's pid: %q: %v", s, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the shell did not print its child's pid in 10s")
	}

	e := &EnvRuns{Host: host}
	snap, err := ReadProcs("/proc", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	want := []int{cmd.Process.Pid, busy}
	slices.Sort(want)
	if got := e.find(snap); !maps.EqualFunc(got, map[string][]int{"j-0-1": want}, slices.Equal) {
		t.Fatalf("find = %v, want j-0-1: %v (the root and its busy child)", got, want)
	}

	first, err := e.Runs(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// The busy child wants a whole core; the machine is shared, so ask
	// for much less. CPU time counts in ticks (10 ms): read again until
	// 0.3 cores show over at least 200 ms, which an idle run never does.
	var u Usage
	testutil.Eventually(t, 10*time.Second, "the run uses > 0.3 cores (a busy loop)", func() error {
		second, err := e.Runs(time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if u, err = HostUsage(first["j-0-1"], second["j-0-1"]); err != nil {
			t.Fatal(err)
		}
		if u.Interval < 200*time.Millisecond || u.CPUCores <= 0.3 {
			return fmt.Errorf("%.2f cores over %s", u.CPUCores, u.Interval)
		}
		return nil
	})
	if u.MemUsed == 0 {
		t.Error("run uses no memory")
	}
}

// hostFixture is a host with 100 runs of 3 processes each and 200 other
// processes, and the /proc files a HostReader reads.
func hostFixture(b *testing.B) *fsTree {
	tree := newTree(b).
		file("proc/stat", procStatText(100, 0, 50, 1000, 0, 0, 0)).
		file("proc/meminfo", meminfoText(8*giB, 5*giB))
	pid := 1
	for r := range 100 {
		for range 3 {
			pid++
			tree.proc(procStatFields{pid: pid, comm: "task", ppid: 1, start: uint64(pid), utime: 100, rss: 100, envStart: 1, envEnd: 2},
				runEnv(fmt.Sprintf("job%d-0-1", r), "h", "HOME=/home/task", "LANG=C.UTF-8"))
		}
	}
	for range 200 {
		pid++
		tree.proc(procStatFields{pid: pid, comm: "other", ppid: 1, start: uint64(pid), utime: 100, rss: 100, envStart: 1, envEnd: 2},
			environ("HOME=/root", "LANG=C.UTF-8"))
	}
	return tree
}

// BenchmarkEnvRuns is one cycle of finding and measuring the runs of
// hostFixture, the cache warm.
func BenchmarkEnvRuns(b *testing.B) {
	e := &EnvRuns{ProcRoot: hostFixture(b).path("proc"), Host: "h"}
	if runs, err := e.Runs(t0); err != nil || len(runs) != 100 {
		b.Fatalf("Runs = %d runs, %v; want 100", len(runs), err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Runs(t0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEnvRunsProc is one cycle over this machine's /proc, the cache
// warm.
func BenchmarkEnvRunsProc(b *testing.B) {
	e := &EnvRuns{}
	if _, err := e.Runs(time.Now()); err != nil {
		b.Skip("no /proc:", err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Runs(time.Now()); err != nil {
			b.Fatal(err)
		}
	}
}

// TestEnvRunsOwnCgroup: with CgroupRoot set, a run alone in its cgroup is
// read from it (v2 and v1); a run sharing its cgroup with a process of
// another run, one in the root cgroup, one whose path a cgroup namespace
// hides, and one whose cgroup lacks counters are summed over their
// processes. The cgroup of a run is its earliest process's.
func TestEnvRunsOwnCgroup(t *testing.T) {
	cg2 := func(f *fsTree, dir string, usec int, procs string) *fsTree {
		return f.file(dir+"/cpu.stat", fmt.Sprintf("usage_usec %d\n", usec)).
			file(dir+"/memory.current", "104857600\n").
			file(dir+"/memory.stat", "inactive_file 0\n").
			file(dir+"/memory.max", "max\n").
			file(dir+"/cgroup.procs", procs)
	}
	st := func(pid, ppid int, start uint64) procStatFields {
		return procStatFields{pid: pid, comm: "p", ppid: ppid, utime: 10, start: start, rss: 1}
	}
	f := newTree(t).
		// a: two processes alone in their v2 cgroup.
		proc(st(10, 1, 100), runEnv("a-0-1", "h")).file("proc/10/cgroup", "0::/pods/a\n").
		proc(st(11, 10, 200), runEnv("a-0-1", "h")).file("proc/11/cgroup", "0::/pods/a\n").
		// b: shares its cgroup with process 21, of another host's run.
		proc(st(20, 1, 100), runEnv("b-0-1", "h")).file("proc/20/cgroup", "0::/pods/b\n").
		proc(st(21, 1, 100), runEnv("x-0-1", "g")).file("proc/21/cgroup", "0::/pods/b\n").
		// c: in the root cgroup; d: outside the agent's namespace.
		proc(st(30, 1, 100), runEnv("c-0-1", "h")).file("proc/30/cgroup", "0::/\n").
		proc(st(40, 1, 100), runEnv("d-0-1", "h")).file("proc/40/cgroup", "0::/../../pods/d\n").
		// e: v1, cpuacct mounted with cpu.
		proc(st(50, 1, 100), runEnv("e-0-1", "h")).
		file("proc/50/cgroup", "7:memory:/pods/e\n4:cpu,cpuacct:/pods/e\n1:name=systemd:/pods/e\n").
		file("cgroup/cpu,cpuacct/pods/e/cpuacct.usage", "3000000000\n").
		file("cgroup/cpu,cpuacct/pods/e/cgroup.procs", "50\n").
		file("cgroup/memory/pods/e/memory.usage_in_bytes", "52428800\n").
		file("cgroup/memory/pods/e/memory.stat", "total_inactive_file 0\n").
		file("cgroup/memory/pods/e/memory.limit_in_bytes", "9223372036854771712\n").
		// g: a cgroup without counters.
		proc(st(60, 1, 100), runEnv("g-0-1", "h")).file("proc/60/cgroup", "0::/pods/g\n").
		file("cgroup/pods/g/cgroup.procs", "60\n")
	cg2(f, "cgroup/pods/a", 2_500_000, "11\n10\n")
	cg2(f, "cgroup/pods/b", 9_000_000, "20\n21\n")

	e := &EnvRuns{ProcRoot: f.path("proc"), Host: "h", CgroupRoot: f.path("cgroup")}
	for pass := range 2 { // the second from the cache of cgroup paths
		runs, err := e.Runs(t0)
		if err != nil {
			t.Fatal(err)
		}
		page := uint64(os.Getpagesize())
		want := map[string]Sample{
			"a-0-1": {CPUSeconds: 2.5, MemUsed: 100 * miB, Time: t0},
			"b-0-1": {CPUSeconds: 0.1, MemUsed: page, Time: t0},
			"c-0-1": {CPUSeconds: 0.1, MemUsed: page, Time: t0},
			"d-0-1": {CPUSeconds: 0.1, MemUsed: page, Time: t0},
			"e-0-1": {CPUSeconds: 3, MemUsed: 50 * miB, Time: t0},
			"g-0-1": {CPUSeconds: 0.1, MemUsed: page, Time: t0},
		}
		for id, w := range want {
			if got := runs[id]; !sampleEqual(got, w) {
				t.Errorf("pass %d: %s = %+v, want %+v", pass, id, got, w)
			}
		}
	}
	// A process of another run joins a's cgroup: a is its own no more.
	f.file("cgroup/pods/a/cgroup.procs", "10\n11\n21\n")
	runs, err := e.Runs(t0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := runs["a-0-1"], (Sample{CPUSeconds: 0.2, MemUsed: 2 * uint64(os.Getpagesize()), Time: t0}); !sampleEqual(got, want) {
		t.Errorf("a-0-1 sharing its cgroup = %+v, want %+v (its processes)", got, want)
	}
}
