//go:build linux

package hostagent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Kill sends SIGKILL to the run's processes as RunInfo found them, and to
// the process group each of its root processes leads (see
// RunProc.GroupLeader): the group also holds what the scan could not see
// as the run's, a child forked since or one that scrubbed its environment.
// Processes gone already are no error.
//
// Between the scan and the kill a process may exit and its pid go to
// another, which must not be killed. So each process is pinned first with
// a pidfd (Linux 5.3), then its stat read again and its start time
// compared with the scan's: a match means the pidfd is the scanned
// process, and the signal goes through the pidfd, which cannot reach a
// later holder of the pid. Where pidfd_open is missing (ENOSYS) or filtered
// (EPERM from a seccomp profile), the check is followed by kill(2) on the
// pid: racy for the microseconds between the two, no worse than any kill
// by pid.
//
// A group is signalled by kill(-pgid) after the same check of its leader:
// the kernel does not give a group id to a new process while any process,
// the leader's zombie included, still has it, so while the pinned leader
// is unreaped the group is the run's.
//
// Kill refuses when ProcRoot's pids are not this process's (a proc of
// another pid namespace mounted at --root without hostPID, or a fixture
// tree): its numbers would name other processes here.
func (e *EnvRuns) Kill(id string, run RunInfo) error {
	if err := e.ownPIDs(); err != nil {
		return fmt.Errorf("hostagent: kill run %s: %w", id, err)
	}
	var errs []error
	// Groups first: a child forked after the scan is in its parent's
	// group, and a process killed first could no longer be checked.
	for _, p := range run.Procs {
		if p.GroupLeader {
			errs = append(errs, e.signal(p, true))
		}
	}
	for _, p := range run.Procs {
		errs = append(errs, e.signal(p, false))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("hostagent: kill run %s: %w", id, err)
	}
	return nil
}

// signal sends SIGKILL to p, or to the group p leads, when p is still the
// process the scan saw.
func (e *EnvRuns) signal(p RunProc, group bool) error {
	fd, err := unix.PidfdOpen(p.PID, 0)
	switch {
	case err == nil:
		defer unix.Close(fd)
	case errors.Is(err, unix.ESRCH):
		return nil // gone, and reaped
	case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EPERM):
		fd = -1
	default:
		return fmt.Errorf("process %d: pidfd_open: %w", p.PID, err)
	}
	path := filepath.Join(e.procRoot(), strconv.Itoa(p.PID), "stat")
	line, err := readFileInto(path, nil, statMax)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("process %d: %w", p.PID, err)
	}
	st, err := parseStat(line)
	if err != nil {
		return fmt.Errorf("process %d: %s: %w", p.PID, path, err)
	}
	if ticks(st.start) != p.Started {
		return nil // the pid is someone else's now
	}
	switch {
	case group && st.pgrp != p.PID:
		return nil // left its group since the scan: the group is no longer the run's to kill
	case group:
		err = unix.Kill(-p.PID, unix.SIGKILL)
	case fd >= 0:
		err = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	default:
		err = unix.Kill(p.PID, unix.SIGKILL)
	}
	if err != nil && !errors.Is(err, unix.ESRCH) {
		what := "process"
		if group {
			what = "process group"
		}
		return fmt.Errorf("%s %d: %w", what, p.PID, err)
	}
	return nil
}

// ownPIDs checks that ProcRoot numbers processes as this process does:
// its "self" link names our own pid.
func (e *EnvRuns) ownPIDs() error {
	self, err := os.Readlink(filepath.Join(e.procRoot(), "self"))
	if err != nil {
		return fmt.Errorf("%s/self: %w: cannot tell whose pids it lists", e.procRoot(), err)
	}
	if self != strconv.Itoa(os.Getpid()) {
		return fmt.Errorf("%s lists another pid namespace's processes (self is %q, we are %d); killing by its pids would hit others",
			e.procRoot(), self, os.Getpid())
	}
	return nil
}
