package jobmgr

import (
	"maps"
	"testing"
)

// A run is lost only when two passes in a row find it unknown to the
// backend in the same state.
func TestStillUnknownNeedsTwoPassesInTheSameState(t *testing.T) {
	r := newReconciler(0)
	first := map[string]ts{"a": stRunning, "b": stLaunched}
	r.stillUnknown(first)
	if len(first) != 0 {
		t.Fatalf("first pass confirmed %v, want none", first)
	}
	second := map[string]ts{"a": stRunning, "b": stRunning, "c": stRunning}
	r.stillUnknown(second)
	if want := map[string]ts{"a": stRunning}; !maps.Equal(second, want) {
		t.Fatalf("second pass confirmed %v, want %v", second, want)
	}
	third := map[string]ts{"a": stRunning, "b": stRunning, "c": stRunning}
	r.stillUnknown(third)
	if want := map[string]ts{"b": stRunning, "c": stRunning}; !maps.Equal(third, want) {
		t.Fatalf("third pass confirmed %v, want %v", third, want)
	}
}
