package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/peloton-sched/peloton/history"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// ArchiveOff is the --archive value that keeps no archive: finished jobs
// stay in the live store until `job delete`.
const ArchiveOff = "off"

// ArchiveFile is the embedded archive's file in the data dir.
const ArchiveFile = "history.db"

// ValidateArchive checks an --archive value: empty (the embedded archive,
// a file in the data dir), "off", or a PostgreSQL URL.
func ValidateArchive(a string) error {
	switch {
	case a == "", a == ArchiveOff, isPostgresURL(a):
		return nil
	}
	return fmt.Errorf(`want nothing (a file in --data-dir), %q, or a PostgreSQL URL (postgres://user:password@host:port/database)`, ArchiveOff)
}

func isPostgresURL(a string) bool {
	return strings.HasPrefix(a, "postgres://") || strings.HasPrefix(a, "postgresql://")
}

// OpenArchive opens the archive of finished jobs that --archive names
// (nil for "off"). A PostgreSQL archive that cannot be reached yet does
// not keep the stack from starting: it is connected to in the background,
// and until then its calls fail as unavailable (the collector waits and
// retries, and removes nothing).
func OpenArchive(ctx context.Context, archive, dataDir string, log *slog.Logger) (history.Store, error) {
	switch {
	case archive == ArchiveOff:
		return nil, nil
	case isPostgresURL(archive):
		l := &lazyArchive{log: log}
		actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		l.cancel = cancel
		p, err := history.OpenPostgres(ctx, archive)
		if err == nil {
			l.set(p)
			return l, nil
		}
		if !isUnavailable(err) {
			cancel()
			return nil, fmt.Errorf("--archive: %w", err)
		}
		log.Warn("the archive (PostgreSQL) cannot be reached yet; finished jobs stay in the live store until it can", "err", err)
		go l.connect(actx, archive)
		return l, nil
	case archive == "":
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return nil, fmt.Errorf("--data-dir: %w", err)
		}
		b, err := history.OpenBolt(filepath.Join(dataDir, ArchiveFile))
		if err != nil {
			return nil, fmt.Errorf("open the archive in --data-dir: %w", err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("--archive: %w", ValidateArchive(archive))
}

func isUnavailable(err error) bool { return errors.Is(err, history.ErrUnavailable) }

// lazyArchive is a PostgreSQL archive that connects in the background.
type lazyArchive struct {
	log    *slog.Logger
	mu     sync.Mutex
	store  history.Store
	cancel context.CancelFunc
	closed bool
}

func (l *lazyArchive) set(s history.Store) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		s.Close()
		return
	}
	l.store = s
}

// connect tries to open the archive until it can, or ctx ends.
func (l *lazyArchive) connect(ctx context.Context, url string) {
	wait := time.Second
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		p, err := history.OpenPostgres(ctx, url)
		if err == nil {
			l.log.Info("the archive (PostgreSQL) answers")
			l.set(p)
			return
		}
		wait = min(wait*2, 30*time.Second)
	}
}

func (l *lazyArchive) get(op string) (history.Store, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, history.ErrClosed
	}
	if l.store == nil {
		return nil, &history.UnavailableError{Op: op, Err: fmt.Errorf("not connected yet")}
	}
	return l.store, nil
}

func (l *lazyArchive) Put(ctx context.Context, jobs ...*history.Job) error {
	s, err := l.get("put")
	if err != nil {
		return err
	}
	return s.Put(ctx, jobs...)
}

func (l *lazyArchive) Get(ctx context.Context, cluster, id string) (*history.Job, error) {
	s, err := l.get("get job " + id)
	if err != nil {
		return nil, err
	}
	return s.Get(ctx, cluster, id)
}

func (l *lazyArchive) List(ctx context.Context, f history.Filter, size uint32, token string) ([]*pelotonv1.Job, string, error) {
	s, err := l.get("list")
	if err != nil {
		return nil, "", err
	}
	return s.List(ctx, f, size, token)
}

func (l *lazyArchive) Delete(ctx context.Context, cluster, id string) error {
	s, err := l.get("delete job " + id)
	if err != nil {
		return err
	}
	return s.Delete(ctx, cluster, id)
}

func (l *lazyArchive) Close() error {
	l.cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if l.store != nil {
		return l.store.Close()
	}
	return nil
}

func (l *lazyArchive) PutFederated(ctx context.Context, objs ...*history.Federated) error {
	s, err := l.get("put")
	if err != nil {
		return err
	}
	return s.PutFederated(ctx, objs...)
}

func (l *lazyArchive) GetFederated(ctx context.Context, federation string, kind history.Kind, id string) (*history.Federated, error) {
	s, err := l.get("get " + id)
	if err != nil {
		return nil, err
	}
	return s.GetFederated(ctx, federation, kind, id)
}

func (l *lazyArchive) ListFederated(ctx context.Context, f history.FederatedFilter, size uint32, token string) ([]*history.Federated, string, error) {
	s, err := l.get("list")
	if err != nil {
		return nil, "", err
	}
	return s.ListFederated(ctx, f, size, token)
}

func (l *lazyArchive) DeleteFederated(ctx context.Context, federation string, kind history.Kind, id string) error {
	s, err := l.get("delete " + id)
	if err != nil {
		return err
	}
	return s.DeleteFederated(ctx, federation, kind, id)
}
