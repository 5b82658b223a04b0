package local

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/peloton-sched/peloton/internal/resources"
)

// DefaultHostCapacity returns this machine's total capacity: every core
// (runtime.NumCPU, in milli-CPU), MemTotal from /proc/meminfo and the size of
// the file system holding "/" (both in MiB), and no GPU. A quantity that
// cannot be read is 0. It is the whole machine; a caller that splits it into
// N hosts divides it itself (New does so when Config.HostCapacity is zero).
func DefaultHostCapacity() resources.Resources { return machineCapacity("/") }

// machineCapacity is DefaultHostCapacity with disk measured on dir's file
// system, which is where sandboxes, and so task output, live.
func machineCapacity(dir string) resources.Resources {
	return resources.Resources{
		MilliCPU: int64(runtime.NumCPU()) * 1000,
		MemoryMB: memTotalMB("/proc/meminfo"),
		DiskMB:   diskTotalMB(dir),
	}
}

// memTotalMB parses the MemTotal line ("MemTotal: 16318412 kB") of a
// meminfo file.
func memTotalMB(path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || kb < 0 {
			return 0
		}
		return kb / 1024
	}
	return 0
}

// diskTotalMB is the size of the file system holding dir.
func diskTotalMB(dir string) int64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0
	}
	mb := uint64(st.Blocks) * uint64(st.Bsize) >> 20
	return int64(min(mb, 1<<62))
}
