// Package live serves GET /v1/events: server-sent events that tell a web
// page when what it shows may have changed, so it reads the API again
// instead of polling it. The events carry no state, only a hint:
//
//	event: change   data: {"revision":123}   something under the daemon's
//	                                         etcd prefix changed (at most one
//	                                         per Coalesce per stream)
//	event: usage    data: {}                 hosts' usage reports arrived
//	                                         (at most one per UsageEvery)
//	: ping                                   a comment every Heartbeat, so
//	                                         proxies keep the stream open
//
// One watch serves every stream of a daemon, and it runs only while a
// stream is open. The number of streams is bounded (503 above it), and End
// ends them all so that a graceful shutdown is not held up by them.
//
// It knows net/http and a watch function, no Peloton domain package.
package live

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/peloton-sched/peloton/internal/metrics"
)

// Defaults for Options.
const (
	DefaultMaxStreams = 256
	DefaultCoalesce   = 250 * time.Millisecond
	DefaultUsageEvery = 3 * time.Second
	DefaultHeartbeat  = 15 * time.Second
	// RetryMillis is the reconnection delay the stream asks browsers for.
	RetryMillis = 2000
	// writeTimeout bounds one write of a stream.
	writeTimeout = 10 * time.Second
)

// Options says what a Server watches and how often it may tell.
type Options struct {
	// Watch reports the etcd revision of every change (latest wins) until
	// ctx ends, then closes the channel (store.Etcd.Watch).
	Watch func(ctx context.Context) <-chan int64
	// Usage, if set, is a count that grows as usage reports arrive; it is
	// read every UsageEvery while a stream is open.
	Usage func() uint64
	// MaxStreams bounds the open streams (default 256).
	MaxStreams int
	// Coalesce is the least time between two change events of a stream.
	Coalesce time.Duration
	// UsageEvery is how often Usage is read.
	UsageEvery time.Duration
	// Heartbeat is how often an idle stream sends a comment.
	Heartbeat time.Duration
}

// Server is the /v1/events handler of one daemon.
type Server struct {
	o Options

	mu      sync.Mutex
	subs    map[*sub]struct{}
	stop    context.CancelFunc // of the running watch, nil when none runs
	ended   bool
	ending  chan struct{}
	endOnce sync.Once
}

type sub struct {
	change chan int64    // latest revision, one slot
	usage  chan struct{} // one slot
}

// Streams counts the open event streams.
var Streams = prometheus.NewGauge(prometheus.GaugeOpts{
	Namespace: "peloton", Name: "ui_event_streams", Help: "Open server-sent event streams (GET /v1/events).",
})

func init() { metrics.Registry.MustRegister(Streams) }

// New makes a Server; nothing runs until the first stream opens.
func New(o Options) *Server {
	if o.MaxStreams <= 0 {
		o.MaxStreams = DefaultMaxStreams
	}
	if o.Coalesce <= 0 {
		o.Coalesce = DefaultCoalesce
	}
	if o.UsageEvery <= 0 {
		o.UsageEvery = DefaultUsageEvery
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	return &Server{o: o, subs: map[*sub]struct{}{}, ending: make(chan struct{})}
}

// End ends every stream at once and refuses new ones (503): the daemon is
// shutting down. Calling it again is a no-op.
func (s *Server) End() {
	s.endOnce.Do(func() {
		s.mu.Lock()
		s.ended = true
		if s.stop != nil {
			s.stop()
			s.stop = nil
		}
		s.mu.Unlock()
		close(s.ending)
	})
}

// join adds a stream, starting the watch for the first; "" when refused.
func (s *Server) join() (*sub, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return nil, "the server is shutting down"
	}
	if len(s.subs) >= s.o.MaxStreams {
		return nil, fmt.Sprintf("too many event streams are open (at most %d); the page falls back to polling", s.o.MaxStreams)
	}
	u := &sub{change: make(chan int64, 1), usage: make(chan struct{}, 1)}
	s.subs[u] = struct{}{}
	Streams.Inc()
	if s.stop == nil {
		ctx, cancel := context.WithCancel(context.Background())
		s.stop = cancel
		go s.watch(ctx)
	}
	return u, ""
}

// leave removes a stream, stopping the watch after the last.
func (s *Server) leave(u *sub) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.subs, u)
	Streams.Dec()
	if len(s.subs) == 0 && s.stop != nil {
		s.stop()
		s.stop = nil
	}
}

// watch hands the watch's revisions and usage ticks to every stream until
// ctx ends.
func (s *Server) watch(ctx context.Context) {
	revs := s.o.Watch(ctx)
	tick := time.NewTicker(s.o.UsageEvery)
	defer tick.Stop()
	var lastUsage uint64
	if s.o.Usage != nil {
		lastUsage = s.o.Usage()
	}
	for {
		select {
		case rev, ok := <-revs:
			if !ok {
				return // ctx ended
			}
			s.each(ctx, func(u *sub) { putLatest(u.change, rev) })
		case <-tick.C:
			if s.o.Usage == nil {
				continue
			}
			if n := s.o.Usage(); n != lastUsage {
				lastUsage = n
				s.each(ctx, func(u *sub) {
					select {
					case u.usage <- struct{}{}:
					default:
					}
				})
			}
		}
	}
}

func (s *Server) each(ctx context.Context, f func(*sub)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ctx.Err() != nil {
		return // a later watch serves the streams now
	}
	for u := range s.subs {
		f(u)
	}
}

// putLatest leaves rev in a one-slot channel, replacing what waits there.
// The caller holds Server.mu, so it is the only sender.
func putLatest(ch chan int64, rev int64) {
	select {
	case old := <-ch:
		rev = max(rev, old)
	default:
	}
	ch <- rev
}

// ServeHTTP serves one event stream until the client goes or End.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "method "+r.Method+" is not allowed on /v1/events; allowed: GET", http.StatusMethodNotAllowed)
		return
	}
	rc := http.NewResponseController(w)
	u, refused := s.join()
	if u == nil {
		w.Header().Set("Retry-After", "30")
		http.Error(w, refused, http.StatusServiceUnavailable)
		return
	}
	defer s.leave(u)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	write := func(format string, a ...any) bool {
		// A client that stops reading must not hold the stream (and the
		// shutdown) for longer than writeTimeout.
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := fmt.Fprintf(w, format, a...); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write("retry: %d\n: connected\n\n", RetryMillis) {
		return
	}
	beat := time.NewTicker(s.o.Heartbeat)
	defer beat.Stop()
	var (
		pending  int64 // a revision not yet sent
		lastSent time.Time
		hold     *time.Timer // runs while a change waits for Coalesce
		holdC    <-chan time.Time
	)
	defer func() {
		if hold != nil {
			hold.Stop()
		}
	}()
	sendChange := func() bool {
		rev := pending
		pending, lastSent, holdC = 0, time.Now(), nil
		return write("event: change\ndata: {\"revision\":%d}\n\n", rev)
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.ending:
			return
		case rev := <-u.change:
			pending = max(pending, rev)
			if holdC != nil {
				continue // sent when the hold ends
			}
			if wait := s.o.Coalesce - time.Since(lastSent); wait > 0 {
				if hold == nil {
					hold = time.NewTimer(wait)
				} else {
					hold.Reset(wait)
				}
				holdC = hold.C
				continue
			}
			if !sendChange() {
				return
			}
		case <-holdC:
			if !sendChange() {
				return
			}
		case <-u.usage:
			if !write("event: usage\ndata: {}\n\n") {
				return
			}
		case <-beat.C:
			if !write(": ping\n\n") {
				return
			}
		}
	}
}
