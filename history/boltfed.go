package history

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	bolt "go.etcd.io/bbolt"
)

// fedBuckets are the buckets of one federation's objects of one kind.
type fedBuckets struct {
	objs, ids *bolt.Bucket
}

// federatedBuckets returns the buckets of a federation's objects of kind,
// creating them when create is set; without create it returns nil when
// there are none.
func federatedBuckets(tx *bolt.Tx, federation string, kind Kind, create bool) (*fedBuckets, error) {
	root := tx.Bucket(bFederations)
	if root == nil {
		if !create {
			return nil, nil
		}
		return nil, errors.New("the file has no federations bucket")
	}
	names := [][]byte{[]byte(federation), binary.AppendVarint(nil, int64(kind))}
	b := root
	for _, n := range names {
		next := b.Bucket(n)
		if next == nil {
			if !create {
				return nil, nil
			}
			var err error
			if next, err = b.CreateBucket(n); err != nil {
				return nil, err
			}
		}
		b = next
	}
	fb := &fedBuckets{}
	for _, x := range []struct {
		name []byte
		dst  **bolt.Bucket
	}{{bObjs, &fb.objs}, {bIDs, &fb.ids}} {
		if *x.dst = b.Bucket(x.name); *x.dst == nil {
			if !create {
				return nil, fmt.Errorf("%s of federation %s has no %s bucket", kind, federation, x.name)
			}
			var err error
			if *x.dst, err = b.CreateBucket(x.name); err != nil {
				return nil, err
			}
		}
	}
	fb.objs.FillPercent = timeFill
	return fb, nil
}

// fedTimeKey is where an object's id entry says its record is.
func (fb *fedBuckets) timeKeyOf(id string) ([]byte, error) {
	v := fb.ids.Get([]byte(id))
	if v == nil {
		return nil, nil
	}
	if len(v) != 8 {
		return nil, fmt.Errorf("%s: bad index entry", id)
	}
	return timeKey(int64(binary.BigEndian.Uint64(v)), id), nil
}

// PutFederated archives objects in one transaction.
func (s *Bolt) PutFederated(ctx context.Context, objs ...*Federated) error {
	if err := checkFederated(objs); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(objs) == 0 {
		return nil
	}
	enc, err := encodeAllFederated(objs)
	if err != nil {
		return err
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		for _, e := range enc {
			fb, err := federatedBuckets(tx, e.federation, e.kind, true)
			if err != nil {
				return err
			}
			old, err := fb.timeKeyOf(e.id)
			if err != nil {
				return err
			}
			if old != nil {
				if err := fb.objs.Delete(old); err != nil {
					return err
				}
			}
			if err := fb.objs.Put(timeKey(e.createNanos, e.id), e.record); err != nil {
				return err
			}
			if err := fb.ids.Put([]byte(e.id), binary.BigEndian.AppendUint64(nil, uint64(e.createNanos))); err != nil {
				return err
			}
		}
		return nil
	})
	return s.fail(fedPutOp(objs), err)
}

// GetFederated returns one archived object.
func (s *Bolt) GetFederated(ctx context.Context, federation string, kind Kind, id string) (*Federated, error) {
	if err := checkFedKey(federation, kind, id); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var rec []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		fb, err := federatedBuckets(tx, federation, kind, false)
		if err != nil || fb == nil {
			return err
		}
		k, err := fb.timeKeyOf(id)
		if err != nil || k == nil {
			return err
		}
		v := fb.objs.Get(k)
		if v == nil {
			return fmt.Errorf("%s %s is indexed but not stored", kind, id)
		}
		rec = bytes.Clone(v)
		return nil
	})
	if err != nil {
		return nil, s.fail(fedOp("get", federation, kind, id), err)
	}
	if rec == nil {
		return nil, fedNotFound(federation, kind, id)
	}
	o, err := decodeFederated(rec)
	if err != nil {
		return nil, fmt.Errorf("history: %s %s of federation %s in %s: %w", kind, id, federation, s.path, err)
	}
	return o, nil
}

// DeleteFederated removes one archived object.
func (s *Bolt) DeleteFederated(ctx context.Context, federation string, kind Kind, id string) error {
	if err := checkFedKey(federation, kind, id); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	found := false
	err := s.db.Update(func(tx *bolt.Tx) error {
		fb, err := federatedBuckets(tx, federation, kind, false)
		if err != nil || fb == nil {
			return err
		}
		k, err := fb.timeKeyOf(id)
		if err != nil || k == nil {
			return err
		}
		found = true
		if err := fb.objs.Delete(k); err != nil {
			return err
		}
		return fb.ids.Delete([]byte(id))
	})
	if err != nil {
		return s.fail(fedOp("delete", federation, kind, id), err)
	}
	if !found {
		return fedNotFound(federation, kind, id)
	}
	return nil
}

// ListFederated returns one page of the objects f selects, newest first.
func (s *Bolt) ListFederated(ctx context.Context, f FederatedFilter, pageSize uint32, pageToken string) ([]*Federated, string, error) {
	n, err := checkFedFilter(f, pageSize)
	if err != nil {
		return nil, "", err
	}
	after, hasAfter, err := parseToken(pageToken)
	if err != nil {
		return nil, "", err
	}
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	var out []*Federated
	var next string
	err = s.db.View(func(tx *bolt.Tx) error {
		fb, err := federatedBuckets(tx, f.Federation, f.Kind, false)
		if err != nil || fb == nil {
			return err
		}
		var below []byte
		if !f.CreatedUntil.IsZero() {
			u := timeNanos(f.CreatedUntil)
			if u == math.MinInt64 {
				return nil
			}
			below = binary.BigEndian.AppendUint64(nil, timeOrder(u))
		}
		if hasAfter {
			if k := timeKey(after.createNanos, after.id); below == nil || bytes.Compare(k, below) < 0 {
				below = k
			}
		}
		since := int64(math.MinInt64)
		if !f.CreatedSince.IsZero() {
			since = timeNanos(f.CreatedSince)
		}
		it := newBackIter([]*bolt.Bucket{fb.objs}, below)
		bytesOut := 0
		var lastKey []byte
		for k := it.next(); k != nil; k = it.next() {
			if keyNanos(k) < since {
				break
			}
			v := fb.objs.Get(k)
			o, err := decodeFederated(v)
			if err != nil {
				return fmt.Errorf("entry %x: %w", k, err)
			}
			if !fedMatches(f, o) {
				continue
			}
			if len(out) == n || (len(out) > 0 && bytesOut+len(v) > pageBytes) {
				last := out[len(out)-1]
				next = cursor{createNanos: keyNanos(lastKey), id: last.ID}.token()
				break
			}
			out = append(out, o)
			lastKey = k
			bytesOut += len(v)
		}
		return nil
	})
	if err != nil {
		return nil, "", s.fail(fmt.Sprintf("list %ss of federation %s", f.Kind, f.Federation), err)
	}
	return out, next, nil
}
