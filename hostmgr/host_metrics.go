package hostmgr

import "github.com/peloton-sched/peloton/internal/metrics"

// hostGauged is what a host's per-host gauges last said.
type hostGauged struct {
	partition string
	up        bool
}

// gaugeHostsLocked keeps the per-host gauges hostmgr owns:
// peloton_host_partition{host,partition} at 1 for each host's partition (a
// host's old series goes when it moves) and peloton_host_up{host}, 1 while
// the host is HOST_UP. A host that left takes its series with it. Called
// from recountLocked; only what changed is written.
func (m *Manager) gaugeHostsLocked() {
	if m.hostGauged == nil {
		m.hostGauged = map[string]hostGauged{}
	}
	for name, h := range m.hosts {
		now := hostGauged{partition: h.info.Partition, up: h.state == hostUp && !h.gone}
		old, ok := m.hostGauged[name]
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
		m.hostGauged[name] = now
	}
	for name, g := range m.hostGauged {
		if m.hosts[name] == nil {
			metrics.HostPartition.DeleteLabelValues(name, g.partition)
			metrics.HostUp.DeleteLabelValues(name)
			delete(m.hostGauged, name)
		}
	}
}
