package supervise

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFilesBesideTheStatus(t *testing.T) {
	st := filepath.Join("/data", "runs", "j-0-1"+StatusSuffix)
	if got, want := KillPath(st), "/data/runs/j-0-1.kill"; got != want {
		t.Errorf("KillPath = %s, want %s", got, want)
	}
	if got := PartialPath(st); strings.HasSuffix(got, ".tmp") || got == st {
		t.Errorf("PartialPath = %s: must differ from the status and never end .tmp (the backend removes those at start)", got)
	}
}

func TestStatusRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r-0-1"+StatusSuffix)
	if _, err := ReadStatus(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ReadStatus of no file: %v, want ErrNotExist", err)
	}
	want := Status{TaskID: "r-0-1", Exited: true, ExitCode: 3, Killed: true, Time: time.Unix(100, 5).UTC()}
	if err := writeStatus(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadStatus(path)
	if err != nil || got != want {
		t.Fatalf("ReadStatus = %+v, %v; want %+v", got, err, want)
	}
	if _, err := os.Stat(PartialPath(path)); !os.IsNotExist(err) {
		t.Errorf("the partial file is left behind: %v", err)
	}
	if err := os.WriteFile(path, []byte("{torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadStatus(path); err == nil || errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadStatus of a torn file: %v; want a decode error", err)
	}
}

func TestKillDeadline(t *testing.T) {
	st := filepath.Join(t.TempDir(), "k-0-1"+StatusSuffix)
	if _, ok := readKill(st); ok {
		t.Fatal("a deadline before any kill")
	}
	at := time.Now().Add(3 * time.Second).Round(0)
	if err := WriteKill(st, at); err != nil {
		t.Fatal(err)
	}
	if got, ok := readKill(st); !ok || !got.Equal(at) {
		t.Fatalf("readKill = %v, %v; want %v", got, ok, at)
	}
}

func TestReadConfigRefusesIncomplete(t *testing.T) {
	for in, want := range map[string]string{
		`{`:                                    "config:",
		`{"statusPath":"/x.exit"}`:             "no command",
		`{"path":"/bin/true","argv":["true"]}`: "no status path",
		`{"path":"/bin/true","argv":["true"],"x"`: "config:",
	} {
		if _, err := readConfig(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("readConfig(%s) = %v; want an error with %q", in, err, want)
		}
	}
	cfg, err := readConfig(strings.NewReader(`{"taskId":"a-0-1","path":"/bin/true","argv":["true"],"statusPath":"/r/a-0-1.exit","killGrace":1000}`))
	if err != nil || cfg.TaskID != "a-0-1" || cfg.KillGrace != time.Microsecond {
		t.Fatalf("readConfig = %+v, %v", cfg, err)
	}
}
