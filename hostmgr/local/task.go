package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/hostmgr/local/supervise"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// task is one run launched by this Backend.
type task struct {
	spec    hostmgr.LaunchSpec
	sandbox string
	// exited is closed once the process has been reaped (or could not be
	// started); log followers stop there.
	exited chan struct{}
	// gone is closed after the terminal event has been delivered; Close
	// waits on it.
	gone chan struct{}

	// Set by Launch, under mu, before it starts the process and the run
	// goroutine; read-only afterwards, so read without mu.
	env       []string          // the run's environment, for its health check too
	ports     map[string]uint32 // the run's ports by name
	heldPorts []uint32          // what to give back to Backend.portUse
	volume    string            // absolute path of the volume, or ""
	volKey    string            // its key in Backend.volUse, or ""
	// user is who the run's processes, and its command health check, run
	// as; nil: the control plane's user. An adopted run keeps the user it
	// was started as (its record says), whatever the backend's is now.
	user *TaskUser
	// healthCtx ends the health watcher and any check it runs; stopHealth
	// (idempotent) is called when the process exits, on Kill and on Close.
	healthCtx  context.Context
	stopHealth context.CancelFunc

	mu   sync.Mutex
	last hostmgr.TaskEvent
	// removed marks a task whose Launch failed before it was accepted.
	removed bool
	started bool // the process was started
	pgid    int  // its pid, which is also its process group id
	// reaped is set, under mu, in the same critical section that reaps the
	// process. Signals are only sent to pgid while it is false: until then
	// the group leader is at least a zombie, so its pid (the group id) cannot
	// have been reused by an unrelated process.
	reaped       bool
	killing      bool
	killDeadline time.Time
	killTimer    *time.Timer

	// closed: Close stopped the run (the control plane shut down).
	closed bool
	// record is the run's record under <Dir>/runs (adopt.go); nil until
	// its process has started.
	record *runRecord
	// adoptedTicks is the start time of the process of a run adopted from
	// an earlier backend (0 for our own runs): it is not our child, so
	// nothing keeps its pid from being reused once it exits, and signals
	// are sent only while the pid still has that start time.
	adoptedTicks uint64
	// cg is the run's cgroup (cgroup.go), nil when it has none. Set before
	// the process starts, under mu; read-only afterwards.
	cg *runCgroup

	// sup is the pid of the run's supervisor (package supervise), 0 for a
	// run started as this process's own child or adopted without one.
	// supTicks is its start time when it is not our child (adopted), 0
	// when it is. statusPath is where the supervisor writes the run's end.
	sup        int
	supTicks   uint64
	statusPath string
}

// portsCopy is a copy of the run's ports, or nil.
func (t *task) portsCopy() map[string]uint32 {
	if t.ports == nil {
		return nil
	}
	return maps.Clone(t.ports)
}

// event builds an event of the run. Each carries its own copy of the ports,
// so a sink may keep or change it.
func (t *task) event(state pelotonv1.TaskState, code int32, reason, msg string) hostmgr.TaskEvent {
	ev := hostmgr.TaskEvent{
		TaskID:   t.spec.TaskID,
		Host:     t.spec.Host,
		State:    state,
		ExitCode: code,
		Reason:   reason,
		Message:  msg,
		Time:     time.Now(),
	}
	ev.Ports = t.portsCopy()
	return ev
}

// start creates the output files and the run's cgroup (when cgs is not
// nil) and starts the process in its own process group, inside the cgroup.
// The caller holds t.mu. A failure is reported to the user twice: as the
// launch-failed event and as a line in the sandbox's stderr, so `peloton
// task logs --stderr` explains it too. A cgroup made before a failure is
// left in t.cg for the run's end to remove.
func (t *task) start(env []string, cgs *cgroups, direct bool) error {
	stdout, err := t.createOutput("stdout")
	if err != nil {
		return err
	}
	defer stdout.Close()
	stderr, err := t.createOutput("stderr")
	if err != nil {
		return err
	}
	defer stderr.Close()

	if cgs != nil {
		t.cg, err = cgs.newRun(t.spec.TaskID, t.spec.Resources)
	}
	if err == nil {
		err = t.exec(env, stdout, stderr, direct)
	}
	if err != nil {
		fmt.Fprintf(stderr, "peloton: launch failed: %v\n", err)
	}
	return err
}

// createOutput creates one of the run's output files in its fresh sandbox,
// owned by the run's user, who may then rotate or truncate it.
func (t *task) createOutput(name string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(t.sandbox, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, err
	}
	if u := t.user; u != nil {
		if err := f.Chown(int(u.UID), int(u.GID)); err != nil {
			f.Close()
			return nil, fmt.Errorf("give %s to user %s: %w", name, u.Name, err)
		}
	}
	return f, nil
}

// exec starts the run: under a supervisor of its own (supervise.go), or,
// with direct (off Linux, or a benchmark's baseline), as a child of this
// process. The caller holds t.mu.
func (t *task) exec(env []string, stdout, stderr *os.File, direct bool) error {
	path, err := lookPath(t.spec.Command[0], envValue(env, "PATH"))
	if err != nil {
		return err
	}
	// The child gets its own descriptors for the files (they are dup'ed at
	// fork), so the caller may close ours; without pipes there is no copying
	// goroutine, and no wait can hang on a grandchild holding the output
	// open. Stdin is /dev/null, as os/exec would give.
	stdin, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer stdin.Close()
	if !direct {
		return t.execSupervised(path, env, stdin, stdout, stderr)
	}
	// A run started directly writes its files itself: its lines have no
	// times (Logs refuses --since and --timestamps for it).
	p, err := t.cg.startProcess(path, t.spec.Command, &os.ProcAttr{
		Dir:   t.sandbox,
		Env:   env,
		Files: []*os.File{stdin, stdout, stderr},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Credential: t.user.credential()},
	})
	if err != nil {
		return err
	}
	// The os.Process is released at once: it holds a pidfd of its own, and
	// with the reaper's that would be two descriptors per run (10,000 runs
	// would hit a common 20,000 file limit). The child stays ours to reap,
	// by pid, in reap.
	t.started = true
	t.pgid = p.Pid
	p.Release()
	return nil
}

// reap waits for the process to exit, kills what it left in its group,
// reaps it and returns its terminal event.
func (t *task) reap(log *slog.Logger) hostmgr.TaskEvent {
	if t.sup > 0 {
		return t.reapSupervised(log)
	}
	// Wait until the leader has exited but leave it a zombie, so that its
	// pid cannot be reused while we SIGKILL the rest of its group: the run
	// is over, and leftovers would run unaccounted and unkillable. The wait
	// parks this goroutine on a channel of the shared pidfd reaper
	// (wait_linux.go), not a thread in a syscall; wait4 then returns at once.
	var ws syscall.WaitStatus
	var werr error
	if exited := exitNotify(t.pgid); exited != nil {
		<-exited
		t.mu.Lock()
		t.signal(syscall.SIGKILL, log)
		ws, werr = wait4(t.pgid)
	} else {
		ws, werr = wait4(t.pgid)
		t.mu.Lock()
	}
	t.reaped = true
	if t.killTimer != nil {
		t.killTimer.Stop()
	}
	ev := t.outcome(ws, werr)
	if t.cg != nil && werr == nil {
		// Read before the cgroup is removed, and after the process is
		// reaped: the kernel counts an OOM kill before its victim dies.
		ev = oomEnd(ev, sigkilled(waitStatus(ws, nil)), t.cg.memoryMB, t.cg.readMemEnd())
	}
	t.mu.Unlock()
	close(t.exited)
	return ev
}

// wait4 reaps the child pid, blocking until it exits.
func wait4(pid int) (syscall.WaitStatus, error) {
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		return ws, err
	}
}

// outcome turns the result of wait4 into the terminal event. The caller
// holds t.mu.
func (t *task) outcome(ws syscall.WaitStatus, werr error) hostmgr.TaskEvent {
	return t.ending(waitStatus(ws, werr))
}

// waitStatus is the result of wait4 in the words of a supervisor.
func waitStatus(ws syscall.WaitStatus, werr error) supervise.Status {
	switch {
	case werr != nil:
		return supervise.Status{WaitError: werr.Error()}
	case ws.Signaled():
		return supervise.Status{Signal: int32(ws.Signal())}
	default:
		return supervise.Status{Exited: true, ExitCode: int32(ws.ExitStatus())}
	}
}

// ending turns how a run ended into its terminal event. The caller holds
// t.mu.
func (t *task) ending(st supervise.Status) hostmgr.TaskEvent {
	if st.WaitError != "" {
		return t.event(pelotonv1.TaskState_FAILED, -1, "wait-failed", st.WaitError)
	}
	code := st.ExitCode
	msg := fmt.Sprintf("exited with code %d", code)
	signaled := !st.Exited
	if signaled {
		code = 128 + st.Signal
		msg = "terminated by signal: " + syscall.Signal(st.Signal).String()
	}
	switch {
	case t.killing || st.Killed:
		return t.event(pelotonv1.TaskState_KILLED, code, "killed", msg)
	case signaled:
		return t.event(pelotonv1.TaskState_FAILED, code, "signaled", msg)
	case code == 0:
		return t.event(pelotonv1.TaskState_SUCCEEDED, 0, "", "")
	default:
		return t.event(pelotonv1.TaskState_FAILED, code, "exit-nonzero", msg)
	}
}

// sigkilled reports whether a run ended by SIGKILL (or a shell's report of
// it), which is how the OOM killer ends a process.
func sigkilled(st supervise.Status) bool {
	kill := int32(syscall.SIGKILL)
	return !st.Exited && st.Signal == kill || st.Exited && st.ExitCode == 128+kill
}

// kill starts or hurries the termination of the process group: SIGTERM now
// and SIGKILL at now+grace, or SIGKILL at once when grace <= 0. A kill that
// is already due earlier is left alone. The health check stops at once: a
// run being killed has no health worth reporting, and its check must not
// outlive it. The caller holds t.mu.
func (t *task) kill(grace time.Duration, log *slog.Logger) {
	t.stopHealth()
	if t.removed || !t.started || t.reaped {
		return
	}
	grace = max(grace, 0)
	deadline := time.Now().Add(grace)
	if t.killing && !deadline.Before(t.killDeadline) {
		return
	}
	first := !t.killing
	t.killing, t.killDeadline = true, deadline
	if t.sup > 0 {
		t.killSupervised(deadline, log)
		return
	}
	if grace == 0 {
		if t.killTimer != nil {
			t.killTimer.Stop()
		}
		t.signal(syscall.SIGKILL, log)
		return
	}
	if first {
		t.signal(syscall.SIGTERM, log)
	}
	if t.killTimer != nil {
		t.killTimer.Reset(grace)
		return
	}
	t.killTimer = time.AfterFunc(grace, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if !t.reaped {
			t.signal(syscall.SIGKILL, log)
		}
	})
}

// signal sends sig to the whole process group. The caller holds t.mu and
// has checked that the process is not yet reaped.
func (t *task) signal(sig syscall.Signal, log *slog.Logger) {
	if !t.stillOurs() {
		return
	}
	if err := syscall.Kill(-t.pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		log.Warn("signal task", "task", t.spec.TaskID, "signal", sig.String(), "err", err)
	}
}

// lookPath finds an executable like exec.LookPath, but in the task's PATH
// rather than the control plane's. Relative PATH entries are skipped: they
// would resolve inside the sandbox, which is what exec.ErrDot guards against.
// A name with a slash is used as is (relative to the sandbox).
func lookPath(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", &exec.Error{Name: name, Err: exec.ErrNotFound}
}

// envValue returns the last value of key in env, as os/exec would use it.
func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}

// ReasonOOMKilled is the reason of the FAILED end of a run that the
// kernel's OOM killer ended, almost always for exceeding its memory limit
// (spec.Resources.MemoryMB, enforced with a cgroup).
const ReasonOOMKilled = "oom-killed"

// ReasonShutdown is the reason of the LOST end of a run that Close stopped:
// the control plane shut down, which is not the run's failure, and a
// restarted one runs the instance again.
const ReasonShutdown = "control-plane-shutdown"

// shutdownEnd turns the end of a run that Close stopped, and that did not
// finish on its own meanwhile, into LOST (ReasonShutdown).
func (t *task) shutdownEnd(ev hostmgr.TaskEvent) hostmgr.TaskEvent {
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if !closed || ev.State == pelotonv1.TaskState_SUCCEEDED {
		return ev
	}
	ev.State, ev.Reason = pelotonv1.TaskState_LOST, ReasonShutdown
	ev.Message = "the control plane shut down and stopped the run (" + ev.Message + ")"
	return ev
}
