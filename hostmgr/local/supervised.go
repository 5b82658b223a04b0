package local

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/hostmgr/local/supervise"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Runs under supervisors. On Linux every run is started by a supervisor
// process of its own (package supervise: this binary again, in a session
// of its own), which is the run's parent, waits for it and writes how it
// ended to <Dir>/runs/<TaskID>.exit before it exits. The backend waits for
// the supervisor (its child) and reads that file, so a run's end is known
// exactly whether this process watched it or not: a restarted backend
// adopts the supervisors that still run and reads the status of every run
// that ended while no backend watched (adopt.go). Only a run whose
// supervisor died too (killed with the control plane, a reboot) is
// reported LOST and run again.
//
// Kills go through the supervisor as well: the backend writes the kill's
// deadline to <TaskID>.kill and sends the supervisor SIGTERM; the
// supervisor sends SIGTERM to the run's process group and SIGKILL (and the
// cgroup v2 kill) at the deadline, so a grace period holds even if the
// control plane dies during it.

// ReasonSupervisorLost is the reason of the LOST end of a run whose
// supervisor ended without recording the run's end (it was killed, or the
// machine restarted): how the run ended is not known, so it runs again.
const ReasonSupervisorLost = "supervisor-lost"

// defaultKillGrace is the grace period a supervisor gives a run on a
// SIGTERM that came with no deadline (someone else's kill of the
// supervisor); the backend always names one.
const defaultKillGrace = 10 * time.Second

// statusPath is where the supervisor of run taskID writes its end.
func (b *Backend) statusPath(taskID string) string {
	return filepath.Join(b.dir, runsDir, taskID+supervise.StatusSuffix)
}

// removeRunFiles deletes what a supervisor wrote for run taskID; the
// record keeps the run's end once it has it.
func (b *Backend) removeRunFiles(taskID string) {
	st := b.statusPath(taskID)
	for _, p := range []string{st, supervise.KillPath(st), supervise.KillPath(st) + ".new", supervise.PartialPath(st)} {
		_ = os.Remove(p)
	}
}

// supervisorCgroup is the cgroup of the run in a supervisor's words.
func (rc *runCgroup) supervisorCgroup() *supervise.Cgroup {
	if rc == nil {
		return nil
	}
	if rc.version == 2 {
		return &supervise.Cgroup{Version: 2, Dirs: []string{rc.memory}}
	}
	return &supervise.Cgroup{Version: rc.version, Dirs: rc.dirs()}
}

// execSupervised starts the run's supervisor and, through it, the run. It
// returns once the supervisor has said the run's pid, or why it could not
// start it. The caller holds t.mu.
func (t *task) execSupervised(path string, env []string, stdin, stdout, stderr *os.File) error {
	cfg := supervise.Config{TaskID: t.spec.TaskID, Path: path, Argv: t.spec.Command, Env: env, Dir: t.sandbox,
		Cgroup: t.cg.supervisorCgroup(), KillGrace: cmpOr(t.spec.KillGrace, defaultKillGrace), StatusPath: t.statusPath,
		Times: true}
	outTimes, errTimes, err := t.createTimes()
	if err != nil {
		return err
	}
	defer outTimes.Close()
	defer errTimes.Close()
	if u := t.user; u != nil {
		cfg.User = &supervise.User{UID: u.UID, GID: u.GID, Groups: u.Groups}
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("supervisor: %w", err)
	}
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("supervisor: %w", err)
	}
	defer cfgW.Close()
	repR, repW, err := os.Pipe()
	if err != nil {
		cfgR.Close()
		return fmt.Errorf("supervisor: %w", err)
	}
	defer repR.Close()
	// /proc/self/exe is this process's binary even if the file was
	// replaced or deleted since it started. A session of its own keeps
	// the supervisor out of the terminal's signals (Ctrl-C on `peloton
	// up`) and lets it outlive us.
	p, err := os.StartProcess("/proc/self/exe", []string{supervise.ProcessName, t.spec.TaskID}, &os.ProcAttr{
		Dir:   "/",
		Env:   []string{supervise.SupervisorEnv + "=" + t.statusPath},
		Files: []*os.File{stdin, stdout, stderr, cfgR, repW, outTimes, errTimes},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	cfgR.Close()
	repW.Close()
	if err != nil {
		cfgW.Close()
		return fmt.Errorf("supervisor: start: %w", err)
	}
	sup := p.Pid
	p.Release() // reaped by pid, like a run (see exec)
	_, werr := cfgW.Write(data)
	cfgW.Close()
	line, rerr := bufio.NewReader(repR).ReadBytes('\n')
	var rep supervise.Report
	if rerr == nil {
		rerr = json.Unmarshal(line, &rep)
	}
	switch {
	case rerr == nil && rep.Error == "" && rep.Pid > 0:
		t.started, t.pgid, t.sup = true, rep.Pid, sup
		return nil
	case rerr == nil && rep.Error != "":
		err = errors.New(rep.Error)
	case werr != nil:
		err = fmt.Errorf("supervisor: %w", werr)
	default:
		err = fmt.Errorf("supervisor: no answer: %v", rerr)
	}
	// The supervisor exits when it cannot start the run.
	_ = syscall.Kill(sup, syscall.SIGKILL)
	_, _ = wait4(sup)
	return err
}

// createTimes creates the indexes of the times of the run's stdout and
// stderr (supervise/logtimes.go), which its supervisor writes. They are
// the control plane's, not the run's user's: the run never writes them.
func (t *task) createTimes() (stdout, stderr *os.File, err error) {
	open := func(name string) (*os.File, error) {
		return os.OpenFile(filepath.Join(t.sandbox, name+supervise.TimesSuffix),
			os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND|syscall.O_NOFOLLOW, 0o644)
	}
	if stdout, err = open("stdout"); err != nil {
		return nil, nil, err
	}
	if stderr, err = open("stderr"); err != nil {
		stdout.Close()
		return nil, nil, err
	}
	return stdout, stderr, nil
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// reapSupervised waits for the supervisor to exit, reaps it and returns the
// run's terminal event, from the status it wrote.
func (t *task) reapSupervised(log *slog.Logger) hostmgr.TaskEvent {
	if exited := exitNotify(t.sup); exited != nil {
		<-exited
	}
	t.mu.Lock()
	ws, werr := wait4(t.sup)
	// detach (a simulated crash) set reaped already: nothing may be
	// signalled from here any more.
	mayStop := !t.reaped
	t.reaped = true
	ev := t.supervisedEnd(ws, werr, mayStop, log)
	t.mu.Unlock()
	close(t.exited)
	return ev
}

// supervisedEnd is the terminal event of a run whose supervisor has
// exited: the end it recorded or, if it recorded none, LOST. ws and werr
// are how the supervisor itself ended, when this process reaped it; with
// mayStop, a run left orphaned is stopped. The caller holds t.mu.
func (t *task) supervisedEnd(ws syscall.WaitStatus, werr error, mayStop bool, log *slog.Logger) hostmgr.TaskEvent {
	st, err := supervise.ReadStatus(t.statusPath)
	if err == nil {
		ev := t.ending(st)
		if t.cg != nil && st.WaitError == "" {
			// Read before the cgroup is removed: the kernel counts an
			// OOM kill before its victim dies.
			ev = oomEnd(ev, sigkilled(st), t.cg.memoryMB, t.cg.readMemEnd())
		}
		return ev
	}
	// The supervisor is gone without a word: the run's process may live
	// on, orphaned. It is stopped (if its pid still names it), since no
	// one could learn how it ends.
	how := "ended"
	if werr == nil && ws.Signaled() {
		how = "was killed by " + ws.Signal().String()
	} else if werr == nil {
		how = fmt.Sprintf("exited with code %d", ws.ExitStatus())
	}
	if mayStop && t.stillRunOurs() {
		if kerr := syscall.Kill(-t.pgid, syscall.SIGKILL); kerr != nil && !errors.Is(kerr, syscall.ESRCH) {
			log.Warn("stop the run of a lost supervisor", "task", t.spec.TaskID, "err", kerr)
		}
	}
	log.Warn("a run's supervisor ended without recording the run's end; the run is lost", "task", t.spec.TaskID,
		"supervisor", t.sup, "how", how, "err", err)
	return t.event(pelotonv1.TaskState_LOST, 0, ReasonSupervisorLost,
		fmt.Sprintf("the run's supervisor (pid %d) %s without recording how the run ended", t.sup, how))
}

// stillRunOurs reports whether the run's pid still names the run's process
// (by its recorded start time), so that it may be signalled although it
// is not our child.
func (t *task) stillRunOurs() bool {
	ticks := t.adoptedTicks
	if ticks == 0 && t.record != nil {
		ticks = t.record.StartTicks
	}
	if ticks == 0 || t.pgid <= 0 {
		return false
	}
	now, err := procStartTicks(t.pgid)
	return err == nil && now == ticks
}

// killSupervised hands a kill with its deadline to the run's supervisor.
// The caller holds t.mu and has set t.killDeadline.
func (t *task) killSupervised(deadline time.Time, log *slog.Logger) {
	if err := supervise.WriteKill(t.statusPath, deadline); err != nil {
		// The supervisor then kills after the run's own grace period.
		log.Warn("could not give a run's supervisor the kill's deadline", "task", t.spec.TaskID, "err", err)
	}
	if t.supTicks != 0 {
		// Adopted: not our child, so its pid is only trusted while it
		// still has the start time it was adopted with.
		if now, err := procStartTicks(t.sup); err != nil || now != t.supTicks {
			return
		}
	}
	if err := syscall.Kill(t.sup, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		log.Warn("signal a run's supervisor", "task", t.spec.TaskID, "err", err)
	}
}
