// Package election runs one candidate of a leader election in etcd: it
// campaigns on a key prefix the caller names, runs the caller's function
// for as long as it leads, and campaigns again when it loses the lease.
//
// It knows nothing of what the leader does. The cluster stack
// (cluster/leader.go) elects one leader per cluster on
// <cluster prefix>leader/cluster; another service (the federation) can elect
// its own on its own key with the same code. It must not import any other
// Peloton package.
//
// Every candidate campaigns through an etcd concurrency.Election on its own
// session (a lease of Config.Lease). The one whose key is oldest leads. A
// leader's Term names its key and that key's create revision, so the caller
// can fence its writes to the term (see store.Fence); the term's context
// ends the moment the session does.
//
// Handover: when Run's context ends, the leader's function returns and the
// lease is revoked, so the next candidate leads at once. A candidate that
// dies holds its key until its lease expires. A leader cut off from etcd
// sees its session end when the etcd client gives up on the lease (its TTL
// after the last renewal it saw); etcd may have handed the key over a little
// earlier, which is why a fence, not this notice, is what keeps two leaders
// from writing.
package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"k8s.io/apimachinery/pkg/util/wait"
)

// DefaultLease is the TTL of a candidate's lease when Config leaves it 0.
const DefaultLease = 15 * time.Second

const (
	// requestTimeout bounds each etcd call of the election itself (grant,
	// check, revoke, proclaim); campaigning waits as long as it must.
	requestTimeout = 5 * time.Second
	// observeRetry is the pause before watching the leader again after the
	// watch broke (etcd unreachable).
	observeRetry = time.Second
)

// ErrStoppedWhileLeading is what Run returns when the leader's function
// returned nil while this candidate still led and Run's context was alive:
// the caller's work ended on its own, which Run does not take as a reason
// to campaign again.
var ErrStoppedWhileLeading = errors.New("election: the leader's work stopped while leading")

// Config describes one candidate.
type Config struct {
	// Client reaches etcd; the caller keeps it and closes it after Run.
	Client *clientv3.Client
	// Key is the election's key prefix, absolute (e.g.
	// "/peloton/clusters/local/leader/cluster"). Candidates of one election
	// share it; different keys are independent elections.
	Key string
	// Lease is the TTL of the candidate's lease, rounded up to whole seconds
	// (0: DefaultLease): how long a leader that died holds the key.
	Lease time.Duration
	// Value gives the election value a candidate campaigns with, from its
	// id ("<hostname>/<lease id in hex>"); nil campaigns with the id.
	Value func(id string) string
	// OnLeader, if set, is called with the election value of the current
	// leader whenever this candidate, while it campaigns, sees it change.
	// It is not called for this candidate's own term.
	OnLeader func(value []byte)
	// BeforeCampaign, if set, is called before every campaign, including
	// before the pause that precedes a retry; an error ends Run with it.
	BeforeCampaign func() error
	// Logger; nil discards.
	Logger *slog.Logger
}

// Term is one term of leadership.
type Term struct {
	// ID identifies the candidate: "<hostname>/<lease id in hex>".
	ID string
	// Key is this candidate's own key under Config.Key; it exists exactly
	// as long as the term lasts.
	Key string
	// Revision is Key's create revision. Key and Revision together fence
	// writes to this term: a transaction that also compares Key's create
	// revision with Revision fails once the term is over.
	Revision int64
	// Lease ends when the session does: the term is over.
	Lease context.Context

	el *concurrency.Election
}

// Proclaim replaces the leader's election value, e.g. once it knows the
// addresses it serves on; candidates see it through OnLeader.
func (t *Term) Proclaim(ctx context.Context, value string) error {
	pctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return t.el.Proclaim(pctx, value)
}

// LeaseSeconds checks a lease and returns it in whole seconds, the unit of
// etcd leases (0 means DefaultLease).
func LeaseSeconds(d time.Duration) (int, error) {
	if d == 0 {
		d = DefaultLease
	}
	if d < time.Second {
		return 0, fmt.Errorf("leader lease %s: must be at least 1s", d)
	}
	if d > time.Hour {
		return 0, fmt.Errorf("leader lease %s: must be at most 1h", d)
	}
	return int(math.Ceil(d.Seconds())), nil
}

// candidate is the state of one Run; used only by Run's goroutine.
type candidate struct {
	cfg Config
	log *slog.Logger
	ttl int
}

// Run campaigns until ctx ends and calls lead each time this candidate
// leads, with a context that ends when ctx or the term does. When lead
// returns because the term ended (the lease was lost), Run campaigns again;
// when ctx ended, Run returns nil (or lead's error, unless it is
// context.Canceled); otherwise it returns lead's error, or
// ErrStoppedWhileLeading if there was none. The lease is revoked after lead
// returns, so the next candidate need not wait for its TTL.
func Run(ctx context.Context, cfg Config, lead func(ctx context.Context, t *Term) error) error {
	if cfg.Client == nil {
		return errors.New("election: Client must be set")
	}
	if cfg.Key == "" {
		return errors.New("election: Key must be set")
	}
	ttl, err := LeaseSeconds(cfg.Lease)
	if err != nil {
		return err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &candidate{cfg: cfg, log: log.With("election", cfg.Key), ttl: ttl}
	return c.run(ctx, lead)
}

func (c *candidate) run(ctx context.Context, lead func(context.Context, *Term) error) error {
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: math.MaxInt32, Cap: 10 * time.Second}
	retry := false
	for ctx.Err() == nil {
		if c.cfg.BeforeCampaign != nil {
			if err := c.cfg.BeforeCampaign(); err != nil {
				return err
			}
		}
		if retry {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff.Step()):
			}
		}
		retry = true
		sess, err := c.newSession(ctx)
		if err != nil {
			c.log.Warn("cannot open an etcd session to campaign; retrying", "err", err)
			continue
		}
		id := fmt.Sprintf("%s/%x", hostname(), sess.Lease())
		el, err := c.campaign(ctx, sess, id)
		if err != nil {
			c.endSession(sess)
			if ctx.Err() == nil {
				c.log.Warn("campaign ended without leading; campaigning again", "err", err)
			}
			continue
		}
		backoff.Duration = 500 * time.Millisecond
		err = c.lead(ctx, sess, el, id, lead)
		lost := sess.Ctx().Err() != nil
		c.endSession(sess)
		switch {
		case ctx.Err() != nil:
			// Stopped as asked; work cut short while starting says
			// "context canceled", which is no failure.
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		case lost:
			c.log.Warn("the leader's work stopped after the lease was lost; campaigning again", "err", err)
		case err != nil:
			return err
		default:
			return ErrStoppedWhileLeading
		}
	}
	return nil
}

// newSession grants a lease and keeps it alive until endSession. The grant
// is bounded; the keep-alive is not tied to ctx so that endSession can still
// revoke the lease after ctx ended.
func (c *candidate) newSession(ctx context.Context) (*concurrency.Session, error) {
	gctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	g, err := c.cfg.Client.Grant(gctx, int64(c.ttl))
	if err != nil {
		return nil, err
	}
	return concurrency.NewSession(c.cfg.Client, concurrency.WithLease(g.ID), concurrency.WithTTL(c.ttl),
		concurrency.WithContext(context.Background()))
}

// endSession stops the keep-alive and revokes the lease, which deletes this
// candidate's key: the next candidate need not wait for the TTL.
func (c *candidate) endSession(sess *concurrency.Session) {
	sess.Orphan()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	if _, err := c.cfg.Client.Revoke(ctx, sess.Lease()); err != nil {
		c.log.Debug("revoke the candidate's lease", "err", err)
	}
}

// campaign waits until this candidate leads, the session ends or ctx does.
// While it waits it reports the current leader through OnLeader.
func (c *candidate) campaign(ctx context.Context, sess *concurrency.Session, id string) (*concurrency.Election, error) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(sess.Ctx(), cancel)
	defer stop()
	value := id
	if c.cfg.Value != nil {
		value = c.cfg.Value(id)
	}
	var wg sync.WaitGroup
	if c.cfg.OnLeader != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.observe(cctx, concurrency.NewElection(sess, c.cfg.Key), value)
		}()
	}
	el := concurrency.NewElection(sess, c.cfg.Key)
	c.log.Info("campaigning for leadership", "id", id)
	err := el.Campaign(cctx, value)
	cancel()
	wg.Wait()
	if err != nil {
		if sess.Ctx().Err() != nil {
			return nil, fmt.Errorf("session lost while campaigning: %w", err)
		}
		return nil, err
	}
	// Campaign returns once every older key is gone, without checking that
	// ours is still there (its lease may have run out meanwhile).
	gctx, gcancel := context.WithTimeout(ctx, requestTimeout)
	defer gcancel()
	resp, err := c.cfg.Client.Get(gctx, el.Key())
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != el.Rev() {
		return nil, errors.New("our election key was gone when the campaign ended")
	}
	return el, nil
}

// observe reports every change of the leader's value until ctx ends,
// except own: the value this candidate campaigns with, which the watch may
// show just before Campaign returns (ids hold the lease id, so no other
// candidate has it).
func (c *candidate) observe(ctx context.Context, el *concurrency.Election, own string) {
	var last []byte
	for {
		for resp := range el.Observe(ctx) {
			if len(resp.Kvs) == 0 {
				continue
			}
			v := resp.Kvs[0].Value
			if string(v) == own || (last != nil && string(v) == string(last)) {
				continue
			}
			last = v
			c.cfg.OnLeader(v)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(observeRetry):
		}
	}
}

// lead runs the caller's function until ctx ends or the session does.
func (c *candidate) lead(ctx context.Context, sess *concurrency.Session, el *concurrency.Election, id string,
	f func(context.Context, *Term) error) error {
	leaderCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(sess.Ctx(), func() {
		c.log.Error("lost the leader lease; stopping the leader's work now", "id", id)
		cancel()
	})
	defer stop()
	c.log.Info("leading", "id", id, "key", el.Key(), "revision", el.Rev())
	return f(leaderCtx, &Term{ID: id, Key: el.Key(), Revision: el.Rev(), Lease: sess.Ctx(), el: el})
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return fmt.Sprintf("pid-%d", os.Getpid())
	}
	return h
}
