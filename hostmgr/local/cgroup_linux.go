package local

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/peloton-sched/peloton/hostmgr/local/supervise"
	"golang.org/x/sys/unix"
)

// startProcess is os.StartProcess with the child born in the run's cgroup
// (rc may be nil: no cgroup). Only runs started without a supervisor use
// it; a supervisor starts its run the same way (supervise.StartInCgroup).
func (rc *runCgroup) startProcess(path string, argv []string, attr *os.ProcAttr) (*os.Process, error) {
	return supervise.StartInCgroup(path, argv, attr, rc.supervisorCgroup())
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
