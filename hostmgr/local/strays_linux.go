//go:build linux

package local

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/peloton-sched/peloton/hostmgr/local/supervise"
)

// liveProcs are the live processes of this backend's runs, found in /proc
// by their environment: each run's processes by task ID (they all carry
// the run's PELOTON_SANDBOX), and each run's supervisor (which carries
// supervise.SupervisorEnv naming the run's status file).
type liveProcs struct {
	runs map[string][]int
	sups map[string]int
}

// runProcs finds, in /proc, the live processes (not this one) of this
// backend's runs and their supervisors.
func (b *Backend) runProcs() liveProcs {
	dir := filepath.Clean(b.dir)
	prefix := []byte("PELOTON_SANDBOX=" + dir + "/")
	supPrefix := []byte(supervise.SupervisorEnv + "=" + filepath.Join(dir, runsDir) + "/")
	self := os.Getpid()
	out := liveProcs{runs: map[string][]int{}, sups: map[string]int{}}
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	buf := make([]byte, 0, 64<<10)
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == self {
			continue
		}
		env, ok := readEnviron(pid, buf[:0])
		if !ok {
			continue
		}
		buf = env[:0]
		for v := range bytes.SplitSeq(env, []byte{0}) {
			if rest, found := bytes.CutPrefix(v, prefix); found {
				task, _, _ := strings.Cut(string(rest), "/")
				out.runs[task] = append(out.runs[task], pid)
				break
			}
			if rest, found := bytes.CutPrefix(v, supPrefix); found {
				if task, ok := strings.CutSuffix(string(rest), supervise.StatusSuffix); ok {
					out.sups[task] = pid
				}
				break
			}
		}
	}
	return out
}

// runLeader is the process of pids that leads its process group: the
// run's own process (runs start in a group of their own), and its start
// time; ok is false when none does.
func runLeader(pids []int) (pid int, ticks uint64, ok bool) {
	for _, p := range pids {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
		if err != nil {
			continue
		}
		// The fields after the command's closing parenthesis: state, ppid, pgrp.
		i := bytes.LastIndexByte(data, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(data[i+1:]))
		if len(f) < 3 || f[2] != strconv.Itoa(p) {
			continue
		}
		if t, err := procStartTicks(p); err == nil {
			return p, t, true
		}
	}
	return 0, 0, false
}

// killStrays stops every process of a run of this backend that no adopted
// run accounts for (left by a run whose record says it ended, or whose run
// could not be adopted, such as one caught between fork and exec as the
// last control plane died), and the supervisors of such runs, which could
// otherwise start a run unwatched later; it waits until they are gone, at
// most strayWait: a run is either adopted or over, never both. Like a
// kill, it sends SIGTERM first, once to each process group (a run's
// processes share one; the processes a run starts as it handles the
// signal are left to finish), so a run can note its end and clean up, and
// SIGKILL to every process once strayGrace has passed. Called by Start,
// before any Launch.
func (b *Backend) killStrays(adopted map[string]bool) {
	begin := time.Now()
	termed := map[int]bool{} // process groups, and processes outside their run's group
	for round := 0; ; round++ {
		var live []int
		procs := b.runProcs()
		for task, pids := range procs.runs {
			if !adopted[task] {
				live = append(live, pids...)
			}
		}
		for task, pid := range procs.sups {
			if !adopted[task] {
				live = append(live, pid)
			}
		}
		if len(live) == 0 {
			return
		}
		if round == 0 {
			b.log.Warn("stopping processes of runs that are over or could not be adopted", "processes", len(live))
		}
		kill := time.Since(begin) >= strayGrace
		isLive := make(map[int]bool, len(live))
		for _, pid := range live {
			isLive[pid] = true
		}
		for _, pid := range live {
			if kill {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				continue
			}
			// A group led by one of the strays is theirs to signal; a
			// process in another group is signalled alone.
			target := pid
			if pgid, err := syscall.Getpgid(pid); err == nil && isLive[pgid] {
				target = -pgid
			}
			if !termed[target] {
				termed[target] = true
				_ = syscall.Kill(target, syscall.SIGTERM)
			}
		}
		if time.Since(begin) >= strayWait {
			b.log.Error("processes of runs that are over would not die", "pids", live)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// strayGrace is how long strays have to end on SIGTERM before SIGKILL;
// strayWait bounds the whole wait (SIGKILL takes milliseconds).
var (
	strayGrace = 3 * time.Second
	strayWait  = 10 * time.Second
)

// readEnviron reads a process's environment (at most 256 KiB) into buf.
func readEnviron(pid int, buf []byte) ([]byte, bool) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return nil, false
	}
	defer f.Close()
	b := bytes.NewBuffer(buf)
	if _, err := io.Copy(b, io.LimitReader(f, 256<<10)); err != nil {
		return nil, false
	}
	return b.Bytes(), true
}
