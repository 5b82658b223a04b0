package hostmgr

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/peloton-sched/peloton/internal/resources"
)

func TestShortReason(t *testing.T) {
	long := strings.Repeat("é", MaxReasonBytes) // two bytes a rune
	for _, tc := range []struct {
		name, in, want string
	}{
		{"one line", "dial tcp 127.0.0.1:5050: connect: connection refused", "dial tcp 127.0.0.1:5050: connect: connection refused"},
		{"first non-blank line of a page", "\n  \r\n<!DOCTYPE html>\r\n<html><body><h1>404</h1></body></html>\n", "<!DOCTYPE html>"},
		{"invalid UTF-8 and control characters", "bad \xff\xfe byte\tand\x00nul\n", "bad \ufffd byte and nul"},
		{"cut at a rune boundary", long, strings.Repeat("é", (MaxReasonBytes-len("…"))/2) + "…"},
		{"empty", "", "no answer"},
		{"blank", " \n\t\n", "no answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ShortReason(tc.in)
			if got != tc.want {
				t.Errorf("ShortReason(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if !utf8.ValidString(got) || len(got) > MaxReasonBytes || strings.ContainsAny(got, "\n\r") {
				t.Errorf("ShortReason(%q) = %q: not one valid line of at most %d bytes", tc.in, got, MaxReasonBytes)
			}
		})
	}
}

func TestHTTPReason(t *testing.T) {
	page := []byte("<!DOCTYPE html>\n<html>\n<head><title>404 Not Found</title></head>\n<body>nothing here</body>\n</html>\n")
	if got, want := HTTPReason(404, page), "HTTP 404 Not Found: <!DOCTYPE html>"; got != want {
		t.Errorf("HTTPReason(404, page) = %q, want %q", got, want)
	}
	if got, want := HTTPReason(503, nil), "HTTP 503 Service Unavailable"; got != want {
		t.Errorf("HTTPReason(503, nil) = %q, want %q", got, want)
	}
	if got, want := HTTPReason(599, []byte("odd")), "HTTP 599: odd"; got != want {
		t.Errorf("HTTPReason(599) = %q, want %q", got, want)
	}
}

// TestSubstrateObserve walks a substrate through attempts: since moves only
// when reachability flips, and news is a flip or another reason, never the
// same failure again.
func TestSubstrateObserve(t *testing.T) {
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	refused := errors.New("dial tcp 127.0.0.1:5050: connect: connection refused")
	steps := []struct {
		err       error
		at        time.Duration
		reachable bool
		since     time.Duration
		reason    string
		news      bool
		// wentAway: the step begins an outage (one warning per outage;
		// another reason within it is news, but not a new outage).
		wentAway bool
	}{
		{refused, 1 * time.Second, false, 0, refused.Error(), true, true},   // the first answer is news
		{refused, 2 * time.Second, false, 0, refused.Error(), false, false}, // the same again is not
		{errors.New("HTTP 404 Not Found: <!DOCTYPE html>\n<html>"), 3 * time.Second, false, 0, "HTTP 404 Not Found: <!DOCTYPE html>", true, false},
		{nil, 4 * time.Second, true, 4 * time.Second, "", true, false},
		{nil, 5 * time.Second, true, 4 * time.Second, "", false, false},
		{refused, 6 * time.Second, false, 6 * time.Second, refused.Error(), true, true},
	}
	s := NewSubstrateStatus("mesos master http://127.0.0.1:5050", t0)
	if s.Reachable || s.Reason != ReasonNotConnected || !s.Since.Equal(t0) {
		t.Fatalf("initial status %+v", s)
	}
	for i, st := range steps {
		prev := s
		var news bool
		s, news = s.Observe(st.err, t0.Add(st.at))
		if s.Reachable != st.reachable || !s.Since.Equal(t0.Add(st.since)) || s.Reason != st.reason || news != st.news {
			t.Fatalf("step %d: %+v news=%v; want reachable=%v since=+%s reason=%q news=%v", i, s, news, st.reachable, st.since, st.reason, st.news)
		}
		if got := prev.WentAway(s); got != st.wentAway {
			t.Errorf("step %d: WentAway = %v, want %v", i, got, st.wentAway)
		}
	}
	if got, want := s.Describe(t0.Add(18*time.Second)),
		"the mesos master http://127.0.0.1:5050 is not reachable (for 12s): "+refused.Error(); got != want {
		t.Errorf("Describe = %q, want %q", got, want)
	}
	s, _ = s.Observe(nil, t0.Add(20*time.Second))
	if got := s.Describe(t0.Add(21 * time.Second)); got != "" {
		t.Errorf("Describe of a reachable substrate = %q, want empty", got)
	}
}

// TestManagerSubstrate: a backend that does not report its substrate (local,
// sim) always reaches it; one that does is asked, and while it is not
// reachable no host is offered to placement.
func TestManagerSubstrate(t *testing.T) {
	capacity := resources.Resources{MilliCPU: 1000, MemoryMB: 100}
	m := newTestManager(t, 2, capacity)
	defer m.Close()
	if s := m.Substrate(); !s.Reachable || s.Reason != "" {
		t.Fatalf("substrate of a backend that does not report one: %+v", s)
	}
	if p := m.SubstrateProto(); !p.GetReachable() || p.GetBackend() != "fixed" {
		t.Fatalf("substrate proto of a backend that does not report one: %v", p)
	}

	rb := &reportingHosts{fixedHosts: fixedHosts{[]HostInfo{{Name: "a", Capacity: capacity}, {Name: "b", Capacity: capacity}}}}
	rb.status.Store(&SubstrateStatus{Name: "test substrate", Since: time.Now(), Reason: "HTTP 404 Not Found: <!DOCTYPE html>"})
	m2 := NewManager(rb, Options{})
	if err := m2.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if s := m2.Substrate(); s.Reachable || s.Reason != "HTTP 404 Not Found: <!DOCTYPE html>" {
		t.Fatalf("substrate %+v, want the backend's", s)
	}
	if p := m2.SubstrateProto(); p.GetReachable() || p.GetReason() != "HTTP 404 Not Found: <!DOCTYPE html>" || p.GetName() != "test substrate" ||
		p.GetBackend() != "fixed" || p.GetSince() == nil {
		t.Fatalf("substrate proto %v", p)
	}
	if id, offers := m2.AcquireHosts(HostFilter{Max: 10}); id != "" || len(offers) != 0 {
		t.Fatalf("hosts offered while the substrate is unreachable: %v", offers)
	}
	rb.status.Store(&SubstrateStatus{Name: "test substrate", Reachable: true, Since: time.Now()})
	if _, offers := m2.AcquireHosts(HostFilter{Max: 10}); len(offers) != 2 {
		t.Fatalf("%d hosts offered once the substrate is back, want 2", len(offers))
	}
}

// reportingHosts is fixedHosts with a substrate that a test sets.
type reportingHosts struct {
	fixedHosts
	status atomic.Pointer[SubstrateStatus]
}

func (r *reportingHosts) Substrate() SubstrateStatus { return *r.status.Load() }

var _ SubstrateReporter = (*reportingHosts)(nil)
