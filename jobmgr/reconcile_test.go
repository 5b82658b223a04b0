package jobmgr

import (
	"maps"
	"testing"
)

// A run is lost only when two passes in a row find it unknown to the
// backend in the same state.
func TestStillUnknownNeedsTwoPassesInTheSameState(t *testing.T) {
	r := newReconciler(0)
	first := map[string]taskState{"a": taskRunning, "b": taskLaunched}
	r.stillUnknown(first)
	if len(first) != 0 {
		t.Fatalf("first pass confirmed %v, want none", first)
	}
	second := map[string]taskState{"a": taskRunning, "b": taskRunning, "c": taskRunning}
	r.stillUnknown(second)
	if want := map[string]taskState{"a": taskRunning}; !maps.Equal(second, want) {
		t.Fatalf("second pass confirmed %v, want %v", second, want)
	}
	third := map[string]taskState{"a": taskRunning, "b": taskRunning, "c": taskRunning}
	r.stillUnknown(third)
	if want := map[string]taskState{"b": taskRunning, "c": taskRunning}; !maps.Equal(third, want) {
		t.Fatalf("third pass confirmed %v, want %v", third, want)
	}
}
