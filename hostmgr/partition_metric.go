package hostmgr

import "github.com/peloton-sched/peloton/internal/metrics"

// gaugePartitionsLocked keeps peloton_host_partition{host,partition} at 1
// for each host's partition: a host's old series goes when it moves, and a
// host that left takes its series with it. Called from recountLocked.
func (m *Manager) gaugePartitionsLocked() {
	if m.partGauged == nil {
		m.partGauged = map[string]string{}
	}
	for name, h := range m.hosts {
		p := h.info.Partition
		if old, ok := m.partGauged[name]; ok && old == p {
			continue
		} else if ok {
			metrics.HostPartition.DeleteLabelValues(name, old)
		}
		metrics.HostPartition.WithLabelValues(name, p).Set(1)
		m.partGauged[name] = p
	}
	for name, p := range m.partGauged {
		if m.hosts[name] == nil {
			metrics.HostPartition.DeleteLabelValues(name, p)
			delete(m.partGauged, name)
		}
	}
}
