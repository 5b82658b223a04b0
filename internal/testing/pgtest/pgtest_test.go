package pgtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

func TestMain(m *testing.M) {
	testutil.LeakCheckMain(m, func(stack string) bool {
		return strings.Contains(stack, "pgtest.(*Server)")
	})
}

func run(t *testing.T, url, sql string) []*pgconn.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	res, err := conn.Exec(ctx, sql).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return res
}

// TestServerKeepsDataAcrossRestarts starts a server, writes over TCP,
// reads over the unix socket, and reads again after a stop and a crash.
func TestServerKeepsDataAcrossRestarts(t *testing.T) {
	s := New(t)
	db := s.NewDatabase(t)
	run(t, s.URL(db), "CREATE TABLE t (v text); INSERT INTO t VALUES ('kept')")
	sock := s.SocketURL(db)
	read := func(what string) {
		t.Helper()
		res := run(t, sock, "SELECT v FROM t")
		if len(res) != 1 || len(res[0].Rows) != 1 || string(res[0].Rows[0][0]) != "kept" {
			t.Fatalf("%s: read %v", what, res)
		}
	}
	read("first start")
	s.Stop(t)
	s.Start(t)
	read("after a stop")
	s.Crash(t)
	s.Start(t)
	read("after a crash")
}

// TestServerRefusesWrongPassword checks the server is not open to anyone
// on the machine who finds its port.
func TestServerRefusesWrongPassword(t *testing.T) {
	s := New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := strings.Replace(s.URL("postgres"), s.password, "wrong", 1)
	if conn, err := pgconn.Connect(ctx, url); err == nil {
		conn.Close(ctx)
		t.Fatal("connected with a wrong password")
	}
}

func TestBinDirFindsNewestVersion(t *testing.T) {
	dir, err := BinDir()
	if err != nil {
		t.Skipf("no PostgreSQL here: %v", err)
	}
	if !strings.HasPrefix(dir, Root+"/") || !strings.HasSuffix(dir, "/bin") {
		t.Fatalf("BinDir() = %s", dir)
	}
}
