package bench

import "syscall"

// childProcAttr puts a child process in its own process group and has the
// kernel kill it when this process dies, so that an interrupted run leaves
// no Peloton behind.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
