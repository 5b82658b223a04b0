package auth

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func auditLines(t *testing.T, path string) []AuditEntry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []AuditEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e AuditEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %q is not one JSON entry: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

// The audit log is appended to (logrotate's copytruncate works), created
// readable by its owner only, and Reopen follows a rename.
func TestAuditFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	if err := os.WriteFile(path, []byte(`{"requestId":"earlier"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := OpenAudit(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	e := AuditEntry{Time: time.Now(), RequestID: "r1", Principal: "alice", Method: "/x.Y/Z", Outcome: "OK"}
	if err := a.Write(e); err != nil {
		t.Fatal(err)
	}
	if got := auditLines(t, path); len(got) != 2 || got[0].RequestID != "earlier" || got[1].RequestID != "r1" {
		t.Errorf("entries %+v, want the earlier one kept and r1 appended", got)
	}

	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	e.RequestID = "r2"
	if err := a.Write(e); err != nil { // still to the renamed file
		t.Fatal(err)
	}
	if err := a.Reopen(); err != nil {
		t.Fatal(err)
	}
	e.RequestID = "r3"
	if err := a.Write(e); err != nil {
		t.Fatal(err)
	}
	if got := auditLines(t, path+".1"); len(got) != 3 || got[2].RequestID != "r2" {
		t.Errorf("rotated file %+v, want r2 last", got)
	}
	if got := auditLines(t, path); len(got) != 1 || got[0].RequestID != "r3" {
		t.Errorf("new file %+v, want r3 alone", got)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("new audit file mode %v, want 0600", fi.Mode().Perm())
	}
}

// Concurrent writes make whole lines.
func TestAuditConcurrentWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	a, err := OpenAudit(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				_ = a.Write(AuditEntry{Principal: strings.Repeat("p", 100*i), Outcome: "OK"})
			}
		}()
	}
	wg.Wait()
	if got := auditLines(t, path); len(got) != 400 {
		t.Errorf("%d entries, want 400", len(got))
	}
}

func TestLimiter(t *testing.T) {
	if newLimiter(0, 5) != nil {
		t.Error("a limiter with no rate")
	}
	l := newLimiter(0.001, 2)
	for i := range 2 {
		if ok, _ := l.allow("a"); !ok {
			t.Fatalf("call %d of a burst of 2 refused", i+1)
		}
	}
	ok, wait := l.allow("a")
	if ok || wait <= 0 {
		t.Errorf("third call: %v, wait %v; want refused with a wait", ok, wait)
	}
	if ok, _ := l.allow("b"); !ok {
		t.Error("another key shares the bucket")
	}
	// A refused call takes no token: the wait does not grow with retries.
	_, again := l.allow("a")
	if again > wait+time.Second {
		t.Errorf("wait grew from %v to %v after a refused call", wait, again)
	}
	one := newLimiter(1000, 0)
	if ok, _ := one.allow("x"); !ok {
		t.Error("a burst below 1 allows nothing; want it taken as 1")
	}
}
