// Package metrics defines every Prometheus metric Peloton exports, in one
// place so names stay consistent and dashboards can rely on them. Components
// update these; the HTTP server exposes Registry at /metrics.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Registry holds Peloton's metrics plus the Go and process collectors. A
// private registry (not the global default) keeps tests that start several
// stacks in one process from colliding.
var Registry = prometheus.NewRegistry()

var (
	// JobsByState counts jobs per state; jobmgr sets it.
	JobsByState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "peloton", Name: "jobs", Help: "Jobs by state.",
	}, []string{"state"})
	// TasksByState counts task instances per state; jobmgr sets it.
	TasksByState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "peloton", Name: "tasks", Help: "Task instances by state.",
	}, []string{"state"})
	// TaskTransitions counts task state changes.
	TaskTransitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "peloton", Name: "task_transitions_total", Help: "Task state transitions by target state.",
	}, []string{"to"})
	// QueueDepth is the number of tasks in each scheduling queue.
	QueueDepth = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "peloton", Name: "queue_depth", Help: "Tasks waiting in each queue (pending: not admitted; ready: admitted, not placed; placed: not launched).",
	}, []string{"queue"})
	// AdmissionLatency is the time from enqueue to admission.
	AdmissionLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "peloton", Name: "admission_latency_seconds", Help: "Time a gang waited in its pool's queue before admission.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
	})
	// PlacementLatency is the time one placement round took.
	PlacementLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "peloton", Name: "placement_round_seconds", Help: "Duration of one placement round.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
	})
	// PlacementHostsLeased is how many hosts one placement round leased
	// (in proportion to its demand, or up to the engine's most): with
	// several engines, the share of the cluster each round holds.
	PlacementHostsLeased = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "peloton", Name: "placement_round_hosts_leased", Help: "Hosts one placement round leased.",
		Buckets: prometheus.ExponentialBuckets(1, 4, 8),
	})
	// Placements counts placement outcomes.
	Placements = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "peloton", Name: "placements_total", Help: "Tasks placed, and gangs returned unplaced.",
	}, []string{"result"})
	// PlacementConflicts counts placement rounds whose commit hostmgr
	// refused (another engine, or a change of the hosts, got there first):
	// their gangs go back to resmgr and are placed again.
	PlacementConflicts = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "peloton", Name: "placement_commit_conflicts_total", Help: "Placement rounds whose commit hostmgr refused; their gangs are placed again.",
	})
	// PoolResources is each pool's allocation and demand per resource kind.
	PoolResources = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "peloton", Name: "pool_resources", Help: "Pool allocation/demand/reservation/entitlement per resource kind.",
	}, []string{"pool", "type", "resource"})
	// APILatency is the latency of each API method.
	APILatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "peloton", Name: "api_request_seconds", Help: "API request latency by method and gRPC code.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
	}, []string{"method", "code"})
	// Hosts counts hosts by state.
	Hosts = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "peloton", Name: "hosts", Help: "Hosts by state.",
	}, []string{"state"})
	// Store size against its quota (store.QuotaGuard), by cluster: the
	// alert PelotonStoreNearlyFull fires at 80 %, creates are refused
	// at 95 %.
	StoreDBBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "peloton", Name: "store_db_bytes", Help: "Size of the etcd database file (the largest member's), which etcd compares with its quota.",
	}, []string{"cluster"})
	StoreDBInUseBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "peloton", Name: "store_db_in_use_bytes", Help: "Part of the etcd database file that holds data; the rest is free pages a defragmentation gives back.",
	}, []string{"cluster"})
	StoreQuotaBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "peloton", Name: "store_quota_bytes", Help: "etcd's --quota-backend-bytes, as Peloton knows it (--etcd-quota-bytes).",
	}, []string{"cluster"})
	// StoreWrites counts etcd write transactions issued by jobmgr.
	StoreWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "peloton", Name: "store_writes_total", Help: "Records written to the store, by kind.",
	}, []string{"kind"})
)

func init() {
	Registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		JobsByState, TasksByState, TaskTransitions, QueueDepth, AdmissionLatency,
		PlacementLatency, PlacementHostsLeased, Placements, PlacementConflicts, PoolResources, APILatency, Hosts, StoreWrites,
		StoreDBBytes, StoreDBInUseBytes, StoreQuotaBytes,
	)
}

// Preemptions counts tasks chosen for preemption, by reason (reclaim,
// priority, reservation, host-drain), and runs the backend took back
// (evicted).
var Preemptions = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "peloton", Name: "preemptions_total", Help: "Tasks chosen for preemption, by reason.",
}, []string{"reason"})

func init() { Registry.MustRegister(Preemptions) }

// ReservationIdle is the cost of host reservations (resmgr/hostres.go):
// the CPU of hosts set aside for a waiting gang that nothing used, in
// core-seconds, per pool of the gang.
var ReservationIdle = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "peloton", Name: "reservation_idle_core_seconds_total",
	Help: "Core-seconds of CPU that hosts set aside for a waiting gang held free (reserved but idle), by the gang's pool.",
}, []string{"pool"})

func init() { Registry.MustRegister(ReservationIdle) }

// AdmissionRounds counts the rounds of the resource manager's loop (admit
// what fits, recompute entitlements, pick reclaim victims), at least four a
// second: a count that stalls is a stalled scheduler, and a test that
// claims a round changed nothing first sees rounds pass.
var AdmissionRounds = prometheus.NewCounter(prometheus.CounterOpts{
	Namespace: "peloton", Name: "admission_rounds_total", Help: "Rounds of the resource manager's admission loop (admission, entitlements, reclaim).",
})

func init() { Registry.MustRegister(AdmissionRounds) }

// The collector of finished jobs (jobmgr/collect.go).
var (
	// JobsArchived counts finished jobs written to the history store.
	JobsArchived = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "peloton", Name: "jobs_archived_total", Help: "Finished jobs written to the archive (history store).",
	})
	// JobsCollected counts archived jobs removed from the live store.
	JobsCollected = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "peloton", Name: "jobs_collected_total", Help: "Archived finished jobs removed from the live store (etcd).",
	})
	// JobsCollectFailures counts archive writes that failed (nothing was
	// removed; the collector retries).
	JobsCollectFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "peloton", Name: "jobs_archive_failures_total", Help: "Archive writes of finished jobs that failed; nothing was removed from the live store and the collector retries.",
	})
)

func init() { Registry.MustRegister(JobsArchived, JobsCollected, JobsCollectFailures) }

// Restarts counts new runs of long-running instances by how they started:
// "patched" (the running run's sandbox patched into the new run, e.g. a
// pod's image), "in-place" (a new sandbox on the same host, no placement)
// or "placed".
var Restarts = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "peloton", Name: "update_restarts_total", Help: "Instances restarted onto a new spec or run by an update, by how their new run was started.",
}, []string{"how"})

func init() { Registry.MustRegister(Restarts) }

// HostMoves counts the steps hosts take when moved between partitions:
// "started", "drained" (empty, the backend about to be told), "moved"
// (settled in the new partition), "apply-failed" (the backend refused
// the new partition; the step is retried) and "cancelled" (the move was
// cancelled and the host stayed where it was).
var HostMoves = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "peloton", Name: "host_partition_moves_total", Help: "Steps of host moves between partitions.",
}, []string{"step"})

func init() { Registry.MustRegister(HostMoves) }

// UnwrittenEvents is how many task events wait to be written again after
// their write to the store failed (jobmgr retries them in order per run).
var UnwrittenEvents = prometheus.NewGauge(prometheus.GaugeOpts{
	Namespace: "peloton", Name: "jobmgr_unwritten_events", Help: "Task events whose store write failed and that wait to be written again.",
})

// Reconciled counts what jobmgr's reconciliation with the backend found
// and repaired, by kind: "missed-event" (a run's state the backend has
// and jobmgr had not applied), "lost" (a run the backend does not know),
// "stray" (a run the backend has that jobmgr does not: killed), "adopted"
// (a run launched before a restart whose launch was never written: jobmgr
// takes it as the instance's).
var Reconciled = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "peloton", Name: "reconciled_total", Help: "Differences between jobmgr and the backend found and repaired by reconciliation, by kind.",
}, []string{"kind"})

// ReconcileSeconds is how long one reconciliation pass over every run took.
var ReconcileSeconds = prometheus.NewGauge(prometheus.GaugeOpts{
	Namespace: "peloton", Name: "reconcile_pass_seconds", Help: "Duration of the last reconciliation pass of jobmgr with the backend.",
})

func init() { Registry.MustRegister(UnwrittenEvents, Reconciled, ReconcileSeconds) }

// QuarantinedRecords counts the records this process moved aside because
// they could not be loaded at start (internal/quarantine): each is a piece
// of state the stack runs without until a person looks at it. /readyz says
// which records are in quarantine now.
var QuarantinedRecords = prometheus.NewCounter(prometheus.CounterOpts{
	Namespace: "peloton", Name: "store_quarantined_records_total", Help: "Stored records that could not be loaded at start and were moved aside under quarantine/.",
})

func init() { Registry.MustRegister(QuarantinedRecords) }

// The federation's metrics (peloton serve federation, peloton up).
var (
	// FederationClusterState is 1 for each cluster's current state and 0
	// for its other states.
	FederationClusterState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "peloton", Subsystem: "federation", Name: "cluster_state",
		Help: "1 for the state each registered cluster is in (READY, DEGRADED, UNREACHABLE, CORDONED), 0 for the others.",
	}, []string{"cluster", "state"})
	// FederationClusterTransitions counts health changes of clusters.
	FederationClusterTransitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "peloton", Subsystem: "federation", Name: "cluster_transitions_total",
		Help: "Health changes of registered clusters, by the state entered.",
	}, []string{"cluster", "state"})
	// FederationPoolRepairs counts cluster pools set back to their desired
	// state after someone changed them in the cluster.
	FederationPoolRepairs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "peloton", Subsystem: "federation", Name: "pool_repairs_total",
		Help: "Cluster pools set back to their desired state after a change made in the cluster.",
	}, []string{"cluster"})
	// FederationPoolPropagation is the time from a change of a global pool
	// to a cluster's pool holding its part.
	FederationPoolPropagation = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "peloton", Subsystem: "federation", Name: "pool_propagation_seconds",
		Help:    "Time from a change of a global pool until a cluster's pool holds its part.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
	})
	// FederationJobs counts federated jobs by step: created, dispatched
	// (a cluster chosen), sent (the cluster has it), done.
	FederationJobs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "peloton", Subsystem: "federation", Name: "jobs_total",
		Help: "Federated jobs by step: created, dispatched, sent, done.",
	}, []string{"step"})
	// FederationServices counts federated service events: created,
	// deleted, part-created (a cluster's job made), part-repaired (a
	// cluster's job made again or set back after a change there).
	FederationServices = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "peloton", Subsystem: "federation", Name: "services_total",
		Help: "Federated service events: created, deleted, part-created, part-repaired.",
	}, []string{"event"})
	// FederationSLA counts the global SLA evaluator's answers: granted,
	// refused.
	FederationSLA = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "peloton", Subsystem: "federation", Name: "sla_requests_total",
		Help: "Disruption requests to the global SLA evaluator, by answer: granted, refused.",
	}, []string{"answer"})
	// FederationSLALatency is the time the global evaluator takes to
	// decide and record a grant.
	FederationSLALatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "peloton", Subsystem: "federation", Name: "sla_grant_seconds",
		Help:    "Time from a disruption request to its grant being recorded, in the federation.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
	})
	// SLAFallback is 1 while a cluster decides federated services'
	// disruptions alone, on its share of their budgets, because the
	// federation cannot be reached; 0 otherwise.
	SLAFallback = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "peloton", Subsystem: "sla", Name: "federation_fallback",
		Help: "1 while federated services' disruptions are decided on this cluster's share of their budget (the federation unreachable).",
	})
)

func init() {
	Registry.MustRegister(FederationClusterState, FederationClusterTransitions, FederationPoolRepairs,
		FederationPoolPropagation, FederationJobs, FederationServices, FederationSLA, FederationSLALatency, SLAFallback)
}

// What host agents report (hostmgr/usage.go). A host's report age is
// time() - peloton_host_usage_report_timestamp_seconds.
var (
	// HostCPUUsed is each host's CPU in use, in cores, as last reported.
	HostCPUUsed = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "peloton", Subsystem: "host", Name: "cpu_used_cores",
		Help: "CPU in use on each host, in cores, as its agent last reported.",
	}, []string{"host"})
	// HostMemoryUsed is each host's memory in use, in bytes.
	HostMemoryUsed = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "peloton", Subsystem: "host", Name: "memory_used_bytes",
		Help: "Memory in use on each host, in bytes, as its agent last reported.",
	}, []string{"host"})
	// HostReportTime is when the stack took each host's last report.
	HostReportTime = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "peloton", Subsystem: "host", Name: "usage_report_timestamp_seconds",
		Help: "Unix time at which the stack took each host's last usage report; its age is time() minus this.",
	}, []string{"host"})
	// HostReports counts host agents' reports by what became of them:
	// "taken", "duplicate" (resent, at or below the last sequence taken),
	// "refused" (unknown host or malformed).
	HostReports = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "peloton", Subsystem: "host", Name: "usage_reports_total",
		Help: "Host agents' usage reports, by what became of them: taken, duplicate, refused.",
	}, []string{"result"})
)

// HostQoSKills counts the revocable runs each host's QoS controller
// killed because the host ran hot, by the resource it ran hot in
// (KindCPU, KindMemory); HostSlackCPU and HostSlackMemory are
// what revocable work may still take there (hostmgr/slack.go).
var (
	HostQoSKills = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "peloton", Subsystem: "host", Name: "qos_kills_total",
		Help: "Revocable runs a host agent's QoS controller killed because the host ran hot, by the resource it ran hot in (cpu, memory).",
	}, []string{"host", "resource"})
	HostSlackCPU = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "peloton", Subsystem: "host", Name: "slack_cpu_cores",
		Help: "CPU revocable work may still take on each host (held but unused by other work, less the margin and what revocable runs hold).",
	}, []string{"host"})
	HostSlackMemory = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "peloton", Subsystem: "host", Name: "slack_memory_bytes",
		Help: "Memory revocable work may still take on each host, in bytes.",
	}, []string{"host"})
)

// HostReportDelay is how long after an agent's reading the stack took it
// (by two clocks where the agent runs on another machine).
var HostReportDelay = prometheus.NewHistogram(prometheus.HistogramOpts{
	Namespace: "peloton", Subsystem: "host", Name: "usage_report_delay_seconds",
	Help:    "From a host agent's reading to the stack taking its report (two clocks when the agent runs elsewhere).",
	Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5, 10},
})

func init() {
	Registry.MustRegister(HostCPUUsed, HostMemoryUsed, HostReportTime, HostReports, HostQoSKills, HostSlackCPU, HostSlackMemory, HostReportDelay)
}

// The host advisor's view of the partitions (advisor/): zones, pressure,
// oversubscription, services' latency against their SLO, and the moves it
// decides. The advisor sets them each interval; hostmgr sets the revocable
// capacity gauges with the slack.
var (
	// PartitionHosts is the hosts of each partition by zone (green,
	// orange, red; unknown for a host without a fresh report).
	PartitionHosts = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "peloton", Subsystem: "partition", Name: "hosts",
		Help: "Hosts of each partition by zone (green, orange, red, unknown), as the advisor last classified them.",
	}, []string{"partition", "zone"})
	// PartitionPressure is each partition's pressure, 0 to 1: the larger
	// of the share of its hosts orange or red and the share of its
	// services whose P99 is over their SLO.
	PartitionPressure = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "peloton", Subsystem: "partition", Name: "pressure",
		Help: "Each partition's pressure (0-1): the larger of the share of its hosts orange or red and the share of its latency-sensitive services over their SLO.",
	}, []string{"partition"})
	// PartitionOversubscription is the mean oversubscription factor of
	// each partition's hosts (1: none).
	PartitionOversubscription = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "peloton", Subsystem: "partition", Name: "oversubscription_factor",
		Help: "Mean oversubscription factor of each partition's hosts (1: none): revocable work may hold up to capacity x factor.",
	}, []string{"partition"})
	// HostZone is 1 for each host's current zone.
	HostZone = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "peloton", Subsystem: "host", Name: "zone",
		Help: "1 for each host's current zone (green, orange, red, unknown), as the advisor last classified it.",
	}, []string{"host", "zone"})
	// HostOversubscription is each host's oversubscription factor.
	HostOversubscription = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "peloton", Subsystem: "host", Name: "oversubscription_factor",
		Help: "Each host's oversubscription factor (1: none), from the p95 of its measured use.",
	}, []string{"host"})
	// AdvisorMoves counts the moves the advisor decided, by partitions and
	// mode (act: asked of hostmgr; observe: only logged and shown).
	AdvisorMoves = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "peloton", Subsystem: "advisor", Name: "moves_total",
		Help: "Host moves between partitions the advisor decided, by from, to and mode (act, observe).",
	}, []string{"from", "to", "mode"})
	// AdvisorRounds counts the advisor's rounds by outcome (ok, error).
	AdvisorRounds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "peloton", Subsystem: "advisor", Name: "rounds_total",
		Help: "The advisor's rounds, by outcome (ok, error).",
	}, []string{"outcome"})
	// ServiceLatencyP99 and ServiceLatencySLO are each latency-sensitive
	// service's P99 (the worst of its instances' last readings) and its
	// SLO, in seconds.
	ServiceLatencyP99 = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "peloton", Subsystem: "service", Name: "latency_p99_seconds",
		Help: "Each latency-sensitive service's P99 latency, the worst of its instances' last readings, in seconds.",
	}, []string{"service", "partition"})
	ServiceLatencySLO = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "peloton", Subsystem: "service", Name: "latency_slo_seconds",
		Help: "Each latency-sensitive service's latency SLO (latencySloMs), in seconds.",
	}, []string{"service", "partition"})
	// RevocableCapacity and RevocableAllocated are, per resource kind (cpu
	// in cores, memory in bytes), what revocable work may hold in the
	// cluster (the hosts' slack, oversubscription included) and what it
	// holds.
	RevocableCapacity = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "peloton", Subsystem: "revocable", Name: "capacity",
		Help: "What revocable work may hold in the cluster, by kind (cpu in cores, memory in bytes): the hosts' slack, oversubscription included.",
	}, []string{"kind"})
	RevocableAllocated = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "peloton", Subsystem: "revocable", Name: "allocated",
		Help: "What revocable runs hold in the cluster, by kind (cpu in cores, memory in bytes).",
	}, []string{"kind"})
)

func init() {
	Registry.MustRegister(PartitionHosts, PartitionPressure, PartitionOversubscription, HostZone, HostOversubscription,
		AdvisorMoves, AdvisorRounds, ServiceLatencyP99, ServiceLatencySLO, RevocableCapacity, RevocableAllocated)
	for _, k := range []string{"cpu", "memory"} {
		RevocableCapacity.WithLabelValues(k)
		RevocableAllocated.WithLabelValues(k)
	}
	for _, o := range []string{"ok", "error"} {
		AdvisorRounds.WithLabelValues(o)
	}
}
