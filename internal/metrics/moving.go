package metrics

import "github.com/prometheus/client_golang/prometheus"

// HostsMoving is how many hosts are between partitions now: moving
// (draining) or drained and waiting for the backend to take the new
// partition. hostmgr sets it whenever it recounts its hosts; a value that
// stays above 0 is a move that does not finish.
var HostsMoving = prometheus.NewGauge(prometheus.GaugeOpts{
	Namespace: "peloton", Name: "hosts_moving",
	Help: "Hosts moving between partitions now (draining, or drained and waiting for the backend).",
})

func init() { Registry.MustRegister(HostsMoving) }
