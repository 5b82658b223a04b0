package sla

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// errRefused marks a step that expects a *RefusedError.
var errRefused = errors.New("refused (test marker)")

// step is one call on the core at t0+at, and what must come of it. Every
// step also checks Status("j").Unavailable afterwards.
type step struct {
	at  time.Duration
	do  string // request | release | renew | report | setjob | remove
	req Request
	ref int // release/renew: the step whose grant to use; -1 for an unknown ID
	ttl time.Duration
	ids []uint32
	job JobSLA

	want    []uint32 // instances granted
	err     error    // errors.Is target, or errRefused
	msg     string   // substring of the error
	unavail int      // job "j" after the step
}

func TestCore(t *testing.T) {
	const A, B = "update/a", "drain/h1"
	for _, tc := range []struct {
		name  string
		job   JobSLA
		steps []step
	}{
		{"budget 0 refuses every voluntary disruption", MakeJob("j").Budget(0).Obj(), []step{
			{do: "request", req: MakeReq("j", A, 1).Obj(), err: errRefused, msg: "no voluntary disruption"},
			{do: "request", req: MakeReq("j", A, 1).Partial().Obj(), err: errRefused},
			{do: "report", ids: []uint32{3}, unavail: 1},
			{do: "request", req: MakeReq("j", A, 3).Obj(), err: errRefused, unavail: 1},
		}},
		{"all or nothing", MakeJob("j").Budget(2).Obj(), []step{
			{do: "request", req: MakeReq("j", A, 1, 2, 3).Obj(), err: errRefused, msg: "would make 3 unavailable"},
			{do: "request", req: MakeReq("j", A, 1, 2).Obj(), want: []uint32{1, 2}, unavail: 2},
		}},
		{"partial grants the longest prefix that fits", MakeJob("j").Budget(2).Obj(), []step{
			{do: "request", req: MakeReq("j", A, 5, 1, 3).Partial().Obj(), want: []uint32{5, 1}, unavail: 2},
			{do: "request", req: MakeReq("j", A, 4).Partial().Obj(), err: errRefused, unavail: 2},
			// Instances it already holds cost nothing, so they fit even now.
			{do: "request", req: MakeReq("j", A, 1, 5, 4).Partial().Obj(), want: []uint32{1, 5}, unavail: 2},
		}},
		{"partial stops at another holder's instance", MakeJob("j").Budget(5).Obj(), []step{
			{do: "request", req: MakeReq("j", A, 3).Obj(), want: []uint32{3}, unavail: 1},
			{do: "request", req: MakeReq("j", B, 1, 3, 2).Partial().Obj(), want: []uint32{1}, unavail: 2},
			{do: "request", req: MakeReq("j", B, 3, 2).Partial().Obj(), err: errRefused, msg: "instance 3 is already granted to update/a", unavail: 2},
		}},
		{"down instances consume budget", MakeJob("j").Budget(3).Obj(), []step{
			{do: "report", ids: []uint32{0, 1}, unavail: 2},
			{do: "request", req: MakeReq("j", A, 2).Obj(), want: []uint32{2}, unavail: 3},
			{do: "request", req: MakeReq("j", B, 3).Obj(), err: errRefused, msg: "(2 down, 1 granted to update/a)", unavail: 3},
		}},
		{"down instances cost no more budget", MakeJob("j").Budget(2).Obj(), []step{
			{do: "report", ids: []uint32{0, 1}, unavail: 2},
			{do: "request", req: MakeReq("j", A, 0, 1).Obj(), want: []uint32{0, 1}, unavail: 2},
			{do: "request", req: MakeReq("j", A, 2).Obj(), err: errRefused, unavail: 2},
			// The instances come back; the grant still holds them.
			{do: "report", ids: nil, unavail: 2},
		}},
		{"a job over budget by downs alone gets nothing, not even a down instance", MakeJob("j").Budget(1).Obj(), []step{
			{do: "report", ids: []uint32{0, 1}, unavail: 2},
			{do: "request", req: MakeReq("j", A, 0).Obj(), err: errRefused, msg: "already has 2 unavailable, over its budget of 1", unavail: 2},
		}},
		{"same holder asking again does not count twice", MakeJob("j").Budget(2).Obj(), []step{
			{do: "request", req: MakeReq("j", A, 1, 2).Obj(), want: []uint32{1, 2}, unavail: 2},
			{do: "request", req: MakeReq("j", A, 2).Obj(), want: []uint32{2}, unavail: 2},
			{do: "request", req: MakeReq("j", A, 2, 3).Obj(), err: errRefused, unavail: 2},
			// Instance 2 stays held by the second grant.
			{do: "release", ref: 0, unavail: 1},
			{do: "release", ref: 1, unavail: 0},
		}},
		{"duplicates in a request count once", MakeJob("j").Budget(1).Obj(), []step{
			{do: "request", req: MakeReq("j", A, 4, 4, 4).Obj(), want: []uint32{4}, unavail: 1},
		}},
		{"a different holder is refused the same instance", MakeJob("j").Budget(5).Obj(), []step{
			{do: "request", req: MakeReq("j", A, 1).Obj(), want: []uint32{1}, unavail: 1},
			{do: "request", req: MakeReq("j", B, 2, 1).Obj(), err: errRefused, msg: "instance 1 is already granted to update/a", unavail: 1},
		}},
		{"release frees budget", MakeJob("j").Budget(1).Obj(), []step{
			{do: "request", req: MakeReq("j", A, 1).Obj(), want: []uint32{1}, unavail: 1},
			{do: "request", req: MakeReq("j", B, 2).Obj(), err: errRefused, unavail: 1},
			{do: "release", ref: 0, unavail: 0},
			{do: "request", req: MakeReq("j", B, 2).Obj(), want: []uint32{2}, unavail: 1},
			{do: "release", ref: 0, err: ErrUnknownGrant, unavail: 1},
		}},
		{"expiry frees budget exactly at the TTL", MakeJob("j").Budget(1).Obj(), []step{
			{do: "request", req: MakeReq("j", A, 1).TTL(10 * time.Second).Obj(), want: []uint32{1}, unavail: 1},
			{at: 10*time.Second - 1, do: "request", req: MakeReq("j", B, 2).Obj(), err: errRefused, unavail: 1},
			{at: 10 * time.Second, do: "request", req: MakeReq("j", B, 2).Obj(), want: []uint32{2}, unavail: 1},
			{at: 10 * time.Second, do: "release", ref: 0, err: ErrUnknownGrant, unavail: 1},
		}},
		{"renew extends, but not a lease already lost", MakeJob("j").Budget(1).Obj(), []step{
			{do: "request", req: MakeReq("j", A, 1).TTL(10 * time.Second).Obj(), want: []uint32{1}, unavail: 1},
			{at: 5 * time.Second, do: "renew", ref: 0, ttl: 10 * time.Second, unavail: 1},
			{at: 15*time.Second - 1, do: "request", req: MakeReq("j", B, 2).Obj(), err: errRefused, unavail: 1},
			{at: 15 * time.Second, do: "renew", ref: 0, ttl: 10 * time.Second, err: ErrUnknownGrant, unavail: 0},
			{at: 15 * time.Second, do: "request", req: MakeReq("j", B, 2).TTL(time.Second).Obj(), want: []uint32{2}, unavail: 1},
			{at: 15 * time.Second, do: "renew", ref: 4, ttl: 0, err: ErrInvalidRequest, unavail: 1},
			{at: 15 * time.Second, do: "renew", ref: -1, ttl: time.Second, err: ErrUnknownGrant, unavail: 1},
		}},
		{"unknown job, instance, grant; malformed requests", MakeJob("j").Instances(3).Budget(5).Obj(), []step{
			{do: "request", req: MakeReq("nope", A, 1).Obj(), err: ErrUnknownJob, msg: "job nope: not known"},
			{do: "request", req: MakeReq("j", A, 1, 3).Obj(), err: ErrUnknownInstance, msg: "instance 3: no such instance (the job has 3)"},
			{do: "request", req: MakeReq("j", A, 1, 3).Partial().Obj(), err: ErrUnknownInstance},
			{do: "request", req: MakeReq("j", A).Obj(), err: ErrInvalidRequest},
			{do: "request", req: MakeReq("j", "", 1).Obj(), err: ErrInvalidRequest},
			{do: "request", req: MakeReq("j", A, 1).TTL(0).Obj(), err: ErrInvalidRequest},
			{do: "release", ref: -1, err: ErrUnknownGrant},
			{do: "renew", ref: -1, ttl: time.Second, err: ErrUnknownGrant},
		}},
		{"lowering the budget refuses new requests but revokes nothing", MakeJob("j").Budget(3).Obj(), []step{
			{do: "request", req: MakeReq("j", A, 1, 2, 3).Obj(), want: []uint32{1, 2, 3}, unavail: 3},
			{do: "setjob", job: MakeJob("j").Budget(1).Obj(), unavail: 3},
			{do: "request", req: MakeReq("j", B, 4).Obj(), err: errRefused, unavail: 3},
			{do: "request", req: MakeReq("j", A, 1).Obj(), err: errRefused, unavail: 3},
			{do: "renew", ref: 0, ttl: time.Minute, unavail: 3},
			{do: "release", ref: 0, unavail: 0},
			{do: "request", req: MakeReq("j", B, 4).Obj(), want: []uint32{4}, unavail: 1},
		}},
		{"instances beyond a shrunk job do not count, and count again if it grows", MakeJob("j").Budget(3).Obj(), []step{
			{do: "report", ids: []uint32{8, 12}, unavail: 1}, // 12 is not an instance: dropped
			{do: "request", req: MakeReq("j", A, 9).Obj(), want: []uint32{9}, unavail: 2},
			{do: "setjob", job: MakeJob("j").Instances(5).Budget(3).Obj(), unavail: 0},
			{do: "request", req: MakeReq("j", A, 9).Obj(), err: ErrUnknownInstance},
			{do: "setjob", job: MakeJob("j").Instances(10).Budget(3).Obj(), unavail: 1}, // the grant on 9; the down report on 8 was dropped
		}},
		{"remove job drops its grants", MakeJob("j").Budget(3).Obj(), []step{
			{do: "request", req: MakeReq("j", A, 1).Obj(), want: []uint32{1}, unavail: 1},
			{do: "remove"},
			{do: "release", ref: 0, err: ErrUnknownGrant},
			{do: "request", req: MakeReq("j", A, 1).Obj(), err: ErrUnknownJob},
			{do: "setjob", job: MakeJob("j").Budget(3).Obj()},
			{do: "request", req: MakeReq("j", B, 1).Obj(), want: []uint32{1}, unavail: 1},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCore(nil)
			c.setJob(t0, tc.job)
			grants := map[int]Grant{}
			for n, s := range tc.steps {
				now := t0.Add(s.at)
				id := "0123456789abcdef0123456789abcdef"
				if s.ref >= 0 {
					id = grants[s.ref].ID
				}
				var err error
				switch s.do {
				case "request":
					var g Grant
					g, err = c.request(now, s.req)
					if err == nil {
						grants[n] = g
						if !slices.Equal(g.Instances, s.want) {
							t.Errorf("step %d: granted %v, want %v", n, g.Instances, s.want)
						}
						if !g.Expires.Equal(now.Add(s.req.TTL)) || g.Holder != s.req.Holder || g.JobID != s.req.JobID {
							t.Errorf("step %d: grant %+v", n, g)
						}
					}
				case "release":
					err = c.release(now, id)
				case "renew":
					err = c.renew(now, id, s.ttl)
				case "report":
					c.report(now, "j", s.ids)
				case "setjob":
					c.setJob(now, s.job)
				case "remove":
					c.removeJob(now, "j")
				default:
					t.Fatalf("step %d: unknown op %q", n, s.do)
				}
				checkErr(t, fmt.Sprintf("step %d (%s)", n, s.do), err, s.err, s.msg)
				st, _ := c.status(now, "j")
				if st.Unavailable != s.unavail {
					t.Errorf("step %d (%s): unavailable = %d, want %d", n, s.do, st.Unavailable, s.unavail)
				}
			}
		})
	}
}

func checkErr(t *testing.T, where string, err, want error, msg string) {
	t.Helper()
	switch {
	case want == nil && err != nil:
		t.Errorf("%s: unexpected error %v", where, err)
	case want == nil:
	case want == errRefused:
		var re *RefusedError
		if !errors.As(err, &re) {
			t.Errorf("%s: got %v, want a *RefusedError", where, err)
		}
	case !errors.Is(err, want):
		t.Errorf("%s: got %v, want %v", where, err, want)
	}
	if msg != "" && (err == nil || !strings.Contains(err.Error(), msg)) {
		t.Errorf("%s: error %v does not say %q", where, err, msg)
	}
}

func TestRefusedErrorNamesTheNumbers(t *testing.T) {
	c := newCore(nil)
	c.setJob(t0, MakeJob("j").Budget(4).Obj())
	c.report(t0, "j", []uint32{0, 1})
	if _, err := c.request(t0, MakeReq("j", "update/abc", 2).Obj()); err != nil {
		t.Fatal(err)
	}
	_, err := c.request(t0, MakeReq("j", "drain/h1", 3, 4, 5).Obj())
	var re *RefusedError
	if !errors.As(err, &re) {
		t.Fatalf("got %v, want *RefusedError", err)
	}
	want := "job j: taking down 3 more instances would make 6 unavailable, over its budget of 4 (2 down, 1 granted to update/abc)"
	if err.Error() != want {
		t.Errorf("got  %q\nwant %q", err, want)
	}
	if re.JobID != "j" || re.Requested != 3 || re.Unavailable != 6 || re.Budget != 4 {
		t.Errorf("fields %+v", re)
	}

	_, err = c.request(t0, MakeReq("j", "drain/h1", 2).Obj())
	if want := "job j: instance 2 is already granted to update/abc; two disruptions of one instance must not overlap"; err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}

	c.setJob(t0, MakeJob("k").Budget(0).Obj())
	_, err = c.request(t0, MakeReq("k", "preempt", 1).Obj())
	if want := "job k: maximumUnavailableInstances is 0: no voluntary disruption is allowed"; err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
}

// The invariant as first stated, |grants ∪ down| ≤ max(budget, |down|),
// cannot hold at every moment: instances may crash after a grant was given,
// and revoking the grant would not bring them back. What the evaluator
// guarantees is that grants never add to a job over its budget; this test
// pins the counterexample and that guarantee.
func TestDownsAfterAGrantCanExceedTheBudget(t *testing.T) {
	c := newCore(nil)
	c.setJob(t0, MakeJob("j").Budget(2).Obj())
	if _, err := c.request(t0, MakeReq("j", "update/a", 0, 1).Obj()); err != nil {
		t.Fatal(err)
	}
	c.report(t0, "j", []uint32{5})
	st, _ := c.status(t0, "j")
	if st.Unavailable != 3 {
		t.Fatalf("unavailable = %d, want 3", st.Unavailable)
	}
	if _, err := c.request(t0, MakeReq("j", "update/a", 0).Obj()); err == nil {
		t.Fatal("granted on a job over its budget")
	}
}

func TestStatus(t *testing.T) {
	c := newCore(nil)
	if _, ok := c.status(t0, "j"); ok {
		t.Fatal("status of an unknown job")
	}
	c.setJob(t0, MakeJob("j").Budget(5).Obj())
	c.report(t0, "j", []uint32{7, 3, 3})
	req := MakeReq("j", "update/a", 2, 3).Obj()
	g1, _ := c.request(t0, req)
	req.Instances[0] = 9 // the grant must not alias the request
	g2, _ := c.request(t0, MakeReq("j", "drain/h", 4).Obj())
	st, ok := c.status(t0, "j")
	if !ok || !slices.Equal(st.Down, []uint32{3, 7}) || st.Unavailable != 4 || len(st.Grants) != 2 {
		t.Fatalf("status %+v", st)
	}
	if st.Grants[0].ID > st.Grants[1].ID {
		t.Errorf("grants not sorted by ID: %v", st.Grants)
	}
	for _, g := range st.Grants {
		want := g1
		if g.ID == g2.ID {
			want = g2
		}
		if g.Holder != want.Holder || !slices.Equal(g.Instances, want.Instances) {
			t.Errorf("grant %+v, want %+v", g, want)
		}
	}
	if !slices.Equal(g1.Instances, []uint32{2, 3}) {
		t.Errorf("grant aliases the request: %v", g1.Instances)
	}
	st.Grants[0].Instances[0] = 99 // nor the caller's copy the core
	if st2, _ := c.status(t0, "j"); st2.Grants[0].Instances[0] == 99 {
		t.Error("status aliases the core")
	}
}

func TestGrantIDsAreUniqueHex(t *testing.T) {
	l := NewLocal(nil)
	l.SetJob(ctx, MakeJob("j").Instances(1000).Budget(1000).Obj())
	hexID := regexp.MustCompile(`^[0-9a-f]{32}$`)
	seen := map[string]bool{}
	for i := range uint32(1000) {
		g, err := l.Request(ctx, MakeReq("j", "update/a", i).Obj())
		if err != nil {
			t.Fatal(err)
		}
		if !hexID.MatchString(g.ID) || seen[g.ID] {
			t.Fatalf("grant ID %q: not 32 hex digits or not unique", g.ID)
		}
		seen[g.ID] = true
	}
}

func TestExpireReturnsEveryExpiredGrantOnce(t *testing.T) {
	c := newCore(nil)
	c.setJob(t0, MakeJob("j").Budget(5).Obj())
	short, _ := c.request(t0, MakeReq("j", "drain/h1", 1).TTL(time.Second).Obj())
	long, _ := c.request(t0, MakeReq("j", "update/a", 2).TTL(time.Minute).Obj())
	released, _ := c.request(t0, MakeReq("j", "update/a", 3).TTL(time.Second).Obj())
	_ = c.release(t0, released.ID)

	// A request at t0+1s drops the short grant lazily; Expire still reports it.
	if _, err := c.request(t0.Add(time.Second), MakeReq("j", "preempt", 4).TTL(time.Hour).Obj()); err != nil {
		t.Fatal(err)
	}
	if got := c.expire(t0.Add(time.Second)); len(got) != 1 || got[0].ID != short.ID {
		t.Fatalf("expired %v, want only %s", got, short.ID)
	}
	if got := c.expire(t0.Add(time.Second)); len(got) != 0 {
		t.Fatalf("expired again: %v", got)
	}
	if got := c.expire(t0.Add(time.Minute)); len(got) != 1 || got[0].ID != long.ID {
		t.Fatalf("expired %v, want only %s", got, long.ID)
	}

	// The log is bounded for callers that never ask.
	c.setJob(t0, MakeJob("big").Instances(2*maxExpiredLog).Budget(2*maxExpiredLog).Obj())
	for i := range uint32(2 * maxExpiredLog) {
		_, _ = c.request(t0.Add(time.Minute), MakeReq("big", "update/a", i).TTL(time.Second).Obj())
	}
	c.status(t0.Add(time.Hour), "big")
	if got := len(c.expire(t0.Add(time.Hour))); got != maxExpiredLog {
		t.Fatalf("expire returned %d grants, want the bound %d", got, maxExpiredLog)
	}
	if st, _ := c.status(t0.Add(time.Hour), "big"); st.Unavailable != 0 || len(c.byExpiry) != 1 { // the preempt grant lives on
		t.Fatalf("grants left after expiry: %+v", st)
	}
}

func TestLocalUsesItsClock(t *testing.T) {
	now := t0
	l := NewLocal(func() time.Time { return now })
	l.SetJob(ctx, MakeJob("j").Budget(1).Obj())
	g, err := l.Request(ctx, MakeReq("j", "update/a", 1).TTL(time.Second).Obj())
	if err != nil || !g.Expires.Equal(t0.Add(time.Second)) {
		t.Fatalf("grant %+v, %v", g, err)
	}
	if err := l.Renew(ctx, g.ID, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	now = t0.Add(2 * time.Second)
	if st, _ := l.Status(ctx, "j"); st.Unavailable != 0 {
		t.Fatalf("grant still counts at its expiry: %+v", st)
	}
	if got := l.Expire(); len(got) != 1 || got[0].ID != g.ID || !got[0].Expires.Equal(now) {
		t.Fatalf("expired %+v", got)
	}
	l.ReportAvailability(ctx, "j", []uint32{0})
	if _, err := l.Request(ctx, MakeReq("j", "update/a", 1).Obj()); err == nil {
		t.Fatal("granted over budget")
	}
	if err := l.Release(ctx, g.ID); !errors.Is(err, ErrUnknownGrant) {
		t.Fatalf("release of an expired grant: %v", err)
	}
	l.RemoveJob(ctx, "j")
	if _, err := l.Status(ctx, "j"); !errors.Is(err, ErrUnknownJob) {
		t.Fatalf("status of a removed job: %v", err)
	}
}

// TestLocalHonoursItsContext: a call whose context is done fails with the
// context's error and changes nothing, as a remote evaluator's would.
func TestLocalHonoursItsContext(t *testing.T) {
	l := NewLocal(func() time.Time { return t0 })
	if err := l.SetJob(ctx, MakeJob("j").Budget(1).Obj()); err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Request(done, MakeReq("j", "update/a", 1).Obj()); !errors.Is(err, context.Canceled) {
		t.Fatalf("request: %v", err)
	}
	if err := l.ReportAvailability(done, "j", []uint32{0}); !errors.Is(err, context.Canceled) {
		t.Fatalf("report: %v", err)
	}
	if err := l.SetJob(done, MakeJob("j").Budget(5).Obj()); !errors.Is(err, context.Canceled) {
		t.Fatalf("setjob: %v", err)
	}
	if err := l.RemoveJob(done, "j"); !errors.Is(err, context.Canceled) {
		t.Fatalf("removejob: %v", err)
	}
	if _, err := l.Status(done, "j"); !errors.Is(err, context.Canceled) {
		t.Fatalf("status: %v", err)
	}
	st, err := l.Status(ctx, "j")
	if err != nil || st.Unavailable != 0 || len(st.Grants) != 0 || st.MaximumUnavailableInstances != 1 {
		t.Fatalf("a cancelled call changed the job: %+v, %v", st, err)
	}
}
