package kubernetes

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/testing/kubetest"
)

func TestNodeDown(t *testing.T) {
	taint := func(key string, eff corev1.TaintEffect) corev1.Taint {
		return corev1.Taint{Key: key, Value: "v", Effect: eff}
	}
	for _, tc := range []struct {
		name string
		spec corev1.NodeSpec
		down bool
		why  string
	}{
		{"plain", corev1.NodeSpec{}, false, ""},
		{"cordoned", corev1.NodeSpec{Unschedulable: true}, true, "cordoned"},
		{"NoExecute", corev1.NodeSpec{Taints: []corev1.Taint{taint("dedicated", corev1.TaintEffectNoExecute)}}, true, "tainted dedicated=v:NoExecute"},
		{"NoSchedule only", corev1.NodeSpec{Taints: []corev1.Taint{taint("dedicated", corev1.TaintEffectNoSchedule)}}, false, ""},
		{"not ready", corev1.NodeSpec{Taints: []corev1.Taint{taint(corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute)}}, false, ""},
		{"unreachable", corev1.NodeSpec{Taints: []corev1.Taint{taint(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute)}}, false, ""},
	} {
		down, why := nodeDown(&corev1.Node{Spec: tc.spec})
		if down != tc.down || why != tc.why {
			t.Errorf("%s: %v %q; want %v %q", tc.name, down, why, tc.down, tc.why)
		}
	}
}

// TestCordonedAndTaintedNodesAreDown: the backend tells hostmgr (its
// MaintenanceSource word) that a cordoned node, and one tainted NoExecute,
// is down, reports it unschedulable, and says it is up again once
// uncordoned or untainted.
func TestCordonedAndTaintedNodesAreDown(t *testing.T) {
	e := newEnv(t, cluster(t), 2, nil)
	var mu sync.Mutex
	words := map[string][]bool{}
	e.b.WatchMaintenance(func(h string, down bool) {
		mu.Lock()
		words[h] = append(words[h], down)
		mu.Unlock()
	})
	update := func(name string, f func(*corev1.Node)) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := e.c.Client.CoreV1().Nodes().Get(e.ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			f(n)
			_, err = e.c.Client.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	wait := func(name string, down bool, what string) {
		t.Helper()
		err := kubetest.Poll(e.ctx, 20*time.Second, func(context.Context) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			w := words[name]
			return len(w) > 0 && w[len(w)-1] == down, nil
		})
		if err != nil {
			mu.Lock()
			t.Fatalf("%s: words of %s: %v; want the last down=%v", what, name, words[name], down)
		}
		e.waitHosts(what, func(hs map[string]hostmgr.HostInfo) bool { return hs[name].Unschedulable == down })
	}
	cordoned, tainted := e.nodes[0], e.nodes[1]
	update(cordoned, func(n *corev1.Node) { n.Spec.Unschedulable = true })
	wait(cordoned, true, "cordoned")
	update(tainted, func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "maintenance", Value: "now", Effect: corev1.TaintEffectNoExecute})
	})
	wait(tainted, true, "tainted NoExecute")
	update(cordoned, func(n *corev1.Node) { n.Spec.Unschedulable = false })
	wait(cordoned, false, "uncordoned")
	update(tainted, func(n *corev1.Node) { n.Spec.Taints = nil })
	wait(tainted, false, "untainted")
	mu.Lock()
	defer mu.Unlock()
	for _, n := range []string{cordoned, tainted} {
		w := words[n]
		if len(w) > 0 && !w[0] {
			w = w[1:] // up, when first seen
		}
		if len(w) != 2 || !w[0] || w[1] {
			t.Errorf("words of %s: %v; want (up when first seen,) down, then up, each once", n, words[n])
		}
	}
}
