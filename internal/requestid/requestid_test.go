package requestid_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/internal/requestid"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func TestValidate(t *testing.T) {
	for _, ok := range []string{"a", "0b9c-._X", strings.Repeat("x", requestid.MaxLen)} {
		if err := requestid.Validate(ok); err != nil {
			t.Errorf("Validate(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{strings.Repeat("x", requestid.MaxLen+1), "a/b", "..", ".", "a b", "é"} {
		err := requestid.Validate(bad)
		if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), "requestId: ") {
			t.Errorf("Validate(%q) = %v, want InvalidArgument naming requestId", bad, err)
		}
	}
}

func TestDigestIgnoresTheIDOnly(t *testing.T) {
	a := &pelotonv1.CreatePoolRequest{Path: "/a", RequestId: "one"}
	b := &pelotonv1.CreatePoolRequest{Path: "/a", RequestId: "two"}
	c := &pelotonv1.CreatePoolRequest{Path: "/b", RequestId: "one"}
	if requestid.Digest(a) != requestid.Digest(b) {
		t.Error("the same request under two ids has two digests")
	}
	if requestid.Digest(a) == requestid.Digest(c) {
		t.Error("two different requests have one digest")
	}
	if a.RequestId != "one" {
		t.Error("Digest changed its argument")
	}
}

func TestLookupRecordReplayExpire(t *testing.T) {
	_, st := storetest.StartEtcd(t)
	ctx := context.Background()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	req := &pelotonv1.CreateJobRequest{Spec: &pelotonv1.JobSpec{Name: "j"}, RequestId: "r1"}
	r, err := requestid.New(requestid.Job, req.RequestId, req)
	if err != nil {
		t.Fatal(err)
	}
	o, err := requestid.Lookup(ctx, st, r, now)
	if err != nil || o.Done {
		t.Fatalf("first Lookup = %+v, %v", o, err)
	}
	// The create's transaction writes the object and the record together.
	ops := append([]store.Op{store.Put("jobs/j1", []byte("x"), store.MustNotExist)}, o.Ops(r, "j1", now)...)
	if _, err := st.Txn(ctx, ops...); err != nil {
		t.Fatal(err)
	}
	// A second claim of the same id, looked up before the first committed,
	// conflicts instead of creating twice.
	if _, err := st.Txn(ctx, append([]store.Op{store.Put("jobs/j2", []byte("x"), store.MustNotExist)}, o.Ops(r, "j2", now)...)...); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second claim: %v, want conflict", err)
	}
	if _, err := st.Get(ctx, "jobs/j2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatal("the losing claim's object was written")
	}
	if o, err := requestid.Recheck(ctx, st, r, now, errors.New("conflict")); err != nil || !o.Done || o.Object != "j1" {
		t.Fatalf("Recheck after the race = %+v, %v; want the winner j1", o, err)
	}

	o, err = requestid.Lookup(ctx, st, r, now.Add(time.Hour))
	if err != nil || !o.Done || o.Object != "j1" {
		t.Fatalf("retry Lookup = %+v, %v; want done, j1", o, err)
	}

	other := &pelotonv1.CreateJobRequest{Spec: &pelotonv1.JobSpec{Name: "other"}, RequestId: "r1"}
	r2, _ := requestid.New(requestid.Job, other.RequestId, other)
	_, err = requestid.Lookup(ctx, st, r2, now)
	if status.Code(err) != codes.AlreadyExists || !strings.HasPrefix(status.Convert(err).Message(), "requestId: ") {
		t.Fatalf("same id, other request: %v; want AlreadyExists naming requestId", err)
	}
	// Kinds are separate: a pool may use the job's id.
	rp, _ := requestid.New(requestid.Pool, "r1", &pelotonv1.CreatePoolRequest{Path: "/p"})
	if o, err := requestid.Lookup(ctx, st, rp, now); err != nil || o.Done {
		t.Fatalf("pool with a job's id: %+v, %v", o, err)
	}

	// After Retention the id is free again, for any request; the new record
	// replaces the old one.
	later := now.Add(requestid.Retention)
	o, err = requestid.Lookup(ctx, st, r2, later)
	if err != nil || o.Done {
		t.Fatalf("Lookup after retention = %+v, %v", o, err)
	}
	if _, err := st.Txn(ctx, o.Ops(r2, "j3", later)...); err != nil {
		t.Fatal(err)
	}
	if o, err := requestid.Lookup(ctx, st, r2, later); err != nil || o.Object != "j3" {
		t.Fatalf("reused id = %+v, %v", o, err)
	}
}

func TestNoIDNoRecord(t *testing.T) {
	_, st := storetest.StartEtcd(t)
	r, err := requestid.New(requestid.Job, "", &pelotonv1.CreateJobRequest{})
	if err != nil || r.ID != "" {
		t.Fatal(r, err)
	}
	o, err := requestid.Lookup(context.Background(), st, r, time.Now())
	if err != nil || o.Done || o.Ops(r, "x", time.Now()) != nil {
		t.Fatalf("zero request: %+v %v", o, err)
	}
}

func TestSweepDeletesOnlyExpired(t *testing.T) {
	_, st := storetest.StartEtcd(t)
	ctx := context.Background()
	t0 := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	for i, at := range []time.Time{t0, t0, t0.Add(2 * time.Hour)} {
		r := requestid.Request{Kind: requestid.Job, ID: string(rune('a' + i)), Digest: "d"}
		o, _ := requestid.Lookup(ctx, st, r, at)
		if _, err := st.Txn(ctx, o.Ops(r, "obj", at)...); err != nil {
			t.Fatal(err)
		}
	}
	now := t0.Add(requestid.Retention + time.Hour)
	if n, err := requestid.Sweep(ctx, st, now, 1); err != nil || n != 1 {
		t.Fatalf("Sweep limit 1 = %d, %v", n, err)
	}
	if n, err := requestid.Sweep(ctx, st, now, 100); err != nil || n != 1 {
		t.Fatalf("second Sweep = %d, %v", n, err)
	}
	kvs, _ := st.List(ctx, "requests/")
	if len(kvs) != 1 || kvs[0].Key != requestid.Key(requestid.Job, "c") {
		t.Fatalf("left after sweeps: %v", kvs)
	}
}

// TestFreshIsLookupOfANewID: Fresh is what Lookup answers for an id with
// no record, so a create may write with it before reading; a write with it
// fails when the id has a record, and Lookup then says whether that record
// is expired (Replaces) or answers the request (Done).
func TestFreshIsLookupOfANewID(t *testing.T) {
	_, st := storetest.StartEtcd(t)
	ctx := context.Background()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r, _ := requestid.New(requestid.Job, "f1", &pelotonv1.CreateJobRequest{Spec: &pelotonv1.JobSpec{Name: "j"}, RequestId: "f1"})
	if o, err := requestid.Lookup(ctx, st, r, now); err != nil || o != requestid.Fresh() || o.Replaces() {
		t.Fatalf("Lookup of a new id = %+v, %v; want Fresh(), not replacing", o, err)
	}
	if _, err := st.Txn(ctx, requestid.Fresh().Ops(r, "j1", now)...); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Txn(ctx, requestid.Fresh().Ops(r, "j2", now)...); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a second Fresh write of the id: %v, want a conflict", err)
	}
	if o, err := requestid.Lookup(ctx, st, r, now); err != nil || !o.Done || o.Replaces() || o.Object != "j1" {
		t.Fatalf("Lookup after = %+v, %v; want done, j1", o, err)
	}
	later := now.Add(requestid.Retention)
	o, err := requestid.Lookup(ctx, st, r, later)
	if err != nil || o.Done || !o.Replaces() {
		t.Fatalf("Lookup of an expired record = %+v, %v; want one that replaces it", o, err)
	}
	if _, err := st.Txn(ctx, o.Ops(r, "j3", later)...); err != nil {
		t.Fatalf("replacing the expired record: %v", err)
	}
}

// TestWriteFirst: a new id is written once, with no read; a replay is
// answered with the first create's object and writes nothing; the id with
// another request is AlreadyExists; an expired record is replaced by a
// second write; an error final picks is returned without a read.
func TestWriteFirst(t *testing.T) {
	_, st := storetest.StartEtcd(t)
	ctx := context.Background()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	req := func(name string) requestid.Request {
		r, _ := requestid.New(requestid.Job, "w1", &pelotonv1.CreateJobRequest{Spec: &pelotonv1.JobSpec{Name: name}, RequestId: "w1"})
		return r
	}
	n := 0
	create := func(r requestid.Request, at time.Time, object string) (string, error) {
		return requestid.WriteFirst(ctx, st, r, at, func(o requestid.Outcome) error {
			n++
			_, err := st.Txn(ctx, append([]store.Op{store.Put("objects/"+object, []byte("x"), store.MustNotExist)}, o.Ops(r, object, at)...)...)
			return err
		}, nil)
	}
	if done, err := create(req("a"), now, "j1"); err != nil || done != "" || n != 1 {
		t.Fatalf("a new id: done %q, err %v, %d writes; want written once", done, err, n)
	}
	if done, err := create(req("a"), now, "j2"); err != nil || done != "j1" || n != 2 {
		t.Fatalf("a replay: done %q, err %v, %d writes; want j1 answered after the one failed write", done, err, n)
	}
	if kvs, _ := st.List(ctx, "objects/"); len(kvs) != 1 {
		t.Fatalf("objects after the replay: %v; want j1 alone", kvs)
	}
	if _, err := create(req("b"), now, "j3"); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("the id with another request: %v; want AlreadyExists", err)
	}
	later := now.Add(requestid.Retention)
	n = 0
	if done, err := create(req("b"), later, "j4"); err != nil || done != "" || n != 2 {
		t.Fatalf("an expired id: done %q, err %v, %d writes; want the record replaced by a second write", done, err, n)
	}
	boom := errors.New("boom")
	n = 0
	_, err := requestid.WriteFirst(ctx, st, req("a"), later, func(requestid.Outcome) error { n++; return boom }, func(err error) bool { return err == boom })
	if err != boom || n != 1 {
		t.Fatalf("a final error: %v after %d writes; want it as it was, after one", err, n)
	}
}
