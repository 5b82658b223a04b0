//go:build !linux

package bench

import "syscall"

// childProcAttr puts a child process in its own process group (only Linux
// can also have it killed when this process dies).
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
