package local

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestRemovalSurvivesACrash: a job's removal is remembered across a crash
// of the control plane that came before its output was removed, and the
// crash loses nothing the restarted backend still needs: a run that ended
// while no backend watched gets its true end, and its output stays.
func TestRemovalSurvivesACrash(t *testing.T) {
	dir := t.TempDir()
	// No sweeps: the crash comes before the output is removed.
	first, rec := retentionBackend(t, dir, Config{sweepEvery: -1})
	removed := jobSpec("removed", 0, 1, "echo", "bye")
	runToEnd(t, first, rec, removed)
	release := filepath.Join(t.TempDir(), "release")
	running := jobSpec("running", 0, 1, "sh", "-c", `while [ ! -e "$0" ]; do sleep 0.05; done; echo done; exit 3`, release)
	launch(t, first, running)
	rec.waitState(t, running.TaskID, pelotonv1.TaskState_RUNNING)
	if err := first.RemoveJobOutput(context.Background(), "removed"); err != nil {
		t.Fatal(err)
	}
	outputIs(t, first, removed.TaskID, "bye\n")
	first.detach() // the crash
	// The run ends while no backend watches.
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "the run's end written by its supervisor", func() error {
		_, err := os.Stat(first.statusPath(running.TaskID))
		return err
	})

	second, _ := retentionBackend(t, dir, Config{})
	testutil.Eventually(t, waitTimeout, "the removed job's output removed after the restart", func() error {
		return outputGone(second, removed.TaskID)
	})
	end, err := second.Status(running.TaskID)
	if err != nil || end.State != pelotonv1.TaskState_FAILED || end.ExitCode != 3 {
		t.Errorf("end of the run that ended during the crash = %+v, %v; want FAILED with code 3", end, err)
	}
	second.waitSweeps(t, 3)
	outputIs(t, second, running.TaskID, "done\n")
}
