package local

import (
	"syscall"
	"unsafe"
)

// pP_PID is waitid's idtype for "the process with this pid".
const pP_PID = 1

// waitExited blocks until process pid has exited, without reaping it: the
// zombie keeps the pid (and so the process group id) from being reused until
// cmd.Wait reaps it. os/exec has no such call, hence the raw waitid.
func waitExited(pid int) error {
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

// canPeek says that waitExited works here.
const canPeek = true
