package hostagent

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// latencyBuckets are the buckets of the test services' histograms.
var latencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}

// serveService serves a real client_golang histogram request_seconds that
// observes, each time it is scraped and before it answers, 99 requests of
// 8 ms and one of 400 ms: every window between two scrapes holds exactly
// those 100, whose P99 the buckets put at 0.01 s (rank 99 is the last of
// the 99 in (0.005, 0.01]: 0.005 + 0.005 × 99/99).
func serveService(t *testing.T) string {
	reg := prometheus.NewRegistry()
	lat := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "request_seconds", Help: "Latency.", Buckets: latencyBuckets})
	reg.MustRegister(lat)
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	return serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for range 99 {
			lat.Observe(0.008)
		}
		lat.Observe(0.4)
		h.ServeHTTP(w, r)
	}))
}

// wantServiceP99 is serveService's P99 over any window.
const wantServiceP99 = 0.01

// portOf is the port of a loopback server's URL.
func portOf(t *testing.T, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

// downPort is a loopback port nothing listens on (one just closed).
func downPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return fmt.Sprint(port)
}

// metricsEnv is the environment of a run with metrics on port, as the stack
// and the local backend start it.
func metricsEnv(task, port, hist string) string {
	return runEnv(task, "h", "PELOTON_METRICS_PORT=http", "PELOTON_METRICS_PATH=/metrics",
		"PELOTON_METRICS_HISTOGRAM="+hist, "PELOTON_PORT_HTTP="+port)
}

// latencyAgent is an agent of a virtual host whose runs are found in a
// fixture /proc by EnvRuns: measure drives it, a reading at a time, with
// fixed times one second apart. Its interval gives the scrapes a second
// (latencyTestTimeout): ample for a loopback answer on a busy machine.
func latencyAgent(t *testing.T, tree *fsTree) *Agent {
	t.Helper()
	a, err := New(Config{Host: "h", Virtual: true, Runs: &EnvRuns{ProcRoot: tree.path("proc"), Host: "h"},
		Client: pelotonv1.NewHostAgentServiceClient(nil), Interval: 2 * latencyTestTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.scraper.CloseIdleConnections)
	return a
}

// latencyTestTimeout is the scrape timeout of latencyAgent.
const latencyTestTimeout = time.Second

// TestAgentLatency: the agent scrapes every run that declares metrics and
// reports its P99 over the window, or why there is none, in the run's
// usage; a run without metrics has neither.
func TestAgentLatency(t *testing.T) {
	ok := serveService(t)
	// Up from its third scrape on: until then it answers 503.
	var lateScrapes atomic.Int32
	late, proxy := serveService(t), newClient(t)
	lateSrv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if lateScrapes.Add(1) < 3 {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		resp, err := proxy.Get(late + r.URL.Path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		_, _ = io.Copy(w, resp.Body)
	}))
	huge := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		line := "# " + strings.Repeat("x", 1021) + "\n"
		for range scrapeBodyLimit/len(line) + 2 {
			if _, err := w.Write([]byte(line)); err != nil {
				return
			}
		}
	}))
	json := serveText(t, "application/json", `{"request_seconds": 0.01}`)
	slow := serve(t, stall(t, true))
	idle := serveText(t, "text/plain; version=0.0.4", "# TYPE request_seconds histogram\nrequest_seconds_bucket{le=\"0.1\"} 5\nrequest_seconds_bucket{le=\"+Inf\"} 5\nrequest_seconds_sum 0.2\nrequest_seconds_count 5\n")
	gauge := serveText(t, "text/plain; version=0.0.4", "# TYPE request_seconds gauge\nrequest_seconds 0.01\n")

	tree := newTree(t)
	for i, r := range []struct{ task, port, hist string }{
		{"ok-0-1", portOf(t, ok), "request_seconds"},
		{"late-0-1", portOf(t, lateSrv), "request_seconds"},
		{"down-0-1", downPort(t), "request_seconds"},
		{"slow-0-1", portOf(t, slow), "lat_seconds"},
		{"json-0-1", portOf(t, json), "request_seconds"},
		{"huge-0-1", portOf(t, huge), "request_seconds"},
		{"missing-0-1", portOf(t, ok), "other_seconds"},
		{"gauge-0-1", portOf(t, gauge), "request_seconds"},
		{"idle-0-1", portOf(t, idle), "request_seconds"},
	} {
		pid := 100 + i
		tree.proc(procStatFields{pid: pid, comm: "server", ppid: 1, start: uint64(pid), utime: 1}, metricsEnv(r.task, r.port, r.hist))
	}
	tree.proc(procStatFields{pid: 200, comm: "plain", ppid: 1, start: 200, utime: 1}, runEnv("plain-0-1", "h"))
	tree.proc(procStatFields{pid: 201, comm: "badenv", ppid: 1, start: 201, utime: 1},
		runEnv("badenv-0-1", "h", "PELOTON_METRICS_PORT=http", "PELOTON_METRICS_HISTOGRAM=l"))
	a := latencyAgent(t, tree)

	ctx := context.Background()
	var rep *pelotonv1.UsageReport
	for k := 1; k <= 3; k++ {
		var err error
		if rep, err = a.measure(ctx, at(k)); err != nil {
			t.Fatalf("reading %d: %v", k, err)
		}
		if k == 2 {
			// The second reading: every run measured, and its latency
			// from the second scrape.
			if u := rep.Runs["ok-0-1"]; u.GetLatencyP99Seconds() != wantServiceP99 || u.GetLatencyError() != "" {
				t.Errorf("reading 2: ok: P99 %v error %q, want %v", u.GetLatencyP99Seconds(), u.GetLatencyError(), wantServiceP99)
			}
			if u := rep.Runs["late-0-1"]; u.GetLatencyP99Seconds() != 0 || !strings.Contains(u.GetLatencyError(), "503") {
				t.Errorf("reading 2: late: P99 %v error %q, want its 503", u.GetLatencyP99Seconds(), u.GetLatencyError())
			}
		}
	}
	for id, want := range map[string]string{
		"ok-0-1":      "",
		"late-0-1":    errFirstReading,
		"down-0-1":    "connection refused",
		"slow-0-1":    "no answer within " + latencyTestTimeout.String(),
		"json-0-1":    "is not Prometheus text format",
		"huge-0-1":    "body larger than the limit of 4194304 bytes",
		"missing-0-1": `metric "other_seconds" not found`,
		"gauge-0-1":   "is a GAUGE, not a histogram",
		"idle-0-1":    "no requests in the window",
		"badenv-0-1":  "PELOTON_PORT_HTTP, the number of metrics port \"http\", is not set",
		"plain-0-1":   "",
	} {
		u := rep.Runs[id]
		if u == nil {
			t.Errorf("%s: no usage in the report", id)
			continue
		}
		switch {
		case id == "ok-0-1":
			if u.LatencyP99Seconds != wantServiceP99 || u.LatencyError != "" {
				t.Errorf("%s: P99 %v error %q, want %v", id, u.LatencyP99Seconds, u.LatencyError, wantServiceP99)
			}
		case id == "plain-0-1":
			if u.LatencyP99Seconds != 0 || u.LatencyError != "" {
				t.Errorf("%s: P99 %v error %q, want neither: it declares no metrics", id, u.LatencyP99Seconds, u.LatencyError)
			}
		case u.LatencyP99Seconds != 0 || !strings.Contains(u.LatencyError, want):
			t.Errorf("%s: P99 %v error %q, want no P99 and an error saying %q", id, u.LatencyP99Seconds, u.LatencyError, want)
		}
	}
	// The fourth reading: the late one answers P99 too.
	rep, err := a.measure(ctx, at(4))
	if err != nil {
		t.Fatal(err)
	}
	if u := rep.Runs["late-0-1"]; u.GetLatencyP99Seconds() != wantServiceP99 {
		t.Errorf("reading 4: late: P99 %v error %q, want %v", u.GetLatencyP99Seconds(), u.GetLatencyError(), wantServiceP99)
	}

	// A run gone is forgotten.
	if err := os.RemoveAll(tree.path("proc/100")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.measure(ctx, at(5)); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.scrapes["ok-0-1"]; ok {
		t.Error("the agent still keeps the state of a run gone")
	}
}

// TestAgentLatencyBounded: ten endpoints that never answer take at most
// maxConcurrentScrapes connections at once, and only the reading's time:
// the runs left out are told so, and go first at the next reading, so a
// healthy run among them is measured all the same.
func TestAgentLatencyBounded(t *testing.T) {
	var inFlight, most atomic.Int32
	done := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(done) }) })
	stuck := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		select {
		case <-r.Context().Done():
		case <-done:
		}
	}))
	ok := serveService(t)
	tree := newTree(t)
	for i := range 10 {
		pid := 100 + i
		tree.proc(procStatFields{pid: pid, comm: "stuck", ppid: 1, start: uint64(pid), utime: 1},
			metricsEnv(fmt.Sprintf("a%d-0-1", i), portOf(t, stuck), "request_seconds"))
	}
	tree.proc(procStatFields{pid: 200, comm: "ok", ppid: 1, start: 200, utime: 1}, metricsEnv("z-0-1", portOf(t, ok), "request_seconds"))
	a := latencyAgent(t, tree)

	// The server learns that a request was given up only when it sees
	// the connection closed: wait for that between readings, so that
	// what it counts at once is one reading's.
	settled := func() {
		testutil.Eventually(t, 10*time.Second, "the stuck requests given up", func() bool { return inFlight.Load() == 0 })
	}
	ctx := context.Background()
	if _, err := a.measure(ctx, at(1)); err != nil {
		t.Fatal(err)
	}
	settled()
	if got := a.scrapes["z-0-1"]; got == nil || got.have {
		t.Fatalf("reading 1: the healthy run was scraped (%+v): want it left out, the stuck ones first by name", got)
	}
	for k := 2; k <= 4; k++ {
		rep, err := a.measure(ctx, at(k))
		if err != nil {
			t.Fatal(err)
		}
		settled()
		notScraped := 0
		for id, u := range rep.Runs {
			if strings.HasPrefix(u.LatencyError, "not scraped") {
				notScraped++
			}
			if id != "z-0-1" && u.LatencyP99Seconds != 0 {
				t.Errorf("reading %d: %s has a P99 %v", k, id, u.LatencyP99Seconds)
			}
		}
		// Eight stuck at once leave three out; fewer when the healthy
		// one, answering at once, frees its connection for another.
		if notScraped < 11-maxConcurrentScrapes-1 || notScraped > 11-maxConcurrentScrapes {
			t.Errorf("reading %d: %d runs not scraped, want %d or one fewer", k, notScraped, 11-maxConcurrentScrapes)
		}
		// The healthy run is scraped at readings 2 and 4: the ones left
		// out before it go first, and at 3 it was the others' turn.
		z := rep.Runs["z-0-1"]
		switch k {
		case 2:
			if z.GetLatencyError() != errFirstReading {
				t.Errorf("reading 2: the healthy run: error %q, want %q", z.GetLatencyError(), errFirstReading)
			}
		case 3:
			if !strings.HasPrefix(z.GetLatencyError(), "not scraped") {
				t.Errorf("reading 3: the healthy run: error %q, want it left out", z.GetLatencyError())
			}
		case 4:
			if z.GetLatencyP99Seconds() != wantServiceP99 {
				t.Errorf("reading 4: the healthy run: P99 %v error %q, want %v", z.GetLatencyP99Seconds(), z.GetLatencyError(), wantServiceP99)
			}
		}
	}
	if m := most.Load(); m > maxConcurrentScrapes {
		t.Errorf("%d scrapes at once, want at most %d", m, maxConcurrentScrapes)
	}
}

// TestAgentReportsLatency: latency goes out in the reports of a running
// agent, from a real process's environment: the test binary's child, a
// sleep whose environment points at a loopback service.
func TestAgentReportsLatency(t *testing.T) {
	rec := newRecorder()
	_, addr := serveAgents(t, rec, "127.0.0.1:0")
	ok := serveService(t)
	host := fmt.Sprintf("hostagent-latency-%d", time.Now().UnixNano())
	// A sleep stands for the service: the agent reads the environment,
	// the service behind the port is the test's.
	cmd := exec.Command("sleep", "60")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "PELOTON_TASK_ID=svc-0-1", "PELOTON_HOST=" + host,
		"PELOTON_METRICS_PORT=http", "PELOTON_METRICS_HISTOGRAM=request_seconds", "PELOTON_PORT_HTTP=" + portOf(t, ok)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	cfg := Config{Host: host, Virtual: true, Runs: &EnvRuns{Host: host}, Client: dial(t, addr),
		Interval: 500 * time.Millisecond, RetryMin: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond}
	_, stop := start(t, cfg)
	testutil.Eventually(t, 10*time.Second, "a report with the service's P99", func() bool {
		for _, r := range rec.reports() {
			if u := r.Runs["svc-0-1"]; u.GetLatencyP99Seconds() == wantServiceP99 {
				return true
			}
		}
		return false
	})
	stop()
}

func TestWhyNoP99(t *testing.T) {
	b := []float64{0.1, inf}
	for _, tt := range []struct {
		name      string
		prev, cur Histogram
		want      string
	}{
		{"no requests", hist(b, 5, 5), hist(b, 5, 5), "no requests in the window"},
		{"restarted", hist(b, 5, 9), hist(b, 1, 2), "went back"},
		{"restarted, caught up in total", hist(b, 5, 9), hist(b, 1, 12), "went back"},
		{"new buckets", hist(b, 5, 9), hist([]float64{0.2, inf}, 5, 10), "buckets changed"},
		{"more buckets", hist(b, 5, 9), hist([]float64{0.1, 0.2, inf}, 5, 9, 10), "buckets changed"},
		{"only +Inf", Histogram{}, hist([]float64{inf}, 3), "no bucket but +Inf"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if p, ok := P99(tt.prev, tt.cur); ok {
				t.Fatalf("P99 = %v, true: the case has an answer", p)
			}
			if got := whyNoP99(tt.prev, tt.cur); !strings.Contains(got, tt.want) {
				t.Errorf("whyNoP99 = %q, want it to say %q", got, tt.want)
			}
		})
	}
}

// TestLatencyOfNotALatency: a histogram whose P99 is not a positive number
// of seconds is an error, never a 0 or a negative latency in the report.
func TestLatencyOfNotALatency(t *testing.T) {
	a := &Agent{cfg: Config{Interval: time.Second}}
	st := &scrapeState{}
	neg := func(n float64) Histogram { return hist([]float64{-1, 0, inf}, n, n, n) }
	if got := a.latencyOf(st, scrapeResult{started: true, h: neg(1)}, at(1)); got.err != errFirstReading {
		t.Fatalf("first reading: %+v", got)
	}
	got := a.latencyOf(st, scrapeResult{started: true, h: neg(2)}, at(2))
	if got.p99 != 0 || !strings.Contains(got.err, "not a latency") {
		t.Errorf("buckets below zero: %+v, want an error", got)
	}
	// A reading too old to start a window.
	got = a.latencyOf(st, scrapeResult{started: true, h: neg(3)}, at(2+latencyStaleIntervals+1))
	if got.p99 != 0 || !strings.Contains(got.err, "old; P99 from the next one") {
		t.Errorf("after a gap: %+v, want no P99 over the gap", got)
	}
}

func TestLimitError(t *testing.T) {
	long := strings.Repeat("é", latencyErrorMax)
	for _, s := range []string{"short", long, "bad \xff byte", strings.Repeat("x", 10*latencyErrorMax)} {
		got := limitError(s)
		if len(got) > latencyErrorMax || !utf8.ValidString(got) {
			t.Errorf("limitError(%.20q…) = %d bytes, valid UTF-8 %v", s, len(got), utf8.ValidString(got))
		}
	}
	if got := limitError("short"); got != "short" {
		t.Errorf("limitError(short) = %q", got)
	}
}

func TestScrapeTimeout(t *testing.T) {
	for in, want := range map[time.Duration]time.Duration{
		200 * time.Millisecond: 100 * time.Millisecond,
		time.Second:            500 * time.Millisecond,
		DefaultInterval:        2 * time.Second,
		time.Minute:            2 * time.Second,
	} {
		if got := scrapeTimeout(in); got != want {
			t.Errorf("scrapeTimeout(%s) = %s, want %s", in, got, want)
		}
	}
}
