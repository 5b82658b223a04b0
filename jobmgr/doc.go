// Package jobmgr owns jobs and their tasks: the spec versions and runtime
// records in the store, the transition tables of tasks, jobs and updates,
// and the goal-state engine that drives every task's actual state towards
// its goal (enqueue to resmgr, launch placed tasks through hostmgr, retry
// failures, kill). Around that engine it holds:
//
//   - updates (update.go, update_plan.go): the rolling update's record, the
//     pure planner and the driver that applies its plan, in-place restarts
//     where the backend can patch a run (patch.go);
//   - long-running jobs (longrunning.go): runs that end are run again, and
//     every voluntary disruption of an instance (update, kill, drain,
//     preemption) first takes a grant from the SLA evaluator (package sla);
//   - DAEMON jobs (daemon.go), one instance bound to every matching host,
//     following hosts as they come and go (hostmgr.Matches), and instance
//     counts (scale.go);
//   - adoption of foreign work (foreign.go): pods another system hands to
//     Peloton (hostmgr.ForeignSource) become instances of jobs that stand
//     for their group, admitted and preempted like any other work;
//   - drains (drain.go): the runs on a host in maintenance or moving between
//     partitions are preempted when hostmgr asks, and run again elsewhere;
//     resmgr's preemptions take the same path;
//   - reconciliation with the backend (reconcile.go), and the resolution of
//     writes whose outcome is unknown (resolve.go, retry.go);
//   - the job index and the collector (index.go, collect.go): one index entry
//     per job keeps start-up and memory bounded by live work, finished jobs
//     leave memory when idle, and the collector archives finished jobs into
//     the history store after their time to live and then removes them from
//     etcd;
//   - what a record that cannot be loaded at start means (quarantine.go).
//
// Manager is the jobs registry (the jobs in memory, the finished jobs by ID,
// the update records) with the API of jobs and tasks and the engine's Start
// and Wait. The rest is in parts of their own types (parts.go), so that no
// type carries the whole package: Updates (update.go, patch.go, scale.go) and
// Archive (index.go, collect.go), exported through Manager.Updates and
// Manager.Archive, and inside the package the engine (engine.go, retry.go,
// quarantine.go), the reconcilers (longrunning.go, daemon.go, drain.go,
// reconcile.go) and the adoption of foreign work (foreign.go). A part holds
// only its Manager: the registry and every lock stay there, and a part's
// method takes them as Manager's own methods do, since one evaluation of a job
// passes through the engine, the updates and the reconcilers under the same
// locks.
//
// jobmgr may import resmgr, hostmgr, sla and history; none of them, nor
// placement, imports jobmgr, and jobmgr does not import placement.
// Events come back from hostmgr through a channel, placements from resmgr
// through GetPlacements.
package jobmgr
