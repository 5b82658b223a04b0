package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/peloton-sched/peloton/hostmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// The secondary-scheduler mode. Pods that any client creates (kubectl, a
// Deployment, a Spark operator) with schedulerName peloton and the
// annotation peloton.io/pool are foreign tasks: jobmgr groups them into
// jobs, resmgr admits them through the pool, placement places them, and
// the backend binds them through the Binding subresource. From then on a
// bound foreign pod is a run like Peloton's own, with two differences:
// Peloton never deletes one that finished (it is its owner's), and its
// end is final (its owner decides whether another pod follows).
//
// The pod itself is the durable record: adoption writes the run's task ID
// into its peloton.io/task-id annotation, so a restarted Peloton finds the
// run a pending pod is, and a bound pod's events are matched to their run
// as for Peloton's own pods.

// Annotations a foreign pod may carry.
const (
	// AnnotationGangName and AnnotationGangSize make pods a gang: none of
	// them is bound until all gang-size of them can be, together.
	AnnotationGangName = "peloton.io/gang-name"
	AnnotationGangSize = "peloton.io/gang-size"
	// AnnotationPriority is the pod's priority inside its pool (default 0).
	AnnotationPriority = "peloton.io/priority"
	// AnnotationBoundBy, set to SchedulerName by the Binding, marks a
	// foreign pod Peloton bound itself (not one bound by someone else
	// after Peloton adopted it), which hostmgr then accounts for.
	AnnotationBoundBy = "peloton.io/bound-by"
)

// EventReasonFailedScheduling is the reason of the Warning events Peloton
// puts on foreign pods it cannot take; kube-scheduler uses the same word.
const EventReasonFailedScheduling = "FailedScheduling"

// foreign reports whether p is a pod another client handed to Peloton.
func (b *Backend) foreign(p *corev1.Pod) bool {
	if !b.cfg.Secondary || p.Spec.SchedulerName != SchedulerName || p.Labels[LabelManagedBy] == ManagedByValue || p.Labels[LabelHelper] != "" {
		return false
	}
	return len(b.secondaryNS) == 0 || b.secondaryNS[p.Namespace]
}

// boundForeign reports whether p is a foreign pod Peloton bound: from
// then on a run like Peloton's own pods.
func (b *Backend) boundForeign(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && p.Annotations[AnnotationBoundBy] == SchedulerName && p.Annotations[AnnotationTaskID] != "" && b.foreign(p)
}

// WatchForeign registers the function told about foreign pods.
func (b *Backend) WatchForeign(changed func(hostmgr.ForeignTask)) { b.foreignChanged.Store(&changed) }

// ForeignTasks lists the foreign pods that wait for placement.
func (b *Backend) ForeignTasks() []hostmgr.ForeignTask {
	if b.pods == nil || !b.cfg.Secondary {
		return nil
	}
	var out []hostmgr.ForeignTask
	for _, obj := range b.pods.List() {
		p := obj.(*corev1.Pod)
		if !b.foreign(p) || p.Spec.NodeName != "" || p.DeletionTimestamp != nil || podTerminal(p) {
			continue
		}
		out = append(out, b.foreignTask(context.Background(), p, false))
	}
	return out
}

// onForeign reports a change of foreign pod p (deleted: it is gone). A
// bound pod is reported once, when it becomes bound; its run's events
// tell the rest.
func (b *Backend) onForeign(old, p *corev1.Pod, deleted bool) {
	if o := old; o != nil && o.Spec.NodeName != "" && p.Spec.NodeName != "" && !deleted {
		return
	}
	b.foreignQueue.push(b.foreignTask(context.Background(), p, deleted))
}

// foreignTask describes foreign pod p. A pod whose annotations Peloton
// cannot read is Invalid, and its owner is told why with an event.
func (b *Backend) foreignTask(ctx context.Context, p *corev1.Pod, deleted bool) hostmgr.ForeignTask {
	ft := hostmgr.ForeignTask{
		ForeignRef: hostmgr.ForeignRef{Ref: p.Namespace + "/" + p.Name, UID: string(p.UID)},
		Pool:       p.Annotations[AnnotationPool],
		Resources:  b.podRequests(p),
		TaskID:     p.Annotations[AnnotationTaskID],
		Host:       p.Spec.NodeName,
		Gone:       deleted || p.DeletionTimestamp != nil || podTerminal(p),
	}
	if len(p.Spec.Containers) > 0 {
		c := p.Spec.Containers[0]
		ft.Image = c.Image
		ft.Command = append(append([]string(nil), c.Command...), c.Args...)
	}
	placement, problems := podPlacement(p)
	ft.Placement = placement
	gang := p.Annotations[AnnotationGangName]
	if ft.Pool == "" {
		problems = append(problems, fmt.Sprintf("annotation %s: required: the leaf pool to run in, e.g. /org/team", AnnotationPool))
	}
	if v, ok := p.Annotations[AnnotationPriority]; ok {
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
		if err != nil {
			problems = append(problems, fmt.Sprintf("annotation %s: must be an integer from 0 to %d, got %q", AnnotationPriority, uint32(1<<32-1), v))
		}
		ft.Priority = uint32(n)
	} else if !ft.Gone && p.Spec.NodeName == "" {
		// Only a pod that waits needs it: the others' jobs exist.
		prio, problem := b.podPriority(ctx, p)
		if problem != "" {
			problems = append(problems, problem)
		}
		ft.Priority = prio
	}
	if v, ok := p.Annotations[AnnotationGangSize]; ok || gang != "" {
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
		switch {
		case gang == "":
			problems = append(problems, fmt.Sprintf("annotation %s: needs %s too", AnnotationGangSize, AnnotationGangName))
		case !ok:
			problems = append(problems, fmt.Sprintf("annotation %s: required with %s: the number of pods in the gang", AnnotationGangSize, AnnotationGangName))
		case err != nil || n == 0:
			problems = append(problems, fmt.Sprintf("annotation %s: must be a positive integer, got %q", AnnotationGangSize, v))
		default:
			ft.GangSize = uint32(n)
		}
	}
	owner := metav1.GetControllerOf(p)
	switch {
	case gang != "":
		// A gang may span owners (a driver pod and the executors it
		// creates): its name, in its namespace, is what holds it together.
		ft.Group = "kubernetes/gang/" + p.Namespace + "/" + gang
		ft.Owner = hostmgr.ForeignOwner{Kind: "Gang", Name: gang}
	case owner != nil:
		ft.Group = "kubernetes/owner/" + string(owner.UID)
		ft.Owner = hostmgr.ForeignOwner{Kind: owner.Kind, Name: owner.Name, UID: string(owner.UID)}
	default:
		ft.Group = "kubernetes/pod/" + string(p.UID)
		ft.Owner = hostmgr.ForeignOwner{Kind: "Pod", Name: p.Name, UID: string(p.UID)}
	}
	ft.Owner.Source, ft.Owner.Namespace = BackendName, p.Namespace
	if len(problems) > 0 {
		ft.Invalid = strings.Join(problems, "; ")
		if !ft.Gone && p.Spec.NodeName == "" {
			b.Reject(ctx, ft.ForeignRef, "Peloton cannot schedule this pod: "+ft.Invalid)
		}
	}
	return ft
}

// podPriority is the Peloton priority of a pod without the priority
// annotation: its spec.priority, which the apiserver's Priority admission
// fills in from spec.priorityClassName; where that admission is off, the
// value of the PriorityClass it names. Negative values (below the
// default of 0) count as 0, the lowest Peloton priority; others are kept
// as they are, so the order of classes is kept.
func (b *Backend) podPriority(ctx context.Context, p *corev1.Pod) (uint32, string) {
	v := int32(0)
	switch {
	case p.Spec.Priority != nil:
		v = *p.Spec.Priority
	case p.Spec.PriorityClassName != "":
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var pc *schedulingv1.PriorityClass
		err := b.call(ctx, func(ctx context.Context) error {
			var err error
			pc, err = b.client.SchedulingV1().PriorityClasses().Get(ctx, p.Spec.PriorityClassName, metav1.GetOptions{})
			return err
		})
		switch {
		case apierrors.IsNotFound(err):
			return 0, fmt.Sprintf("spec.priorityClassName: no PriorityClass %q", p.Spec.PriorityClassName)
		case err != nil:
			return 0, fmt.Sprintf("spec.priorityClassName: reading PriorityClass %q: %v", p.Spec.PriorityClassName, err)
		}
		v = pc.Value
	}
	return uint32(max(v, 0)), ""
}

// Adopt writes the run's task ID into the pod's annotations. The patch
// carries the pod's UID, which the apiserver refuses to change, so it
// fails on another pod of the same name.
func (b *Backend) Adopt(ctx context.Context, ref hostmgr.ForeignRef, taskID string) error {
	ns, name, ok := strings.Cut(ref.Ref, "/")
	if !ok {
		return fmt.Errorf("kubernetes: adopt: ref %q: want namespace/name", ref.Ref)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid": ref.UID, "annotations": map[string]string{AnnotationTaskID: taskID}}})
	err := b.call(ctx, func(ctx context.Context) error {
		_, err := b.client.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("kubernetes: adopt pod %s as %s: %w", ref.Ref, taskID, err)
	}
	return nil
}

// Reject puts a Warning event on the pod, once per pod and message.
func (b *Backend) Reject(ctx context.Context, ref hostmgr.ForeignRef, message string) {
	if b.failedScheduling(ctx, ref, message) {
		b.log.Info("foreign pod not scheduled", "pod", ref.Ref, "why", message)
	}
}

// failedScheduling puts a FailedScheduling Warning event on the pod,
// unless it was told message last, and reports whether it did. The
// event is written in the background, behind binds (not urgent).
func (b *Backend) failedScheduling(ctx context.Context, ref hostmgr.ForeignRef, message string) bool {
	ns, name, ok := strings.Cut(ref.Ref, "/")
	if !ok || !b.firstTelling(b.rejected, ref.UID, message) {
		return false
	}
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: name + ".", Namespace: ns},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: name,
			UID: types.UID(ref.UID)},
		Reason: EventReasonFailedScheduling, Message: message, Type: corev1.EventTypeWarning,
		Source: corev1.EventSource{Component: SchedulerName}, FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "peloton.io/scheduler", ReportingInstance: SchedulerName,
	}
	go func() {
		_ = b.call(context.WithoutCancel(ctx), func(ctx context.Context) error {
			_, err := b.client.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{})
			return err
		})
	}()
	return true
}

// Waiting sets the PodScheduled condition of a pod that still waits to
// False (reason Unschedulable), as kube-scheduler does for the pods it
// cannot place, so that kubectl shows why and autoscalers see the pod, and
// puts the same words on it as a FailedScheduling event, once per reason.
// The patch carries the resourceVersion the informer last saw: a pod bound
// or changed since is left alone.
func (b *Backend) Waiting(ctx context.Context, ref hostmgr.ForeignRef, why string) {
	obj, ok, _ := b.pods.GetByKey(ref.Ref)
	if !ok {
		return
	}
	p := obj.(*corev1.Pod)
	if string(p.UID) != ref.UID || p.Spec.NodeName != "" || p.DeletionTimestamp != nil {
		return
	}
	b.failedScheduling(ctx, ref, why)
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable && c.Message == why {
			return
		}
	}
	if !b.firstTelling(b.waitingTold, ref.UID, why) {
		return
	}
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": p.ResourceVersion},
		"status": map[string]any{"conditions": []map[string]any{{
			"type": corev1.PodScheduled, "status": corev1.ConditionFalse, "reason": corev1.PodReasonUnschedulable,
			"message": why, "lastTransitionTime": metav1.Now(),
		}}},
	})
	err := b.call(ctx, func(ctx context.Context) error {
		_, err := b.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		return err
	})
	if err != nil {
		b.mu.Lock()
		delete(b.waitingTold, ref.UID) // try again next time
		b.mu.Unlock()
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			b.log.Warn("set a waiting pod's PodScheduled condition", "pod", ref.Ref, "err", err)
		}
	}
}

// maxRejected bounds the memory of messages already told.
const maxRejected = 10_000

// launchForeign binds a foreign pod to spec.Host. The Binding carries the
// task ID annotation too, so the bound pod names its run even if the
// adoption patch was lost.
func (b *Backend) launchForeign(ctx context.Context, spec hostmgr.LaunchSpec) error {
	ref := spec.Foreign
	obj, ok, _ := b.pods.GetByKey(ref.Ref)
	if !ok {
		return fmt.Errorf("kubernetes: launch %s: pod %s is gone", spec.TaskID, ref.Ref)
	}
	p := obj.(*corev1.Pod)
	switch {
	case string(p.UID) != ref.UID:
		return fmt.Errorf("kubernetes: launch %s: pod %s was replaced by another of the same name", spec.TaskID, ref.Ref)
	case p.DeletionTimestamp != nil || podTerminal(p):
		return fmt.Errorf("kubernetes: launch %s: pod %s is being deleted", spec.TaskID, ref.Ref)
	case p.Spec.NodeName != "" && p.Spec.NodeName != spec.Host:
		return fmt.Errorf("kubernetes: launch %s: pod %s is already bound to %s", spec.TaskID, ref.Ref, p.Spec.NodeName)
	}
	t := &task{id: spec.TaskID, ns: p.Namespace, name: p.Name, host: spec.Host, ports: podPorts(p),
		withHealth: hasProbe(p), failAfter: failAfter(p), foreign: true}
	if err := b.register(t); err != nil {
		return err
	}
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID,
			Annotations: map[string]string{AnnotationTaskID: spec.TaskID, AnnotationBoundBy: SchedulerName}},
		Target: corev1.ObjectReference{Kind: "Node", Name: spec.Host},
	}
	// Urgent, as the bind after a create: the pod waits already.
	err := b.call(urgent(ctx), func(ctx context.Context) error {
		err := b.client.CoreV1().Pods(p.Namespace).Bind(ctx, binding, metav1.CreateOptions{})
		if apierrors.IsConflict(err) {
			// A retried bind whose first try went through.
			if cur, gerr := b.client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{}); gerr == nil &&
				cur.UID == p.UID && cur.Spec.NodeName == spec.Host {
				return nil
			}
		}
		return err
	})
	if err != nil {
		b.mu.Lock()
		delete(b.tasks, spec.TaskID)
		b.mu.Unlock()
		return fmt.Errorf("kubernetes: launch %s: bind pod %s to %s: %w", spec.TaskID, ref.Ref, spec.Host, err)
	}
	b.launched(t, p.UID)
	return nil
}

// register records a run about to be launched.
func (b *Backend) register(t *task) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed || !b.started:
		return fmt.Errorf("kubernetes: launch %s: backend not running", t.id)
	case b.tasks[t.id] != nil:
		return fmt.Errorf("kubernetes: launch %s: spec.taskId: %w", t.id, hostmgr.ErrAlreadyLaunched)
	}
	b.tasks[t.id] = t
	return nil
}

// launched marks t's pod (of uid) as existing and bound: LAUNCHED now,
// or what the informer has already seen of it.
func (b *Backend) launched(t *task, uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t.created = true
	if obj, ok, _ := b.pods.GetByKey(t.ns + "/" + t.name); ok {
		if p := obj.(*corev1.Pod); p.UID == uid {
			b.advanceLocked(t, observe(p, t.withHealth))
		}
	}
	if t.last.State == 0 && !b.closed {
		b.setLocked(t, hostmgr.TaskEvent{State: pelotonv1.TaskState_LAUNCHED})
	}
}

var _ hostmgr.ForeignSource = (*Backend)(nil)

// firstTelling records, in told (one of b's maps, under b.mu), that the
// pod uid was told msg, and reports whether it was not already: each
// message reaches a pod once. A map that reaches maxRejected entries is
// emptied, so it stays bounded; at worst a pod is told again.
func (b *Backend) firstTelling(told map[string]string, uid, msg string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if told[uid] == msg {
		return false
	}
	if len(told) >= maxRejected {
		clear(told)
	}
	told[uid] = msg
	return true
}
