package cli

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/history"
	"github.com/peloton-sched/peloton/internal/testing/apitest"
	"github.com/peloton-sched/peloton/jobmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// startArchivingStack runs the real managers over embedded etcd and the
// sim backend, with the API reading through a bolt archive, and returns
// the API's address, the job manager and the archive. (`peloton up` wires
// its archive itself; this builds the same parts by hand.)
func startArchivingStack(t *testing.T) (string, *jobmgr.Manager, history.Store) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a stack")
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h, err := history.OpenBolt(filepath.Join(t.TempDir(), "history.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	st := apitest.Start(t, apitest.Options{Logger: log, History: h, Cluster: "local"})
	return st.Addr, st.JM, h
}

// TestArchivedJobThroughTheCLI: once a finished job is archived and gone
// from the live store, job get, job list --archived, task list, task get
// and task logs show it, job cancel and task kill say it is archived, and
// job delete purges it.
func TestArchivedJobThroughTheCLI(t *testing.T) {
	addr, jm, h := startArchivingStack(t)
	ctx := context.Background()
	s := &stack{t: t, addr: addr}
	spec := writeSpec(t, "job.yaml", `name: archived-cli
type: BATCH
pool: /default
instanceCount: 2
labels: {team: data}
defaultSpec:
  command: [sleep, "0.05"]
  resources: {cpu: 0.1, memoryMb: 8}
instanceSpecs:
  1: {command: [exit, "4"]}
`)
	id := strings.TrimSpace(s.ok("job", "create", "-f", spec))
	s.waitFor(30*time.Second, "the job to finish", func() (bool, string) {
		j, err := jm.GetJob(id)
		if err != nil {
			return false, err.Error()
		}
		return j.Status.State == pelotonv1.JobState_JOB_FAILED, j.Status.State.String()
	})
	// Archive it as the collector does: the API's answers, then out of etcd.
	job, _ := jm.GetJob(id)
	versions, _ := jm.Updates().ListJobVersions(id)
	tasks, _, err := jm.ListTasksPage(id, nil, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	rec := &history.Job{Cluster: "local", ID: id, Versions: versions, Status: job.Status, ArchiveTime: time.Now()}
	for _, tk := range tasks {
		rec.Tasks = append(rec.Tasks, tk.Status)
	}
	if err := h.Put(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if err := jm.DeleteJob(ctx, id); err != nil {
		t.Fatal(err)
	}

	if out := s.ok("job", "get", id); !strings.Contains(out, "JOB_FAILED (archived)") || !strings.Contains(out, "\narchived: ") {
		t.Errorf("job get of the archived job:\n%s", out)
	}
	if out := s.ok("job", "list"); strings.Contains(out, id) {
		t.Errorf("job list (live) shows the archived job:\n%s", out)
	}
	if out := s.ok("job", "list", "--archived", "--label", "team=data", "--created-since", "1h"); !strings.Contains(out, id) || !strings.Contains(out, "(archived)") {
		t.Errorf("job list --archived:\n%s", out)
	}
	if out := s.ok("job", "list", "--archived", "--label", "team=web"); strings.Contains(out, id) {
		t.Errorf("job list --archived --label team=web shows the job:\n%s", out)
	}
	out := s.ok("task", "list", id)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || !strings.Contains(lines[1], "SUCCEEDED") || !strings.Contains(lines[2], "FAILED") {
		t.Errorf("task list of the archived job:\n%s", out)
	}
	if out := s.ok("task", "get", id, "1"); !strings.Contains(out, "FAILED") {
		t.Errorf("task get of an archived instance:\n%s", out)
	}
	if out := s.ok("task", "logs", id, "1"); !strings.Contains(out, "sim: exit 4 on ") || !strings.Contains(out, "failed (exit 4)") {
		t.Errorf("task logs of an archived instance: %q", out)
	}
	s.fails(exitError, "Error: FailedPrecondition: job "+id+" is archived (it finished and its time to live passed): it cannot be cancelled; ...", "job", "cancel", id)
	s.fails(exitError, "Error: FailedPrecondition: job "+id+" is archived (it finished and its time to live passed): it cannot be killed; ...", "task", "kill", id, "0")
	s.fails(exitError, "Error: NotFound: job "+id+" has no instance 5 (instanceCount 2)", "task", "get", id, "5")
	if out := s.ok("job", "delete", id); !strings.Contains(out, "deleted") {
		t.Errorf("job delete of the archived job: %q", out)
	}
	s.fails(exitError, "Error: NotFound: job "+id+" does not exist", "job", "get", id)
}
