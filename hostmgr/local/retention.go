package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// What the backend keeps on disk per run, and for how long:
//
//   - the sandbox <Dir>/<TaskID>/ with the run's stdout and stderr (and
//     whatever the run wrote there): the run's output. With
//     Config.LogRetention 0 it stays as long as the run's job is in the live
//     store: RemoveJobOutput (jobmgr's delete, or the collector that
//     archives finished jobs) marks the job removed, and the sweeper removes
//     the sandboxes of its runs once they have ended. With a retention N it
//     stays N after the run ended, whatever happens to the job (so `task
//     logs` still reads it for an archived job), and the sweeper removes it
//     after;
//   - the run record <Dir>/runs/<TaskID>.json (adopt.go): needed until the
//     run's end has been delivered and the control plane can no longer ask
//     for it. It goes when the run's job leaves the live store
//     (RemoveJobOutput, for runs whose end was delivered), or, oldest
//     first, beyond maxFinished ended runs;
//   - the supervisor's files <TaskID>.exit, .kill, .kill.new and the
//     partial status (supervised.go): needed until the record has the
//     run's end, removed then, also by a restarted backend;
//   - <Dir>/runs/removed/<JobID>: the mark of a job removed whose output
//     is still to be removed (retention 0). It is written, and its
//     directory synced, before RemoveJobOutput returns, so a crash before
//     the sweep loses no removal; the sweeper drops it after a sweep over
//     every sandbox found none of the job's runs still running.
//
// Volumes (volume.go) are not output: they go with ReleaseVolume.
//
// The sweeper is one goroutine, started by Start once the records of
// earlier backends are read and stopped by Close (or Start's ctx). It
// walks <Dir> in passes of sweepBatch entries, sweepPause apart; a walk
// over all of it starts every sweepEvery (at once when a job is marked
// removed), and only when there is something to look for: a retention, or
// a job marked removed. A sandbox is the output of a run of the job its
// record names or, with no record left, of the job its name says
// (<jobID>-<instance>-<run>, hostmgr.LaunchSpec.TaskID). Its run ended at
// the end its record holds or, with no record left, when anything last
// changed its sandbox or output files (their change times, which a run's
// user can move forward but not back). A sandbox of a run that has not
// ended is never removed, nor a directory that is neither known as a run's
// nor named like one.

const (
	// removedDir, under runsDir, holds the marks of jobs removed.
	removedDir = "removed"
	// sweepBatch bounds the sandboxes one pass of the sweeper looks at,
	// and so the removals it does.
	sweepBatch = 128
	// sweepPause is the time between two passes of one walk.
	sweepPause = 20 * time.Millisecond
	// defaultSweepEvery is the time between two walks over Dir.
	defaultSweepEvery = time.Minute
)

// validJobID reports whether id can name a file of removedDir.
func validJobID(id string) bool {
	return id != "" && id != "." && id != ".." && len(id) <= 255 && !strings.ContainsAny(id, "/\\\x00")
}

// jobOfTaskID is the job of a run by its ID, <jobID>-<instance>-<run>, or
// false when id is not of that form.
func jobOfTaskID(id string) (string, bool) {
	rest := id
	for range 2 {
		i := strings.LastIndexByte(rest, '-')
		if i < 0 || !allDigits(rest[i+1:]) {
			return "", false
		}
		rest = rest[:i]
	}
	return rest, rest != ""
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// RemoveJobOutput is told that job jobID has left the live store (see
// hostmgr.OutputPruner). The records of its runs whose end was delivered
// are deleted at once. With no retention (Config.LogRetention 0) the job is
// marked removed, durably, and the sweeper removes its runs' sandboxes
// soon after, each once its run has ended; with a retention the output
// stays until its age passes it. It is idempotent; an unknown job is no
// error.
func (b *Backend) RemoveJobOutput(ctx context.Context, jobID string) error {
	if !validJobID(jobID) {
		return fmt.Errorf("local: remove the output of job %q: not a valid job ID", jobID)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("local: remove the output of job %s: %w", jobID, err)
	}
	if b.retention == 0 {
		b.sweepMu.Lock()
		marked := b.removedJobs[jobID]
		b.sweepMu.Unlock()
		if !marked {
			if err := b.markRemoved(jobID); err != nil {
				return fmt.Errorf("local: remove the output of job %s: %w", jobID, err)
			}
			b.sweepMu.Lock()
			b.removedJobs[jobID] = true
			b.sweepMu.Unlock()
		}
		select {
		case b.sweepKick <- struct{}{}:
		default:
		}
	}
	b.forgetJobRuns(jobID)
	return nil
}

// markRemoved writes the durable mark of job jobID's removal.
func (b *Backend) markRemoved(jobID string) error {
	dir := filepath.Join(b.dir, runsDir, removedDir)
	f, err := os.OpenFile(filepath.Join(dir, jobID), os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// loadRemoved reads the marks of jobs removed whose output may not all be
// gone yet. Called by Start.
func (b *Backend) loadRemoved() error {
	entries, err := os.ReadDir(filepath.Join(b.dir, runsDir, removedDir))
	if err != nil {
		return fmt.Errorf("local: start: %w", err)
	}
	b.sweepMu.Lock()
	defer b.sweepMu.Unlock()
	for _, e := range entries {
		if validJobID(e.Name()) {
			b.removedJobs[e.Name()] = true
		}
	}
	return nil
}

// forgetJobRuns forgets the ended runs of job jobID whose end was
// delivered, and deletes their records.
func (b *Backend) forgetJobRuns(jobID string) {
	b.mu.Lock()
	ids := b.endedByJob[jobID]
	delete(b.endedByJob, jobID)
	for id := range ids {
		delete(b.tasks, id)
	}
	b.mu.Unlock()
	for id := range ids {
		b.dropRecord(id)
	}
}

// dropRecord deletes the record of an ended run and its supervisor's files.
func (b *Backend) dropRecord(id string) {
	_ = os.Remove(b.recordPath(id))
	b.removeRunFiles(id)
}

// indexEndedLocked notes that run id of job jobID has ended and its end
// was delivered. The caller holds b.mu.
func (b *Backend) indexEndedLocked(jobID, id string) {
	ids := b.endedByJob[jobID]
	if ids == nil {
		ids = map[string]struct{}{}
		b.endedByJob[jobID] = ids
	}
	ids[id] = struct{}{}
}

// unindexEndedLocked undoes indexEndedLocked. The caller holds b.mu.
func (b *Backend) unindexEndedLocked(jobID, id string) {
	if ids := b.endedByJob[jobID]; ids != nil {
		delete(ids, id)
		if len(ids) == 0 {
			delete(b.endedByJob, jobID)
		}
	}
}

// sweep is one walk of the sweeper over Dir.
type sweep struct {
	dir *os.File
	// removed are the jobs marked removed when the walk began, busy those
	// of them with a run found still running.
	removed map[string]bool
	busy    map[string]bool
}

// startSweeper starts the sweeper, unless the backend is closed or tests
// turned it off. Called by Start with b.mu held.
func (b *Backend) startSweeperLocked(ctx context.Context) {
	if b.closed || b.sweepEvery < 0 {
		return
	}
	b.sweeping = true
	go b.sweepLoop(ctx)
}

// stopSweeper stops the sweeper and waits until it has.
func (b *Backend) stopSweeper() {
	b.stopSweepOnce.Do(func() { close(b.sweepStop) })
	b.mu.Lock()
	sweeping := b.sweeping
	b.mu.Unlock()
	if sweeping {
		<-b.sweepDone
	}
}

func (b *Backend) sweepLoop(ctx context.Context) {
	defer close(b.sweepDone)
	var cur *sweep
	defer func() {
		if cur != nil {
			cur.dir.Close()
		}
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.sweepStop:
			return
		case <-b.sweepKick:
			if cur != nil {
				continue // this walk goes on; the next one sees the new mark
			}
		case <-timer.C:
		}
		var soon bool
		cur, soon = b.sweepPass(cur)
		wait := b.sweepEvery
		if cur != nil || soon {
			wait = sweepPause
		}
		timer.Reset(wait)
	}
}

// sweepPass looks at the next sweepBatch sandboxes of walk cur, beginning
// a walk when cur is nil, and returns the walk to go on with (nil when it
// is over) and whether another should begin soon.
func (b *Backend) sweepPass(cur *sweep) (*sweep, bool) {
	if cur == nil {
		if cur = b.beginSweep(); cur == nil {
			b.countSweep()
			return nil, false
		}
	}
	entries, err := cur.dir.ReadDir(sweepBatch)
	now := b.now()
	for _, e := range entries {
		b.sweepSandbox(cur, e, now)
	}
	if err == nil && len(entries) > 0 {
		return cur, false
	}
	if err != nil && !errors.Is(err, io.EOF) {
		b.log.Warn("could not read the sandboxes' directory; the walk begins again later", "dir", b.dir, "err", err)
	}
	return nil, b.endSweep(cur)
}

// beginSweep begins a walk over Dir, or returns nil when there is nothing
// to look for.
func (b *Backend) beginSweep() *sweep {
	b.sweepMu.Lock()
	removed := make(map[string]bool, len(b.removedJobs))
	for j := range b.removedJobs {
		removed[j] = true
	}
	b.sweepMu.Unlock()
	if b.retention == 0 && len(removed) == 0 {
		return nil
	}
	d, err := os.Open(b.dir)
	if err != nil {
		b.log.Warn("could not read the sandboxes' directory", "dir", b.dir, "err", err)
		return nil
	}
	return &sweep{dir: d, removed: removed, busy: map[string]bool{}}
}

// endSweep ends a walk: the marks of the jobs it looked for whose runs had
// all ended are dropped. It reports whether jobs were marked removed since
// the walk began.
func (b *Backend) endSweep(s *sweep) bool {
	s.dir.Close()
	dir := filepath.Join(b.dir, runsDir, removedDir)
	for j := range s.removed {
		if s.busy[j] {
			continue
		}
		if err := os.Remove(filepath.Join(dir, j)); err != nil && !errors.Is(err, os.ErrNotExist) {
			b.log.Warn("could not drop the mark of a job removed", "job", j, "err", err)
			continue
		}
		b.sweepMu.Lock()
		delete(b.removedJobs, j)
		b.sweepMu.Unlock()
	}
	b.countSweep()
	b.sweepMu.Lock()
	defer b.sweepMu.Unlock()
	for j := range b.removedJobs {
		if !s.removed[j] {
			return true
		}
	}
	return false
}

func (b *Backend) countSweep() {
	b.sweepMu.Lock()
	b.sweepCycles++
	b.sweepMu.Unlock()
}

// sweepSandbox removes the sandbox e of Dir if its time is over.
func (b *Backend) sweepSandbox(s *sweep, e fs.DirEntry, now time.Time) {
	name := e.Name()
	if !e.IsDir() || !validTaskID(name) {
		return // the records, the volumes, or not a sandbox of ours
	}
	b.mu.Lock()
	t, known := b.tasks[name]
	b.mu.Unlock()
	var job string
	var ended time.Time
	if known {
		job = t.spec.JobID
		select {
		case <-t.gone:
		default:
			if s.removed[job] {
				s.busy[job] = true
			}
			return // still running, or its end not yet delivered
		}
		t.mu.Lock()
		ended = t.last.Time
		t.mu.Unlock()
	} else if job, _ = jobOfTaskID(name); job == "" {
		return // not named as a run's sandbox: not ours to remove
	}
	path := filepath.Join(b.dir, name)
	if b.retention == 0 {
		if job == "" || !s.removed[job] {
			return
		}
		if known {
			// Its job is gone: its record too, if RemoveJobOutput came
			// before its end was delivered.
			b.mu.Lock()
			if b.tasks[name] == t {
				delete(b.tasks, name)
				b.unindexEndedLocked(job, name)
			}
			b.mu.Unlock()
			b.dropRecord(name)
		}
	} else {
		if !known {
			ended = sandboxTime(path)
		}
		if ended.IsZero() || now.Sub(ended) < b.retention {
			return
		}
	}
	b.removeSandbox(path)
}

// sandboxTime is when anything last changed a sandbox or its output files;
// zero if it cannot be read.
func sandboxTime(path string) time.Time {
	var last time.Time
	for _, p := range []string{path, filepath.Join(path, "stdout"), filepath.Join(path, "stderr")} {
		fi, err := os.Lstat(p)
		if err != nil {
			if p == path {
				return time.Time{}
			}
			continue
		}
		if c := changeTime(fi); c.After(last) {
			last = c
		}
	}
	return last
}

// removeSandbox deletes a sandbox and everything in it. os.RemoveAll
// follows no link. Directories the run made unwritable are made writable
// (never through a link) and the removal tried again.
func (b *Backend) removeSandbox(path string) {
	err := os.RemoveAll(path)
	if err != nil && errors.Is(err, fs.ErrPermission) {
		_ = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				_ = os.Chmod(p, 0o700)
			}
			return nil
		})
		err = os.RemoveAll(path)
	}
	if err != nil {
		b.log.Warn("could not remove a run's output; trying again on the next walk", "sandbox", path, "err", err)
	}
}
