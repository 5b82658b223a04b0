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

// killStrays SIGKILLs every process of a run of this backend that no
// adopted run accounts for (left by a run whose record says it ended, or
// whose run could not be adopted), and waits until they are gone, at
// most strayWait: a run is either adopted or over, never both. Called by
// Start, before any Launch.
func (b *Backend) killStrays(adopted map[string]bool) {
	deadline := time.Now().Add(strayWait)
	for round := 0; ; round++ {
		var live []int
		for task, pids := range b.runProcs().runs {
			if !adopted[task] {
				live = append(live, pids...)
			}
		}
		if len(live) == 0 {
			return
		}
		if round == 0 {
			b.log.Warn("stopping processes of runs that are over or could not be adopted", "processes", len(live))
		}
		for _, pid := range live {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			b.log.Error("processes of runs that are over would not die", "pids", live)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// strayWait bounds the wait for strays to die; SIGKILL takes milliseconds.
const strayWait = 10 * time.Second

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
