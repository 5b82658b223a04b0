package history

import (
	"path/filepath"
	"strings"
	"testing"
)

func openBolt(t *testing.T) Store {
	t.Helper()
	s, err := OpenBolt(filepath.Join(t.TempDir(), "history.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestBoltConformance(t *testing.T) {
	conformance(t, openBolt)
}

// TestBoltReopens checks that what one process archived the next one
// reads, and that a second process cannot open the file meanwhile.
func TestBoltReopens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	s, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	j := makeJob("a", "j").instances(5).obj()
	put(t, s, j)
	if _, err := OpenBolt(path); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("second open of %s: %v, want it refused", path, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	equalJobs(t, "after reopening", get(t, s, "a", "j"), j)
}
