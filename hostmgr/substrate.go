package hostmgr

import (
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// SubstrateStatus says whether a backend reaches its substrate, the system
// that runs its tasks (a Mesos master, a Kubernetes apiserver), since
// when, and why not. It is what /readyz, `peloton host list` and the
// reasons of waiting jobs say while the substrate is away.
type SubstrateStatus struct {
	// Name names the substrate for people: "mesos master
	// http://10.0.0.1:5050", "kubernetes apiserver https://10.0.0.2:6443".
	Name string
	// Reachable: the backend talks to the substrate, and its view of
	// hosts and runs is current (a Kubernetes backend's caches have
	// listed the cluster at least once).
	Reachable bool
	// Since is when Reachable last changed (zero: never).
	Since time.Time
	// Reason is, when not reachable, why not: the status code and the first
	// line of the answer, or the connection's error (ShortReason: one line
	// of valid UTF-8, at most MaxReasonBytes). Empty when reachable.
	Reason string
}

// SubstrateReporter is implemented by backends whose substrate is another
// system, which may be away or misconfigured when the stack starts or at
// any time after: the mesos and kubernetes backends. Such a backend never
// gives up on it. Start returns once it knows whether the substrate
// answers, without waiting for it, and the backend keeps trying with capped
// exponential backoff; work goes on with no restart when it answers again.
// While it is not reachable hostmgr offers no host to placement (the
// backend's hosts are as last seen), jobmgr declares no run lost for the
// backend not knowing it, and the API says why work waits. A backend that
// does not implement it (local, sim) always reaches its substrate.
type SubstrateReporter interface {
	// Substrate is the status now. It must be cheap and never block: it
	// is read on every placement round and every /readyz.
	Substrate() SubstrateStatus
}

// MaxReasonBytes bounds SubstrateStatus.Reason: a status line and the
// start of an answer, never a whole page.
const MaxReasonBytes = 200

// ReasonNotConnected is the reason of a substrate before the backend's
// first attempt to reach it has ended.
const ReasonNotConnected = "not connected yet"

// NewSubstrateStatus is the status of a substrate the backend has not
// tried to reach yet, as of now.
func NewSubstrateStatus(name string, now time.Time) SubstrateStatus {
	return SubstrateStatus{Name: name, Since: now, Reason: ReasonNotConnected}
}

// Observe returns the status after an attempt to reach the substrate that
// ended at now with err (nil: it answered as it should), and whether that
// is news: reachability flipped or the reason changed. Backends log news
// only, so a substrate that stays away costs one line, not one a retry.
func (s SubstrateStatus) Observe(err error, now time.Time) (SubstrateStatus, bool) {
	next := s
	if err == nil {
		next.Reachable, next.Reason = true, ""
	} else {
		next.Reachable, next.Reason = false, ShortReason(err.Error())
	}
	if next.Reachable != s.Reachable {
		next.Since = now
	}
	return next, next.Reachable != s.Reachable || next.Reason != s.Reason
}

// WentAway reports whether next, the status Observe made from s, begins
// an outage: the substrate is not reachable, and was, or was never reached.
// A backend warns once per outage, on this; a new reason within an outage
// is news too (Observe says so) but no new outage.
func (s SubstrateStatus) WentAway(next SubstrateStatus) bool {
	return !next.Reachable && (s.Reachable || s.Reason == ReasonNotConnected)
}

// Describe says, as of now, why the substrate is not reachable, in the
// words /readyz and waiting jobs use; "" when it is reachable.
func (s SubstrateStatus) Describe(now time.Time) string {
	if s.Reachable {
		return ""
	}
	name := s.Name
	if name == "" {
		name = "substrate"
	}
	if s.Since.IsZero() {
		return fmt.Sprintf("the %s is not reachable: %s", name, s.Reason)
	}
	return fmt.Sprintf("the %s is not reachable (for %s): %s", name, now.Sub(s.Since).Round(time.Second), s.Reason)
}

// ShortReason cuts an error's text to what logs and the API may carry: its
// first non-blank line, with invalid UTF-8 replaced, control characters
// made spaces and at most MaxReasonBytes long (cut at a character, with an
// ellipsis). An HTML error page becomes its first line.
func ShortReason(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	line := ""
	for l := range strings.Lines(s) {
		if strings.TrimSpace(l) != "" {
			line = l
			break
		}
	}
	line = strings.TrimSpace(strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, line))
	if line == "" {
		return "no answer"
	}
	if len(line) <= MaxReasonBytes {
		return line
	}
	const ellipsis = "…"
	cut := MaxReasonBytes - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(line[cut]) {
		cut--
	}
	return line[:cut] + ellipsis
}

// HTTPReason is the reason of an HTTP answer that is not the substrate's:
// "HTTP 404 Not Found: <!DOCTYPE html>", the status and the first line of
// the body.
func HTTPReason(code int, body []byte) string {
	status := fmt.Sprintf("HTTP %d", code)
	if text := http.StatusText(code); text != "" {
		status += " " + text
	}
	if strings.TrimSpace(string(body)) == "" {
		return status
	}
	return ShortReason(status + ": " + ShortReason(string(body)))
}

// Substrate is the status of the backend's substrate; a backend that does
// not report one (SubstrateReporter) always reaches it.
func (m *Manager) Substrate() SubstrateStatus {
	if m.substrate == nil {
		return SubstrateStatus{Name: m.backend.Name() + " backend", Reachable: true}
	}
	return m.substrate.Substrate()
}

// reachable is Manager.Substrate().Reachable for a backend's reporter,
// without making a status for a backend that always reaches its substrate
// (nil: it reports none).
func reachable(sub SubstrateReporter) bool {
	return sub == nil || sub.Substrate().Reachable
}

// SubstrateProto is Substrate for the API.
func (m *Manager) SubstrateProto() *pelotonv1.Substrate {
	s := m.Substrate()
	out := &pelotonv1.Substrate{Backend: m.backend.Name(), Name: s.Name, Reachable: s.Reachable, Reason: s.Reason}
	if !s.Since.IsZero() {
		out.Since = timestamppb.New(s.Since)
	}
	return out
}
