package history

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/peloton-sched/peloton/internal/testing/pgtest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

func openPostgres(t *testing.T, url string) *Postgres {
	t.Helper()
	s, err := OpenPostgres(bg(t), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestPostgresConformance(t *testing.T) {
	srv := pgtest.New(t)
	conformance(t, func(t *testing.T) Store {
		return openPostgres(t, srv.URL(srv.NewDatabase(t)))
	})
}

// TestPostgresOverUnixSocket opens the store as a process beside its
// database would: over the server's unix socket.
func TestPostgresOverUnixSocket(t *testing.T) {
	srv := pgtest.New(t)
	s := openPostgres(t, srv.SocketURL(srv.NewDatabase(t)))
	j := makeJob("a", "j").instances(3).obj()
	put(t, s, j)
	equalJobs(t, "get", get(t, s, "a", "j"), j)
}

func schemaVersions(t *testing.T, url string) []int {
	t.Helper()
	conn, err := pgx.Connect(bg(t), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(bg(t))
	rows, err := conn.Query(bg(t), `SELECT version FROM peloton_schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

// TestPostgresMigratesOnceWhenStartedTogether opens the store from several
// processes' worth of pools at once on an empty database: each opens, and
// the schema is applied once.
func TestPostgresMigratesOnceWhenStartedTogether(t *testing.T) {
	srv := pgtest.New(t)
	url := srv.URL(srv.NewDatabase(t))
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := OpenPostgres(context.Background(), url)
			if err != nil {
				errs <- err
				return
			}
			s.Close()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("open at once: %v", err)
	}
	vs := schemaVersions(t, url)
	if len(vs) != len(migrations) || vs[len(vs)-1] != len(migrations) {
		t.Fatalf("schema versions %v, want 1..%d once each", vs, len(migrations))
	}
	// And opening again changes nothing.
	s := openPostgres(t, url)
	s.Close()
	if again := schemaVersions(t, url); len(again) != len(vs) {
		t.Fatalf("schema versions %v after another start, were %v", again, vs)
	}
}

// TestPostgresRefusesNewerSchema: a database a later Peloton migrated is
// not written by this one.
func TestPostgresRefusesNewerSchema(t *testing.T) {
	srv := pgtest.New(t)
	url := srv.URL(srv.NewDatabase(t))
	openPostgres(t, url).Close()
	conn, err := pgx.Connect(bg(t), url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(bg(t), `INSERT INTO peloton_schema_migrations (version) VALUES ($1)`, len(migrations)+1); err != nil {
		t.Fatal(err)
	}
	conn.Close(bg(t))
	_, err = OpenPostgres(bg(t), url)
	if err == nil || errors.Is(err, ErrUnavailable) {
		t.Fatalf("open of a newer schema: %v, want a refusal that is not retryable", err)
	}
	t.Log(err)
}

// TestPostgresUnreachableIsRetryable: a server that is not there is an
// error callers retry, and the store works once it is back.
func TestPostgresUnreachableIsRetryable(t *testing.T) {
	srv := pgtest.New(t)
	url := srv.URL(srv.NewDatabase(t))
	s := openPostgres(t, url)
	srv.Stop(t)
	_, err := OpenPostgres(bg(t), url)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("open with the server down: %v, want ErrUnavailable", err)
	}
	for what, err := range map[string]error{
		"put":    s.Put(bg(t), makeJob("a", "j").obj()),
		"get":    func() error { _, err := s.Get(bg(t), "a", "j"); return err }(),
		"list":   func() error { _, _, err := s.List(bg(t), Filter{Cluster: "a"}, 0, ""); return err }(),
		"delete": s.Delete(bg(t), "a", "j"),
	} {
		var ue *UnavailableError
		if !errors.Is(err, ErrUnavailable) || !errors.As(err, &ue) {
			t.Errorf("%s with the server down: %v, want an UnavailableError", what, err)
		}
	}
	srv.Start(t)
	testutil.Eventually(t, 30*time.Second, "a put once the server is back", func() error {
		return s.Put(bg(t), makeJob("a", "j").obj())
	})
	get(t, s, "a", "j")
}

// TestPostgresServerRestartUnderLoad archives jobs from several writers
// while the server is stopped, crashed and started again. While it is down
// puts fail retryably; after, they succeed without reopening the store;
// and every job is either archived whole or not at all, never in part.
func TestPostgresServerRestartUnderLoad(t *testing.T) {
	srv := pgtest.New(t)
	s := openPostgres(t, srv.URL(srv.NewDatabase(t)))

	type outcome struct {
		stored  map[string]*Job // put returned nil
		unsure  map[string]*Job // put failed retryably: either way
		other   []error         // any other failure
		retried atomic.Int64
	}
	var mu sync.Mutex
	res := &outcome{stored: map[string]*Job{}, unsure: map[string]*Job{}}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var ok atomic.Int64
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				// Batches of jobs of various sizes, one of them large, so
				// that a stop lands in the middle of a transaction.
				var batch []*Job
				for k := range 1 + i%4 {
					n := 1 + (i*7+k)%40
					if k == 0 && i%10 == 0 {
						n = 5000
					}
					batch = append(batch, makeJob("a", fmt.Sprintf("w%d-%04d-%d", w, i, k)).instances(n).seeded(uint64(i)).obj())
				}
				err := s.Put(context.Background(), batch...)
				mu.Lock()
				for _, j := range batch {
					switch {
					case err == nil:
						res.stored[j.ID] = j
					case errors.Is(err, ErrUnavailable):
						res.unsure[j.ID] = j
					}
				}
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, ErrUnavailable):
					res.retried.Add(1)
				default:
					res.other = append(res.other, err)
				}
				mu.Unlock()
			}
		}()
	}
	// waitPuts waits for more puts to succeed: the server is up and the
	// store uses it.
	waitPuts := func(what string) {
		from := ok.Load()
		testutil.Eventually(t, 60*time.Second, what, func() error {
			if ok.Load() < from+5 {
				return fmt.Errorf("%d puts succeeded since", ok.Load()-from)
			}
			return nil
		})
	}
	waitPuts("puts before any restart")
	srv.Stop(t)
	// While the server is down, puts fail, retryably.
	down := res.retried.Load()
	testutil.Eventually(t, 30*time.Second, "puts fail while the server is down", func() error {
		if res.retried.Load() < down+3 {
			return errors.New("no failed puts yet")
		}
		return nil
	})
	srv.Start(t)
	waitPuts("puts after a stop and start")
	srv.Crash(t)
	srv.Start(t)
	waitPuts("puts after a crash and start")
	stop()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(res.other) > 0 {
		t.Fatalf("%d puts failed other than retryably, first: %v", len(res.other), res.other[0])
	}
	t.Logf("%d jobs stored, %d in puts that failed retryably (%d puts)", len(res.stored), len(res.unsure), res.retried.Load())
	for id, j := range res.stored {
		equalJobs(t, "a stored job", get(t, s, "a", id), j)
	}
	for id, j := range res.unsure {
		got, err := s.Get(bg(t), "a", id)
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			t.Fatalf("get %s: %v", id, err)
		default:
			equalJobs(t, "a job of a failed put", got, j)
		}
	}
	if ids := listAll(t, s, Filter{Cluster: "a"}, MaxPageSize); len(ids) < len(res.stored) {
		t.Fatalf("listed %d jobs, %d were stored", len(ids), len(res.stored))
	}
}

// TestPostgresBadURLKeepsItsPassword: a URL that does not parse is
// refused without being quoted back.
func TestPostgresBadURLKeepsItsPassword(t *testing.T) {
	_, err := OpenPostgres(bg(t), "postgres://user:s3cret@host:notaport/db")
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "archive" || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("open of a bad URL: %v", err)
	}
}
