package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/hostmgr/local/supervise"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// Runs outlive a crash of the control plane (kill -9, a panic, a lost
// machine power aside): their processes go on, reparented to init. So that
// a restarted backend neither loses them nor starts a second run of the
// instance beside them, every run is recorded under <Dir>/runs/<TaskID>.json
// once its process has started: its pid, the pid's start time (to tell a
// reused pid apart), its host, resources, ports, volume, health check,
// cgroup and the user it runs as. The records hold the runs' environments,
// so they are the control plane's user's alone (0600 in a 0700 directory).
// When the backend sees the run end, the record is rewritten with the end.
//
// A new Backend over the same Dir reads the records at Start:
//   - a run whose process still lives (same pid, same start time) is
//     adopted: Status says RUNNING, Runs lists it, Kill signals its process
//     group, its ports and volume stay taken, its health check resumes, and
//     its end is reported. The exit status of a process that is not our
//     child cannot be read, so an adopted run that ends on its own ends LOST
//     with reason hostmgr.ReasonUnobservedEnd (KILLED if we killed it);
//   - a run that ended while no backend watched it is LOST with that reason
//     too;
//   - a run whose end was recorded keeps its end (Status answers it, as
//     for a run that ended in this process).
//
// An adopted run's cgroup is removed when it ends, as for a run of this
// backend; the cgroup of a run that ended unseen is removed at Start if no
// process is left in it (a live one is left alone, like the process).
//
// Ended records beyond maxFinished are deleted, oldest first, at Start;
// see retention.go for when the others go.
// Adoption needs /proc (Linux); elsewhere a record of a live run is
// reported LOST, and its process is left alone.

// runsDir is the directory under Config.Dir that holds the run records.
const runsDir = "runs"

// runRecord is what a restarted backend needs to know of a run.
type runRecord struct {
	TaskID      string              `json:"taskId"`
	JobID       string              `json:"jobId"`
	Instance    uint32              `json:"instance"`
	Run         uint32              `json:"run"`
	Host        string              `json:"host"`
	Pid         int                 `json:"pid"`
	StartTicks  uint64              `json:"startTicks"`
	Command     []string            `json:"command"`
	Env         map[string]string   `json:"env,omitempty"`
	Resources   resources.Resources `json:"resources"`
	PortSpecs   []hostmgr.Port      `json:"portSpecs,omitempty"`
	Ports       map[string]uint32   `json:"ports,omitempty"`
	VolumeID    string              `json:"volumeId,omitempty"`
	HealthCheck json.RawMessage     `json:"healthCheck,omitempty"`
	KillGraceNs int64               `json:"killGraceNs,omitempty"`
	Cgroup      *recordCgroup       `json:"cgroup,omitempty"`
	User        *recordUser         `json:"user,omitempty"`
	// Supervisor is the run's supervisor (supervised.go); nil for a run
	// started without one.
	Supervisor *recordSupervisor `json:"supervisor,omitempty"`
	Started    time.Time         `json:"started"`
	End        *recordEnd        `json:"end,omitempty"`
}

// recordUser is the user a run runs as (Config.TaskUser); none: the
// control plane's. An adopted run's health check runs as it.
type recordUser struct {
	Name   string   `json:"name"`
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups,omitempty"`
	Home   string   `json:"home,omitempty"`
}

func (u *TaskUser) toRecord() *recordUser {
	if u == nil {
		return nil
	}
	return &recordUser{Name: u.Name, UID: u.UID, GID: u.GID, Groups: u.Groups, Home: u.Home}
}

func (r *recordUser) taskUser() *TaskUser {
	if r == nil {
		return nil
	}
	return &TaskUser{Name: r.Name, UID: r.UID, GID: r.GID, Groups: r.Groups, Home: r.Home}
}

// recordSupervisor names a run's supervisor process: its pid and start
// time, which together name it uniquely.
type recordSupervisor struct {
	Pid        int    `json:"pid"`
	StartTicks uint64 `json:"startTicks"`
}

type recordEnd struct {
	State    pelotonv1.TaskState `json:"state"`
	ExitCode int32               `json:"exitCode"`
	Reason   string              `json:"reason,omitempty"`
	Message  string              `json:"message,omitempty"`
	Time     time.Time           `json:"time"`
}

func (b *Backend) recordPath(taskID string) string {
	return filepath.Join(b.dir, runsDir, taskID+".json")
}

// writeRecord records a run whose process has just started. The caller
// holds t.mu. A failure is logged: the run goes on, but a restart would not
// find it.
func (b *Backend) writeRecord(t *task) {
	ticks, err := procStartTicks(t.pgid)
	if err != nil {
		// Off Linux, or the process already gone: a zero start time
		// makes a restart report the run LOST rather than adopt a stranger.
		ticks = 0
	}
	rec := runRecord{TaskID: t.spec.TaskID, JobID: t.spec.JobID, Instance: t.spec.InstanceID, Run: t.spec.RunID,
		Host: t.spec.Host, Pid: t.pgid, StartTicks: ticks, Command: t.spec.Command, Env: t.spec.Env,
		Resources: t.spec.Resources, PortSpecs: t.spec.Ports, Ports: t.ports, KillGraceNs: int64(t.spec.KillGrace),
		Cgroup: t.cg.toRecord(), User: t.user.toRecord(), Started: time.Now()}
	if t.sup > 0 {
		supTicks, err := procStartTicks(t.sup)
		if err == nil {
			rec.Supervisor = &recordSupervisor{Pid: t.sup, StartTicks: supTicks}
		}
	}
	if v := t.spec.Volume; v != nil {
		rec.VolumeID = v.ID
	}
	if hc := t.spec.HealthCheck; hc != nil {
		// A check protojson refuses (a string that is not UTF-8) cannot be
		// recorded, so neither can the run: a record without its check
		// would adopt the run unchecked.
		hcJSON, err := protojson.Marshal(hc)
		if err != nil {
			b.log.Warn("could not record a run's health check; a restart of the control plane will not find the run", "task", t.spec.TaskID, "err", err)
			return
		}
		rec.HealthCheck = hcJSON
	}
	t.record = &rec
	if err := b.storeRecord(&rec); err != nil {
		b.log.Warn("could not record a run; a restart of the control plane will not find it", "task", t.spec.TaskID, "err", err)
	}
}

// endRecord rewrites a run's record with its end.
func (b *Backend) endRecord(t *task, ev hostmgr.TaskEvent) {
	if t.record == nil {
		return
	}
	rec := *t.record
	rec.End = &recordEnd{State: ev.State, ExitCode: ev.ExitCode, Reason: ev.Reason, Message: ev.Message, Time: ev.Time}
	if err := b.storeRecord(&rec); err != nil {
		b.log.Warn("could not record a run's end", "task", t.spec.TaskID, "err", err)
		return
	}
	// The record has the end now; the supervisor's files are not needed.
	b.removeRunFiles(t.spec.TaskID)
}

// recordWrites bounds the record writes under way at once. A burst of
// runs ending together (a job killed, a host drained) writes as many
// records; each write is a few blocking system calls, and the Go runtime
// keeps a thread for every one blocked at once, for good.
var recordWrites = make(chan struct{}, 4)

// storeRecord writes rec atomically: to a temporary file, then renamed.
func (b *Backend) storeRecord(rec *runRecord) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	recordWrites <- struct{}{}
	defer func() { <-recordWrites }()
	path := b.recordPath(rec.TaskID)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// loadRecords reads the records of earlier backends over Dir: it adopts the
// runs still alive and remembers the ends of the others. Called by Start.
func (b *Backend) loadRecords() error {
	dir := filepath.Join(b.dir, runsDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("local: start: read %s: %w", dir, err)
	}
	var ended []*task
	adopted, recovered := 0, 0
	adoptedIDs := map[string]bool{}
	defer func() { b.killStrays(adoptedIDs) }()
	// The live processes of runs, found by their environment: a record
	// written just before its process started names no process yet.
	recs := b.readRecords(dir, entries)
	procs := b.runProcs()
	for i := range recs {
		if recs[i].End == nil {
			b.recordFound(&recs[i], procs)
		}
	}
	b.awaitStarting(recs)
	for _, rec := range recs {
		id := rec.TaskID
		t := b.recordedTask(&rec)
		if rec.End == nil {
			if st, err := supervise.ReadStatus(t.statusPath); err == nil {
				// It ended while no backend watched, and its supervisor
				// wrote down how: the true end, never a second run.
				ev := t.ending(st)
				if t.cg != nil && st.WaitError == "" {
					ev = oomEnd(ev, sigkilled(st), t.cg.memoryMB, t.cg.readMemEnd())
				}
				rec.End = &recordEnd{State: ev.State, ExitCode: ev.ExitCode, Reason: ev.Reason, Message: ev.Message, Time: st.Time}
				if err := b.storeRecord(&rec); err != nil {
					b.log.Warn("could not record a run's end", "task", id, "err", err)
				} else {
					b.removeRunFiles(id)
				}
				recovered++
			} else if !errors.Is(err, os.ErrNotExist) {
				b.log.Warn("unreadable status of a run's supervisor", "task", id, "err", err)
			}
		} else {
			b.removeRunFiles(id) // left if a stop came between the two
		}
		switch {
		case rec.End == nil && b.adopt(t):
			adopted++
			adoptedIDs[id] = true
			continue
		case t.cg != nil:
			// Ended: its cgroup should be gone. One left behind is
			// removed if empty; processes in it are left alone, as the
			// run's process is when it is not adopted.
			_ = rmdirAll(t.cg.dirs())
			t.cg = nil
		}
		switch {
		case rec.End != nil:
			t.last = hostmgr.TaskEvent{TaskID: id, Host: rec.Host, State: rec.End.State, ExitCode: rec.End.ExitCode,
				Reason: rec.End.Reason, Message: rec.End.Message, Time: rec.End.Time, Ports: t.portsCopy()}
			ended = append(ended, t)
		default:
			t.last = t.event(pelotonv1.TaskState_LOST, 0, hostmgr.ReasonUnobservedEnd,
				"the run ended while no control plane watched it; how it ended is not known")
			b.endRecord(t, t.last)
			ended = append(ended, t)
		}
	}
	// The ended runs are remembered like runs that end here, oldest first,
	// and the oldest beyond maxFinished forgotten (records deleted).
	sort.Slice(ended, func(i, j int) bool { return ended[i].last.Time.Before(ended[j].last.Time) })
	b.mu.Lock()
	for _, t := range ended {
		close(t.exited)
		close(t.gone)
		b.tasks[t.spec.TaskID] = t
		b.finished = append(b.finished, t.spec.TaskID)
		b.indexEndedLocked(t.spec.JobID, t.spec.TaskID)
	}
	b.pruneFinishedLocked()
	b.mu.Unlock()
	if adopted+len(ended) > 0 {
		b.log.Info("found the runs of an earlier control plane", "adopted", adopted, "ended", len(ended),
			"endedUnwatched", recovered)
	}
	return nil
}

// readRecords reads the run records among entries of dir, removing the
// temporary files of writes cut short and skipping what is not a record.
func (b *Backend) readRecords(dir string, entries []os.DirEntry) []runRecord {
	var recs []runRecord
	for _, e := range entries {
		name := e.Name()
		if strings.HasSuffix(name, ".tmp") {
			_ = os.Remove(filepath.Join(dir, name)) // a write cut short
			continue
		}
		id, ok := strings.CutSuffix(name, ".json")
		if !ok || !validTaskID(id) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			b.log.Warn("unreadable run record", "file", name, "err", err)
			continue
		}
		var rec runRecord
		if err := json.Unmarshal(data, &rec); err != nil || rec.TaskID != id {
			b.log.Warn("invalid run record; ignoring it", "file", name, "err", err)
			continue
		}
		recs = append(recs, rec)
	}
	return recs
}

// awaitStarting waits, at most startingWait, for the runs whose supervisor
// lives but has not started the run yet (the control plane that launched
// them died first; on a loaded machine a supervisor may take seconds): each
// is recorded with its process once the supervisor starts it, so it is
// adopted, or not at all if the supervisor ends first. A run not waited for
// would be reported LOST and run again while its supervisor still starts
// the first one, unwatched.
func (b *Backend) awaitStarting(recs []runRecord) {
	starting := func(rec *runRecord) bool {
		s := rec.Supervisor
		if rec.End != nil || rec.Pid > 0 || s == nil {
			return false
		}
		ticks, err := procStartTicks(s.Pid)
		return err == nil && ticks == s.StartTicks
	}
	deadline := time.Now().Add(startingWait)
	for first := true; ; first = false {
		var waiting []*runRecord
		for i := range recs {
			if starting(&recs[i]) {
				waiting = append(waiting, &recs[i])
			}
		}
		if len(waiting) == 0 {
			return
		}
		if first {
			b.log.Info("waiting for supervisors of an earlier control plane to start their runs", "runs", len(waiting))
		}
		if time.Now().After(deadline) {
			b.log.Warn("supervisors did not start their runs in time; their runs are lost", "runs", len(waiting))
			return
		}
		time.Sleep(20 * time.Millisecond)
		procs := b.runProcs()
		for _, rec := range waiting {
			b.recordFound(rec, procs)
		}
	}
}

// recordFound fills in the processes of a run recorded as starting, if
// procs has them, and writes its record again with them.
func (b *Backend) recordFound(rec *runRecord, procs liveProcs) {
	if b.findProcesses(rec, procs) {
		if err := b.storeRecord(rec); err != nil {
			b.log.Warn("could not record the processes of a run found starting", "task", rec.TaskID, "err", err)
		}
	}
}

// startingWait bounds awaitStarting.
const startingWait = 10 * time.Second

// findProcesses fills in the processes of a run recorded as starting (a
// control plane that died between starting them and recording them),
// found by their environment, and reports whether it found any.
func (b *Backend) findProcesses(rec *runRecord, procs liveProcs) bool {
	found := false
	if rec.Pid <= 0 || rec.StartTicks == 0 {
		if pid, ticks, ok := runLeader(procs.runs[rec.TaskID]); ok {
			rec.Pid, rec.StartTicks, found = pid, ticks, true
		}
	}
	if pid, ok := procs.sups[rec.TaskID]; ok && rec.Supervisor == nil {
		if ticks, err := procStartTicks(pid); err == nil {
			rec.Supervisor, found = &recordSupervisor{Pid: pid, StartTicks: ticks}, true
		}
	}
	return found
}

// recordedTask rebuilds a run's task from its record.
func (b *Backend) recordedTask(rec *runRecord) *task {
	spec := hostmgr.LaunchSpec{TaskID: rec.TaskID, JobID: rec.JobID, InstanceID: rec.Instance, RunID: rec.Run, Host: rec.Host,
		Command: rec.Command, Env: rec.Env, Resources: rec.Resources, Ports: rec.PortSpecs, KillGrace: time.Duration(rec.KillGraceNs)}
	if rec.VolumeID != "" {
		spec.Volume = &hostmgr.Volume{ID: rec.VolumeID}
	}
	if len(rec.HealthCheck) > 0 {
		hc := &pelotonv1.HealthCheck{}
		if err := protojson.Unmarshal(rec.HealthCheck, hc); err == nil {
			spec.HealthCheck = hc
		}
	}
	t := &task{spec: spec, sandbox: filepath.Join(b.dir, rec.TaskID), ports: rec.Ports, record: rec, statusPath: b.statusPath(rec.TaskID),
		exited: make(chan struct{}), gone: make(chan struct{}), cg: recordedCgroup(rec), user: rec.User.taskUser()}
	t.healthCtx, t.stopHealth = context.WithCancel(context.Background())
	return t
}

// adopt takes over t's process if it still lives, and reports whether it
// did. The run then counts as this backend's: its ports and volume are
// taken, its health check runs, and its end will be reported.
func (b *Backend) adopt(t *task) bool {
	rec := t.record
	if rec.StartTicks == 0 || rec.Pid <= 0 || !b.hasHost(rec.Host) {
		return false
	}
	// A run with a live supervisor is followed through it, and its end
	// will be known; one whose supervisor is gone (or that never had
	// one) is followed by its own process, whose exit status cannot be
	// read.
	var exited <-chan struct{}
	ok := false
	if s := rec.Supervisor; s != nil {
		if exited, ok = watchAdopted(s.Pid, s.StartTicks); ok {
			t.sup, t.supTicks = s.Pid, s.StartTicks
		}
	}
	if !ok {
		if exited, ok = watchAdopted(rec.Pid, rec.StartTicks); !ok {
			return false
		}
	}
	t.started, t.pgid, t.adoptedTicks = true, rec.Pid, rec.StartTicks
	if t.spec.Volume != nil {
		t.volume = b.volumePath(rec.Host, t.spec.Volume.ID)
		t.volKey = volumeKey(rec.Host, t.spec.Volume.ID)
	}
	t.env = b.taskEnv(t.spec, t.sandbox, t.ports, t.volume)
	t.last = t.event(pelotonv1.TaskState_RUNNING, 0, "", "")
	b.mu.Lock()
	b.tasks[t.spec.TaskID] = t
	for _, p := range t.ports {
		b.portUse[p]++
		t.heldPorts = append(t.heldPorts, p)
	}
	if t.volKey != "" {
		b.volUse[t.volKey] = t.spec.TaskID
	}
	b.mu.Unlock()
	b.log.Info("adopted a run of an earlier control plane", "task", t.spec.TaskID, "host", rec.Host, "pid", rec.Pid)
	if b.user != nil && (t.user == nil || t.user.UID != b.user.UID) {
		was := "the control plane's user"
		if t.user != nil {
			was = "user " + t.user.Name
		}
		b.log.Warn("an adopted run runs as another user than the task user, until it ends", "task", t.spec.TaskID, "runsAs", was, "taskUser", b.user.Name)
	}
	go b.runAdopted(t, exited)
	return true
}

// runAdopted is run for an adopted run: it resumes the health check and
// reports the run's end.
func (b *Backend) runAdopted(t *task, exited <-chan struct{}) {
	defer close(t.gone)
	watched := make(chan struct{})
	if hc := t.spec.HealthCheck; hc != nil {
		go func() {
			defer close(watched)
			b.watchHealth(t, newHealthConfig(hc, t.spec.Ports, t.ports))
		}()
	} else {
		close(watched)
	}
	<-exited
	t.mu.Lock()
	t.reaped = true
	if t.killTimer != nil {
		t.killTimer.Stop()
	}
	var last hostmgr.TaskEvent
	if t.sup > 0 {
		// Not our child: its own exit status is not ours to read, only
		// the one it wrote.
		last = t.supervisedEnd(0, errNotOurChild, !b.isDetached(), b.log)
	} else if t.killing {
		last = t.event(pelotonv1.TaskState_KILLED, 0, "killed",
			"killed; its exit status is not known (it was started by an earlier control-plane process)")
	} else {
		msg := "the run ended; its exit status is not known (it was started by an earlier control-plane process)"
		if t.cg != nil && t.cg.readMemEnd().oomKills > 0 {
			// Not FAILED: the OOM killer may have ended a child only.
			msg += "; the kernel's OOM killer killed a process of the run"
			if t.cg.memoryMB > 0 {
				msg += fmt.Sprintf(" (memory limit %d MiB)", t.cg.memoryMB)
			}
		}
		last = t.event(pelotonv1.TaskState_LOST, 0, hostmgr.ReasonUnobservedEnd, msg)
	}
	t.mu.Unlock()
	close(t.exited)
	t.stopHealth()
	<-watched
	if b.isDetached() {
		return
	}
	b.dropCgroup(t.cg, t.spec.TaskID)
	last = t.shutdownEnd(last)
	b.releaseRun(t)
	b.endRecord(t, last)
	b.emit(t, last)
	b.forgetOld(t.spec.TaskID)
}

// stillOurs reports whether an adopted run's pid still names the process
// that was adopted; signals are sent only then.
func (t *task) stillOurs() bool {
	if t.adoptedTicks == 0 {
		return true
	}
	ticks, err := procStartTicks(t.pgid)
	return err == nil && ticks == t.adoptedTicks
}

// pollAdopted closes the returned channel once process pid, with start time
// ticks, is gone: the fallback when no pidfd can watch it.
func pollAdopted(pid int, ticks uint64) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if t, err := procStartTicks(pid); err != nil || t != ticks {
				return
			}
			time.Sleep(time.Second)
		}
	}()
	return done
}

// errNotOurChild stands for the exit status of an adopted supervisor,
// which only its parent can read.
var errNotOurChild = errors.New("not a child of this process")

// isDetached reports whether detach was called.
func (b *Backend) isDetached() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.detached
}

// detach makes the backend let go of its runs as a crash of the control
// plane would: they go on, and nothing more is reported, recorded or
// signalled by this backend. For tests of adoption.
func (b *Backend) detach() {
	b.mu.Lock()
	b.detached = true
	b.closed = true
	b.mu.Unlock()
	b.stopSweeper()
	b.mu.Lock()
	all := make([]*task, 0, len(b.tasks))
	for _, t := range b.tasks {
		all = append(all, t)
	}
	b.mu.Unlock()
	for _, t := range all {
		t.mu.Lock()
		if t.killTimer != nil {
			t.killTimer.Stop()
		}
		t.reaped = true // no more signals from here
		t.mu.Unlock()
		t.stopHealth()
	}
}

var _ hostmgr.RunLister = (*Backend)(nil)

// Runs lists the runs that have not ended, adopted ones included.
func (b *Backend) Runs() []hostmgr.RunInfo {
	b.mu.Lock()
	all := make([]*task, 0, len(b.tasks))
	for _, t := range b.tasks {
		all = append(all, t)
	}
	b.mu.Unlock()
	var out []hostmgr.RunInfo
	for _, t := range all {
		t.mu.Lock()
		last, removed := t.last, t.removed
		t.mu.Unlock()
		switch last.State {
		case pelotonv1.TaskState_SUCCEEDED, pelotonv1.TaskState_FAILED, pelotonv1.TaskState_KILLED, pelotonv1.TaskState_LOST:
			continue
		}
		if removed {
			continue
		}
		out = append(out, hostmgr.RunInfo{TaskID: t.spec.TaskID, Host: t.spec.Host, Resources: t.spec.Resources, Last: last})
	}
	return out
}
