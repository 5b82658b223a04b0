package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// ScenarioHostAgent measures what a host agent costs its host.
const ScenarioHostAgent = "hostagent"

var hostAgentFigures = []string{"agentCpuPctOfCore", "agentRssMib", "agentPeakRssMib", "fullBinaryAgentRssMib",
	"reportsTaken", "reportDelayP99Ms", "qosReactionSec", "qosReactionIntervals", "qosReactionMaxIntervals"}

// HostAgentConfig sizes the hostagent scenario: one peloton-hostagent
// process (the real daemon, in a process of its own so that its CPU and
// memory are its own) on this machine, with Runs processes that carry task
// run ids of its host, reporting to an in-process stack; then the same
// agent run from the full peloton binary (`serve hostagent`), for its
// memory alone.
type HostAgentConfig struct {
	Runs     int
	Interval time.Duration
	// Warmup runs before the window; Window is what is measured.
	Warmup, Window time.Duration
	// AgentBin is the slim peloton-hostagent binary (default: the one
	// beside this executable).
	AgentBin string
	// FullBin is the peloton binary whose `serve hostagent` is measured
	// too (default: this executable).
	FullBin string
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
	if cfg.AgentBin == "" || cfg.FullBin == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("bench: the agent's binary: %w", err)
		}
		if cfg.FullBin == "" {
			cfg.FullBin = exe
		}
		if cfg.AgentBin == "" {
			cfg.AgentBin = filepath.Join(filepath.Dir(exe), "peloton-hostagent")
		}
	}
	if _, err := os.Stat(cfg.AgentBin); err != nil {
		return nil, fmt.Errorf("invalid --agent-bin: %w (make build puts peloton-hostagent beside peloton)", err)
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
	agentArgs := []string{"--server", s.ready.GRPCAddr, "--host", host, "--interval", cfg.Interval.String(), "--log-level", "warn"}
	agent, line, err := startAgent(ctx, cfg.AgentBin, agentArgs)
	if err != nil {
		return nil, err
	}
	defer stopAgent(agent)
	r.note("%s", line)
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
	r.add("agentRssMib", float64(rss)/(1<<20), "MiB", "peloton-hostagent's resident memory at the end (goal < 30)")
	r.add("agentPeakRssMib", float64(peak)/(1<<20), "MiB", "its peak resident memory")
	r.add("reportsTaken", float64(taken), "", "reports the stack took during the window")
	r.add("reportDelayP99Ms", delays[min(len(delays)-1, len(delays)*99/100)], "ms", "from the agent's reading to the stack taking it, p99")
	stopAgent(agent)

	// The same agent from the full binary, which links the control plane:
	// its memory after the same warmup and as many readings.
	env.progress("hostagent: the full binary's serve hostagent")
	full, _, err := startAgent(ctx, cfg.FullBin, append([]string{"serve", "hostagent"}, agentArgs...))
	if err != nil {
		return nil, err
	}
	if err := sleepCtx(ctx, cfg.Warmup+3*cfg.Interval); err != nil {
		stopAgent(full)
		return nil, err
	}
	fullRSS, _, err := procRSS(full.Process.Pid)
	stopAgent(full)
	if err != nil {
		return nil, err
	}
	r.add("fullBinaryAgentRssMib", float64(fullRSS)/(1<<20), "MiB", "the same agent run as `peloton serve hostagent` from the full binary, after the warmup and three readings")

	reactions, err := qosReaction(ctx, env, cfg, s.ready.GRPCAddr, host)
	if err != nil {
		return nil, err
	}
	secs := make([]float64, len(reactions))
	for i, d := range reactions {
		secs[i] = d.Seconds()
	}
	med := percentile(secs, 0.5)
	r.add("qosReactionSec", med, "s", "a virtual host of 1 core made hot (0.5 of it) by a busy run: from that run's start to the nearly idle revocable run's death; median of trials started at three phases of the agent's interval")
	r.add("qosReactionIntervals", med/cfg.Interval.Seconds(), "", "the same in report intervals (goal < 2): the busy run is measured from its first reading, and two hot readings are needed")
	r.add("qosReactionMaxIntervals", slices.Max(secs)/cfg.Interval.Seconds(), "", "the slowest trial, in intervals")
	return r.finish(), nil
}

// qosReaction runs an agent with its QoS controller on a virtual host of
// one core (hot at half of it) and, in each of qosTrials trials, a nearly
// idle revocable run; once the agent has seen it, it starts a busy loop
// that is not revocable and times the revocable run's death from the busy
// loop's start. The trials start the busy loop at different phases of the
// agent's reading interval (a quarter, a half, three quarters past a
// reading), which is what the reaction time hangs on. The revocable run
// must still live when the busy loop starts, or the trial would time
// nothing.
func qosReaction(ctx context.Context, env Env, cfg HostAgentConfig, server, host string) ([]time.Duration, error) {
	env.progress("hostagent: QoS reaction")
	agent, _, err := startAgent(ctx, cfg.AgentBin, []string{"--server", server, "--host", host, "--virtual",
		"--capacity-cpu", "1", "--capacity-memory-mb", "1000000", "--qos-cpu-high", "0.5", "--qos-cpu-low", "0.2",
		"--interval", cfg.Interval.String(), "--log-level", "error"})
	if err != nil {
		return nil, err
	}
	defer stopAgent(agent)
	// The agent reads at once and then every interval from about now.
	phase0 := time.Now()
	var out []time.Duration
	for trial := range qosTrials {
		d, err := qosTrial(ctx, cfg, host, trial, func() time.Duration {
			// Until the next reading, then a quarter, a half or three
			// quarters of an interval on.
			since := time.Since(phase0) % cfg.Interval
			offset := time.Duration(float64(cfg.Interval) * float64(trial+1) / float64(qosTrials+1))
			return (cfg.Interval - since + offset) % cfg.Interval
		})
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// qosTrials is how many QoS reaction trials the scenario runs.
const qosTrials = 3

// qosTrial is one trial of qosReaction: wait tells how long to wait,
// after the agent has seen the revocable run, before the busy loop starts.
func qosTrial(ctx context.Context, cfg HostAgentConfig, host string, trial int, wait func() time.Duration) (time.Duration, error) {
	run := func(id string, revocable bool, name string, args ...string) (*exec.Cmd, error) {
		c := exec.Command(name, args...)
		// Its own process group, killed whole: the shell under timeout
		// must not outlive the bench.
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		c.Env = []string{"PELOTON_TASK_ID=" + id, "PELOTON_HOST=" + host}
		if revocable {
			c.Env = append(c.Env, "PELOTON_REVOCABLE=true", "PELOTON_PRIORITY=0")
		}
		return c, c.Start()
	}
	// A few percent of a core (a sleep started every 20 ms): the
	// controller kills only runs whose use, once gone, cools the host.
	rev, err := run(fmt.Sprintf("qos-rev-%d-1", trial), true, "timeout", "300", "sh", "-c", "while :; do sleep 0.02; done")
	if err != nil {
		return 0, err
	}
	died := make(chan struct{})
	go func() { _ = rev.Wait(); close(died) }()
	defer func() { _ = syscall.Kill(-rev.Process.Pid, syscall.SIGKILL); <-died }()
	// Let the agent see the revocable run (two readings), and the host
	// cool from the trial before, then wait for the trial's phase.
	if err := sleepCtx(ctx, 3*cfg.Interval); err != nil {
		return 0, err
	}
	if err := sleepCtx(ctx, wait()); err != nil {
		return 0, err
	}
	select {
	case <-died:
		return 0, errors.New("bench: the revocable run died before the host ran hot")
	default:
	}
	start := time.Now()
	hot, err := run(fmt.Sprintf("qos-hot-%d-1", trial), false, "timeout", "120", "sh", "-c", "while :; do :; done")
	if err != nil {
		return 0, err
	}
	defer func() { _ = syscall.Kill(-hot.Process.Pid, syscall.SIGKILL); _ = hot.Wait() }()
	select {
	case <-died:
		return time.Since(start), nil
	case <-time.After(max(20*cfg.Interval, 30*time.Second)):
		// A bound for a broken controller, not a figure: short intervals
		// on a loaded machine take many of them.
		return 0, fmt.Errorf("bench: the QoS controller did not kill the revocable run within %s", max(20*cfg.Interval, 30*time.Second))
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// startAgent starts an agent process with args and waits for its first
// line, which it returns.
func startAgent(ctx context.Context, bin string, args []string) (*exec.Cmd, string, error) {
	agent := exec.CommandContext(ctx, bin, args...)
	out, err := agent.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	agent.Stderr = os.Stderr
	if err := agent.Start(); err != nil {
		return nil, "", fmt.Errorf("bench: start the agent %s: %w", bin, err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "peloton hostagent is reporting") {
		stopAgent(agent)
		return nil, "", fmt.Errorf("bench: the agent %s did not start (%v): %q", bin, err, line)
	}
	return agent, strings.TrimSpace(line), nil
}

// stopAgent stops an agent and waits for it; a second call does nothing.
func stopAgent(agent *exec.Cmd) {
	if agent.ProcessState != nil {
		return
	}
	_ = agent.Process.Signal(syscall.SIGTERM)
	_ = agent.Wait()
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
