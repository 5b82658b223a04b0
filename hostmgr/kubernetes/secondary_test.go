package kubernetes

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/testing/kubetest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
)

// foreignLog keeps what the backend says about foreign pods, by pod name.
type foreignLog struct {
	mu   sync.Mutex
	seen map[string][]hostmgr.ForeignTask
}

func (l *foreignLog) add(ft hostmgr.ForeignTask) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen[ft.Ref] = append(l.seen[ft.Ref], ft)
}

func (l *foreignLog) last(ref string) (hostmgr.ForeignTask, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fts := l.seen[ref]
	if len(fts) == 0 {
		return hostmgr.ForeignTask{}, false
	}
	return fts[len(fts)-1], true
}

func (e *env) waitForeign(ref, what string, ok func(hostmgr.ForeignTask) bool, l *foreignLog) hostmgr.ForeignTask {
	e.t.Helper()
	var ft hostmgr.ForeignTask
	err := kubetest.Poll(e.ctx, 20*time.Second, func(context.Context) (bool, error) {
		var seen bool
		ft, seen = l.last(ref)
		return seen && ok(ft), nil
	})
	if err != nil {
		e.t.Fatalf("%s: last said of %s: %+v: %v", what, ref, ft, err)
	}
	return ft
}

// foreignPod is a pod as another client would create it for Peloton.
func (e *env) foreignPod(name string, annotations map[string]string, mutate func(*corev1.Pod)) *corev1.Pod {
	e.t.Helper()
	rl := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns, Annotations: annotations},
		Spec: corev1.PodSpec{SchedulerName: SchedulerName, Containers: []corev1.Container{{
			Name: "app", Image: "nginx:stable", Args: []string{"serve"}, Resources: corev1.ResourceRequirements{Requests: rl, Limits: rl}}}},
	}
	if mutate != nil {
		mutate(p)
	}
	created, err := e.c.Client.CoreV1().Pods(e.ns).Create(e.ctx, p, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return created
}

// TestForeignPods: pods another client creates with schedulerName peloton
// are reported with what Peloton needs to admit and place them, can be
// adopted and bound, and then run like Peloton's own; pods with bad
// annotations are refused with an event that names the annotation.
func TestForeignPods(t *testing.T) {
	c := cluster(t)
	e := newEnvWith(t, c, 2, nil, func(cfg *Config) {
		cfg.Secondary = true
		cfg.SecondaryNamespaces = []string{cfg.Namespace}
	})
	l := &foreignLog{seen: map[string][]hostmgr.ForeignTask{}}
	e.b.WatchForeign(l.add)

	// A bare pod.
	p := e.foreignPod("hello", map[string]string{AnnotationPool: "/team", AnnotationPriority: "7"}, func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{"disk": "ssd"}
	})
	ref := e.ns + "/hello"
	ft := e.waitForeign(ref, "a bare pod", func(hostmgr.ForeignTask) bool { return true }, l)
	want := hostmgr.ForeignTask{
		ForeignRef: hostmgr.ForeignRef{Ref: ref, UID: string(p.UID)}, Group: "kubernetes/pod/" + string(p.UID),
		Owner: hostmgr.ForeignOwner{Source: "kubernetes", Namespace: e.ns, Kind: "Pod", Name: "hello", UID: string(p.UID)},
		Pool:  "/team", Priority: 7, Resources: resources.Resources{MilliCPU: 500, MemoryMB: 256},
		Image: "nginx:stable", Command: []string{"serve"}, Placement: &pelotonv1.PlacementSpec{Constraints: []*pelotonv1.Constraint{
			{Label: "disk", Op: pelotonv1.ConstraintOp_EQUALS, Values: []string{"ssd"}}}},
	}
	if !equalForeign(ft, want) {
		t.Fatalf("foreign task\n got %+v\nwant %+v", ft, want)
	}
	if got := e.b.ForeignTasks(); len(got) != 1 || got[0].Ref != ref {
		t.Fatalf("ForeignTasks() = %+v, want the pod", got)
	}

	// Adoption writes the run on the pod, and only on that pod.
	if err := e.b.Adopt(e.ctx, hostmgr.ForeignRef{Ref: ref, UID: "not-its-uid"}, "job-0-1"); err == nil {
		t.Fatal("adopting a pod under another UID succeeded")
	}
	if err := e.b.Adopt(e.ctx, ft.ForeignRef, "job-0-1"); err != nil {
		t.Fatal(err)
	}
	e.waitForeign(ref, "the adopted pod", func(ft hostmgr.ForeignTask) bool { return ft.TaskID == "job-0-1" }, l)
	// Why it waits goes on the pod, as kube-scheduler would put it.
	e.waitWaiting(ft.ForeignRef, "Peloton: no host has room now")

	// Launch binds it; then it is a run like any other.
	spec := hostmgr.LaunchSpec{TaskID: "job-0-1", JobID: "job", RunID: 1, Host: e.nodes[1], Foreign: &ft.ForeignRef,
		Resources: ft.Resources}
	if err := e.b.Launch(e.ctx, spec); err != nil {
		t.Fatal(err)
	}
	evs := e.waitFor("job-0-1", pelotonv1.TaskState_RUNNING, 20*time.Second)
	if got := states(evs); got != "LAUNCHED RUNNING" {
		t.Errorf("events %q, want LAUNCHED RUNNING", got)
	}
	bound, err := c.Client.CoreV1().Pods(e.ns).Get(e.ctx, "hello", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if bound.Spec.NodeName != e.nodes[1] || bound.Annotations[AnnotationTaskID] != "job-0-1" || bound.UID != p.UID {
		t.Fatalf("pod after launch: node %q, annotations %v", bound.Spec.NodeName, bound.Annotations)
	}
	e.waitForeign(ref, "the bound pod", func(ft hostmgr.ForeignTask) bool { return ft.Host == e.nodes[1] }, l)
	// A bound pod is not marked waiting any more.
	e.b.Waiting(e.ctx, ft.ForeignRef, "Peloton: too late")
	if p, err := c.Client.CoreV1().Pods(e.ns).Get(e.ctx, "hello", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if c := scheduledCondition(p); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("PodScheduled of a bound pod: %+v", c)
	}
	if got := e.b.ForeignTasks(); len(got) != 0 {
		t.Errorf("ForeignTasks() after binding = %+v, want none waiting", got)
	}
	// Peloton's hold accounts for it: the node's capacity is not reduced
	// by it as by a pod of someone else.
	if h := e.hosts()[e.nodes[1]]; h.Capacity.MilliCPU != 4000 {
		t.Errorf("capacity of the node running the adopted pod: %v, want all 4 CPUs", h.Capacity)
	}
	if got, err := e.b.Status("job-0-1"); err != nil || got.State != pelotonv1.TaskState_RUNNING {
		t.Errorf("Status = %+v, %v", got, err)
	}
	if err := e.b.Kill(e.ctx, "job-0-1", time.Second); err != nil {
		t.Fatal(err)
	}
	e.waitFor("job-0-1", pelotonv1.TaskState_KILLED, 20*time.Second)
	e.waitForeign(ref, "the deleted pod", func(ft hostmgr.ForeignTask) bool { return ft.Gone }, l)

	// A launch of a pod that is gone fails and leaves nothing.
	if err := e.b.Launch(e.ctx, hostmgr.LaunchSpec{TaskID: "job-1-1", JobID: "job", InstanceID: 1, RunID: 1, Host: e.nodes[0],
		Foreign: &hostmgr.ForeignRef{Ref: e.ns + "/nobody", UID: "x"}}); err == nil || !strings.Contains(err.Error(), "gone") {
		t.Errorf("launch of a missing pod: %v", err)
	}
	if _, err := e.b.Status("job-1-1"); err == nil {
		t.Error("a failed foreign launch left a run behind")
	}

	// A pod Peloton adopted but someone else bound is not Peloton's run:
	// its requests count against its node like any other pod's.
	sq := e.foreignPod("squatter", map[string]string{AnnotationPool: "/team"}, nil)
	sqRef := hostmgr.ForeignRef{Ref: e.ns + "/squatter", UID: string(sq.UID)}
	if err := e.b.Adopt(e.ctx, sqRef, "job-5-1"); err != nil {
		t.Fatal(err)
	}
	if err := c.Client.CoreV1().Pods(e.ns).Bind(e.ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "squatter", Namespace: e.ns},
		Target: corev1.ObjectReference{Kind: "Node", Name: e.nodes[0]}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitForeign(sqRef.Ref, "the pod bound by another", func(ft hostmgr.ForeignTask) bool { return ft.Host == e.nodes[0] }, l)
	e.waitHosts("the other's pod counted", func(h map[string]hostmgr.HostInfo) bool { return h[e.nodes[0]].Capacity.MilliCPU == 3500 })

	// Pods of one controller share a group; a gang's members share theirs.
	owned := func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5d9f", UID: "rs-1", Controller: ptr(true)}}
	}
	e.foreignPod("web-a", map[string]string{AnnotationPool: "/team"}, owned)
	ft = e.waitForeign(e.ns+"/web-a", "an owned pod", func(hostmgr.ForeignTask) bool { return true }, l)
	if ft.Group != "kubernetes/owner/rs-1" || ft.Owner.Kind != "ReplicaSet" || ft.Owner.Name != "web-5d9f" {
		t.Errorf("owned pod: group %q, owner %+v", ft.Group, ft.Owner)
	}
	e.foreignPod("ps-0", map[string]string{AnnotationPool: "/ml", AnnotationGangName: "train", AnnotationGangSize: "4"}, owned)
	ft = e.waitForeign(e.ns+"/ps-0", "a gang member", func(hostmgr.ForeignTask) bool { return true }, l)
	if ft.Group != "kubernetes/gang/"+e.ns+"/train" || ft.GangSize != 4 || ft.Owner.Kind != "Gang" || ft.Invalid != "" {
		t.Errorf("gang member: %+v", ft)
	}

	// Bad annotations: refused, with an event naming them.
	bad := map[string]map[string]string{
		"no-pool":      {},
		"bad-priority": {AnnotationPool: "/team", AnnotationPriority: "high"},
		"half-gang":    {AnnotationPool: "/team", AnnotationGangName: "g"},
	}
	wantIn := map[string]string{"no-pool": AnnotationPool, "bad-priority": AnnotationPriority, "half-gang": AnnotationGangSize}
	for name, a := range bad {
		e.foreignPod(name, a, nil)
		ft := e.waitForeign(e.ns+"/"+name, name, func(hostmgr.ForeignTask) bool { return true }, l)
		if !strings.Contains(ft.Invalid, wantIn[name]) {
			t.Errorf("%s: Invalid %q, want it to name %s", name, ft.Invalid, wantIn[name])
		}
		err := kubetest.Poll(e.ctx, 20*time.Second, func(ctx context.Context) (bool, error) {
			evs, err := c.Client.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
			if err != nil {
				return false, err
			}
			for _, ev := range evs.Items {
				if ev.Reason == EventReasonFailedScheduling && ev.Type == corev1.EventTypeWarning && strings.Contains(ev.Message, wantIn[name]) {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Errorf("%s: no FailedScheduling event naming %s: %v", name, wantIn[name], err)
		}
	}

	// Pods of other schedulers, and of other namespaces, are not foreign.
	other := e.foreignPod("kube-scheduled", map[string]string{AnnotationPool: "/team"}, func(p *corev1.Pod) { p.Spec.SchedulerName = "default-scheduler" })
	if err := c.CreateNamespace(e.ctx, e.ns+"-other"); err != nil {
		t.Fatal(err)
	}
	elsewhere := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: e.ns + "-other", Annotations: map[string]string{AnnotationPool: "/team"}},
		Spec: corev1.PodSpec{SchedulerName: SchedulerName, Containers: []corev1.Container{{Name: "app", Image: "nginx:stable"}}}}
	if _, err := c.Client.CoreV1().Pods(elsewhere.Namespace).Create(e.ctx, elsewhere, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A marker pod created after them: once it is seen, they would have been.
	e.foreignPod("marker", map[string]string{AnnotationPool: "/team"}, nil)
	e.waitForeign(e.ns+"/marker", "the marker", func(hostmgr.ForeignTask) bool { return true }, l)
	for _, ref := range []string{e.ns + "/" + other.Name, elsewhere.Namespace + "/elsewhere"} {
		if ft, seen := l.last(ref); seen {
			t.Errorf("%s reported as foreign: %+v", ref, ft)
		}
	}
	if err := c.Client.CoreV1().Pods(e.ns).Delete(e.ctx, "marker", metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	e.waitForeign(e.ns+"/marker", "the deleted pending pod", func(ft hostmgr.ForeignTask) bool { return ft.Gone }, l)
}

// scheduledCondition is a pod's PodScheduled condition, or nil.
func scheduledCondition(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodScheduled {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// waitWaiting tells the backend that pod ref waits because of message
// until the pod says so. Waiting leaves a pod alone when the informer has
// not seen its latest version yet (the patch carries the resourceVersion),
// so it is told again, as jobmgr does every few seconds.
func (e *env) waitWaiting(ref hostmgr.ForeignRef, message string) {
	e.t.Helper()
	_, name, _ := strings.Cut(ref.Ref, "/")
	var last *corev1.PodCondition
	err := kubetest.Poll(e.ctx, 20*time.Second, func(ctx context.Context) (bool, error) {
		e.b.Waiting(ctx, ref, message)
		p, err := e.c.Client.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = scheduledCondition(p)
		return last != nil && last.Status == corev1.ConditionFalse && last.Reason == corev1.PodReasonUnschedulable && last.Message == message, nil
	})
	if err != nil {
		e.t.Fatalf("pod %s: PodScheduled %+v, want False/Unschedulable %q: %v", name, last, message, err)
	}
}

func equalForeign(a, b hostmgr.ForeignTask) bool {
	return a.ForeignRef == b.ForeignRef && a.Group == b.Group && a.Owner == b.Owner && a.Pool == b.Pool &&
		a.Priority == b.Priority && a.GangSize == b.GangSize && a.Resources == b.Resources && a.Image == b.Image &&
		strings.Join(a.Command, " ") == strings.Join(b.Command, " ") && proto.Equal(a.Placement, b.Placement) &&
		a.TaskID == b.TaskID && a.Host == b.Host && a.Invalid == b.Invalid && a.Gone == b.Gone
}

// TestSecondaryOff: without the mode, pods for Peloton are nobody's.
func TestSecondaryOff(t *testing.T) {
	c := cluster(t)
	e := newEnv(t, c, 1, nil)
	l := &foreignLog{seen: map[string][]hostmgr.ForeignTask{}}
	e.b.WatchForeign(l.add)
	e.foreignPod("ignored", map[string]string{AnnotationPool: "/team"}, nil)
	spec := e.launch("after") // a run of Peloton's own, launched after the pod
	e.waitFor(spec.TaskID, pelotonv1.TaskState_RUNNING, 20*time.Second)
	if got := e.b.ForeignTasks(); len(got) != 0 {
		t.Errorf("ForeignTasks() = %+v with the mode off", got)
	}
	if ft, seen := l.last(e.ns + "/ignored"); seen {
		t.Errorf("reported with the mode off: %+v", ft)
	}
}
