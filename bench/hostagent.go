package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// ScenarioHostAgent measures what a host agent costs its host.
const ScenarioHostAgent = "hostagent"

var hostAgentFigures = []string{"agentCpuPctOfCore", "agentRssMib", "agentPeakRssMib", "reportsTaken", "reportDelayP99Ms",
	"qosReactionSec", "qosReactionIntervals"}

// HostAgentConfig sizes the hostagent scenario: one `peloton serve
// hostagent` process (the real daemon, in a process of its own so that its
// CPU and memory are its own) on this machine, with Runs processes that
// carry task run ids of its host, reporting to an in-process stack.
type HostAgentConfig struct {
	Runs     int
	Interval time.Duration
	// Warmup runs before the window; Window is what is measured.
	Warmup, Window time.Duration
	// AgentBin is the peloton binary the agent runs from (default: this
	// executable).
	AgentBin string
}

// DefaultHostAgentConfig is the size docs/benchmarks.md quotes: 100 runs,
// the default 5s interval, a minute measured.
func DefaultHostAgentConfig() HostAgentConfig {
	return HostAgentConfig{Runs: 100, Interval: 5 * time.Second, Warmup: 10 * time.Second, Window: 60 * time.Second}
}

// Validate names the first bad flag.
func (c *HostAgentConfig) Validate() error {
	switch {
	case c.Runs < 0 || c.Runs > 10_000:
		return fmt.Errorf("invalid --runs %d: must be 0 to 10000", c.Runs)
	case c.Interval < 100*time.Millisecond:
		return fmt.Errorf("invalid --interval %s: must be at least 100ms", c.Interval)
	case c.Warmup < 0:
		return fmt.Errorf("invalid --warmup %s: must be >= 0", c.Warmup)
	case c.Window < c.Interval:
		return fmt.Errorf("invalid --window %s: must be at least one --interval", c.Window)
	}
	return nil
}

// HostAgent runs the scenario: the agent's CPU over the window (from
// /proc/<pid>/stat) as a percentage of one core, its resident memory at
// the end and at its peak, the reports the stack took, and the delay from
// each reading to the stack taking it, p99 (one clock: same machine).
func HostAgent(ctx context.Context, env Env, cfg HostAgentConfig) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.AgentBin == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("bench: the agent's binary: %w", err)
		}
		cfg.AgentBin = exe
	}
	r := newResult(ScenarioHostAgent)
	r.param("runs", cfg.Runs)
	r.param("intervalMs", cfg.Interval.Milliseconds())
	r.param("windowSec", cfg.Window.Seconds())

	s, err := startStack(ctx, env, stackConfig{Hosts: 1})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	hosts, err := s.api.Hosts.ListHosts(ctx, &pelotonv1.ListHostsRequest{})
	if err != nil || len(hosts.Hosts) == 0 {
		return nil, fmt.Errorf("bench: list hosts: %v", err)
	}
	host := hosts.Hosts[0].Name

	// The runs: sleeping processes with the environment every backend
	// gives a run's processes.
	var runs []*exec.Cmd
	defer func() {
		for _, c := range runs {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}()
	for i := range cfg.Runs {
		c := exec.Command("sleep", "3600")
		c.Env = []string{fmt.Sprintf("PELOTON_TASK_ID=bench-%d-1", i), "PELOTON_HOST=" + host}
		if err := c.Start(); err != nil {
			return nil, fmt.Errorf("bench: start run %d: %w", i, err)
		}
		runs = append(runs, c)
	}

	env.progress("hostagent: %d runs; starting the agent", cfg.Runs)
	agent := exec.CommandContext(ctx, cfg.AgentBin, "serve", "hostagent", "--server", s.ready.GRPCAddr, "--host", host,
		"--interval", cfg.Interval.String(), "--log-level", "warn")
	out, err := agent.StdoutPipe()
	if err != nil {
		return nil, err
	}
	agent.Stderr = os.Stderr
	if err := agent.Start(); err != nil {
		return nil, fmt.Errorf("bench: start the agent: %w", err)
	}
	defer func() {
		_ = agent.Process.Signal(syscall.SIGTERM)
		_ = agent.Wait()
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "peloton hostagent is reporting") {
		return nil, fmt.Errorf("bench: the agent did not start (%v): %q", err, line)
	}
	r.note("%s", strings.TrimSpace(line))
	pid := agent.Process.Pid

	if err := sleepCtx(ctx, cfg.Warmup); err != nil {
		return nil, err
	}
	t0, c0, err := procCPUTicks(pid)
	if err != nil {
		return nil, err
	}
	// Each new report's delay, from the reading to the stack taking it.
	var delays []float64
	taken := 0
	var last uint64
	end := time.Now().Add(cfg.Window)
	for time.Now().Before(end) {
		hs, err := s.api.Hosts.ListHosts(ctx, &pelotonv1.ListHostsRequest{})
		if err != nil {
			return nil, err
		}
		for _, h := range hs.Hosts {
			if u := h.Usage; h.Name == host && u != nil && u.Sequence != last {
				last = u.Sequence
				taken++
				delays = append(delays, float64(u.ReceiveTime.AsTime().Sub(u.SampleTime.AsTime()))/float64(time.Millisecond))
			}
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
	t1, c1, err := procCPUTicks(pid)
	if err != nil {
		return nil, err
	}
	rss, peak, err := procRSS(pid)
	if err != nil {
		return nil, err
	}
	if taken == 0 {
		return nil, errors.New("bench: the stack took no report of the agent")
	}
	sort.Float64s(delays)
	r.add("agentCpuPctOfCore", 100*float64(c1-c0)/clockTicks/t1.Sub(t0).Seconds(), "%", "the agent's user+system CPU over the window, of one core (goal < 1 at 5s)")
	r.add("agentRssMib", float64(rss)/(1<<20), "MiB", "the agent's resident memory at the end (goal < 30)")
	r.add("agentPeakRssMib", float64(peak)/(1<<20), "MiB", "its peak resident memory")
	r.add("reportsTaken", float64(taken), "", "reports the stack took during the window")
	r.add("reportDelayP99Ms", delays[min(len(delays)-1, len(delays)*99/100)], "ms", "from the agent's reading to the stack taking it, p99")
	_ = agent.Process.Signal(syscall.SIGTERM)
	_ = agent.Wait()

	reaction, err := qosReaction(ctx, env, cfg, s.ready.GRPCAddr, host)
	if err != nil {
		return nil, err
	}
	r.add("qosReactionSec", reaction.Seconds(), "s", "a virtual host of 1 core made hot (0.5 of it) by a second run: from that run's start to the revocable run's death")
	r.add("qosReactionIntervals", reaction.Seconds()/cfg.Interval.Seconds(), "", "the same in report intervals: the new run is measured from its second reading, and two hot readings are needed")
	return r.finish(), nil
}

// qosReaction runs an agent with its QoS controller on a virtual host of
// one core (hot at half of it) that runs a revocable busy loop held to a
// fifth of a core by nothing but its own sleeps, starts a busy loop that
// is not revocable, and times the revocable run's death.
func qosReaction(ctx context.Context, env Env, cfg HostAgentConfig, server, host string) (time.Duration, error) {
	env.progress("hostagent: QoS reaction")
	agent := exec.CommandContext(ctx, cfg.AgentBin, "serve", "hostagent", "--server", server, "--host", host, "--virtual",
		"--capacity-cpu", "1", "--capacity-memory-mb", "1000000", "--qos-cpu-high", "0.5", "--qos-cpu-low", "0.2",
		"--interval", cfg.Interval.String(), "--log-level", "error")
	if err := agent.Start(); err != nil {
		return 0, fmt.Errorf("bench: start the QoS agent: %w", err)
	}
	defer func() {
		_ = agent.Process.Signal(syscall.SIGTERM)
		_ = agent.Wait()
	}()
	burn := func(id string, revocable bool, script string) (*exec.Cmd, error) {
		c := exec.Command("sh", "-c", script)
		c.Env = []string{"PELOTON_TASK_ID=" + id, "PELOTON_HOST=" + host}
		if revocable {
			c.Env = append(c.Env, "PELOTON_REVOCABLE=true", "PELOTON_PRIORITY=0")
		}
		return c, c.Start()
	}
	// About a fifth of a core: busy 20 ms, asleep 80 ms. Bounded by time.
	rev, err := burn("qos-rev-0-1", true, `end=$(($(date +%s)+120)); while [ $(date +%s) -lt $end ]; do i=0; while [ $i -lt 2000 ]; do i=$((i+1)); done; sleep 0.08; done`)
	if err != nil {
		return 0, err
	}
	died := make(chan struct{})
	go func() { _ = rev.Wait(); close(died) }()
	defer func() { _ = rev.Process.Kill(); <-died }()
	// Let the agent measure the revocable run (two readings) before the host runs hot.
	if err := sleepCtx(ctx, 3*cfg.Interval); err != nil {
		return 0, err
	}
	start := time.Now()
	hot, err := burn("qos-hot-0-1", false, "exec timeout 120 sh -c 'while :; do :; done'")
	if err != nil {
		return 0, err
	}
	defer func() { _ = hot.Process.Kill(); _ = hot.Wait() }()
	select {
	case <-died:
		return time.Since(start), nil
	case <-time.After(20 * cfg.Interval):
		return 0, errors.New("bench: the QoS controller did not kill the revocable run within 20 intervals")
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on
// every architecture Linux exports it on.
const clockTicks = 100

// procCPUTicks is a process's user+system CPU in clock ticks, and when.
func procCPUTicks(pid int) (time.Time, uint64, error) {
	now := time.Now()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return now, 0, fmt.Errorf("bench: the agent's CPU: %w", err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return now, 0, fmt.Errorf("bench: short /proc/%d/stat", pid)
	}
	// After the command: state(0) ppid pgrp session tty tpgid flags minflt
	// cminflt majflt cmajflt utime(11) stime(12).
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return now, 0, fmt.Errorf("bench: /proc/%d/stat: %w", pid, err)
	}
	return now, u + st, nil
}

// procRSS is a process's resident memory now and at its peak, in bytes.
func procRSS(pid int) (rss, peak uint64, err error) {
	status := "/proc/" + strconv.Itoa(pid) + "/status"
	rss, peak = uint64(procKB(status, "VmRSS"))<<10, uint64(procKB(status, "VmHWM"))<<10
	if rss == 0 {
		return 0, 0, fmt.Errorf("bench: the agent's memory: no VmRSS in %s", status)
	}
	return rss, peak, nil
}
