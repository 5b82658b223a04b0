package jobmgr

import (
	"context"
	"fmt"
	"strings"

	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/quarantine"
	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Records that cannot be loaded at start are moved aside
// (internal/quarantine) and the stack starts without them. What that means
// depends on the record, and each case does the least surprising thing:
//
//   - A task record of a job that has not ended: the instance is treated as
//     having no record, as an instance that was never launched has none,
//     so the goal-state engine runs it again (INITIALIZED, a new run). A run
//     of it the backend still has is either taken over (the same run ID on
//     the host it is placed on) or stopped as a stray by reconciliation.
//   - A task record of a job that has ended (SUCCEEDED, FAILED, KILLED):
//     nothing is run again. A record in the job's final state, with reason
//     ReasonRecordQuarantined, takes its place in the same transaction, so
//     the job's state and its instance count stay as they were.
//   - A job's runtime record, or the spec version in force: the job cannot
//     be loaded. It is held: not loaded, its other records left as they
//     are (never swept as a deleted job's), its runs left running (counted
//     on their hosts, never killed as strays), and the API answers
//     FailedPrecondition for it. It stays held, at every start, while any of
//     its records is in quarantine. Restoring the record (and deleting the
//     quarantine key) brings it back at the next start; deleting the
//     quarantine key alone lets the next start sweep it as a deleted job.
//   - An older spec version: moved aside; the job loads without it (runs
//     on that version read the version in force, as for versions never
//     recorded).
//   - An update record: moved aside; the job keeps the versions its
//     instances run, and a new update can be started.

// ReasonRecordQuarantined is the reason of the record that takes the place
// of a quarantined task record of a job that had ended.
const ReasonRecordQuarantined = "record-quarantined"

// quarantineRecord moves kv aside: it could not be loaded because of err.
func (en *engine) quarantineRecord(ctx context.Context, kv store.KV, err error) error {
	m := en.m
	_, qerr := quarantine.Move(ctx, m.store, m.log, kv, err)
	if qerr != nil {
		return fmt.Errorf("jobmgr: %w", qerr)
	}
	return nil
}

// quarantineTask moves aside instance inst's record kv of job j, which
// could not be decoded (cause). It returns the record that takes its place
// and that record's revision, or nil when the instance is left without one
// (see above). Called by recover, before the job is visible.
func (en *engine) quarantineTask(ctx context.Context, j *job, inst uint32, kv store.KV, cause error) (*pelotonv1.TaskStatus, int64, error) {
	m := en.m
	var final taskState
	jrt := j.status()
	switch jrt.State {
	case pelotonv1.JobState_JOB_SUCCEEDED:
		final = taskSucceeded
	case pelotonv1.JobState_JOB_FAILED:
		final = taskFailed
	case pelotonv1.JobState_JOB_KILLED:
		final = taskKilled
	default:
		if err := m.eng.quarantineRecord(ctx, kv, cause); err != nil {
			return nil, 0, err
		}
		m.log.Warn("the instance's record was quarantined; it runs again", "job", j.id, "instance", inst)
		return nil, 0, nil
	}
	now := timestamppb.New(m.now())
	rt := &pelotonv1.TaskStatus{State: final, GoalState: m.taskGoal(j), RunId: jrt.RemovedRunId + 1, SpecVersion: jrt.SpecVersion,
		Reason: ReasonRecordQuarantined, UpdateTime: now,
		Message: fmt.Sprintf("the instance's record could not be read and was moved to %s; the job had ended, so its state is the job's",
			quarantine.KeyOf(kv.Key, kv.Revision))}
	b, err := proto.Marshal(rt)
	if err != nil {
		return nil, 0, fmt.Errorf("jobmgr: encode task %s/%d: %w", j.id, inst, err)
	}
	_, rev, err := quarantine.Replace(ctx, m.store, m.log, kv, cause, b)
	if err != nil {
		return nil, 0, fmt.Errorf("jobmgr: %w", err)
	}
	return rt, rev, nil
}

// quarantinedJobs returns the IDs of the jobs with a record in quarantine,
// and of those whose runtime record is.
func (en *engine) quarantinedJobs(ctx context.Context) (any, runtime map[string]bool, err error) {
	m := en.m
	keys, err := quarantine.List(ctx, m.store, "jobs/")
	if err != nil {
		return nil, nil, fmt.Errorf("jobmgr: list quarantined records: %w", err)
	}
	any, runtime = map[string]bool{}, map[string]bool{}
	for _, k := range keys {
		if parts := strings.Split(quarantine.Original(k), "/"); len(parts) >= 3 {
			any[parts[1]] = true
			if len(parts) == 3 && parts[2] == "runtime" {
				runtime[parts[1]] = true
			}
		}
	}
	return any, runtime, nil
}

// hold records that job id cannot be loaded (see above). Called by recover.
func (en *engine) hold(id string) {
	m := en.m
	m.log.Error("a job cannot be loaded: one of its records is in quarantine; it is held (not run, its runs left alone) until the record is restored or its quarantine key deleted",
		"job", id)
	m.mu.Lock()
	m.held[id] = true
	m.mu.Unlock()
}

// isHeld reports whether job id is held.
func (en *engine) isHeld(id string) bool {
	m := en.m
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.held[id]
}

// heldError is the API's answer for a held job.
func heldError(id string) error {
	return apierr.FailedPrecondition("job %s cannot be loaded: a record of it is in quarantine (see /readyz and docs/operations.md, Quarantined records)", id)
}
