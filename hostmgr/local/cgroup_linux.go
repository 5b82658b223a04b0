package local

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// startProcess is os.StartProcess with the child born in the run's cgroup
// (rc may be nil: no cgroup).
func (rc *runCgroup) startProcess(path string, argv []string, attr *os.ProcAttr) (*os.Process, error) {
	switch {
	case rc == nil:
		return os.StartProcess(path, argv, attr)
	case rc.version == 2:
		return rc.startV2(path, argv, attr)
	default:
		return rc.startV1(path, argv, attr)
	}
}

// startV2 clones the child straight into its cgroup.
func (rc *runCgroup) startV2(path string, argv []string, attr *os.ProcAttr) (*os.Process, error) {
	fd, err := unix.Open(rc.memory, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("cgroup: open %s: %w", rc.memory, err)
	}
	defer unix.Close(fd)
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
	if err := writeCgroupFile(filepath.Join(rc.memory, "cgroup.procs"), strconv.Itoa(p.Pid)); err != nil {
		_ = p.Kill()
		_, _ = p.Wait()
		return nil, fmt.Errorf("cgroup: place the run in %s: %w", rc.memory, err)
	}
	return p, nil
}

// startV1 forks the child from a thread that is in the run's cgroups: a
// child starts in the cgroups of the thread that forks it, and v1 cgroups
// hold threads, not processes. The thread ends when the fork is done, so
// nothing else of the control plane ever runs in the run's cgroups (it
// must not be the main thread, which Go never ends: see onThrowawayThread).
func (rc *runCgroup) startV1(path string, argv []string, attr *os.ProcAttr) (p *os.Process, err error) {
	onThrowawayThread(func() {
		tid := strconv.Itoa(unix.Gettid())
		for _, d := range rc.dirs() {
			if err = writeCgroupFile(filepath.Join(d, "tasks"), tid); err != nil {
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
		if unix.Gettid() != unix.Getpid() {
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

// killCgroupProcs SIGKILLs every process in cgroup dir. A pid read from
// cgroup.procs may have exited and been reused before it is signalled, so
// each is first pinned with a pidfd and signalled only if, read again
// after, the cgroup still lists it: the pidfd then names a process that is
// in the cgroup.
//
// Never this process: a v1 cgroup.procs lists the process of every thread
// in the cgroup, and startV1's thread may still be there, ending, when a
// run that failed to start (or ended at once) is cleaned up.
func killCgroupProcs(dir string) {
	if f, err := os.OpenFile(filepath.Join(dir, "cgroup.kill"), os.O_WRONLY, 0); err == nil {
		_, err = f.WriteString("1")
		f.Close()
		if err == nil {
			return // v2, Linux 5.14+: the kernel does it, without races
		}
	}
	self := os.Getpid()
	procs := func() []int {
		data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			return nil
		}
		var pids []int
		for f := range strings.FieldsSeq(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 && pid != self {
				pids = append(pids, pid)
			}
		}
		return pids
	}
	pids := procs()
	if len(pids) == 0 {
		return
	}
	fds := map[int]int{}
	for _, pid := range pids {
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			fds[pid] = fd
		}
	}
	for _, pid := range procs() {
		if fd, ok := fds[pid]; ok {
			_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		}
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// isCgroupDir reports whether dir is a directory of a cgroup file system.
func isCgroupDir(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false
	}
	return st.Type == unix.CGROUP_SUPER_MAGIC || st.Type == unix.CGROUP2_SUPER_MAGIC
}
