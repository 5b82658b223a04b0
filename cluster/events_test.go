package cluster_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/internal/live"
)

// sseStream is one open GET /v1/events; events delivers its events (blank
// line separated, lines joined by "|") and closes when the stream ends.
type sseStream struct {
	status int
	ctype  string
	events chan string
}

func openEvents(t *testing.T, ctx context.Context, base string) *sseStream {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	s := &sseStream{status: resp.StatusCode, ctype: resp.Header.Get("Content-Type"), events: make(chan string, 16)}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		close(s.events)
		return s
	}
	go func() {
		defer resp.Body.Close()
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		var ev []string
		for sc.Scan() {
			if sc.Text() != "" {
				ev = append(ev, sc.Text())
				continue
			}
			select {
			case s.events <- strings.Join(ev, "|"):
			default: // nobody reads this stream's events
			}
			ev = nil
		}
	}()
	return s
}

// TestEventsEndpoint: a real stack on an embedded etcd serves /v1/events;
// a pool created through the API is a change event at or above the
// revision it was written at; the 257th stream is refused with 503; and shutting the
// stack down ends the open streams at once.
func TestEventsEndpoint(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	ready := make(chan cluster.ReadyInfo, 1)
	done := make(chan error, 1)
	go func() {
		done <- cluster.Run(ctx, cluster.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0",
			Backend: "sim", ShutdownGrace: 30 * time.Second,
			Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
			OnReady: func(r cluster.ReadyInfo) { ready <- r }})
	}()
	var r cluster.ReadyInfo
	select {
	case r = <-ready:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the stack did not serve within 60s")
	}
	base := "http://" + r.HTTPAddr
	cli, err := clientv3.New(clientv3.Config{Endpoints: r.EtcdEndpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	streamsCtx, endStreams := context.WithCancel(context.Background())
	defer endStreams()
	s := openEvents(t, streamsCtx, base)
	if s.status != http.StatusOK || s.ctype != "text/event-stream" {
		t.Fatalf("GET /v1/events: %d %q", s.status, s.ctype)
	}
	getCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	before, err := cli.Get(getCtx, "/", clientv3.WithCountOnly())
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(base+"/v1/pools/events-test?requestId=events-test", "application/json", strings.NewReader(`{"reservation":{"cpu":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("create pool: %d", resp.StatusCode)
	}
	// The revision the pool was written at: the event must be at or after
	// it (other writes of the stack may come first).
	getCtx, cancel = context.WithTimeout(ctx, 10*time.Second)
	kvs, err := cli.Get(getCtx, "/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	var poolRev int64
	for _, kv := range kvs.Kvs {
		if strings.Contains(string(kv.Key), "events-test") {
			poolRev = max(poolRev, kv.ModRevision)
		}
	}
	if poolRev <= before.Header.Revision {
		t.Fatalf("no key of the new pool above revision %d in etcd", before.Header.Revision)
	}
	deadline := time.After(10 * time.Second)
	for got := false; !got; {
		select {
		case ev, ok := <-s.events:
			if !ok {
				t.Fatal("the stream ended")
			}
			if data, isChange := strings.CutPrefix(ev, "event: change|data: "); isChange {
				var c struct{ Revision int64 }
				if err := json.Unmarshal([]byte(data), &c); err != nil {
					t.Fatalf("change event %q: %v", ev, err)
				}
				got = c.Revision >= poolRev
			}
		case <-deadline:
			t.Fatalf("no change event at or above the pool's revision %d within 10s of creating it", poolRev)
		}
	}

	// The limit: with DefaultMaxStreams open, one more is 503.
	streams := []*sseStream{s}
	for len(streams) < live.DefaultMaxStreams {
		o := openEvents(t, streamsCtx, base)
		if o.status != http.StatusOK {
			t.Fatalf("stream %d: %d", len(streams)+1, o.status)
		}
		streams = append(streams, o)
	}
	if o := openEvents(t, streamsCtx, base); o.status != http.StatusServiceUnavailable {
		t.Fatalf("stream %d: %d, want 503", live.DefaultMaxStreams+1, o.status)
	}

	// Shutdown ends the streams at once (well within ShutdownGrace).
	stop()
	end := time.After(15 * time.Second)
	for _, o := range streams {
		for open := true; open; {
			select {
			case _, open = <-o.events:
			case <-end:
				t.Fatal("an event stream was still open 15s after shutdown began")
			}
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s")
	}
}
