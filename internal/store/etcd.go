package store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Defaults for EtcdConfig. They are exported so that callers wiring flags can
// show the effective value in --help.
const (
	// DefaultPrefix keeps Peloton's keys apart from anything else sharing the
	// etcd cluster. A cluster stack opens its store further down, on
	// DefaultPrefix + "clusters/<name>/", so that several share one etcd.
	DefaultPrefix = "/peloton/"
	// DefaultDialTimeout bounds how long NewEtcd waits for a first answer.
	DefaultDialTimeout = 5 * time.Second
	// DefaultRequestTimeout bounds every single etcd round trip, so a stuck
	// member turns into an error instead of a hung scheduler loop.
	DefaultRequestTimeout = 10 * time.Second
	// DefaultMaxTxnOps is etcd's own server default for --max-txn-ops; a
	// store talking to a cluster it did not configure must assume it.
	DefaultMaxTxnOps = 128
)

// listPageSize is how many keys one List round trip reads. Big enough that a
// listing of all tasks takes few round trips, small enough that one page never
// approaches gRPC message limits or stalls the etcd apply loop.
const listPageSize = 1000

// listAttempts is how often List restarts from scratch when etcd compacted
// the revision it was paging at (only possible for listings slower than the
// compaction interval).
const listAttempts = 3

// EtcdConfig says how to reach an external etcd cluster. Zero values take the
// defaults above.
type EtcdConfig struct {
	// Endpoints are etcd client URLs, e.g. "http://10.0.0.1:2379".
	Endpoints []string
	// Prefix is prepended to every key (default DefaultPrefix). A missing
	// trailing "/" is added so "/peloton" and "/peloton2" cannot overlap.
	Prefix string
	// DialTimeout bounds NewEtcd's first round trip (default 5s).
	DialTimeout time.Duration
	// RequestTimeout bounds each etcd round trip (default 10s). List applies
	// it per page; pass a ctx deadline for an overall bound.
	RequestTimeout time.Duration
	// MaxTxnOps must not exceed the server's --max-txn-ops (default 128).
	MaxTxnOps int
	// Logger receives the etcd client's warnings and errors; nil discards
	// them (the store's own errors are returned, not logged).
	Logger *slog.Logger
	// Fence, if set, makes every Txn of this store conditional on a leader
	// key: a process that lost its leadership cannot write.
	Fence *Fence
	// TLS, if set, is the client's TLS configuration (the server's CA, the
	// client certificate): https:// endpoints are dialled with it.
	TLS *tls.Config
	// Client, if set, is the client to use instead of dialling Endpoints:
	// Embedded.InProcessClient's, which calls an etcd of this process
	// directly. The store owns it: Close closes it.
	Client *clientv3.Client
}

// Fence ties a store's writes to one term of leadership. Every Txn also
// compares Key's create revision with Revision in the same atomic step, so
// once the leader key is gone (its lease expired or was revoked) or was
// created again by someone else, the write is refused with ErrFenced and
// nothing is written. Reads are not fenced: they change nothing.
type Fence struct {
	// Key is the leader key, absolute (not under the store's prefix).
	Key string
	// Revision is the key's create revision when the leadership was won.
	Revision int64
}

// Etcd is the Store on an etcd cluster, external or embedded.
type Etcd struct {
	cli       *clientv3.Client
	ownsCli   bool
	prefix    string
	timeout   time.Duration
	maxTxnOps int
	pageSize  int // listPageSize; tests lower it
	fence     *Fence

	closeOnce sync.Once
	closeErr  error
}

var _ Store = (*Etcd)(nil)

// NewEtcd dials the cluster and checks it answers a linearizable read within
// DialTimeout, so a wrong endpoint fails at start-up rather than at the first
// write. The returned store owns its client: Close closes it.
func NewEtcd(ctx context.Context, cfg EtcdConfig) (*Etcd, error) {
	if len(cfg.Endpoints) == 0 && cfg.Client == nil {
		return nil, errors.New("store: etcd: endpoints: must not be empty")
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	cli := cfg.Client
	if cli == nil {
		lg := zap.NewNop()
		if cfg.Logger != nil {
			lg = zap.New(newSlogCore(cfg.Logger.Handler(), zapcore.WarnLevel)).With(zap.String("component", "etcd-client"))
		}
		var err error
		cli, err = clientv3.New(clientv3.Config{
			Endpoints:   cfg.Endpoints,
			DialTimeout: cfg.DialTimeout,
			Logger:      lg,
			TLS:         cfg.TLS,
		})
		if err != nil {
			return nil, fmt.Errorf("store: etcd: connect %v: %w", cfg.Endpoints, err)
		}
	}
	s := newEtcd(cli, cfg.Prefix, cfg.MaxTxnOps, cfg.RequestTimeout)
	s.ownsCli = true
	if cfg.Fence != nil {
		f := *cfg.Fence
		s.fence = &f
	}

	probeCtx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	if _, err := cli.Get(probeCtx, s.prefix, clientv3.WithCountOnly()); err != nil {
		_ = cli.Close()
		err = fmt.Errorf("store: etcd: no answer from %v within %v: %w", cfg.Endpoints, cfg.DialTimeout, err)
		if cfg.TLS != nil {
			if why := DiagnoseTLS(ctx, cfg.Endpoints, cfg.TLS); why != "" {
				err = fmt.Errorf("%w; %s", err, why)
			}
		}
		return nil, err
	}
	return s, nil
}

// diagnoseWait bounds each step of DiagnoseTLS's handshake with one
// endpoint.
const diagnoseWait = 2 * time.Second

// DiagnoseTLS says why TLS with the endpoints fails, or "" when it does
// not (or they are not https). The etcd client only reports that no answer
// came in time; a failed handshake (a server certificate the CA did not
// sign, a client certificate the server refuses or that is missing) is
// what an operator needs to read instead. It makes one TLS connection to
// each https endpoint, as the client would: the server name is the
// endpoint's host unless cfg names one. With TLS 1.3 a server refuses the
// client's certificate only after the handshake, so it also waits a moment
// for that refusal.
func DiagnoseTLS(ctx context.Context, endpoints []string, cfg *tls.Config) string {
	var why []string
	for _, ep := range endpoints {
		u, err := url.Parse(ep)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			continue
		}
		if err := tryTLS(ctx, u.Host, cfg); err != nil {
			why = append(why, fmt.Sprintf("TLS with %s: %v", u.Host, err))
		}
	}
	return strings.Join(why, "; ")
}

func tryTLS(ctx context.Context, addr string, cfg *tls.Config) error {
	ctx, cancel := context.WithTimeout(ctx, diagnoseWait)
	defer cancel()
	raw, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer raw.Close()
	c := cfg.Clone()
	if c.ServerName == "" {
		c.ServerName, _, _ = net.SplitHostPort(addr)
	}
	c.NextProtos = []string{"h2"}
	conn := tls.Client(raw, c)
	if err := conn.HandshakeContext(ctx); err != nil {
		return err
	}
	// The server speaks only after the client has (gRPC's preface): a
	// read that times out means it took the client's certificate.
	_ = conn.SetReadDeadline(time.Now().Add(diagnoseWait / 4))
	var b [1]byte
	_, err = conn.Read(b[:])
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		return nil
	}
	return err
}

// NewEtcdFromClient wraps a client the caller already has (e.g. one shared
// with leader election). The caller keeps ownership: Close does not close cli.
// An empty prefix means DefaultPrefix; maxTxnOps <= 0 means DefaultMaxTxnOps.
func NewEtcdFromClient(cli *clientv3.Client, prefix string, maxTxnOps int) *Etcd {
	return newEtcd(cli, prefix, maxTxnOps, 0)
}

func newEtcd(cli *clientv3.Client, prefix string, maxTxnOps int, timeout time.Duration) *Etcd {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	if maxTxnOps <= 0 {
		maxTxnOps = DefaultMaxTxnOps
	}
	if timeout <= 0 {
		timeout = DefaultRequestTimeout
	}
	return &Etcd{cli: cli, prefix: prefix, timeout: timeout, maxTxnOps: maxTxnOps, pageSize: listPageSize}
}

// Client exposes the raw etcd client for what the Store interface does not
// cover on purpose: leases, elections and watches.
func (s *Etcd) Client() *clientv3.Client { return s.cli }

// Prefix is the absolute key prefix, for code that uses Client() directly and
// must stay inside the store's key space (e.g. watches).
func (s *Etcd) Prefix() string { return s.prefix }

// MaxTxnOps implements Store.
func (s *Etcd) MaxTxnOps() int { return s.maxTxnOps }

// Close implements Store. It closes the client only if NewEtcd created it;
// calling it again is a no-op.
func (s *Etcd) Close() error {
	s.closeOnce.Do(func() {
		if s.ownsCli {
			if err := s.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
				s.closeErr = fmt.Errorf("store: close: %w", err)
			}
		}
	})
	return s.closeErr
}

// Get implements Store. The read is linearizable: it sees every write that
// completed before it started, which CAS callers rely on.
func (s *Etcd) Get(ctx context.Context, key string) (KV, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.prefix+key)
	if err != nil {
		return KV{}, fmt.Errorf("store: get %q: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return KV{}, fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	kv := resp.Kvs[0]
	return KV{Key: key, Value: kv.Value, Revision: kv.ModRevision}, nil
}

// List implements Store. All pages are read at the revision of the first one,
// so the result is one consistent snapshot even while writers keep going: a
// caller rebuilding an in-memory cache from it never sees half a txn.
func (s *Etcd) List(ctx context.Context, prefix string) ([]KV, error) {
	var err error
	for range listAttempts {
		var kvs []KV
		kvs, err = s.list(ctx, prefix)
		if !errors.Is(err, rpctypes.ErrCompacted) {
			return kvs, err
		}
		// The snapshot revision was compacted between two pages; start over
		// at a fresh revision.
	}
	return nil, err
}

func (s *Etcd) list(ctx context.Context, prefix string) ([]KV, error) {
	start := s.prefix + prefix
	end := clientv3.GetPrefixRangeEnd(start)
	var (
		out []KV
		rev int64 // 0 on the first page: read at the latest revision
	)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(s.pageSize))}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		pctx, cancel := context.WithTimeout(ctx, s.timeout)
		resp, err := s.cli.Get(pctx, start, opts...)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("store: list %q: %w", prefix, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
			out = make([]KV, 0, resp.Count)
		}
		for _, kv := range resp.Kvs {
			out = append(out, KV{
				Key:      strings.TrimPrefix(string(kv.Key), s.prefix),
				Value:    kv.Value,
				Revision: kv.ModRevision,
			})
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out, nil
		}
		// Next page starts just after the last key read.
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// Txn implements Store. On a failed compare the error is a *ConflictError
// naming the stale ops, read at the revision the failed txn saw (whyFailed),
// and nothing is written. A store with a Fence whose leader key is gone
// returns ErrFenced instead, whatever the ops' own compares found.
func (s *Etcd) Txn(ctx context.Context, ops ...Op) (int64, error) {
	if err := ValidateTxn(ops, s.maxTxnOps); err != nil {
		return 0, err
	}
	cmps := make([]clientv3.Cmp, 0, len(ops))
	thens := make([]clientv3.Op, 0, len(ops))
	for _, op := range ops {
		key := s.prefix + op.Key
		switch op.ExpectRevision {
		case AnyRevision:
		case MustNotExist:
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(key), "=", 0))
		default:
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", op.ExpectRevision))
		}
		switch op.Kind {
		case OpPut:
			thens = append(thens, clientv3.OpPut(key, string(op.Value)))
		case OpDelete:
			thens = append(thens, clientv3.OpDelete(key))
		}
	}
	if s.fence != nil {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.fence.Key), "=", s.fence.Revision))
	}

	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	// No Else branch: etcd would carry its reads through raft and the
	// apply of every txn, for the few that fail. A failed txn changes
	// nothing, so its revision is the one its compares saw: whyFailed
	// reads the keys there.
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(thens...).Commit()
	if err != nil {
		return 0, fmt.Errorf("store: txn: %w", err)
	}
	if resp.Succeeded {
		return resp.Header.Revision, nil
	}
	return 0, s.whyFailed(ctx, ops, resp.Header.Revision)
}

// whyFailed says why a txn of ops failed at revision rev: the fence
// (ErrFenced) or the ops whose expected revision the keys did not have
// then (a *ConflictError). It reads the keys at rev; if etcd compacted rev
// away meanwhile, at the current revision, where a key that conflicted
// still does (revisions only grow; one re-created since is reported
// conflicting with its new revision, as a retry would find it).
func (s *Etcd) whyFailed(ctx context.Context, ops []Op, rev int64) error {
	var idx []int
	var gets []clientv3.Op
	read := func(at int64) (*clientv3.TxnResponse, error) {
		gets = gets[:0]
		for _, i := range idx {
			gets = append(gets, clientv3.OpGet(s.prefix+ops[i].Key, clientv3.WithKeysOnly(), clientv3.WithRev(at)))
		}
		if s.fence != nil {
			gets = append(gets, clientv3.OpGet(s.fence.Key, clientv3.WithKeysOnly(), clientv3.WithRev(at)))
		}
		return s.cli.Txn(ctx).Then(gets...).Commit()
	}
	for i, op := range ops {
		if op.ExpectRevision != AnyRevision {
			idx = append(idx, i)
		}
	}
	resp, err := read(rev)
	if errors.Is(err, rpctypes.ErrCompacted) {
		resp, err = read(0)
	}
	if err != nil {
		return fmt.Errorf("store: txn failed a compare at revision %d; reading why: %w", rev, err)
	}
	if s.fence != nil {
		var created int64
		if kvs := resp.Responses[len(resp.Responses)-1].GetResponseRange().GetKvs(); len(kvs) > 0 {
			created = kvs[0].CreateRevision
		}
		if created != s.fence.Revision {
			return fmt.Errorf("%w (leader key %s: created at revision %d, now %d)", ErrFenced, s.fence.Key, s.fence.Revision, created)
		}
	}
	ce := &ConflictError{}
	for j, r := range resp.Responses[:len(idx)] {
		op := ops[idx[j]]
		var actual int64
		if kvs := r.GetResponseRange().GetKvs(); len(kvs) > 0 {
			actual = kvs[0].ModRevision
		}
		if (op.ExpectRevision == MustNotExist && actual != 0) ||
			(op.ExpectRevision > 0 && actual != op.ExpectRevision) {
			ce.Conflicts = append(ce.Conflicts, Conflict{
				Index: idx[j], Key: op.Key, Expected: op.ExpectRevision, Actual: actual,
			})
		}
	}
	if len(ce.Conflicts) == 0 {
		// Only after a compaction: the key that conflicted was deleted
		// since. The txn still failed; a retry may succeed.
		return fmt.Errorf("%w: a compare failed at revision %d; the keys no longer show which", ErrConflict, rev)
	}
	return ce
}

// watchRetryMin and watchRetryMax bound the wait before Watch watches
// again after its watch failed (etcd away, the client closing).
const (
	watchRetryMin = 100 * time.Millisecond
	watchRetryMax = 5 * time.Second
)

// Watch reports every change under prefix (relative to the store's
// prefix; "" is the whole store) from now on, as the etcd revision it
// happened at. It is a hint to read again, not a log: when the reader is
// slow only the latest revision waits for it (the channel holds one), and
// revisions etcd compacted away before they were seen are reported as the
// compaction's revision. A failed watch is watched again from the first
// revision not yet seen (after a capped backoff), so nothing is missed
// while etcd keeps its history. The channel closes when ctx ends.
func (s *Etcd) Watch(ctx context.Context, prefix string) <-chan int64 {
	return s.watchFrom(ctx, prefix, 0)
}

// watchFrom is Watch from revision next (0: from now).
func (s *Etcd) watchFrom(ctx context.Context, prefix string, next int64) <-chan int64 {
	out := make(chan int64, 1)
	send := func(rev int64) {
		// The only sender: after draining, the send cannot block.
		select {
		case out <- rev:
		default:
			select {
			case <-out:
			default:
			}
			out <- rev
		}
	}
	go func() {
		defer close(out)
		wait := watchRetryMin
		for ctx.Err() == nil {
			wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			opts := []clientv3.OpOption{clientv3.WithPrefix()}
			if next > 0 {
				opts = append(opts, clientv3.WithRev(next))
			}
			for resp := range s.cli.Watch(wctx, s.prefix+prefix, opts...) {
				if resp.CompactRevision > 0 {
					// What happened before it is gone: say something
					// changed and go on from the oldest revision kept.
					next = resp.CompactRevision
					send(resp.CompactRevision)
					break
				}
				if resp.Err() != nil || resp.Canceled {
					break
				}
				wait = watchRetryMin
				if len(resp.Events) > 0 {
					rev := resp.Events[len(resp.Events)-1].Kv.ModRevision
					next = rev + 1
					send(rev)
				}
			}
			cancel()
			if ctx.Err() != nil {
				return
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			wait = min(2*wait, watchRetryMax)
		}
	}()
	return out
}
