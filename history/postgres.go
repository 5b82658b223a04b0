package history

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
)

// Postgres is the archive in a PostgreSQL database: one database for many
// clusters and the federation, each under its own cluster name. Peloton
// creates and migrates the schema itself when it opens the store (see
// migrations). A call that fails because the server is down or went away
// returns an *UnavailableError; the connection pool makes new connections
// by itself once the server is back, so the caller only retries.
type Postgres struct {
	pool   *pgxpool.Pool
	closed atomic.Bool
}

var _ Store = (*Postgres)(nil)

// Time bounds of talking to the server that the caller's context does not
// set: a connection attempt to a server that does not answer, and a ping
// of a pooled connection before use (a stalled one is dropped, and another
// tried, within the caller's deadline).
const (
	pgConnectTimeout = 10 * time.Second
	pgPingTimeout    = 5 * time.Second
)

// OpenPostgres connects to the database at url (postgres://user:pass@host/db
// or the keyword form libpq takes) and brings its schema to this version's.
// An error that errors.Is ErrUnavailable means the server could not be
// reached: the caller may try again.
func OpenPostgres(ctx context.Context, url string) (*Postgres, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// Not pgx's message: it quotes the URL, and masks a password only
		// where it can tell one.
		return nil, invalid("archive", "not a PostgreSQL connection URL (postgres://user:password@host:port/database?sslmode=verify-full) or keyword string")
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = pgConnectTimeout
	}
	cfg.PingTimeout = pgPingTimeout
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	p := &Postgres{pool: pool}
	if err := p.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return p, nil
}

// Close closes the pool's connections.
func (p *Postgres) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	p.pool.Close()
	return nil
}

// migrations is the schema, one step per version: migrations[i] takes a
// database from version i to i+1. A released step is never edited; a
// change is a new step. Each start applies the steps a database lacks, in
// one transaction, under an advisory lock: two processes starting at once
// apply them once, and a failed step leaves the schema as it was.
//
// Job ids and cluster names sort bytewise (COLLATE "C"), as in the bbolt
// store, so that both page alike. Records are zstd already: stored out of
// line without PostgreSQL's own compression (STORAGE EXTERNAL).
var migrations = []string{
	// Version 1: the jobs, their list filters' indexes.
	`
CREATE TABLE peloton_archived_jobs (
	cluster     text COLLATE "C" NOT NULL,
	job_id      text COLLATE "C" NOT NULL,
	name        text NOT NULL,
	pool        text NOT NULL,
	state       integer NOT NULL,
	create_ns   bigint NOT NULL,
	labels      jsonb NOT NULL,
	archived_at timestamptz,
	summary     bytea NOT NULL,
	record      bytea NOT NULL,
	PRIMARY KEY (cluster, job_id)
);
ALTER TABLE peloton_archived_jobs ALTER COLUMN record SET STORAGE EXTERNAL;
CREATE INDEX peloton_archived_jobs_by_time ON peloton_archived_jobs (cluster, create_ns DESC, job_id);
CREATE INDEX peloton_archived_jobs_by_pool ON peloton_archived_jobs (cluster, pool, create_ns DESC, job_id);
CREATE INDEX peloton_archived_jobs_by_state ON peloton_archived_jobs (cluster, state, create_ns DESC, job_id);
CREATE INDEX peloton_archived_jobs_by_labels ON peloton_archived_jobs USING gin (labels jsonb_path_ops);
`,
	// Version 2: the federation's objects (federated jobs and services),
	// keyed by (federation, kind, id), listed by creation time.
	`
CREATE TABLE peloton_archived_federated (
	federation  text COLLATE "C" NOT NULL,
	kind        smallint NOT NULL,
	id          text COLLATE "C" NOT NULL,
	create_ns   bigint NOT NULL,
	finish_ns   bigint,
	labels      jsonb NOT NULL,
	archived_at timestamptz,
	record      bytea NOT NULL,
	PRIMARY KEY (federation, kind, id)
);
ALTER TABLE peloton_archived_federated ALTER COLUMN record SET STORAGE EXTERNAL;
CREATE INDEX peloton_archived_federated_by_time ON peloton_archived_federated (federation, kind, create_ns DESC, id);
CREATE INDEX peloton_archived_federated_by_labels ON peloton_archived_federated USING gin (labels jsonb_path_ops);
`,
}

// migrationLock is the advisory lock key of schema changes ("pelotonh").
const migrationLock int64 = 0x70656c6f746f6e68

func (p *Postgres) migrate(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLock); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS peloton_schema_migrations (
	version    integer PRIMARY KEY,
	applied_at timestamptz NOT NULL DEFAULT now()
)`); err != nil {
			return err
		}
		var have int
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM peloton_schema_migrations`).Scan(&have); err != nil {
			return err
		}
		if have > len(migrations) {
			return &newerSchemaError{have: have}
		}
		for v := have + 1; v <= len(migrations); v++ {
			if _, err := tx.Exec(ctx, migrations[v-1]); err != nil {
				return fmt.Errorf("schema version %d: %w", v, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO peloton_schema_migrations (version) VALUES ($1)`, v); err != nil {
				return err
			}
		}
		return nil
	})
	var newer *newerSchemaError
	if errors.As(err, &newer) {
		return newer
	}
	return p.fail(ctx, "migrate the schema", err)
}

// newerSchemaError is a database a later Peloton has migrated: this one
// must not write to it.
type newerSchemaError struct{ have int }

func (e *newerSchemaError) Error() string {
	return fmt.Sprintf("history: the database's schema is at version %d, newer than this Peloton's %d; upgrade Peloton", e.have, len(migrations))
}

// fail turns a driver's error into the store's: retryable ones (the server
// down, restarting, or the connection lost) into an *UnavailableError.
func (p *Postgres) fail(ctx context.Context, op string, err error) error {
	switch {
	case err == nil:
		return nil
	case p.closed.Load():
		return ErrClosed
	case ctx.Err() != nil:
		// The caller gave up (or its deadline passed): its error, not the
		// server's.
		return fmt.Errorf("history: %s: %w", op, ctx.Err())
	case retryable(err):
		return &UnavailableError{Op: op, Err: err}
	}
	return fmt.Errorf("history: %s: %w", op, err)
}

// retryable reports whether err says the server could not be reached or
// the connection was lost, rather than that the server refused the
// statement.
func retryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"), // connection exception
			strings.HasPrefix(pe.Code, "53"), // insufficient resources (too many connections)
			pe.Code == "57P01",               // admin shutdown
			pe.Code == "57P02",               // crash shutdown
			pe.Code == "57P03",               // cannot connect now (starting up, shutting down)
			pe.Code == "40001",               // serialization failure
			pe.Code == "40P01":               // deadlock detected
			return true
		}
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, pgconn.ErrConnClosed) || pgconn.SafeToRetry(err) || pgconn.Timeout(err)
}

const upsertJob = `
INSERT INTO peloton_archived_jobs (cluster, job_id, name, pool, state, create_ns, labels, archived_at, summary, record)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (cluster, job_id) DO UPDATE SET
	name = EXCLUDED.name, pool = EXCLUDED.pool, state = EXCLUDED.state, create_ns = EXCLUDED.create_ns,
	labels = EXCLUDED.labels, archived_at = EXCLUDED.archived_at, summary = EXCLUDED.summary, record = EXCLUDED.record`

// Put archives jobs in one transaction.
func (p *Postgres) Put(ctx context.Context, jobs ...*Job) error {
	if err := checkJobs(jobs); err != nil {
		return err
	}
	if len(jobs) == 0 {
		return nil
	}
	enc, err := encodeAll(jobs)
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	for i, e := range enc {
		j := jobs[i]
		labels := j.Spec().GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		var archived *time.Time
		if !j.ArchiveTime.IsZero() {
			archived = &j.ArchiveTime
		}
		b.Queue(upsertJob, e.cluster, e.id, j.Spec().GetName(), e.where.pool, int32(e.where.state), e.where.createNanos,
			labels, archived, e.summary, e.record)
	}
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		return tx.SendBatch(ctx, b).Close()
	})
	return p.fail(ctx, putOp(jobs), err)
}

// Get returns one archived job.
func (p *Postgres) Get(ctx context.Context, cluster, jobID string) (*Job, error) {
	if err := checkKey(cluster, jobID); err != nil {
		return nil, err
	}
	var rec []byte
	err := p.pool.QueryRow(ctx, `SELECT record FROM peloton_archived_jobs WHERE cluster = $1 AND job_id = $2`, cluster, jobID).Scan(&rec)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound(cluster, jobID)
	}
	if err != nil {
		return nil, p.fail(ctx, "get job "+jobID+" of cluster "+cluster, err)
	}
	j, err := decode(rec)
	if err != nil {
		return nil, fmt.Errorf("history: job %s of cluster %s: %w", jobID, cluster, err)
	}
	return j, nil
}

// Delete removes one archived job.
func (p *Postgres) Delete(ctx context.Context, cluster, jobID string) error {
	if err := checkKey(cluster, jobID); err != nil {
		return err
	}
	tag, err := p.pool.Exec(ctx, `DELETE FROM peloton_archived_jobs WHERE cluster = $1 AND job_id = $2`, cluster, jobID)
	if err != nil {
		return p.fail(ctx, "delete job "+jobID+" of cluster "+cluster, err)
	}
	if tag.RowsAffected() == 0 {
		return notFound(cluster, jobID)
	}
	return nil
}

// List returns one page of the jobs f selects, newest first. The order
// (create_ns DESC, job_id) is an index's, and each filter has one (pool,
// state) or narrows an index scan (labels by GIN, name and times as
// conditions): a page reads about as many rows as it returns unless a
// rare name or label must be looked for.
func (p *Postgres) List(ctx context.Context, f Filter, pageSize uint32, pageToken string) ([]*pelotonv1.Job, string, error) {
	n, err := checkFilter(f, pageSize)
	if err != nil {
		return nil, "", err
	}
	after, hasAfter, err := parseToken(pageToken)
	if err != nil {
		return nil, "", err
	}
	var sql strings.Builder
	args := []any{f.Cluster}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	sql.WriteString(`SELECT summary FROM peloton_archived_jobs WHERE cluster = $1`)
	if f.Pool != "" {
		sql.WriteString(` AND pool = ` + arg(f.Pool))
	}
	if len(f.States) > 0 {
		states := make([]int32, len(f.States))
		for i, s := range f.States {
			states[i] = int32(s)
		}
		sql.WriteString(` AND state = ANY(` + arg(states) + `::integer[])`)
	}
	if f.Name != "" {
		sql.WriteString(` AND strpos(name, ` + arg(f.Name) + `) > 0`)
	}
	if len(f.Labels) > 0 {
		sql.WriteString(` AND labels @> ` + arg(f.Labels) + `::jsonb`)
	}
	if !f.CreatedSince.IsZero() {
		sql.WriteString(` AND create_ns >= ` + arg(timeNanos(f.CreatedSince)))
	}
	if !f.CreatedUntil.IsZero() {
		sql.WriteString(` AND create_ns < ` + arg(timeNanos(f.CreatedUntil)))
	}
	if hasAfter {
		t, id := arg(after.createNanos), arg(after.id)
		sql.WriteString(` AND create_ns <= ` + t + ` AND (create_ns < ` + t + ` OR job_id > ` + id + `)`)
	}
	sql.WriteString(` ORDER BY create_ns DESC, job_id LIMIT ` + arg(n+1))

	rows, err := p.pool.Query(ctx, sql.String(), args...)
	if err != nil {
		return nil, "", p.fail(ctx, "list jobs of cluster "+f.Cluster, err)
	}
	defer rows.Close()
	var out []*pelotonv1.Job
	var next string
	bytesOut := 0
	for rows.Next() {
		var sum []byte
		if err := rows.Scan(&sum); err != nil {
			return nil, "", p.fail(ctx, "list jobs of cluster "+f.Cluster, err)
		}
		if len(out) == n || (len(out) > 0 && bytesOut+len(sum) > pageBytes) {
			last := out[len(out)-1]
			next = cursor{createNanos: createNanosOf(last), id: last.Id}.token()
			break
		}
		j := &pelotonv1.Job{}
		if err := proto.Unmarshal(sum, j); err != nil {
			return nil, "", fmt.Errorf("history: summary of an archived job of cluster %s: %w", f.Cluster, err)
		}
		out = append(out, j)
		bytesOut += len(sum)
	}
	if err := rows.Err(); err != nil {
		return nil, "", p.fail(ctx, "list jobs of cluster "+f.Cluster, err)
	}
	return out, next, nil
}
