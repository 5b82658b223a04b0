package federation

import (
	"context"
	"errors"

	"google.golang.org/protobuf/proto"

	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/store"
)

// casRecord is how updateRecord reaches one kind of record kept in
// memory and in etcd: read returns a copy of the record and its revision
// (ok false if it is gone), keep stores a record and its revision back in
// memory. Callers of read and keep do not hold mu.
type casRecord[T proto.Message] struct {
	key, what string
	read      func() (T, int64, bool)
	keep      func(T, int64)
	fresh     func() T
}

// updateRecord changes a record with compare-and-swap, retrying a few
// times on a conflict with another writer (change is applied to the
// latest record each time). It returns the record before and after the
// change that was written.
func updateRecord[T proto.Message](ctx context.Context, f *Federation, r casRecord[T], change func(T) error) (T, T, error) {
	for attempt := 0; ; attempt++ {
		rec, rev, ok := r.read()
		if !ok {
			return rec, rec, apierr.NotFound("%s does not exist", r.what)
		}
		before := proto.Clone(rec).(T)
		if err := change(rec); err != nil {
			return before, rec, err
		}
		b, err := proto.Marshal(rec)
		if err != nil {
			return before, rec, err
		}
		newRev, err := f.batch.Write(ctx, store.Put(r.key, b, rev))
		if errors.Is(err, store.ErrConflict) && attempt < 5 {
			// Someone else wrote it: read it back and apply again.
			if kv, gerr := f.st.Get(ctx, r.key); gerr == nil {
				cur := r.fresh()
				if proto.Unmarshal(kv.Value, cur) == nil {
					r.keep(cur, kv.Revision)
				}
			}
			continue
		}
		if err != nil {
			return before, rec, apierr.Unavailable("write %s: %v", r.what, err)
		}
		r.keep(rec, newRev)
		return before, rec, nil
	}
}
