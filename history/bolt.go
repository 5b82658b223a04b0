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
	bolterrors "go.etcd.io/bbolt/errors"
	"google.golang.org/protobuf/proto"
)

// Bolt is the embedded archive: one bbolt file, in `peloton up`'s data dir.
// bbolt locks the file, so one process at a time opens it; within that
// process it takes any number of readers and one writer at a time.
//
// Layout: a bucket per cluster, under "clusters", holding
//
//	jobs               time key -> the job's summary (a pelotonv1.Job, as
//	                   lists show it) and its record (format byte, zstd of
//	                   ArchivedJob), each with its length first
//	ids                job id -> its creation time, state and pool (so its
//	                   time key and index entries)
//	pools/p<pool>      time key -> nothing
//	states/<state>     time key -> nothing
//
// A time key is the creation time in nanoseconds (big-endian, sign bit
// flipped, so that byte order is time order), then the job id with every
// byte inverted and 0xff after it: walked backwards from the end, keys
// come newest first and, within one nanosecond, by id ascending, as the
// job manager lists. A list walks "jobs", or one pool's index, or the
// wanted states' (merged), backwards from the page token's key: a page
// reads its range only. Get is two lookups, ids then jobs.
//
// The federation's objects (Federated) are under "federations": a bucket
// per federation name, in it one per kind (its number, varint), holding
//
//	objs               time key -> the record (format byte, zstd of
//	                   ArchivedFederated)
//	ids                id -> its creation time (8 bytes, big-endian)
//
// listed backwards from the token's key like "jobs".
//
// Jobs are archived roughly in the order they were created, so the
// time-keyed buckets mostly grow at their end; they are written with a
// high fill percent, which keeps their pages nearly full instead of half
// (bbolt's default suits random keys).
type Bolt struct {
	db   *bolt.DB
	path string
}

var _ Store = (*Bolt)(nil)

// Names of the buckets.
var (
	bMeta     = []byte("meta")
	bClusters = []byte("clusters")
	bJobs     = []byte("jobs")
	bIDs      = []byte("ids")
	bPools    = []byte("pools")
	bStates   = []byte("states")
	kFormat   = []byte("format")

	bFederations = []byte("federations")
	bObjs        = []byte("objs")
)

// boltFormat is the layout above; a file of another is refused rather
// than misread.
const boltFormat = "1"

// timeFill is the fill percent of the time-keyed buckets: pages split when
// this full, and keys that come in order leave them so.
const timeFill = 0.9

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
		PageSize:     boltPageSize,
	})
	if errors.Is(err, bolterrors.ErrTimeout) {
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
		if _, err := tx.CreateBucketIfNotExists(bClusters); err != nil {
			return err
		}
		// Added beside the clusters in the same layout: a Peloton that
		// does not know it leaves it alone.
		_, err = tx.CreateBucketIfNotExists(bFederations)
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

// timeKey is a job's key in the time-ordered buckets. Job ids hold no NUL
// (Put checks), so no inverted byte is 0xff and the terminator sorts a
// shorter id after a longer one it begins: backwards, "ab" before "abc".
func timeKey(createNanos int64, id string) []byte {
	k := make([]byte, 8, 8+len(id)+1)
	binary.BigEndian.PutUint64(k, timeOrder(createNanos))
	for i := 0; i < len(id); i++ {
		k = append(k, ^id[i])
	}
	return append(k, 0xff)
}

// timeOrder makes int64 order unsigned order: the sign bit flipped.
func timeOrder(ns int64) uint64 { return uint64(ns) ^ 1<<63 }

func keyNanos(k []byte) int64 { return int64(binary.BigEndian.Uint64(k) ^ 1<<63) }

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
	jobs, ids, pools, states *bolt.Bucket
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
	}{{bJobs, &cb.jobs}, {bIDs, &cb.ids}, {bPools, &cb.pools}, {bStates, &cb.states}} {
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
	cb.jobs.FillPercent = timeFill
	return cb, nil
}

// remove removes a job and its index entries.
func (cb *clusterBuckets) remove(id string, w where) error {
	k := timeKey(w.createNanos, id)
	if err := cb.jobs.Delete(k); err != nil {
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

// jobValue is what "jobs" holds of a job: the summary, then the record,
// each after its length.
func jobValue(summary, record []byte) []byte {
	v := make([]byte, 0, 2*binary.MaxVarintLen64+len(summary)+len(record))
	v = binary.AppendUvarint(v, uint64(len(summary)))
	v = append(v, summary...)
	v = binary.AppendUvarint(v, uint64(len(record)))
	return append(v, record...)
}

// splitJobValue returns the summary and the record of a value of "jobs"
// (slices of v).
func splitJobValue(v []byte) (summary, record []byte, err error) {
	n, l := binary.Uvarint(v)
	if l <= 0 || n > uint64(len(v)-l) {
		return nil, nil, errors.New("bad job entry")
	}
	summary, v = v[l:l+int(n)], v[l+int(n):]
	n, l = binary.Uvarint(v)
	if l <= 0 || n != uint64(len(v)-l) {
		return nil, nil, errors.New("bad job entry")
	}
	return summary, v[l:], nil
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
	if len(jobs) == 0 {
		return nil
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
				if err := cb.remove(e.id, w); err != nil {
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
			pools.FillPercent, states.FillPercent = timeFill, timeFill
			for _, p := range []struct {
				b    *bolt.Bucket
				k, v []byte
			}{{cb.jobs, k, jobValue(e.summary, e.record)}, {cb.ids, id, e.where.bytes()}, {pools, k, nil}, {states, k, nil}} {
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
	case errors.Is(err, bolterrors.ErrDatabaseNotOpen):
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
		w := cb.ids.Get([]byte(jobID))
		if w == nil {
			return nil
		}
		at, err := parseWhere(w)
		if err != nil {
			return fmt.Errorf("job %s: %w", jobID, err)
		}
		v := cb.jobs.Get(timeKey(at.createNanos, jobID))
		if v == nil {
			return fmt.Errorf("job %s is indexed but not stored", jobID)
		}
		_, r, err := splitJobValue(v)
		if err != nil {
			return fmt.Errorf("job %s: %w", jobID, err)
		}
		// Copied out, so that the transaction (which holds off a writer
		// growing the file) ends before the record is decoded.
		rec = bytes.Clone(r)
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
		return cb.remove(jobID, w)
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
		// The walk starts below a bound: the token's key (the page after
		// it) or CreatedUntil (jobs created before it), the lower of the
		// two.
		var below []byte
		if !f.CreatedUntil.IsZero() {
			u := timeNanos(f.CreatedUntil)
			if u == math.MinInt64 {
				return nil // nothing is created before the earliest time
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
			walk = append(walk, cb.jobs)
		}
		it := newBackIter(walk, below)
		bytesOut := 0
		for k := it.next(); k != nil; k = it.next() {
			if keyNanos(k) < since {
				break
			}
			v := cb.jobs.Get(k)
			if v == nil {
				return fmt.Errorf("index entry %x has no job", k)
			}
			sum, _, err := splitJobValue(v)
			if err != nil {
				return fmt.Errorf("entry %x: %w", k, err)
			}
			j := &pelotonv1.Job{}
			if err := proto.Unmarshal(sum, j); err != nil {
				return fmt.Errorf("summary of entry %x: %w", k, err)
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

// backIter walks the keys of several buckets backwards (newest first),
// merged, from below a bound: a list by several states reads each state's
// index once.
type backIter struct {
	cs   []*bolt.Cursor
	keys [][]byte
}

// newBackIter positions each bucket's cursor on its last key below
// below (its last key when below is nil).
func newBackIter(bs []*bolt.Bucket, below []byte) *backIter {
	it := &backIter{}
	for _, b := range bs {
		c := b.Cursor()
		var k []byte
		switch {
		case below == nil:
			k, _ = c.Last()
		default:
			if k, _ = c.Seek(below); k == nil {
				k, _ = c.Last()
			} else {
				k, _ = c.Prev()
			}
		}
		it.cs = append(it.cs, c)
		it.keys = append(it.keys, k)
	}
	return it
}

// next returns the greatest key left, nil at the end.
func (it *backIter) next() []byte {
	best := -1
	for i, k := range it.keys {
		if k != nil && (best < 0 || bytes.Compare(k, it.keys[best]) > 0) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	k := it.keys[best]
	it.keys[best], _ = it.cs[best].Prev()
	return k
}

// boltPageSize is the page size of a new file (an existing file keeps
// its own). A job's entry is a kilobyte or more (10 instances: about
// 1.1 KB), so a 4 KiB page holds three and wastes the rest, and bbolt
// never splits a node of four entries or fewer, which then spills onto a
// second page. With 16 KiB pages an archive of 50,000 such jobs took
// 83 MB instead of 103 MB (BenchmarkArchivedGet's archive).
const boltPageSize = 16 << 10
