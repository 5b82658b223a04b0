package hostmgr

import "github.com/peloton-sched/peloton/internal/metrics"

// hostGauged is what a host's per-host gauges last said.
type hostGauged struct {
	partition string
	up        bool
}

// hostGauges is what each host's gauges say, by host name. It is part of
// the host table: guarded by Manager.mu.
type hostGauges map[string]hostGauged

// update keeps the per-host gauges hostmgr owns:
// peloton_host_partition{host,partition} at 1 for each host's partition (a
// host's old series goes when it moves) and peloton_host_up{host}, 1 while
// the host is HOST_UP. A host that left takes its series with it. Called
// from recountLocked; only what changed is written.
func (g hostGauges) update(hosts map[string]*host) {
	for name, h := range hosts {
		now := hostGauged{partition: h.info.Partition, up: h.state == hostUp && !h.gone}
		old, ok := g[name]
		if ok && old == now {
			continue
		}
		if ok && old.partition != now.partition {
			metrics.HostPartition.DeleteLabelValues(name, old.partition)
		}
		metrics.HostPartition.WithLabelValues(name, now.partition).Set(1)
		up := 0.0
		if now.up {
			up = 1
		}
		metrics.HostUp.WithLabelValues(name).Set(up)
		g[name] = now
	}
	for name, old := range g {
		if hosts[name] == nil {
			metrics.HostPartition.DeleteLabelValues(name, old.partition)
			metrics.HostUp.DeleteLabelValues(name)
			delete(g, name)
		}
	}
}
