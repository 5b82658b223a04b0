//go:build linux

package supervise

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"
	"unsafe"
)

// Supported reports whether runs can be started under a supervisor here:
// it needs Linux (waitid, clone into a cgroup, /proc/self/exe).
const Supported = true

// init turns this process into a supervisor when SupervisorEnv is set: it
// runs Main and exits, so the program's own main never runs. Every binary
// that links the local backend (peloton, test binaries) can be one.
func init() {
	if os.Getenv(SupervisorEnv) != "" {
		os.Exit(Main())
	}
}

// Descriptors of a supervisor besides stdin, stdout and stderr.
const (
	configFD = 3
	reportFD = 4
	// With Config.Times: the indexes of stdout and stderr.
	stdoutTimesFD = 5
	stderrTimesFD = 6
)

// Main is a supervisor's whole life; it returns the process's exit code:
// 0 once the run's status is written, 1 when the run could not start (the
// Report says why) and 2 when the status could not be written.
func Main() int {
	// Signals first: the backend may ask for a kill as soon as it has the
	// run's pid, and SIGTERM's default action would end the supervisor and
	// orphan the run. SIGHUP and SIGINT belong to terminals, which a
	// supervisor (in a session of its own) has none of.
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGPIPE)
	kills := make(chan os.Signal, 8)
	signal.Notify(kills, syscall.SIGTERM)

	cfgFile := os.NewFile(configFD, "config")
	cfg, err := readConfig(cfgFile)
	cfgFile.Close()
	report := os.NewFile(reportFD, "report")
	if err != nil {
		answer(report, Report{Error: err.Error()})
		return 1
	}
	pid, drained, err := start(cfg)
	if err != nil {
		answer(report, Report{Error: err.Error()})
		return 1
	}
	// The backend may be gone by now (killed during the launch): the run
	// goes on all the same, and the next backend finds it by its record or
	// its environment.
	answer(report, Report{Pid: pid})

	exited := make(chan error, 1)
	go func() { exited <- WaitExited(pid) }()
	var (
		killed   bool
		deadline *time.Timer
		due      time.Time
	)
	fire := make(<-chan time.Time)
	for {
		select {
		case <-kills:
			when, ok := readKill(cfg.StatusPath)
			if !ok {
				when = time.Now().Add(cfg.KillGrace)
			}
			if !killed {
				killed = true
				_ = syscall.Kill(-pid, syscall.SIGTERM)
			}
			if deadline != nil && !when.Before(due) {
				continue
			}
			due = when
			if deadline != nil {
				deadline.Stop()
			}
			deadline = time.NewTimer(max(time.Until(when), 0))
			fire = deadline.C
		case <-fire:
			killAll(pid, cfg.Cgroup)
		case werr := <-exited:
			// The leader is a zombie: its pid, the group's id, cannot
			// be reused yet, so what is left of its group is ours to kill.
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			// What the run wrote last is read before its end is told:
			// a reader that sees the run ended has all of its output.
			waitDrained(drained, drainBound)
			st := reap(pid, werr)
			st.TaskID, st.Killed, st.Time = cfg.TaskID, killed, time.Now()
			if err := writeStatus(cfg.StatusPath, st); err != nil {
				complain("could not record how the run ended: %v", err)
				return 2
			}
			return 0
		}
	}
}

// answer writes the report line and closes the descriptor. A report that
// cannot be encoded is not written: the backend then reads no answer and
// fails the launch.
func answer(f *os.File, r Report) {
	defer f.Close()
	data, err := json.Marshal(r)
	if err != nil {
		complain("could not encode the report: %v", err)
		return
	}
	_, _ = f.Write(append(data, '\n'))
}

// start starts the run in its own process group, as its user, inside its
// cgroup, with the supervisor's stdin and, without Config.Times, its stdout
// and stderr. With Times the run gets pipes, which copiers (logtimes.go)
// copy to the supervisor's stdout and stderr; drained is closed once both
// have read everything (at once without Times).
func start(cfg Config) (pid int, drained <-chan struct{}, err error) {
	sys := &syscall.SysProcAttr{Setpgid: true}
	if u := cfg.User; u != nil {
		sys.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups}
	}
	files := []*os.File{os.Stdin, os.Stdout, os.Stderr}
	done := make(chan struct{})
	var copiers []*copier
	if cfg.Times {
		for i, fd := range []uintptr{stdoutTimesFD, stderrTimesFD} {
			r, w, perr := os.Pipe()
			if perr != nil {
				return 0, nil, fmt.Errorf("output pipe: %w", perr)
			}
			defer w.Close() // the run has its own copy once started
			out := files[i+1]
			files[i+1] = w
			copiers = append(copiers, newCopier(r, out, os.NewFile(fd, "times"), time.Now))
		}
	}
	attr := &os.ProcAttr{Dir: cfg.Dir, Env: cfg.Env, Files: files, Sys: sys}
	p, err := StartInCgroup(cfg.Path, cfg.Argv, attr, cfg.Cgroup)
	if err != nil {
		return 0, nil, err
	}
	// The supervisor reaps by pid (waitid, then wait4); os.Process would
	// hold a pidfd of its own (Release forgets the pid too).
	pid = p.Pid
	_ = p.Release()
	go func() {
		defer close(done)
		finished := make(chan struct{}, len(copiers))
		for _, c := range copiers {
			go func() {
				c.run()
				finished <- struct{}{}
			}()
		}
		for range copiers {
			<-finished
		}
	}()
	return pid, done, nil
}

// waitDrained waits for drained, at most bound.
func waitDrained(drained <-chan struct{}, bound time.Duration) {
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-drained:
	case <-t.C:
		complain("the run's output was still open %v after it ended; what comes later is not kept", bound)
	}
}

// StartInCgroup is os.StartProcess with the child born in cg (nil: no
// cgroup). On version 2 the child is cloned straight into it; on version 1,
// where cgroups hold threads, it is forked from a thread placed in the
// cgroups, which then ends so that nothing else ever runs there.
func StartInCgroup(path string, argv []string, attr *os.ProcAttr, cg *Cgroup) (*os.Process, error) {
	switch {
	case cg == nil || len(cg.Dirs) == 0:
		return os.StartProcess(path, argv, attr)
	case cg.Version == 2:
		return startV2(path, argv, attr, cg.Dirs[0])
	default:
		return startV1(path, argv, attr, cg.Dirs)
	}
}

func startV2(path string, argv []string, attr *os.ProcAttr, dir string) (*os.Process, error) {
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("cgroup: open %s: %w", dir, err)
	}
	defer syscall.Close(fd)
	sys := *attr.Sys
	sys.UseCgroupFD, sys.CgroupFD = true, fd
	into := *attr
	into.Sys = &sys
	p, err := os.StartProcess(path, argv, &into)
	if !errors.Is(err, syscall.ENOSYS) {
		return p, err
	}
	// No clone3 (a kernel before 5.7, or a seccomp profile that refuses
	// it): start the child outside and move it at once. Until the write,
	// its first instants after exec run without limits.
	p, err = os.StartProcess(path, argv, attr)
	if err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(p.Pid)); err != nil {
		_ = p.Kill()
		_, _ = p.Wait()
		return nil, fmt.Errorf("cgroup: place the run in %s: %w", dir, err)
	}
	return p, nil
}

func startV1(path string, argv []string, attr *os.ProcAttr, dirs []string) (p *os.Process, err error) {
	onThrowawayThread(func() {
		tid := strconv.Itoa(syscall.Gettid())
		for _, d := range dirs {
			if err = writeFile(filepath.Join(d, "tasks"), tid); err != nil {
				err = fmt.Errorf("cgroup: place the run in %s: %w", d, err)
				return
			}
		}
		p, err = os.StartProcess(path, argv, attr)
	})
	return p, err
}

// onThrowawayThread runs f on an OS thread of its own that ends when f
// returns, so whatever f changes about the thread dies with it. A goroutine
// that exits without unlocking its thread ends the thread, except the main
// thread, which Go parks forever instead: if the goroutine finds itself on
// the main thread, it holds it and runs f in a second goroutine, which
// cannot be scheduled on a thread locked to another.
func onThrowawayThread(f func()) {
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with us
		if syscall.Gettid() != syscall.Getpid() {
			defer close(done)
			f()
			return
		}
		defer runtime.UnlockOSThread() // the main thread was not changed
		inner := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			defer close(inner)
			f()
		}()
		<-inner
		close(done)
	}()
	<-done
}

// writeFile writes value to a cgroup control file.
func writeFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// killAll SIGKILLs the run's process group and, on cgroup v2 (Linux
// 5.14+), everything in its cgroup, which also ends processes that left
// the group. Version 1 has no such file; the backend empties those
// cgroups when it removes them.
func killAll(pid int, cg *Cgroup) {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	if cg != nil && cg.Version == 2 && len(cg.Dirs) > 0 {
		_ = writeFile(filepath.Join(cg.Dirs[0], "cgroup.kill"), "1")
	}
}

// pP_PID is waitid's P_PID.
const pP_PID = 1

// WaitExited blocks (holding a thread) until child pid has exited,
// leaving it unreaped, so that its pid (its process group's id) cannot be
// reused while the caller deals with the rest of its group.
func WaitExited(pid int) error {
	var info [128]byte // siginfo_t; only the kernel reads or writes it
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pP_PID, uintptr(pid),
			uintptr(unsafe.Pointer(&info[0])), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		switch errno {
		case 0:
			return nil
		case syscall.EINTR:
			continue
		default:
			return errno
		}
	}
}

// reap reaps the exited child and reads how it ended.
func reap(pid int, werr error) Status {
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			if werr == nil {
				werr = err
			}
			return Status{WaitError: werr.Error()}
		}
		break
	}
	if ws.Signaled() {
		return Status{Signal: int32(ws.Signal())}
	}
	return Status{Exited: true, ExitCode: int32(ws.ExitStatus())}
}
