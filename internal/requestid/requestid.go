// Package requestid makes creates safe to retry. A client names each
// intended create with a request id of its choosing; the first create with
// that id records, in the same store transaction as the object it creates,
// the id, a digest of the request and what it created, under
// requests/<kind>/<id>. A retry with the same id and the same request finds
// the record and answers with the object created the first time, creating
// nothing; the same id with a different request is AlreadyExists. Because
// the record and the object are written together, a crash can never leave
// one without the other, and because both are in the store, retries work
// across restarts and leader changes.
//
// Records are kept for Retention. An expired record counts as absent (the
// id may be used again, and the write replaces it); Sweep deletes expired
// records in bounded passes.
//
// The package knows the store and the API protos, not the domain packages:
// jobmgr and resmgr call it from their create paths.
package requestid

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/store"
)

// Retention is how long a request id is remembered after its create.
const Retention = 24 * time.Hour

// SweepInterval and SweepLimit pace the stack's sweep of expired records:
// one pass an hour, deleting at most SweepLimit records, so a backlog is
// worked off over several passes instead of in one long burst of writes.
const (
	SweepInterval = time.Hour
	SweepLimit    = 10000
)

// MaxLen is the longest request id accepted.
const MaxLen = 128

// Field is the request field, as users name it (the JSON name).
const Field = "requestId"

// keyPrefix holds every record; see Key.
const keyPrefix = "requests/"

// Kind names what a request creates. Ids are scoped per kind: a job and a
// pool created with the same id are two different requests.
type Kind string

// The kinds of create that take a request id.
const (
	Job    Kind = "job"
	Pool   Kind = "pool"
	Update Kind = "update"
)

// Request is one create's id and the digest of what it asks. The zero
// Request (no id) asks for no retry protection: Lookup finds nothing and
// Ops writes nothing.
type Request struct {
	Kind   Kind
	ID     string
	Digest string
}

// New checks id and digests req (with its request_id field cleared, so the
// digest is of what is asked, not of how it is named). An empty id is the
// zero Request.
func New(kind Kind, id string, req proto.Message) (Request, error) {
	if id == "" {
		return Request{}, nil
	}
	if err := Validate(id); err != nil {
		return Request{}, err
	}
	return Request{Kind: kind, ID: id, Digest: Digest(req)}, nil
}

// Validate is Check as the API reports it: InvalidArgument naming
// requestId.
func Validate(id string) error {
	if err := Check(id); err != nil {
		return apierr.Invalid(Field, "%v", err)
	}
	return nil
}

// Check reports whether id is a well-formed request id: 1 to MaxLen
// characters of A-Z, a-z, 0-9, '.', '_' and '-' (it is part of a store
// key, so nothing that could read as a path). The error does not name the
// field, so the CLI can name its flag instead.
func Check(id string) error {
	if id == "" {
		return errors.New("is empty")
	}
	if len(id) > MaxLen {
		return fmt.Errorf("is %d characters long; at most %d", len(id), MaxLen)
	}
	if id == "." || id == ".." {
		return fmt.Errorf("%q is not an id", id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("character %q at offset %d is not allowed; use A-Z a-z 0-9 . _ -", c, i)
		}
	}
	return nil
}

// Digest is the hex SHA-256 of req's deterministic encoding, with its
// request_id field (if any) cleared.
func Digest(req proto.Message) string {
	m := proto.Clone(req)
	r := m.ProtoReflect()
	if fd := r.Descriptor().Fields().ByName("request_id"); fd != nil {
		r.Clear(fd)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		// Only an invalid message fails to marshal; no two of those may
		// share a digest with a valid one.
		b = []byte("unmarshalable: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Key is the store key of a request's record.
func Key(kind Kind, id string) string { return keyPrefix + string(kind) + "/" + id }

// record is what the store holds for a request id.
type record struct {
	Digest string `json:"digest"`
	// Object is what the request created: a job id, pool path or update id.
	Object  string    `json:"object"`
	Created time.Time `json:"created"`
}

// expired reports whether a record written at created is past Retention at now.
func expired(created, now time.Time) bool { return now.Sub(created) >= Retention }

// Outcome is what Lookup found for a request.
type Outcome struct {
	// Done: the request was carried out before and created Object.
	Done   bool
	Object string
	// expect is the revision Ops must find at the record's key: absent, or
	// the expired record it replaces.
	expect int64
}

// Lookup reads r's record. It is Done when the same request was carried
// out within Retention; AlreadyExists (naming requestId) when the id was
// used for a different request; otherwise not Done, and its Ops claim the
// id in the create's transaction.
func Lookup(ctx context.Context, st store.Store, r Request, now time.Time) (Outcome, error) {
	if r.ID == "" {
		return Outcome{}, nil
	}
	kv, err := st.Get(ctx, Key(r.Kind, r.ID))
	if errors.Is(err, store.ErrNotFound) {
		return Outcome{expect: store.MustNotExist}, nil
	}
	if err != nil {
		return Outcome{}, apierr.Unavailable("read request %s: %v", r.ID, err)
	}
	var rec record
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		return Outcome{}, fmt.Errorf("decode request record %s: %w", kv.Key, err)
	}
	if expired(rec.Created, now) {
		return Outcome{expect: kv.Revision}, nil
	}
	if rec.Digest != r.Digest {
		return Outcome{}, apierr.AlreadyExists("%s: %q was already used by a different %s request (which created %s); use a fresh id for a new request",
			Field, r.ID, r.Kind, rec.Object)
	}
	return Outcome{Done: true, Object: rec.Object}, nil
}

// Fresh is the Outcome Lookup gives an id that has no record, without
// reading it: what WriteFirst writes with first.
func Fresh() Outcome { return Outcome{expect: store.MustNotExist} }

// WriteFirst carries out a create under r on a hot path: it writes as if
// r's id were new, as nearly every id is (a read first would cost every
// create a store round trip). write is the create's transaction, given the
// Outcome whose Ops record r in it. Only when write fails is r's record
// read: a create carried out before under r (a retry, or a concurrent one
// that won) is answered with its object, done; an id used for another
// request is AlreadyExists; an expired record is replaced by a second
// write. Otherwise write's error is returned. The record and the object
// commit in one transaction, so a failed write left neither. final picks
// the errors of write that end the create without that read (nil: none).
func WriteFirst(ctx context.Context, st store.Store, r Request, now time.Time, write func(Outcome) error, final func(error) bool) (done string, err error) {
	o := Fresh()
	for try := 0; ; try++ {
		werr := write(o)
		if werr == nil {
			return "", nil
		}
		if r.ID == "" || (final != nil && final(werr)) {
			return "", werr
		}
		o2, lerr := Lookup(ctx, st, r, now)
		switch {
		case lerr != nil && apierr.Code(lerr) == codes.AlreadyExists:
			return "", lerr
		case lerr == nil && o2.Done:
			return o2.Object, nil
		case lerr == nil && o2.Replaces() && try == 0:
			o = o2
			continue
		}
		return "", werr
	}
}

// Replaces reports whether o's Ops overwrite an expired record of the id.
func (o Outcome) Replaces() bool { return !o.Done && o.expect != store.MustNotExist }

// Ops are the writes that record r as carried out, creating object, for the
// create's own transaction: it fails with store.ErrConflict if another
// create claimed the id since Lookup. None for the zero Request.
func (o Outcome) Ops(r Request, object string, now time.Time) []store.Op {
	if r.ID == "" {
		return nil
	}
	b, _ := json.Marshal(record{Digest: r.Digest, Object: object, Created: now.UTC()})
	return []store.Op{store.Put(Key(r.Kind, r.ID), b, o.expect)}
}

// Recheck is for a create that failed: if r has meanwhile been carried out
// (a concurrent retry with the same id won the race), it returns that
// outcome so the caller answers as the winner did; otherwise it returns
// the create's own error.
func Recheck(ctx context.Context, st store.Store, r Request, now time.Time, createErr error) (Outcome, error) {
	if r.ID == "" {
		return Outcome{}, createErr
	}
	o, err := Lookup(ctx, st, r, now)
	if err == nil && o.Done {
		return o, nil
	}
	if apierr.Code(err) == codes.AlreadyExists {
		return Outcome{}, err
	}
	return Outcome{}, createErr
}

// Sweep deletes up to limit records expired at now and returns how many it
// deleted. A record rewritten since it was listed is left alone.
func Sweep(ctx context.Context, st store.Store, now time.Time, limit int) (int, error) {
	kvs, err := st.List(ctx, keyPrefix)
	if err != nil {
		return 0, err
	}
	var ops []store.Op
	for _, kv := range kvs {
		if len(ops) >= limit {
			break
		}
		var rec record
		if json.Unmarshal(kv.Value, &rec) == nil && !expired(rec.Created, now) {
			continue
		}
		ops = append(ops, store.Delete(kv.Key, kv.Revision))
	}
	n := 0
	for len(ops) > 0 {
		k := min(len(ops), st.MaxTxnOps())
		_, err := st.Txn(ctx, ops[:k]...)
		switch {
		case err == nil:
			n += k
		case errors.Is(err, store.ErrConflict):
			// One was reused meanwhile; delete the rest one by one.
			for _, op := range ops[:k] {
				if _, err := st.Txn(ctx, op); err == nil {
					n++
				} else if !errors.Is(err, store.ErrConflict) {
					return n, err
				}
			}
		default:
			return n, err
		}
		ops = ops[k:]
	}
	return n, nil
}

// SweepEvery runs Sweep every interval (deleting at most limit records a
// pass) until ctx ends. Errors are reported to onErr and retried next pass.
func SweepEvery(ctx context.Context, st store.Store, interval time.Duration, limit int, onErr func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := Sweep(ctx, st, time.Now(), limit); err != nil && ctx.Err() == nil && onErr != nil {
				onErr(err)
			}
		}
	}
}
