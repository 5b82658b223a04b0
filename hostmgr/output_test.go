package hostmgr

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// prunerBackend records the jobs RemoveJobOutput is asked to forget.
type prunerBackend struct {
	fixedHosts
	removed []string
	err     error
}

func (p *prunerBackend) RemoveJobOutput(_ context.Context, jobID string) error {
	p.removed = append(p.removed, jobID)
	return p.err
}

var _ OutputPruner = (*prunerBackend)(nil)

func TestRemoveJobOutputForwardsToAPruner(t *testing.T) {
	b := &prunerBackend{}
	m := NewManager(b, Options{})
	if err := m.RemoveJobOutput(context.Background(), "j1"); err != nil {
		t.Fatalf("RemoveJobOutput = %v", err)
	}
	b.err = errors.New("disk on fire")
	if err := m.RemoveJobOutput(context.Background(), "j2"); !errors.Is(err, b.err) {
		t.Fatalf("RemoveJobOutput = %v, want the backend's error", err)
	}
	if want := []string{"j1", "j2"}; !slices.Equal(b.removed, want) {
		t.Fatalf("backend was asked to remove %v, want %v", b.removed, want)
	}
}

func TestRemoveJobOutputWithoutAPrunerDoesNothing(t *testing.T) {
	m := NewManager(&fixedHosts{}, Options{})
	if err := m.RemoveJobOutput(context.Background(), "j1"); err != nil {
		t.Fatalf("RemoveJobOutput on a backend that keeps no output = %v, want nil", err)
	}
}
