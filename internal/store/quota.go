package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The store must never fill silently. etcd refuses every write, deletes
// included, once its database file reaches --quota-backend-bytes: it raises
// the NOSPACE alarm and stays read-only until an operator compacts,
// defragments and disarms it. A scheduler that reaches that point cannot
// even cancel the work that filled it. So the QuotaGuard reads the size of
// the database every few seconds and:
//   - publishes it (QuotaUse, for the peloton_store_* metrics and the alert
//     at WarnFraction of the quota);
//   - above RefuseFraction of the quota, makes Check refuse new creates,
//     while cancels, kills and deletes go on in the headroom that is left;
//   - on an embedded etcd, which nobody else looks after: compacts to the
//     current revision while creates are refused (old revisions are what
//     fill a store whose live data fits; watchers that resume from an older
//     revision re-list, which they must handle anyway), defragments when
//     more than half of the file is free (etcd never gives freed pages back
//     to the file system by itself), and disarms a NOSPACE alarm once the
//     database is back under the quota. An external etcd cluster is its
//     operator's: the guard only reads it and refuses.

// Thresholds of the guard, as fractions of the quota.
const (
	// WarnFraction is where the alert rule PelotonStoreNearlyFull fires.
	WarnFraction = 0.80
	// RefuseFraction is where new creates are refused.
	RefuseFraction = 0.95
)

// DefaultEtcdQuotaBytes is etcd's own default --quota-backend-bytes, which
// the guard assumes of an external etcd unless told otherwise.
const DefaultEtcdQuotaBytes = 2 << 30

// minDefragBytes: a database smaller than this is not worth a defrag (it
// blocks the member for its duration).
const minDefragBytes = 1 << 20

// QuotaUse is one reading of the store's size.
type QuotaUse struct {
	// DBBytes is the size of the database file, which is what etcd
	// compares with its quota (the largest of the members').
	DBBytes int64
	// InUseBytes is the part of it that holds data; the rest is free pages
	// a defrag would give back.
	InUseBytes int64
	// QuotaBytes is etcd's --quota-backend-bytes.
	QuotaBytes int64
	// NoSpace: etcd has raised its NOSPACE alarm and refuses every write.
	NoSpace bool
	// Revision is the store's revision at the reading.
	Revision int64
	// At is when it was read.
	At time.Time
}

// Fraction is how full the store is, against its quota.
func (u QuotaUse) Fraction() float64 {
	if u.QuotaBytes <= 0 {
		return 0
	}
	return float64(u.DBBytes) / float64(u.QuotaBytes)
}

// quotaPlan is what the guard does after a reading.
type quotaPlan struct {
	refuse  bool // creates are refused
	compact bool // compact to the current revision (embedded only)
	defrag  bool // defragment (embedded only)
	disarm  bool // disarm NOSPACE (embedded only)
}

// disarmBelow is the fraction of the quota under which a raised NOSPACE
// is disarmed. Not RefuseFraction: the store must take cancels, kills and
// deletes again as soon as they fit, or the way out stays shut. etcd
// raises the alarm again on the first write that does not fit.
const disarmBelow = 0.99

// planQuota is the guard's decision for one reading: a pure function of
// it and of the revision the guard last compacted to, so that every
// threshold is tested without an etcd that is full.
//
// A compaction can itself grow the database file past the quota (the
// pages it frees cannot be reused while older read transactions hold
// them, so its writes go to new pages at the end), which raises NOSPACE
// at the next write. So whenever creates are refused, a defragmentation
// follows the compaction as soon as a tenth of the file is free, and a
// NOSPACE is disarmed as soon as the file fits again.
func planQuota(u QuotaUse, embedded bool, compactedTo int64) quotaPlan {
	p := quotaPlan{refuse: u.NoSpace || u.Fraction() >= RefuseFraction}
	if !embedded {
		return p
	}
	free := u.DBBytes - u.InUseBytes
	p.compact = p.refuse && u.Revision > compactedTo
	p.defrag = u.DBBytes >= minDefragBytes && (free > u.DBBytes/2 || p.refuse && free >= u.DBBytes/10)
	p.disarm = u.NoSpace && u.Fraction() < disarmBelow
	return p
}

// ErrQuotaExceeded is what Check returns (wrapped in a *QuotaError) while
// new creates are refused.
var ErrQuotaExceeded = errors.New("store: nearly full")

// QuotaError says how full the store is and what to do about it.
type QuotaError struct {
	Use QuotaUse
	// Flag names the setting that holds the quota.
	Flag string
}

func (e *QuotaError) Error() string {
	what := fmt.Sprintf("the store (etcd) is %.0f%% full: %s of its %s quota (%s)",
		100*e.Use.Fraction(), bytesText(e.Use.DBBytes), bytesText(e.Use.QuotaBytes), e.Flag)
	if e.Use.NoSpace {
		what = fmt.Sprintf("the store (etcd) is out of space (NOSPACE alarm): %s of its %s quota (%s)",
			bytesText(e.Use.DBBytes), bytesText(e.Use.QuotaBytes), e.Flag)
	}
	return what + "; new creates are refused until finished jobs are deleted or archived (cancels, kills and deletes still work), or the quota is raised"
}

// Unwrap makes errors.Is(err, ErrQuotaExceeded) true.
func (e *QuotaError) Unwrap() error { return ErrQuotaExceeded }

func bytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%d KiB", n>>10)
	}
}

// QuotaGuardOptions configures a QuotaGuard.
type QuotaGuardOptions struct {
	// QuotaBytes is the etcd quota (default DefaultEtcdQuotaBytes).
	QuotaBytes int64
	// Flag names the setting users change the quota with, for messages.
	Flag string
	// Embedded: the etcd is this process's own, which the guard may
	// compact, defragment and disarm.
	Embedded bool
	// Defragment, if set, defragments the etcd instead of the client's
	// Defragment call, for clients that cannot make it (the embedded
	// etcd's in-process client: Embedded.Defragment).
	Defragment func(context.Context) error
	// Interval between readings (default 10s).
	Interval time.Duration
	// CompactLag, with Embedded, keeps the store compacted to the revision
	// it had CompactLag ago, at every reading: the revisions etcd keeps
	// beyond live data are then those of the last CompactLag plus an
	// Interval, whatever the write rate, rather than everything written
	// between two runs of etcd's own compactor (every 5 minutes), which
	// grows the file, the memory and the start of a busy store. A watcher
	// that falls further behind than that gets ErrCompacted and lists
	// again. 0: only etcd's compactor.
	CompactLag time.Duration
	// OnUse, if set, gets every reading (for metrics).
	OnUse func(QuotaUse)
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// QuotaGuard watches the size of an etcd against its quota (see above).
type QuotaGuard struct {
	cli  *clientv3.Client
	opts QuotaGuardOptions
	log  *slog.Logger
	// last is the latest reading; nil before the first.
	last atomic.Pointer[QuotaUse]
	// compactedTo is the revision of the guard's last compaction (Step
	// only: one goroutine).
	compactedTo int64
	// seen are the revisions of the readings of the last CompactLag, oldest
	// first (Step only).
	seen []seenRevision
}

// seenRevision is the store's revision at a reading.
type seenRevision struct {
	at  time.Time
	rev int64
}

// NewQuotaGuard makes a guard over cli. Run does the watching.
func NewQuotaGuard(cli *clientv3.Client, opts QuotaGuardOptions) *QuotaGuard {
	if opts.QuotaBytes <= 0 {
		opts.QuotaBytes = DefaultEtcdQuotaBytes
	}
	if opts.Interval <= 0 {
		opts.Interval = 10 * time.Second
	}
	if opts.Flag == "" {
		opts.Flag = "--etcd-quota-bytes"
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &QuotaGuard{cli: cli, opts: opts, log: log.With("component", "store-quota")}
}

// Check returns a *QuotaError while new creates are refused, else nil. It
// reads the latest reading only: it never waits on etcd.
func (g *QuotaGuard) Check() error {
	u := g.last.Load()
	if u == nil || !planQuota(*u, g.opts.Embedded, 0).refuse {
		return nil
	}
	return &QuotaError{Use: *u, Flag: g.opts.Flag}
}

// Use is the latest reading, and false before the first.
func (g *QuotaGuard) Use() (QuotaUse, bool) {
	u := g.last.Load()
	if u == nil {
		return QuotaUse{}, false
	}
	return *u, true
}

// Run reads and acts every Interval until ctx ends. A reading that fails
// (etcd unreachable) keeps the previous one: Check neither starts nor
// stops refusing on no news.
func (g *QuotaGuard) Run(ctx context.Context) {
	t := time.NewTicker(g.opts.Interval)
	defer t.Stop()
	for {
		g.Step(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Step takes one reading and does what it calls for; Run calls it every
// Interval, tests call it directly.
func (g *QuotaGuard) Step(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, max(g.opts.Interval, 5*time.Second))
	defer cancel()
	u, err := g.read(ctx)
	if err != nil {
		if ctx.Err() == nil {
			g.log.Debug("could not read the store's size", "err", err)
		}
		return
	}
	prev := g.last.Load()
	g.publish(u)
	if g.opts.Embedded {
		g.trail(ctx, u, time.Now())
		u = g.repair(ctx, u)
	}
	refusing := planQuota(u, false, 0).refuse
	if was := prev != nil && planQuota(*prev, false, 0).refuse; refusing != was {
		if refusing {
			g.log.Error("the store is nearly full: new creates are refused", "err", (&QuotaError{Use: u, Flag: g.opts.Flag}).Error())
		} else {
			g.log.Info("the store has room again: creates are accepted", "db", bytesText(u.DBBytes), "quota", bytesText(u.QuotaBytes))
		}
	}
}

// publish makes u the latest reading.
func (g *QuotaGuard) publish(u QuotaUse) {
	g.last.Store(&u)
	if g.opts.OnUse != nil {
		g.opts.OnUse(u)
	}
}

// repair compacts, defragments and disarms an embedded etcd as planQuota
// says, one step after the other on fresh readings, and returns the last
// reading (published).
func (g *QuotaGuard) repair(ctx context.Context, u QuotaUse) QuotaUse {
	reread := func() {
		if u2, err := g.read(ctx); err == nil {
			u = u2
			g.publish(u)
		}
	}
	if planQuota(u, true, g.compactedTo).compact {
		if _, err := g.cli.Compact(ctx, u.Revision, clientv3.WithCompactPhysical()); err != nil && !isCompacted(err) {
			g.log.Warn("could not compact the nearly full store", "err", err)
		} else {
			g.compactedTo = u.Revision
			g.log.Warn("compacted the nearly full store to its current revision", "revision", u.Revision)
		}
		reread()
	}
	if planQuota(u, true, g.compactedTo).defrag {
		start, before := time.Now(), u.DBBytes
		g.defragment(ctx)
		reread()
		g.log.Info("defragmented the store", "before", bytesText(before), "after", bytesText(u.DBBytes), "took", time.Since(start))
	}
	if planQuota(u, true, g.compactedTo).disarm {
		g.disarm(ctx)
		reread()
	}
	return u
}

// trail compacts the store to the newest revision read at least
// CompactLag before now (see QuotaGuardOptions.CompactLag).
func (g *QuotaGuard) trail(ctx context.Context, u QuotaUse, now time.Time) {
	if g.opts.CompactLag <= 0 {
		return
	}
	g.seen = append(g.seen, seenRevision{now, u.Revision})
	var to int64
	for len(g.seen) > 0 && now.Sub(g.seen[0].at) >= g.opts.CompactLag {
		to = g.seen[0].rev
		g.seen = g.seen[1:]
	}
	if to <= g.compactedTo {
		return
	}
	if _, err := g.cli.Compact(ctx, to); err != nil && !isCompacted(err) {
		g.log.Debug("could not compact the store to its revision of CompactLag ago", "revision", to, "lag", g.opts.CompactLag, "err", err)
		return
	}
	g.compactedTo = to
}

// isCompacted reports whether err says that the revision was compacted
// already (by auto-compaction meanwhile): nothing to do then. The
// in-process client returns the server's own error, not the gRPC one.
func isCompacted(err error) bool {
	return errors.Is(err, rpctypes.ErrCompacted) || strings.Contains(err.Error(), "required revision has been compacted")
}

// read takes one reading: the largest database of the members, and
// whether NOSPACE is raised.
func (g *QuotaGuard) read(ctx context.Context) (QuotaUse, error) {
	u := QuotaUse{QuotaBytes: g.opts.QuotaBytes, At: time.Now()}
	var firstErr error
	read := 0
	for _, ep := range g.endpoints() {
		st, err := g.cli.Status(ctx, ep)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		read++
		if st.DbSize > u.DBBytes {
			u.DBBytes, u.InUseBytes = st.DbSize, st.DbSizeInUse
		}
		if st.Header != nil && st.Header.Revision > u.Revision {
			u.Revision = st.Header.Revision
		}
	}
	if read == 0 {
		if firstErr == nil {
			firstErr = errors.New("no endpoint")
		}
		return u, firstErr
	}
	alarms, err := g.cli.AlarmList(ctx)
	if err != nil {
		return u, err
	}
	for _, a := range alarms.Alarms {
		if a.Alarm == etcdserverpb.AlarmType_NOSPACE {
			u.NoSpace = true
		}
	}
	return u, nil
}

// defragment defragments every member.
func (g *QuotaGuard) defragment(ctx context.Context) {
	if f := g.opts.Defragment; f != nil {
		if err := f(ctx); err != nil {
			g.log.Warn("could not defragment the store", "err", err)
		}
		return
	}
	for _, ep := range g.endpoints() {
		if _, err := g.cli.Defragment(ctx, ep); err != nil {
			g.log.Warn("could not defragment the store", "endpoint", ep, "err", err)
		}
	}
}

// endpoints are the members to read and defragment. An in-process client
// (the embedded etcd's) has no endpoints and one member, which it reaches
// whatever endpoint it is given.
func (g *QuotaGuard) endpoints() []string {
	if eps := g.cli.Endpoints(); len(eps) > 0 {
		return eps
	}
	return []string{""}
}

// disarm disarms the NOSPACE alarm of every member that has it.
func (g *QuotaGuard) disarm(ctx context.Context) {
	alarms, err := g.cli.AlarmList(ctx)
	if err != nil {
		return
	}
	for _, a := range alarms.Alarms {
		if a.Alarm != etcdserverpb.AlarmType_NOSPACE {
			continue
		}
		if _, err := g.cli.AlarmDisarm(ctx, (*clientv3.AlarmMember)(a)); err != nil {
			g.log.Warn("could not disarm the store's NOSPACE alarm", "member", a.MemberID, "err", err)
			continue
		}
		g.log.Info("disarmed the store's NOSPACE alarm: it has room again", "member", a.MemberID)
	}
}
