package hostagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// recorder is the stack's side of HostAgentService as the tests need it:
// it takes and acknowledges every report, drops (and acknowledges) what it
// took before, and can be told to misbehave.
type recorder struct {
	pelotonv1.UnimplementedHostAgentServiceServer

	mu       sync.Mutex
	received []uint64                          // every report's sequence as it came, resends included
	taken    map[uint64]*pelotonv1.UsageReport // by sequence
	agents   map[string]bool                   // agent ids seen
	last     uint64                            // highest sequence taken
	streams  int                               // streams opened
	active   int                               // streams open now
	failNext bool                              // end the next stream at its next report, unacknowledged
	notFound bool                              // end every stream NOT_FOUND at its first report
	noAck    bool                              // take reports, acknowledge none
	settings *pelotonv1.AgentSettings          // sent with every ack

	// onReport, when set before serving, sees every report as it comes,
	// before it is acknowledged.
	onReport func(*pelotonv1.UsageReport)
}

func newRecorder() *recorder {
	return &recorder{taken: map[uint64]*pelotonv1.UsageReport{}, agents: map[string]bool{}}
}

func (r *recorder) ReportUsage(stream pelotonv1.HostAgentService_ReportUsageServer) error {
	r.mu.Lock()
	r.streams++
	r.active++
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.active--
		r.mu.Unlock()
	}()
	for {
		rep, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if r.onReport != nil {
			r.onReport(rep)
		}
		r.mu.Lock()
		r.received = append(r.received, rep.GetSequence())
		switch {
		case r.notFound:
			r.mu.Unlock()
			return status.Errorf(codes.NotFound, "host %q is not in the cluster", rep.GetHost())
		case r.failNext:
			r.failNext = false
			r.mu.Unlock()
			return status.Error(codes.Unavailable, "test: stream dropped")
		}
		r.agents[rep.GetAgentId()] = true
		if rep.GetSequence() > r.last {
			r.last = rep.GetSequence()
			r.taken[rep.GetSequence()] = rep
		}
		noAck, settings := r.noAck, r.settings
		r.mu.Unlock()
		if noAck {
			continue
		}
		if err := stream.Send(&pelotonv1.UsageAck{Sequence: rep.GetSequence(), Settings: settings}); err != nil {
			return err
		}
	}
}

func (r *recorder) set(f func(r *recorder)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(r)
}

func (r *recorder) lastTaken() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// reports returns the reports taken, by ascending sequence.
func (r *recorder) reports() []*pelotonv1.UsageReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*pelotonv1.UsageReport
	for _, seq := range slices.Sorted(func(yield func(uint64) bool) {
		for s := range r.taken {
			if !yield(s) {
				return
			}
		}
	}) {
		out = append(out, r.taken[seq])
	}
	return out
}

// serveAgents serves rec on addr (127.0.0.1:0 for any port) until the test ends
// or the returned server is stopped.
func serveAgents(t *testing.T, rec *recorder, addr string) (*grpc.Server, string) {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pelotonv1.RegisterHostAgentServiceServer(srv, rec)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-served
	})
	return srv, lis.Addr().String()
}

// dial is a client of addr that retries a lost connection within tens of
// milliseconds, not grpc's default second and more.
func dial(t *testing.T, addr string) pelotonv1.HostAgentServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.5, Jitter: 0.1, MaxDelay: 100 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return pelotonv1.NewHostAgentServiceClient(conn)
}

// fakeMachine is a HostSource and a RunSource whose k-th reading (from 1)
// is host(k) and runs(k). Its samples carry their own times (t0 + k s), so
// the usage between two readings is exact whatever the real interval was.
type fakeMachine struct {
	// virtual: Runs, not Read, starts a reading (a virtual host has no
	// Source).
	virtual bool
	host    func(k int) (Sample, error)
	runs    func(k int) (map[string]Sample, error)

	mu sync.Mutex
	k  int
}

func (m *fakeMachine) Read(time.Time) (Sample, error) {
	m.mu.Lock()
	m.k++
	k := m.k
	m.mu.Unlock()
	return m.host(k)
}

func (m *fakeMachine) Source() string { return "sim" }

func (m *fakeMachine) Runs(time.Time) (map[string]Sample, error) {
	m.mu.Lock()
	if m.virtual {
		m.k++
	}
	k := m.k
	m.mu.Unlock()
	return m.runs(k)
}

var _ HostSource = (*fakeMachine)(nil)
var _ RunSource = (*fakeMachine)(nil)

// at is the time of the k-th fake reading.
func at(k int) time.Time { return t0.Add(time.Duration(k) * time.Second) }

// testConfig is a Config for the tests: fast intervals and retries.
func testConfig(client pelotonv1.HostAgentServiceClient, m *fakeMachine) Config {
	cfg := Config{
		Host:       "h",
		Interval:   20 * time.Millisecond,
		Runs:       m,
		Client:     client,
		RetryMin:   10 * time.Millisecond,
		RetryMax:   100 * time.Millisecond,
		AckTimeout: 5 * time.Second,
	}
	if m.virtual {
		cfg.Virtual = true
	} else {
		cfg.Source = m
	}
	return cfg
}

// start runs an agent until the test ends or stop is called.
func start(t *testing.T, cfg Config) (a *Agent, stop func()) {
	t.Helper()
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run = %v, want nil when stopped", err)
				}
			case <-time.After(10 * time.Second):
				t.Error("Run did not return within 10s of its context ending")
			}
		})
	}
	t.Cleanup(stop)
	return a, stop
}

var errFake = errors.New("fake: read failed")

// steadyHost is a host using 3 cores, its memory in use growing by 100 MiB
// a reading; it fails from reading n+1 on, so that a test has a last
// report to wait for.
func steadyHost(n int) func(int) (Sample, error) {
	return func(k int) (Sample, error) {
		if k > n {
			return Sample{}, errFake
		}
		return Sample{CPUSeconds: 3 * float64(k), MemUsed: uint64(k) * 100 * miB, MemAvailable: giB, Time: at(k)}, nil
	}
}

func noRuns(int) (map[string]Sample, error) { return map[string]Sample{}, nil }

// TestAgentReports: reports of one agent, with sequences going up, carrying
// the usage between consecutive readings: a run first seen is reported from
// the next interval on, a run whose counter went down is left out once.
func TestAgentReports(t *testing.T) {
	rec := newRecorder()
	_, addr := serveAgents(t, rec, "127.0.0.1:0")
	const readings = 7
	m := &fakeMachine{
		host: steadyHost(readings),
		runs: func(k int) (map[string]Sample, error) {
			runs := map[string]Sample{}
			// j-0-1: half a core; its counter restarts at reading 5.
			cpu := 0.5 * float64(k)
			if k >= 5 {
				cpu = 0.5 * float64(k-5)
			}
			runs["j-0-1"] = Sample{CPUSeconds: cpu, MemUsed: 10*miB + 5, Time: at(k)}
			// j-1-1: a quarter core, first seen at reading 3.
			if k >= 3 {
				runs["j-1-1"] = Sample{CPUSeconds: 0.25 * float64(k), MemUsed: 20 * miB, Time: at(k)}
			}
			return runs, nil
		},
	}
	a, _ := start(t, testConfig(dial(t, addr), m))
	testutil.Eventually(t, 10*time.Second, "the last report", func() bool { return rec.lastTaken() == readings-1 })

	// Report s is of reading s+1 against reading s. Under load a report
	// may be superseded before it is sent; those present must be right.
	want := func(seq uint64) *pelotonv1.UsageReport {
		k := int(seq) + 1
		runs := map[string]*pelotonv1.TaskUsage{}
		if k != 5 {
			runs["j-0-1"] = &pelotonv1.TaskUsage{Cpu: 0.5, MemoryUsedMb: 10, SampleTime: timestamppb.New(at(k))}
		}
		if k >= 4 {
			runs["j-1-1"] = &pelotonv1.TaskUsage{Cpu: 0.25, MemoryUsedMb: 20, SampleTime: timestamppb.New(at(k))}
		}
		return &pelotonv1.UsageReport{
			Host: "h", AgentId: a.AgentID(), Sequence: seq,
			Usage: &pelotonv1.HostUsage{Cpu: 3, MemoryUsedMb: int64(k) * 100, MemoryAvailableMb: 1024,
				Source: "sim", SampleTime: timestamppb.New(at(k))},
			Runs: runs,
		}
	}
	for _, got := range rec.reports() {
		if w := want(got.GetSequence()); !proto.Equal(got, w) {
			t.Errorf("report %d:\n got %v\nwant %v", got.GetSequence(), got, w)
		}
	}
	rec.mu.Lock()
	if len(rec.agents) != 1 {
		t.Errorf("agent ids %v, want one", rec.agents)
	}
	if !slices.IsSorted(rec.received) {
		t.Errorf("sequences as received %v: an older report was sent after a newer one", rec.received)
	}
	rec.mu.Unlock()

	st := a.Stats()
	if st.LastAcked != readings-1 || st.Acked == 0 || st.Sent < st.Acked || st.LastError != "" {
		t.Errorf("Stats = %+v, want last acked %d, acks and no error", st, readings-1)
	}
	if !proto.Equal(st.LastReport, want(readings-1)) {
		t.Errorf("Stats.LastReport = %v, want report %d", st.LastReport, readings-1)
	}
}

// TestAgentFailedReadingSendsNothing: a reading that fails, of the host or
// of the runs, builds no report; the next report covers the interval since
// the last good reading.
func TestAgentFailedReadingSendsNothing(t *testing.T) {
	rec := newRecorder()
	_, addr := serveAgents(t, rec, "127.0.0.1:0")
	steady := steadyHost(6)
	m := &fakeMachine{
		host: func(k int) (Sample, error) {
			if k == 3 {
				return Sample{}, errFake
			}
			return steady(k)
		},
		runs: func(k int) (map[string]Sample, error) {
			if k == 4 {
				return nil, errFake
			}
			return noRuns(k)
		},
	}
	start(t, testConfig(dial(t, addr), m))
	testutil.Eventually(t, 10*time.Second, "report 3", func() bool { return rec.lastTaken() == 3 })

	// Readings 1 (baseline) and 2 make report 1; 3 and 4 fail; 5 makes
	// report 2, against reading 2; 6 makes report 3.
	wantTime := map[uint64]time.Time{1: at(2), 2: at(5), 3: at(6)}
	for _, r := range rec.reports() {
		if got, want := r.GetUsage().GetSampleTime().AsTime(), wantTime[r.GetSequence()]; !got.Equal(want) {
			t.Errorf("report %d read at %v, want %v", r.GetSequence(), got, want)
		}
		if got := r.GetUsage().GetCpu(); got != 3 {
			t.Errorf("report %d: cpu %v, want 3 (over the whole interval since the last good reading)", r.GetSequence(), got)
		}
	}
}

// TestAgentVirtualHost: a virtual host's usage is the sum of the runs it
// reports, from source "runs", with nothing known to be available.
func TestAgentVirtualHost(t *testing.T) {
	rec := newRecorder()
	_, addr := serveAgents(t, rec, "127.0.0.1:0")
	m := &fakeMachine{
		virtual: true,
		runs: func(k int) (map[string]Sample, error) {
			if k > 3 {
				return nil, errFake
			}
			runs := map[string]Sample{
				"j-0-1": {CPUSeconds: 0.5 * float64(k), MemUsed: 10 * miB, Time: at(k)},
				"j-1-1": {CPUSeconds: 0.25 * float64(k), MemUsed: 20*miB + miB/2, Time: at(k)},
			}
			if k == 3 {
				runs["j-2-1"] = Sample{CPUSeconds: 1, MemUsed: 40 * miB, Time: at(k)} // first seen: not in the sum
			}
			return runs, nil
		},
	}
	start(t, testConfig(dial(t, addr), m))
	testutil.Eventually(t, 10*time.Second, "report 2", func() bool { return rec.lastTaken() == 2 })
	for _, r := range rec.reports() {
		u := r.GetUsage()
		if u.GetCpu() != 0.75 || u.GetMemoryUsedMb() != 30 || u.GetMemoryAvailableMb() != 0 || u.GetSource() != SourceRuns || u.GetSampleTime() == nil {
			t.Errorf("report %d usage = %v, want cpu 0.75, 30 MiB used (20.5 + 10 rounded down), 0 available, source runs, a sample time",
				r.GetSequence(), u)
		}
		if len(r.GetRuns()) != 2 {
			t.Errorf("report %d runs = %v, want j-0-1 and j-1-1", r.GetSequence(), r.GetRuns())
		}
	}
}

// TestAgentResendsAfterDrop: the stream drops with the only report
// unacknowledged; the agent reconnects and sends it again.
func TestAgentResendsAfterDrop(t *testing.T) {
	rec := newRecorder()
	rec.failNext = true
	_, addr := serveAgents(t, rec, "127.0.0.1:0")
	m := &fakeMachine{host: steadyHost(2), runs: noRuns} // one report only
	a, _ := start(t, testConfig(dial(t, addr), m))
	testutil.Eventually(t, 10*time.Second, "report 1 taken", func() bool { return rec.lastTaken() == 1 })
	testutil.Eventually(t, 10*time.Second, "report 1 acknowledged", func() bool { return a.Stats().LastAcked == 1 })
	st := a.Stats()
	if st.Reconnects < 1 || !strings.Contains(st.LastError, "test: stream dropped") {
		t.Errorf("Stats = %+v, want a reconnect after the drop, and its error", st)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.received[0] != 1 || rec.received[len(rec.received)-1] != 1 || rec.streams < 2 {
		t.Errorf("received %v on %d streams, want report 1 on the first, again on another", rec.received, rec.streams)
	}
}

// TestAgentReconnects: a stream dropped while reports flow, and a stack
// stopped and started again on the same address: the reports go on, with
// sequences only going up.
func TestAgentReconnects(t *testing.T) {
	rec := newRecorder()
	srv, addr := serveAgents(t, rec, "127.0.0.1:0")
	m := &fakeMachine{host: steadyHost(math.MaxInt), runs: noRuns}
	a, _ := start(t, testConfig(dial(t, addr), m))

	testutil.Eventually(t, 10*time.Second, "report 3", func() bool { return rec.lastTaken() >= 3 })
	rec.set(func(r *recorder) { r.failNext = true })
	testutil.Eventually(t, 10*time.Second, "the drop", func() bool { return a.Stats().Reconnects >= 1 })
	before := rec.lastTaken()
	testutil.Eventually(t, 10*time.Second, "reports after the drop", func() bool { return rec.lastTaken() > before+2 })

	srv.Stop()
	stopped := a.Stats().Reconnects
	testutil.Eventually(t, 10*time.Second, "the agent to see the stack gone", func() bool { return a.Stats().Reconnects > stopped })
	before = rec.lastTaken()
	serveAgents(t, rec, addr)
	testutil.Eventually(t, 10*time.Second, "reports after the restart", func() bool { return rec.lastTaken() > before+2 })

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if !slices.IsSorted(rec.received) {
		t.Errorf("sequences as received %v: an older report was sent after a newer one", rec.received)
	}
	if len(rec.agents) != 1 {
		t.Errorf("agent ids %v, want one", rec.agents)
	}
}

// TestAgentNotFound: a host the cluster does not have is logged as an
// error in the stack's words and retried (at the longest wait), and
// reported once the cluster has it.
func TestAgentNotFound(t *testing.T) {
	rec := newRecorder()
	rec.notFound = true
	_, addr := serveAgents(t, rec, "127.0.0.1:0")
	var logs testutil.SyncBuffer
	cfg := testConfig(dial(t, addr), &fakeMachine{host: steadyHost(math.MaxInt), runs: noRuns})
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	a, _ := start(t, cfg)

	testutil.Eventually(t, 10*time.Second, "two refusals", func() bool { return a.Stats().Reconnects >= 2 })
	if st := a.Stats(); !strings.Contains(st.LastError, "NotFound") {
		t.Errorf("LastError = %q, want NOT_FOUND", st.LastError)
	}
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, `host \"h\" is not in the cluster`) {
		t.Errorf("log:\n%s\nwant an error with the stack's words", l)
	}
	if a.Stats().Acked != 0 {
		t.Error("acknowledged while refused")
	}

	rec.set(func(r *recorder) { r.notFound = false })
	testutil.Eventually(t, 10*time.Second, "reports once the host is known", func() bool { return rec.lastTaken() >= 2 })
}

// TestAgentAckTimeout: a stack that takes reports and never acknowledges
// them is given up on and reconnected to.
func TestAgentAckTimeout(t *testing.T) {
	rec := newRecorder()
	rec.noAck = true
	_, addr := serveAgents(t, rec, "127.0.0.1:0")
	cfg := testConfig(dial(t, addr), &fakeMachine{host: steadyHost(math.MaxInt), runs: noRuns})
	cfg.AckTimeout = 100 * time.Millisecond
	a, _ := start(t, cfg)
	testutil.Eventually(t, 10*time.Second, "the stream given up", func() bool { return a.Stats().Reconnects >= 1 })
	if st := a.Stats(); !strings.Contains(st.LastError, "no ack") {
		t.Errorf("LastError = %q, want no ack", st.LastError)
	}
	rec.set(func(r *recorder) { r.noAck = false })
	testutil.Eventually(t, 10*time.Second, "an ack", func() bool { return a.Stats().LastAcked > 0 })
}

// TestAgentStop: Run returns when its context ends, closing its stream.
func TestAgentStop(t *testing.T) {
	rec := newRecorder()
	_, addr := serveAgents(t, rec, "127.0.0.1:0")
	a, stop := start(t, testConfig(dial(t, addr), &fakeMachine{host: steadyHost(math.MaxInt), runs: noRuns}))
	testutil.Eventually(t, 10*time.Second, "a report", func() bool { return rec.lastTaken() >= 1 })
	if err := a.Run(context.Background()); err == nil {
		t.Error("a second Run while running = nil, want an error")
	}
	stop()
	testutil.Eventually(t, 10*time.Second, "the stream closed", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return rec.active == 0
	})
}

func TestNewConfig(t *testing.T) {
	client := pelotonv1.NewHostAgentServiceClient(nil)
	m := &fakeMachine{}
	ok := Config{Host: "h", Source: m, Runs: m, Client: client}
	for _, tt := range []struct {
		name string
		edit func(c *Config)
		want string // in the error; "" for none
	}{
		{"ok", func(*Config) {}, ""},
		{"no host", func(c *Config) { c.Host = "" }, "config.host: required"},
		{"no client", func(c *Config) { c.Client = nil }, "config.client: required"},
		{"no runs", func(c *Config) { c.Runs = nil }, "config.runs: required"},
		{"no source", func(c *Config) { c.Source = nil }, "config.source: required"},
		{"virtual", func(c *Config) { c.Source, c.Virtual = nil, true }, ""},
		{"virtual with a source", func(c *Config) { c.Virtual = true }, "config.source: must be nil"},
		{"negative interval", func(c *Config) { c.Interval = -time.Second }, "must be >= 0"},
		{"retry max below min", func(c *Config) { c.RetryMin, c.RetryMax = time.Second, time.Millisecond }, "config.retryMax"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ok
			tt.edit(&cfg)
			a, err := New(cfg)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("New = %v, want an agent", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("New = %v, want an error with %q", err, tt.want)
			}
			if err != nil {
				return
			}
			c := a.cfg
			if len(c.AgentID) != 32 || strings.Trim(c.AgentID, "0123456789abcdef") != "" {
				t.Errorf("AgentID = %q, want 128 bits in hex", c.AgentID)
			}
			if c.Interval != DefaultInterval || c.RetryMin != DefaultRetryMin || c.RetryMax != DefaultRetryMax || c.AckTimeout != DefaultAckTimeout {
				t.Errorf("defaults = %v %v %v %v", c.Interval, c.RetryMin, c.RetryMax, c.AckTimeout)
			}
		})
	}
	a, _ := New(ok)
	b, _ := New(ok)
	if a.AgentID() == b.AgentID() {
		t.Errorf("two agents share id %s", a.AgentID())
	}
}

// TestUsageReport is the arithmetic of a report, table-driven.
func TestUsageReport(t *testing.T) {
	host := func(k int, cpu float64) Sample {
		return Sample{CPUSeconds: cpu, MemUsed: 512*miB + miB - 1, MemAvailable: 3 * giB, Time: at(k)}
	}
	run := func(k int, cpu float64) Sample { return Sample{CPUSeconds: cpu, MemUsed: 7 * miB, Time: at(k)} }
	tests := []struct {
		name      string
		prev, cur reading
		virtual   bool
		want      *pelotonv1.UsageReport
		wantErr   error
	}{
		{
			name: "host over two seconds, memory rounded down",
			prev: reading{time: at(1), host: host(1, 10), runs: map[string]Sample{}},
			cur:  reading{time: at(3), host: host(3, 13), runs: map[string]Sample{}},
			want: &pelotonv1.UsageReport{
				Usage: &pelotonv1.HostUsage{Cpu: 1.5, MemoryUsedMb: 512, MemoryAvailableMb: 3072, Source: "proc", SampleTime: timestamppb.New(at(3))},
				Runs:  map[string]*pelotonv1.TaskUsage{},
			},
		},
		{
			name: "runs: one measured, one first seen, one reset, one gone",
			prev: reading{time: at(1), host: host(1, 10), runs: map[string]Sample{"a": run(1, 1), "c": run(1, 5), "d": run(1, 1)}},
			cur:  reading{time: at(2), host: host(2, 11), runs: map[string]Sample{"a": run(2, 1.25), "b": run(2, 9), "c": run(2, 1)}},
			want: &pelotonv1.UsageReport{
				Usage: &pelotonv1.HostUsage{Cpu: 1, MemoryUsedMb: 512, MemoryAvailableMb: 3072, Source: "proc", SampleTime: timestamppb.New(at(2))},
				Runs:  map[string]*pelotonv1.TaskUsage{"a": {Cpu: 0.25, MemoryUsedMb: 7, SampleTime: timestamppb.New(at(2))}},
			},
		},
		{
			name:    "host counter went down",
			prev:    reading{time: at(1), host: host(1, 10), runs: map[string]Sample{}},
			cur:     reading{time: at(2), host: host(2, 9), runs: map[string]Sample{}},
			wantErr: ErrCounterReset,
		},
		{
			name:    "virtual: the sum of the runs reported",
			virtual: true,
			prev:    reading{time: at(1), runs: map[string]Sample{"a": run(1, 1), "c": run(1, 1)}},
			cur:     reading{time: at(2), runs: map[string]Sample{"a": run(2, 1.5), "b": run(2, 1), "c": run(2, 1.25)}},
			want: &pelotonv1.UsageReport{
				Usage: &pelotonv1.HostUsage{Cpu: 0.75, MemoryUsedMb: 14, Source: SourceRuns, SampleTime: timestamppb.New(at(2))},
				Runs: map[string]*pelotonv1.TaskUsage{
					"a": {Cpu: 0.5, MemoryUsedMb: 7, SampleTime: timestamppb.New(at(2))},
					"c": {Cpu: 0.25, MemoryUsedMb: 7, SampleTime: timestamppb.New(at(2))},
				},
			},
		},
		{
			// b began half a second after the previous reading: measured
			// from its start (0.75 s of CPU in 0.5 s). e began before the
			// previous reading (a run the agent could not see then) and
			// f a tenth of a second before this one (too young for its
			// ticks to say much): both wait for the next reading.
			name:    "virtual: a run first seen is measured from its start",
			virtual: true,
			prev:    reading{time: at(1), runs: map[string]Sample{"a": run(1, 1)}},
			cur: reading{time: at(2), runs: map[string]Sample{
				"a": run(2, 1.5),
				"b": {CPUSeconds: 0.75, MemUsed: 7 * miB, Time: at(2), Began: at(1).Add(500 * time.Millisecond)},
				"e": {CPUSeconds: 3, MemUsed: 7 * miB, Time: at(2), Began: at(1).Add(-time.Second)},
				"f": {CPUSeconds: 0.1, MemUsed: 7 * miB, Time: at(2), Began: at(2).Add(-100 * time.Millisecond)},
			}},
			want: &pelotonv1.UsageReport{
				Usage: &pelotonv1.HostUsage{Cpu: 2, MemoryUsedMb: 14, Source: SourceRuns, SampleTime: timestamppb.New(at(2))},
				Runs: map[string]*pelotonv1.TaskUsage{
					"a": {Cpu: 0.5, MemoryUsedMb: 7, SampleTime: timestamppb.New(at(2))},
					"b": {Cpu: 1.5, MemoryUsedMb: 7, SampleTime: timestamppb.New(at(2))},
				},
			},
		},
		{
			name:    "virtual without runs: zero, not unknown",
			virtual: true,
			prev:    reading{time: at(1), runs: map[string]Sample{}},
			cur:     reading{time: at(2), runs: map[string]Sample{}},
			want: &pelotonv1.UsageReport{
				Usage: &pelotonv1.HostUsage{Source: SourceRuns, SampleTime: timestamppb.New(at(2))},
				Runs:  map[string]*pelotonv1.TaskUsage{},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			source := SourceProc
			if tt.virtual {
				source = SourceRuns
			}
			got, err := usageReport(tt.prev, tt.cur, tt.virtual, source)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if !proto.Equal(got, tt.want) {
				t.Errorf("report:\n got %v\nwant %v", got, tt.want)
			}
		})
	}
}

// BenchmarkAgentCycle is what the agent does each interval on hostFixture
// (100 runs): read the host and the runs, and build the report. At the
// default 5 s interval, 1% of a core is 50 ms per cycle.
func BenchmarkAgentCycle(b *testing.B) {
	tree := hostFixture(b)
	source, err := NewHostReader(tree.root)
	if err != nil {
		b.Fatal(err)
	}
	a, err := New(Config{Host: "h", Source: source, Runs: &EnvRuns{ProcRoot: tree.path("proc"), Host: "h"},
		Client: pelotonv1.NewHostAgentServiceClient(nil)})
	if err != nil {
		b.Fatal(err)
	}
	now := t0
	for range 2 { // the baseline, then a report with every run
		now = now.Add(time.Second)
		if _, err := a.measure(context.Background(), now); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		// The fixture's counters stand still: a usage of zero, computed
		// all the same.
		now = now.Add(time.Second)
		rep, err := a.measure(context.Background(), now)
		if err != nil || len(rep.GetRuns()) != 100 {
			b.Fatalf("measure = %d runs, %v; want 100", len(rep.GetRuns()), err)
		}
	}
}

func ExampleAgent() {
	conn, err := grpc.NewClient("stack.example:5391", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	source, err := NewHostReader("/")
	if err != nil {
		fmt.Println(err)
		return
	}
	a, err := New(Config{
		Host:   "host-17",
		Source: source,
		Runs:   &EnvRuns{Host: "host-17"},
		Client: pelotonv1.NewHostAgentServiceClient(conn),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a daemon cancels on SIGTERM
	fmt.Println(a.Run(ctx))
}
