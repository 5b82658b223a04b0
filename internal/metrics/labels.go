package metrics

import "github.com/prometheus/client_golang/prometheus"

// Fixed label values. A vector whose label takes one of a known set of
// values has a series for each of them from registration on, at 0, so
// /metrics shows it before its first event and rate() and increase() have
// a starting point. Call sites may use these names or the same strings;
// a test (labels_test.go) reads every WithLabelValues call in the tree and
// fails on a value missing here, which would otherwise start a second,
// misspelt series.
const (
	QueuePending = "pending"
	QueueReady   = "ready"
	QueuePlaced  = "placed"

	PlacementPlaced       = "placed"
	PlacementUnplaced     = "unplaced"
	PlacementUnresolvable = "unresolvable"

	PreemptReclaim  = "reclaim"
	PreemptPriority = "priority"
	// PreemptReservation: backfill on hosts reserved for a gang.
	PreemptReservation = "reservation"
	PreemptHostDrain   = "host-drain"
	PreemptEvicted     = "evicted"

	RestartPatched = "patched"
	RestartInPlace = "in-place"
	RestartPlaced  = "placed"

	MoveStarted     = "started"
	MoveDrained     = "drained"
	MoveMoved       = "moved"
	MoveApplyFailed = "apply-failed"
	MoveCancelled   = "cancelled"

	WriteJob    = "job"
	WriteTask   = "task"
	WriteUpdate = "update"

	ReconciledMissedEvent = "missed-event"
	ReconciledLost        = "lost"
	ReconciledStray       = "stray"
	ReconciledAdopted     = "adopted"

	ReportTaken     = "taken"
	ReportDuplicate = "duplicate"
	ReportRefused   = "refused"

	AdvisorOK    = "ok"
	AdvisorError = "error"

	KindCPU    = "cpu"
	KindMemory = "memory"
)

// FixedLabel is the one label of a vector and every value it takes.
type FixedLabel struct {
	Vec    *prometheus.MetricVec
	Label  string
	Values []string
}

// Fixed lists every vector whose one label takes a fixed set of values.
// Vectors labelled by data (host, pool, job, cluster, partition) are not
// here: their series start with the data.
var Fixed = []FixedLabel{
	{QueueDepth.MetricVec, "queue", []string{QueuePending, QueueReady, QueuePlaced}},
	{Placements.MetricVec, "result", []string{PlacementPlaced, PlacementUnplaced, PlacementUnresolvable}},
	{Preemptions.MetricVec, "reason", []string{PreemptReclaim, PreemptPriority, PreemptReservation, PreemptHostDrain, PreemptEvicted}},
	{Restarts.MetricVec, "how", []string{RestartPatched, RestartInPlace, RestartPlaced}},
	{HostMoves.MetricVec, "step", []string{MoveStarted, MoveDrained, MoveMoved, MoveApplyFailed, MoveCancelled}},
	{StoreWrites.MetricVec, "kind", []string{WriteJob, WriteTask, WriteUpdate}},
	{Reconciled.MetricVec, "kind", []string{ReconciledMissedEvent, ReconciledLost, ReconciledStray, ReconciledAdopted}},
	{HostReports.MetricVec, "result", []string{ReportTaken, ReportDuplicate, ReportRefused}},
	// hostmgr's host states, by their API names (a test in hostmgr checks
	// them against the enum).
	{Hosts.MetricVec, "state", []string{"HOST_UP", "HOST_DRAINING", "HOST_DRAINED", "HOST_DOWN"}},
	{FederationJobs.MetricVec, "step", []string{"created", "dispatched", "sent", "done"}},
	{FederationServices.MetricVec, "event", []string{"created", "deleted", "part-created", "part-repaired",
		"rollout-started", "rollout-succeeded", "rollout-failed", "rollout-rolled-back", "failover", "move-back",
		"rebalance-pending", "rebalance-moving", "rebalance-done", "rebalance-cancelled"}},
	{FederationSLA.MetricVec, "answer", []string{"granted", "refused"}},
	{AdvisorRounds.MetricVec, "outcome", []string{AdvisorOK, AdvisorError}},
	{RevocableCapacity.MetricVec, "kind", []string{KindCPU, KindMemory}},
	{RevocableAllocated.MetricVec, "kind", []string{KindCPU, KindMemory}},
}

func init() {
	for _, f := range Fixed {
		for _, v := range f.Values {
			if _, err := f.Vec.GetMetricWithLabelValues(v); err != nil {
				panic("metrics: " + f.Label + "=" + v + ": " + err.Error())
			}
		}
	}
}
