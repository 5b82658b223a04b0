package history

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
)

// Bolt is the embedded archive: one bbolt file, in `peloton up`'s data dir.
// bbolt locks the file, so one process at a time opens it; within that
// process it takes any number of readers and one writer at a time.
//
// Layout: a bucket per cluster, under "clusters", holding
//
//	records            job id -> the record (format byte, zstd of ArchivedJob)
//	ids                job id -> where its index entries are (creation time, state, pool)
//	time               time key -> the job's summary (a pelotonv1.Job, as lists show it)
//	pools/p<pool>      time key -> nothing
//	states/<state>     time key -> nothing
//
// A time key is the creation time in nanoseconds, ordered newest first
// (big-endian, inverted), then the job id: a list is a walk of "time", or
// of one pool's or the wanted states' index (merged), from the page
// token's key, which never reads jobs outside the page's range.
type Bolt struct {
	db   *bolt.DB
	path string
}

var _ Store = (*Bolt)(nil)

// Names of the buckets.
var (
	bMeta     = []byte("meta")
	bClusters = []byte("clusters")
	bRecords  = []byte("records")
	bIDs      = []byte("ids")
	bTime     = []byte("time")
	bPools    = []byte("pools")
	bStates   = []byte("states")
	kFormat   = []byte("format")
)

// boltFormat is the layout above; a file of another is refused rather
// than misread.
const boltFormat = "1"

// OpenBolt opens (creating it if need be) the archive file at path. It
// fails at once if another process has the file open.
func OpenBolt(path string) (*Bolt, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		// Another process holding the file is an error to report, not a
		// reason to wait for ever.
		Timeout: time.Second,
		// The hashmap freelist stays fast in a large, fragmented file:
		// an archive only grows, and a purge leaves holes.
		FreelistType: bolt.FreelistMapType,
	})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("history: %s is open in another process", path)
	}
	if err != nil {
		return nil, fmt.Errorf("history: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bMeta)
		if err != nil {
			return err
		}
		switch f := meta.Get(kFormat); {
		case f == nil:
			if err := meta.Put(kFormat, []byte(boltFormat)); err != nil {
				return err
			}
		case string(f) != boltFormat:
			return fmt.Errorf("the file has layout %q; this version of Peloton reads layout %s", f, boltFormat)
		}
		_, err = tx.CreateBucketIfNotExists(bClusters)
		return err
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("history: %s: %w", path, err)
	}
	return &Bolt{db: db, path: path}, nil
}

// Path is the file the archive is in.
func (s *Bolt) Path() string { return s.path }

// Close closes the file.
func (s *Bolt) Close() error { return s.db.Close() }

// timeKey is a job's key in the time-ordered buckets.
func timeKey(createNanos int64, id string) []byte {
	k := make([]byte, 8+len(id))
	binary.BigEndian.PutUint64(k, timePrefix(createNanos))
	copy(k[8:], id)
	return k
}

// timePrefix orders creation times newest first: the sign bit flipped
// makes int64 order unsigned order, and the inversion reverses it.
func timePrefix(ns int64) uint64 { return ^(uint64(ns) ^ 1<<63) }

func keyNanos(k []byte) int64 { return int64(^binary.BigEndian.Uint64(k) ^ 1<<63) }

// where is what ids holds of a job: its time key and its index entries.
type where struct {
	createNanos int64
	state       pelotonv1.JobState
	pool        string
}

func (w where) bytes() []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(w.createNanos))
	b = binary.AppendVarint(b, int64(w.state))
	return append(b, w.pool...)
}

func parseWhere(b []byte) (where, error) {
	if len(b) < 9 {
		return where{}, errors.New("short index entry")
	}
	st, n := binary.Varint(b[8:])
	if n <= 0 || st < math.MinInt32 || st > math.MaxInt32 {
		return where{}, errors.New("bad index entry")
	}
	return where{createNanos: int64(binary.BigEndian.Uint64(b)), state: pelotonv1.JobState(st), pool: string(b[8+n:])}, nil
}

func poolBucket(pool string) []byte { return append([]byte("p"), pool...) }

func stateBucket(s pelotonv1.JobState) []byte { return binary.AppendVarint(nil, int64(s)) }

// clusterBuckets are the buckets of one cluster.
type clusterBuckets struct {
	records, ids, time, pools, states *bolt.Bucket
}

// buckets returns a cluster's buckets, creating them when create is set;
// without create it returns nil for a cluster that has none.
func buckets(tx *bolt.Tx, cluster string, create bool) (*clusterBuckets, error) {
	root := tx.Bucket(bClusters)
	if root == nil {
		return nil, errors.New("the file has no clusters bucket")
	}
	c := root.Bucket([]byte(cluster))
	if c == nil {
		if !create {
			return nil, nil
		}
		var err error
		if c, err = root.CreateBucket([]byte(cluster)); err != nil {
			return nil, err
		}
	}
	cb := &clusterBuckets{}
	for _, b := range []struct {
		name []byte
		dst  **bolt.Bucket
	}{{bRecords, &cb.records}, {bIDs, &cb.ids}, {bTime, &cb.time}, {bPools, &cb.pools}, {bStates, &cb.states}} {
		if *b.dst = c.Bucket(b.name); *b.dst == nil {
			if !create {
				return nil, fmt.Errorf("cluster %s has no %s bucket", cluster, b.name)
			}
			var err error
			if *b.dst, err = c.CreateBucket(b.name); err != nil {
				return nil, err
			}
		}
	}
	return cb, nil
}

// unindex removes a job's index entries.
func (cb *clusterBuckets) unindex(id string, w where) error {
	k := timeKey(w.createNanos, id)
	if err := cb.time.Delete(k); err != nil {
		return err
	}
	if b := cb.pools.Bucket(poolBucket(w.pool)); b != nil {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	if b := cb.states.Bucket(stateBucket(w.state)); b != nil {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return cb.ids.Delete([]byte(id))
}

// encoded is a job ready to write: its record, its summary and where it is
// indexed.
type encoded struct {
	cluster, id string
	record      []byte
	summary     []byte
	where       where
}

// encodeAll encodes jobs, outside any transaction: compression is the
// expensive part of a put, and no lock is held for it.
func encodeAll(jobs []*Job) ([]encoded, error) {
	out := make([]encoded, len(jobs))
	for i, j := range jobs {
		rec, err := encode(j)
		if err != nil {
			return nil, err
		}
		sum, err := proto.MarshalOptions{Deterministic: true}.Marshal(j.Summary())
		if err != nil {
			return nil, fmt.Errorf("history: encode summary of job %s: %w", j.ID, err)
		}
		out[i] = encoded{cluster: j.Cluster, id: j.ID, record: rec, summary: sum,
			where: where{createNanos: createNanos(j), state: j.Status.GetState(), pool: j.Spec().GetPool()}}
	}
	return out, nil
}

// Put archives jobs in one transaction.
func (s *Bolt) Put(ctx context.Context, jobs ...*Job) error {
	if err := checkJobs(jobs); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	enc, err := encodeAll(jobs)
	if err != nil {
		return err
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		for _, e := range enc {
			cb, err := buckets(tx, e.cluster, true)
			if err != nil {
				return err
			}
			id := []byte(e.id)
			if old := cb.ids.Get(id); old != nil {
				w, err := parseWhere(old)
				if err != nil {
					return fmt.Errorf("job %s: %w", e.id, err)
				}
				if err := cb.unindex(e.id, w); err != nil {
					return err
				}
			}
			k := timeKey(e.where.createNanos, e.id)
			pools, err := cb.pools.CreateBucketIfNotExists(poolBucket(e.where.pool))
			if err != nil {
				return err
			}
			states, err := cb.states.CreateBucketIfNotExists(stateBucket(e.where.state))
			if err != nil {
				return err
			}
			for _, p := range []struct {
				b    *bolt.Bucket
				k, v []byte
			}{{cb.records, id, e.record}, {cb.ids, id, e.where.bytes()}, {cb.time, k, e.summary}, {pools, k, nil}, {states, k, nil}} {
				if err := p.b.Put(p.k, p.v); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return s.fail(putOp(jobs), err)
}

// fail names what failed; a closed file is ErrClosed.
func (s *Bolt) fail(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, bolt.ErrDatabaseNotOpen):
		return ErrClosed
	}
	return fmt.Errorf("history: %s in %s: %w", op, s.path, err)
}

// Get returns one archived job.
func (s *Bolt) Get(ctx context.Context, cluster, jobID string) (*Job, error) {
	if err := checkKey(cluster, jobID); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var rec []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		cb, err := buckets(tx, cluster, false)
		if err != nil || cb == nil {
			return err
		}
		// Copied out, so that the transaction (which holds off a writer
		// growing the file) ends before the record is decoded.
		rec = bytes.Clone(cb.records.Get([]byte(jobID)))
		return nil
	})
	if err != nil {
		return nil, s.fail("get job "+jobID, err)
	}
	if rec == nil {
		return nil, notFound(cluster, jobID)
	}
	j, err := decode(rec)
	if err != nil {
		return nil, fmt.Errorf("history: job %s of cluster %s in %s: %w", jobID, cluster, s.path, err)
	}
	return j, nil
}

// Delete removes one archived job.
func (s *Bolt) Delete(ctx context.Context, cluster, jobID string) error {
	if err := checkKey(cluster, jobID); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	found := false
	err := s.db.Update(func(tx *bolt.Tx) error {
		cb, err := buckets(tx, cluster, false)
		if err != nil || cb == nil {
			return err
		}
		old := cb.ids.Get([]byte(jobID))
		if old == nil {
			return nil
		}
		found = true
		w, err := parseWhere(old)
		if err != nil {
			return fmt.Errorf("job %s: %w", jobID, err)
		}
		if err := cb.unindex(jobID, w); err != nil {
			return err
		}
		return cb.records.Delete([]byte(jobID))
	})
	if err != nil {
		return s.fail("delete job "+jobID, err)
	}
	if !found {
		return notFound(cluster, jobID)
	}
	return nil
}

// List returns one page of the jobs f selects, newest first.
func (s *Bolt) List(ctx context.Context, f Filter, pageSize uint32, pageToken string) ([]*pelotonv1.Job, string, error) {
	n, err := checkFilter(f, pageSize)
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
	states := stateSet(f.States)
	var out []*pelotonv1.Job
	var next string
	err = s.db.View(func(tx *bolt.Tx) error {
		cb, err := buckets(tx, f.Cluster, false)
		if err != nil || cb == nil {
			return err
		}
		// The first key to read: after the token's, and no newer than
		// CreatedUntil allows.
		var start []byte
		if !f.CreatedUntil.IsZero() {
			u := timeNanos(f.CreatedUntil)
			if u == math.MinInt64 {
				return nil // nothing is created before the earliest time
			}
			start = binary.BigEndian.AppendUint64(nil, timePrefix(u-1))
		}
		var skip []byte
		if hasAfter {
			if k := timeKey(after.createNanos, after.id); start == nil || bytes.Compare(k, start) >= 0 {
				start, skip = k, k
			}
		}
		since := int64(math.MinInt64)
		if !f.CreatedSince.IsZero() {
			since = timeNanos(f.CreatedSince)
		}
		// The bucket(s) to walk: the pool's index, else the wanted states'
		// (merged), else every job's. The other filters are checked on
		// each summary.
		var walk []*bolt.Bucket
		switch {
		case f.Pool != "":
			if b := cb.pools.Bucket(poolBucket(f.Pool)); b != nil {
				walk = append(walk, b)
			}
		case len(states) > 0:
			for st := range states {
				if b := cb.states.Bucket(stateBucket(st)); b != nil {
					walk = append(walk, b)
				}
			}
		default:
			walk = append(walk, cb.time)
		}
		it := newMergeIter(walk, start)
		bytesOut := 0
		for k := it.next(); k != nil; k = it.next() {
			if skip != nil && bytes.Equal(k, skip) {
				continue
			}
			if keyNanos(k) < since {
				break
			}
			sum := cb.time.Get(k)
			if sum == nil {
				return fmt.Errorf("index entry %x has no job", k)
			}
			j := &pelotonv1.Job{}
			if err := proto.Unmarshal(sum, j); err != nil {
				return fmt.Errorf("summary of job %s: %w", k[8:], err)
			}
			if !matches(f, j, states) {
				continue
			}
			if len(out) == n || (len(out) > 0 && bytesOut+len(sum) > pageBytes) {
				last := out[len(out)-1]
				next = cursor{createNanos: createNanosOf(last), id: last.Id}.token()
				break
			}
			out = append(out, j)
			bytesOut += len(sum)
		}
		return nil
	})
	if err != nil {
		return nil, "", s.fail("list jobs of cluster "+f.Cluster, err)
	}
	return out, next, nil
}

// createNanosOf is the sort key of a listed job.
func createNanosOf(j *pelotonv1.Job) int64 {
	return timeNanos(j.GetStatus().GetCreateTime().AsTime())
}

// mergeIter walks the keys of several buckets in order, from a start key:
// a list by several states reads each state's index once.
type mergeIter struct {
	cs   []*bolt.Cursor
	keys [][]byte
}

func newMergeIter(bs []*bolt.Bucket, start []byte) *mergeIter {
	it := &mergeIter{}
	for _, b := range bs {
		c := b.Cursor()
		var k []byte
		if start == nil {
			k, _ = c.First()
		} else {
			k, _ = c.Seek(start)
		}
		it.cs = append(it.cs, c)
		it.keys = append(it.keys, k)
	}
	return it
}

// next returns the smallest key left, nil at the end.
func (it *mergeIter) next() []byte {
	best := -1
	for i, k := range it.keys {
		if k != nil && (best < 0 || bytes.Compare(k, it.keys[best]) < 0) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	k := it.keys[best]
	it.keys[best], _ = it.cs[best].Next()
	return k
}
