package kubetest

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat: the kernel's
// USER_HZ, which Linux fixes at 100 for that interface.
const userHZ = 100

// CPU is the CPU time (user + system) the process has used so far. It is
// an error once the process has ended.
func (p *Proc) CPU() (time.Duration, error) {
	if p.Exited() {
		return 0, fmt.Errorf("kubetest: %s has exited", p.name)
	}
	return ProcCPU(p.cmd.Process.Pid)
}

// CPU is the CPU time kube-apiserver and kwok have used so far; a process
// that is not running counts 0.
func (c *Cluster) CPU() (apiserver, kwok time.Duration) {
	c.mu.Lock()
	a, k := c.apiserver, c.kwok
	c.mu.Unlock()
	if a != nil {
		apiserver, _ = a.CPU()
	}
	if k != nil {
		kwok, _ = k.CPU()
	}
	return apiserver, kwok
}

// ProcCPU reads a process's user + system CPU time from /proc/<pid>/stat.
func ProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces;
	// the fields after its closing parenthesis start at field 3.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("kubetest: /proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("kubetest: /proc/%d/stat: %d fields", pid, len(f))
	}
	// utime and stime are fields 14 and 15, here 11 and 12.
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("kubetest: /proc/%d/stat: %w", pid, err)
	}
	return time.Duration(u+st) * time.Second / userHZ, nil
}

// SelfCPU is this process's own user + system CPU time.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// MachineCPU is the busy and total CPU time of the whole machine so far,
// summed over its CPUs, from /proc/stat (every process's, not only ours).
func MachineCPU() (busy, total time.Duration, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, errors.New("kubetest: /proc/stat: no cpu line")
	}
	var idle, sum int64
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("kubetest: /proc/stat: %w", err)
		}
		if i >= 7 { // guest times are already in user and nice
			break
		}
		sum += n
		if i == 3 || i == 4 { // idle, iowait
			idle += n
		}
	}
	tick := time.Second / userHZ
	return time.Duration(sum-idle) * tick, time.Duration(sum) * tick, nil
}
