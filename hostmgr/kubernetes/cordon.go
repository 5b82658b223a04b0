package kubernetes

import (
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/peloton-sched/peloton/hostmgr"
)

// Cordoned and NoExecute-tainted nodes. The backend is a
// hostmgr.MaintenanceSource: a node marked unschedulable (kubectl cordon,
// kubectl drain's first step) or tainted NoExecute is down, and hostmgr
// starts maintenance on its host, which drains it through jobmgr's drain
// path within each job's SLA; the node is up again once uncordoned and
// untainted, and hostmgr completes the maintenance it started. Peloton's
// pods tolerate no taint, so every NoExecute taint counts but the node
// lifecycle controller's own not-ready and unreachable ones: those come
// with a NotReady node (which already takes no new runs), and Kubernetes
// evicts the pods itself once their default tolerations run out.

var _ hostmgr.MaintenanceSource = (*Backend)(nil)

// nodeWord is what the backend says of a node's maintenance.
type nodeWord struct {
	host string
	down bool
}

// cordons tells hostmgr which nodes are down, each when first seen and
// then on every change, from one goroutine (the fifo's consumer).
type cordons struct {
	mu    sync.Mutex
	watch func(host string, down bool)
	told  map[string]bool
	q     *fifo[nodeWord]
}

func newCordons() *cordons { return &cordons{told: map[string]bool{}, q: newFifo[nodeWord]()} }

// nodeDown reports whether n should be drained, and why.
func nodeDown(n *corev1.Node) (bool, string) {
	if n.Spec.Unschedulable {
		return true, "cordoned"
	}
	for i := range n.Spec.Taints {
		t := &n.Spec.Taints[i]
		if t.Effect == corev1.TaintEffectNoExecute && t.Key != corev1.TaintNodeNotReady && t.Key != corev1.TaintNodeUnreachable {
			return true, "tainted " + t.ToString()
		}
	}
	return false, ""
}

// note queues n's word when it is new or changed.
func (c *cordons) note(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	down, _ := nodeDown(n)
	c.mu.Lock()
	defer c.mu.Unlock()
	if d, ok := c.told[n.Name]; ok && d == down {
		return
	}
	c.told[n.Name] = down
	c.q.push(nodeWord{host: n.Name, down: down})
}

// forget drops a deleted node, so that a node of that name that comes
// back is told anew.
func (c *cordons) forget(name string) {
	c.mu.Lock()
	delete(c.told, name)
	c.mu.Unlock()
}

// tell passes one word to the watcher.
func (c *cordons) tell(w nodeWord) {
	c.mu.Lock()
	f := c.watch
	c.mu.Unlock()
	if f != nil {
		f(w.host, w.down)
	}
}

// WatchMaintenance implements hostmgr.MaintenanceSource: a node that is
// cordoned or tainted NoExecute is down, and up again when it is neither.
func (b *Backend) WatchMaintenance(changed func(host string, down bool)) {
	b.cordons.mu.Lock()
	b.cordons.watch = changed
	b.cordons.mu.Unlock()
}
