// Package hostagent is the host agent: it measures how much CPU and memory
// its host and each task run on it use, and how slow each service instance
// answers, and reports the usage to the stack (`peloton serve hostagent`,
// one per host).
//
// It owns two layers. The measuring core reads counters and does the
// arithmetic:
//
//   - host usage (host.go): a HostReader that detects, once, which source the
//     host offers (cgroup v2, cgroup v1, or /proc) and reads a cumulative
//     Sample from it;
//   - task-run usage (proc.go): the same Sample summed over a process tree
//     read from /proc, or read from a task's cgroup directory;
//   - finding the runs (runs.go): EnvRuns groups the host's processes by the
//     PELOTON_TASK_ID every backend starts a run's processes with, so the
//     agent asks no one which runs are where, and sums each run's Sample;
//     from the same scan it says which runs are revocable (PELOTON_REVOCABLE,
//     PELOTON_PRIORITY), where each serves its metrics (PELOTON_METRICS_*),
//     and kills one (kill_linux.go);
//   - instance latency (latency.go): Scrape fetches one histogram from a
//     Prometheus text endpoint, and P99 computes the 0.99 quantile over the
//     window between two scrapes.
//
// Readers take the filesystem root and the read time as arguments, and the
// arithmetic (HostUsage, P99, the report of an interval, and the QoS
// decision) is pure: counters in, usage or victims out. That keeps the tests on fixture trees and fixed
// clocks. The only state a reader keeps is EnvRuns' memory of which
// process belongs to which run, so that a process's environment is read
// once, not every cycle.
//
// The reporting loop (agent.go) drives the core: an Agent reads the host
// and its runs every interval, turns two consecutive readings into a
// UsageReport (HostUsage of the machine's counters, or for a virtual host
// of the local backend the sum of its runs), and keeps the newest one
// pending. One sender goroutine keeps a ReportUsage stream to the stack
// open, sends the pending report until it is acknowledged, and reconnects
// with a jittered exponential backoff when the stream ends. Reports are
// state, not events: a newer one replaces an older one not yet sent, and a
// resend is dropped by the stack. A reading that fails sends nothing; the
// stack tells stale numbers by the age of the last report.
//
// Each reading also scrapes the runs that declare metrics (scrape.go),
// concurrently but at most maxConcurrentScrapes at once, all within half an
// interval (at most two seconds), each answer read to at most 4 MiB, and
// puts in each run's usage the P99 of its latency histogram since the
// previous scrape, or why there is none. An endpoint is the tenant's code:
// whatever it does costs the report that bounded wait, and nothing else.
//
// The QoS controller (qos.go), off unless configured, is the one thing the
// agent does besides measuring, and it does it alone: revocable runs live
// on the host's slack, and when the host runs hot (use above a high
// threshold for a few readings in a row) the agent kills revocable runs,
// lowest priority first, then the largest user of memory when memory is
// hot or else the youngest, until the use projected without them is below
// a low threshold. QoSPolicy.Choose is the decision, a pure function of
// one reading; the agent names its victims in the next report (revoked,
// with the resource each was killed for in revokedResources), sent at once, waits a moment for the stack's ack so that the
// stack ends them as preempted rather than failed, and kills them whether
// the ack came or not: cooling the host must not depend on the control
// plane. A failed or stale reading kills nothing and breaks the run of hot
// readings. Work that is not revocable is never killed.
//
// This package must not import jobmgr, resmgr, hostmgr, placement,
// federation or cluster, nor any other Peloton package except internal/
// plumbing and the generated API it reports through (proto/peloton/api/v1):
// the agent runs on every host, reports numbers, and must not drag the
// control plane into the host's binary or depend on how jobs are stored.
// What it needs of a run it reads from the run's environment, the
// contract every backend keeps; the advisor interprets its numbers.
// imports_test.go enforces the rule.
package hostagent
