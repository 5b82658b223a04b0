package metrics

import "github.com/prometheus/client_golang/prometheus"

// HostPartition is 1 for each host's partition: the join that turns the
// per-host usage gauges into usage per partition, e.g.
//
//	sum by (partition) (peloton_host_cpu_used_cores * on (instance, host) group_left (partition) peloton_host_partition)
var HostPartition = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Namespace: "peloton", Subsystem: "host", Name: "partition",
	Help: "1 for the partition each host is in (hostmgr's record; a moving host counts in its old partition until it settles).",
}, []string{"host", "partition"})

// HostUp is 1 for each host that is HOST_UP in hostmgr (not draining,
// drained or down, and still reported by the backend), 0 otherwise: the
// filter for alerts that concern hosts in service.
var HostUp = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Namespace: "peloton", Subsystem: "host", Name: "up",
	Help: "1 for each host that is HOST_UP in hostmgr (not draining, drained or down), 0 otherwise.",
}, []string{"host"})

func init() { Registry.MustRegister(HostPartition, HostUp) }
