package live

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

// fakeWatch is a Watch the test feeds; it counts the watches running.
type fakeWatch struct {
	revs    chan int64
	running atomic.Int32
}

func (f *fakeWatch) watch(ctx context.Context) <-chan int64 {
	out := make(chan int64, 1)
	f.running.Add(1)
	go func() {
		defer f.running.Add(-1)
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case r := <-f.revs:
				select {
				case out <- r:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// stream is one open GET /v1/events; next returns its next event.
type stream struct {
	resp  *http.Response
	lines chan string
}

func open(t *testing.T, url string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	s := &stream{resp: resp, lines: make(chan string, 100)}
	if resp.StatusCode != http.StatusOK {
		return s
	}
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(resp.Body)
		var ev []string
		for sc.Scan() {
			if sc.Text() != "" {
				ev = append(ev, sc.Text())
				continue
			}
			s.lines <- strings.Join(ev, "|")
			ev = nil
		}
	}()
	return s
}

// next returns the next event ("" when the stream ended), skipping
// comments unless withComments.
func (s *stream) next(t *testing.T, withComments bool) string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-s.lines:
			if !ok {
				return ""
			}
			if !withComments && (strings.HasPrefix(ev, ":") || strings.HasPrefix(ev, "retry:")) {
				continue
			}
			return ev
		case <-deadline:
			t.Fatal("no event within 10s")
		}
	}
}

func TestEvents(t *testing.T) {
	fw := &fakeWatch{revs: make(chan int64)}
	var usage atomic.Uint64
	s := New(Options{Watch: fw.watch, Usage: usage.Load, MaxStreams: 2, Coalesce: 200 * time.Millisecond,
		UsageEvery: 20 * time.Millisecond, Heartbeat: 50 * time.Millisecond})
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close) // after the streams' own cleanups

	a := open(t, srv.URL)
	if ct := a.resp.Header.Get("Content-Type"); a.resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("status %d, Content-Type %q", a.resp.StatusCode, ct)
	}
	if ev := a.next(t, true); ev != "retry: 2000|: connected" {
		t.Fatalf("first event %q", ev)
	}
	if ev := a.next(t, true); ev != ": ping" {
		t.Fatalf("heartbeat %q", ev)
	}
	fw.revs <- 5
	if ev := a.next(t, false); ev != `event: change|data: {"revision":5}` {
		t.Fatalf("change %q", ev)
	}
	// Changes within Coalesce of the last event make one event with the
	// latest revision.
	for r := int64(6); r <= 9; r++ {
		fw.revs <- r
	}
	if ev := a.next(t, false); ev != `event: change|data: {"revision":9}` {
		t.Fatalf("coalesced change %q", ev)
	}
	usage.Add(1)
	if ev := a.next(t, false); ev != "event: usage|data: {}" {
		t.Fatalf("usage %q", ev)
	}

	// At most MaxStreams: the third is refused.
	b := open(t, srv.URL)
	c := open(t, srv.URL)
	if b.resp.StatusCode != 200 || c.resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("second and third stream: %d, %d; want 200, 503", b.resp.StatusCode, c.resp.StatusCode)
	}
	// Not GET: 405.
	resp, err := http.Post(srv.URL, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d", resp.StatusCode)
	}

	// End ends both streams, stops the watch and refuses new streams.
	s.End()
	for _, st := range []*stream{a, b} {
		for ev := st.next(t, true); ev != ""; ev = st.next(t, true) {
		}
	}
	testutil.Eventually(t, 10*time.Second, "the watch stops after End", func() bool { return fw.running.Load() == 0 })
	if d := open(t, srv.URL); d.resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a stream after End: %d", d.resp.StatusCode)
	}
}

// The watch runs only while a stream is open.
func TestWatchOnlyWhileStreams(t *testing.T) {
	fw := &fakeWatch{revs: make(chan int64)}
	s := New(Options{Watch: fw.watch})
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close) // after the streams' own cleanups
	if fw.running.Load() != 0 {
		t.Fatal("a watch runs with no stream open")
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "one watch runs with one stream", func() error {
		if n := fw.running.Load(); n != 1 {
			return fmt.Errorf("%d watches run", n)
		}
		return nil
	})
	cancel()
	resp.Body.Close()
	testutil.Eventually(t, 10*time.Second, "the watch stops after the last stream went", func() bool { return fw.running.Load() == 0 })
}
