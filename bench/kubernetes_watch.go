package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// podWatch records, for each pod of one namespace, when an informer in
// this process first saw it, saw it bound (spec.nodeName set) and saw it
// Running. Every phase is timed the same way, so the watch's own lag is in
// all of them alike.
type podWatch struct {
	want  int
	close chan struct{}

	mu      sync.Mutex
	pods    map[string]*podTimes
	bound   int
	running int
	// allRunning is closed when want pods run.
	allRunning chan struct{}
}

type podTimes struct{ seen, bound, running time.Time }

// watchPods starts the informer and waits (bounded by ctx) until it has
// listed the namespace.
func watchPods(ctx context.Context, base *rest.Config, ns string, want int) (*podWatch, error) {
	rc := rest.CopyConfig(base)
	rc.UserAgent = "peloton-bench-watch"
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	w := &podWatch{want: want, close: make(chan struct{}), pods: make(map[string]*podTimes, want), allRunning: make(chan struct{})}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.observe(obj) },
		UpdateFunc: func(_, obj any) { w.observe(obj) },
	}); err != nil {
		return nil, err
	}
	f.Start(w.close)
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(sctx.Done(), inf.HasSynced) {
		w.stop()
		return nil, fmt.Errorf("bench: the pod informer of %s did not sync: %w", ns, sctx.Err())
	}
	return w, nil
}

func (w *podWatch) stop() {
	select {
	case <-w.close:
	default:
		close(w.close)
	}
}

func (w *podWatch) observe(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.pods[p.Name]
	if t == nil {
		t = &podTimes{seen: now}
		w.pods[p.Name] = t
	}
	if t.bound.IsZero() && p.Spec.NodeName != "" {
		t.bound = now
		w.bound++
	}
	if t.running.IsZero() && p.Status.Phase == corev1.PodRunning {
		t.running = now
		w.running++
		if w.running == w.want {
			close(w.allRunning)
		}
	}
}

// wait returns when want pods run, start fails, or ctx ends; it reports
// progress every 5s.
func (w *podWatch) wait(ctx context.Context, startErr <-chan error, progress func(bound, running int)) error {
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-w.allRunning:
			return nil
		case err := <-startErr:
			if err != nil {
				return err
			}
			startErr = nil // done; keep waiting for the pods
		case <-tick.C:
			w.mu.Lock()
			b, r := w.bound, w.running
			w.mu.Unlock()
			progress(b, r)
		case <-ctx.Done():
			w.mu.Lock()
			b, r := w.bound, w.running
			w.mu.Unlock()
			return fmt.Errorf("%w: %d of %d pods bound, %d running", ctx.Err(), b, w.want, r)
		}
	}
}

// result computes the phase's figures with t0 as the time origin.
func (w *podWatch) result(t0 time.Time) phaseResult {
	w.mu.Lock()
	defer w.mu.Unlock()
	var lastBound, lastRunning, firstSeen time.Time
	startup := make([]float64, 0, len(w.pods))
	for _, t := range w.pods {
		if t.bound.After(lastBound) {
			lastBound = t.bound
		}
		if t.running.After(lastRunning) {
			lastRunning = t.running
		}
		if firstSeen.IsZero() || t.seen.Before(firstSeen) {
			firstSeen = t.seen
		}
		if !t.running.IsZero() {
			startup = append(startup, ms(t.running.Sub(t.seen)))
		}
	}
	return phaseResult{
		boundPerSec: perSec(w.bound, lastBound.Sub(t0)),
		allRunning:  lastRunning.Sub(t0),
		firstPod:    firstSeen.Sub(t0),
		startupP50:  percentile(startup, 50),
		startupP99:  percentile(startup, 99),
	}
}
