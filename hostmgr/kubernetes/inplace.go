package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/peloton-sched/peloton/hostmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// In-place replacement (hostmgr.Replacer). A pod's spec is immutable but for
// its containers' images, and the kubelet restarts a container whose image
// changed whatever the pod's restartPolicy. So a run whose next run differs
// only in its image becomes that run with one patch of its pod: the image,
// the run-id label and the task-id annotation (the run's IDs reach the
// container through the downward API, read when the container starts). The
// pod, its node, its IP and its volumes stay.
const (
	// AnnotationSpecHash is a digest of everything in a run's pod that a
	// replacement must keep: the pod as built, without its image and
	// without what names the run (its name, run-id label and task-id
	// annotation). Two runs whose pods have the same digest differ at most
	// in their images.
	AnnotationSpecHash = "peloton.io/spec-hash"
	// AnnotationRunRestarts is the restart count of the task container at
	// which the pod's current run begins: absent (0) for the run the pod
	// was created for, n+1 for a run that replaced one whose container
	// had restarted n times. Until the container's restart count reaches
	// it, the container that runs is the previous run's, and the current
	// run is LAUNCHED, not RUNNING. Being on the pod, it survives a
	// restart of Peloton.
	AnnotationRunRestarts = "peloton.io/run-restarts"
)

// specHashProto begins a digest of the pod's protobuf: the digest
// specHash writes. A digest without it is of the pod's JSON
// (jsonSpecHash), which releases before it wrote on their pods.
const specHashProto = "p1:"

// specHash is the AnnotationSpecHash of a pod as buildPod makes it: a
// digest of the protobuf of its metadata and spec without its name, run
// ID, task ID, digest and images (the generated marshalling writes map
// entries in key order, so it is stable). It is computed for every launch,
// so it copies nothing: it blanks those fields on p while it marshals and
// puts them back (p must not be read meanwhile; buildPod's pod is its
// own). Protobuf, not JSON: JSON's reflection and the copies made it 3 %
// of Peloton's CPU per pod at 1,000 launches a second.
func specHash(p *corev1.Pod) string {
	h := sha256.New()
	ok := true
	withoutIdentity(p, func() {
		for _, part := range []interface{ Marshal() ([]byte, error) }{&p.ObjectMeta, &p.Spec} {
			b, err := part.Marshal()
			if err != nil {
				ok = false
				return
			}
			var n [8]byte
			binary.BigEndian.PutUint64(n[:], uint64(len(b)))
			h.Write(n[:])
			h.Write(b)
		}
	})
	if !ok {
		return ""
	}
	return specHashProto + hex.EncodeToString(h.Sum(nil)[:16])
}

// jsonSpecHash is the digest of earlier releases: of the same parts'
// JSON. A pod they created is compared with a new run's pod by it.
func jsonSpecHash(p *corev1.Pod) string {
	var b []byte
	var err error
	withoutIdentity(p, func() {
		// encoding/json writes map keys in order, so the digest is stable.
		b, err = json.Marshal(struct {
			Meta *metav1.ObjectMeta `json:"meta"`
			Spec *corev1.PodSpec    `json:"spec"`
		}{&p.ObjectMeta, &p.Spec})
	})
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// withoutIdentity runs f with what a digest leaves out blanked on p: its
// name, run-ID label, task-ID and digest annotations and its containers'
// images; then puts them back.
func withoutIdentity(p *corev1.Pod, f func()) {
	name := p.Name
	runID, hasRunID := p.Labels[LabelRunID]
	taskID, hasTaskID := p.Annotations[AnnotationTaskID]
	hash, hasHash := p.Annotations[AnnotationSpecHash]
	var images [4]string
	imgs := images[:0]
	for i := range p.Spec.Containers {
		imgs = append(imgs, p.Spec.Containers[i].Image)
		p.Spec.Containers[i].Image = ""
	}
	p.Name = ""
	delete(p.Labels, LabelRunID)
	delete(p.Annotations, AnnotationTaskID)
	delete(p.Annotations, AnnotationSpecHash)
	defer func() {
		p.Name = name
		for i, img := range imgs {
			p.Spec.Containers[i].Image = img
		}
		if hasRunID {
			p.Labels[LabelRunID] = runID
		}
		if hasTaskID {
			p.Annotations[AnnotationTaskID] = taskID
		}
		if hasHash {
			p.Annotations[AnnotationSpecHash] = hash
		}
	}()
	f()
}

// sameSpec says whether want, a pod as buildPod makes it, differs from
// running at most in its run's identity and its images, by running's
// digest: of its protobuf, or of its JSON if an earlier release made it.
func sameSpec(running, want *corev1.Pod) bool {
	h := running.Annotations[AnnotationSpecHash]
	switch {
	case h == "":
		return false
	case strings.HasPrefix(h, specHashProto):
		return h == want.Annotations[AnnotationSpecHash]
	default:
		return h == jsonSpecHash(want)
	}
}

// runRestarts reads AnnotationRunRestarts.
func runRestarts(p *corev1.Pod) int32 {
	n, err := strconv.ParseInt(p.Annotations[AnnotationRunRestarts], 10, 32)
	if err != nil || n < 0 {
		return 0
	}
	return int32(n)
}

// replacement is a run that can be replaced, and what its replacement needs.
type replacement struct {
	old      *task
	pod      *corev1.Pod // as the informer last saw it
	oldImage string
	image    string
	ports    map[string]uint32
	// restarts is the task container's restart count now; the next run
	// begins with the restart after it.
	restarts   int32
	withHealth bool
}

// CheckReplace reports whether Replace(oldTaskID, next) would patch the
// run's pod, changing nothing.
func (b *Backend) CheckReplace(oldTaskID string, next hostmgr.LaunchSpec) error {
	_, err := b.replaceable(oldTaskID, next)
	return err
}

// replaceable checks, against memory and the informer's cache, that run
// oldTaskID is running in a pod that next's pod would equal but for its
// image and the run's IDs, and that the image changes: without a new image
// the kubelet would not restart the container, and the new run would never
// start.
func (b *Backend) replaceable(oldTaskID string, next hostmgr.LaunchSpec) (*replacement, error) {
	not := func(format string, args ...any) error {
		return fmt.Errorf("kubernetes: replace %s with %s: %w: %s", oldTaskID, next.TaskID, hostmgr.ErrNotReplaceable, fmt.Sprintf(format, args...))
	}
	b.mu.Lock()
	running := b.started && !b.closed
	t, ok := b.tasks[oldTaskID]
	var ns, name, host string
	var state pelotonv1.TaskState
	killing := false
	if ok {
		ns, name, host, state, killing = t.ns, t.name, t.host, t.last.State, t.killing
	}
	_, dup := b.tasks[next.TaskID]
	b.mu.Unlock()
	switch {
	case !running:
		return nil, not("backend not running")
	case !ok:
		return nil, not("run %s is unknown", oldTaskID)
	case dup:
		return nil, not("run %s exists already", next.TaskID)
	case killing || state != pelotonv1.TaskState_RUNNING:
		return nil, not("run %s is %s, not running", oldTaskID, stateWord(state, killing))
	case next.Host != host:
		return nil, not("the new run is for node %s, the pod is on %s", next.Host, host)
	case b.namespaceOf(next.Pool) != ns:
		return nil, not("the new run's pool %s is in namespace %s, the pod in %s", next.Pool, b.namespaceOf(next.Pool), ns)
	}
	obj, exists, _ := b.pods.GetByKey(ns + "/" + name)
	if !exists {
		return nil, not("pod %s/%s is gone", ns, name)
	}
	p := obj.(*corev1.Pod)
	if p.Annotations[AnnotationTaskID] != oldTaskID || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning ||
		len(p.Spec.Containers) != 1 || p.Spec.Containers[0].Name != ContainerName {
		return nil, not("pod %s/%s is not the running pod of run %s", ns, name, oldTaskID)
	}
	ports := assignPorts(next.Ports)
	want := b.buildPod(next, ns, ports)
	if !sameSpec(p, want) {
		return nil, not("the new run's pod would differ from pod %s/%s in more than its image", ns, name)
	}
	r := &replacement{old: t, pod: p, oldImage: p.Spec.Containers[0].Image, image: want.Spec.Containers[0].Image,
		ports: ports, withHealth: hasProbe(want)}
	if r.image == r.oldImage {
		return nil, not("the image %s does not change, so the container would not restart", r.image)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == ContainerName {
			r.restarts = cs.RestartCount
		}
	}
	return r, nil
}

func stateWord(s pelotonv1.TaskState, killing bool) string {
	switch {
	case killing:
		return "being killed"
	case s == 0:
		return "not launched yet"
	}
	return s.String()
}

// Replace patches the pod of run oldTaskID into the pod of run next: its
// image, its run-id label and its task-id annotation, in one JSON patch
// whose tests make it apply only to the same pod (UID) still running the
// same run and image. oldTaskID then ends KILLED (hostmgr.ReasonReplaced)
// and next is LAUNCHED at once, RUNNING once the kubelet has restarted the
// container with the new image (the container's restart count passes
// AnnotationRunRestarts), then healthy or not, and ends, as any run.
func (b *Backend) Replace(ctx context.Context, oldTaskID string, next hostmgr.LaunchSpec) error {
	r, err := b.replaceable(oldTaskID, next)
	if err != nil {
		return err
	}
	p := r.pod
	nt := &task{id: next.TaskID, ns: p.Namespace, name: p.Name, host: next.Host, ports: r.ports,
		withHealth: r.withHealth, failAfter: failAfter(p)}
	b.mu.Lock()
	if b.closed || b.tasks[next.TaskID] != nil {
		b.mu.Unlock()
		return fmt.Errorf("kubernetes: replace %s with %s: %w: backend closed or run exists", oldTaskID, next.TaskID, hostmgr.ErrNotReplaceable)
	}
	// Not created yet: the informer's events of the pod under next's ID
	// wait until the patch is through, as for a launch.
	b.tasks[next.TaskID] = nt
	b.mu.Unlock()

	patched, err := b.patchRun(ctx, r, next)
	if err != nil {
		b.mu.Lock()
		delete(b.tasks, next.TaskID)
		b.mu.Unlock()
		return fmt.Errorf("kubernetes: replace %s with %s: %w", oldTaskID, next.TaskID, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	nt.created = true
	if !r.old.terminal() {
		b.setLocked(r.old, hostmgr.TaskEvent{State: pelotonv1.TaskState_KILLED, Reason: hostmgr.ReasonReplaced,
			Message: fmt.Sprintf("pod %s/%s now runs %s", p.Namespace, p.Name, next.TaskID)})
	}
	// The informer may have seen the patched pod already.
	if obj, ok, _ := b.pods.GetByKey(p.Namespace + "/" + p.Name); ok {
		if q := obj.(*corev1.Pod); q.UID == patched.UID && q.Annotations[AnnotationTaskID] == next.TaskID {
			b.advanceLocked(nt, observe(q, nt.withHealth))
		}
	}
	if nt.last.State == 0 && !b.closed {
		b.setLocked(nt, hostmgr.TaskEvent{State: pelotonv1.TaskState_LAUNCHED})
	}
	return nil
}

// patchOp is one operation of a JSON patch (RFC 6902).
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// jsonPointer escapes a map key for a JSON patch path (RFC 6901).
func jsonPointer(key string) string {
	return strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
}

// patchRun sends the patch and returns the patched pod. A patch retried
// after a timeout whose first try went through fails its tests; the pod
// then already names next, which counts as done. When the pod still names
// the old run and the apiserver refused the patch, nothing changed: the
// error wraps ErrNotReplaceable.
func (b *Backend) patchRun(ctx context.Context, r *replacement, next hostmgr.LaunchSpec) (*corev1.Pod, error) {
	p := r.pod
	meta := "/metadata/annotations/"
	ops := []patchOp{
		{"test", "/metadata/uid", string(p.UID)},
		{"test", meta + jsonPointer(AnnotationTaskID), r.old.id},
		{"test", "/spec/containers/0/name", ContainerName},
		{"test", "/spec/containers/0/image", r.oldImage},
		{"test", "/status/phase", string(corev1.PodRunning)},
		{"replace", "/spec/containers/0/image", r.image},
		{"add", "/metadata/labels/" + jsonPointer(LabelRunID), strconv.FormatUint(uint64(next.RunID), 10)},
		{"add", meta + jsonPointer(AnnotationTaskID), next.TaskID},
		{"add", meta + jsonPointer(AnnotationRunRestarts), strconv.FormatInt(int64(r.restarts)+1, 10)},
	}
	body, err := json.Marshal(ops)
	if err != nil {
		return nil, err
	}
	pods := b.client.CoreV1().Pods(p.Namespace)
	var out *corev1.Pod
	err = b.call(ctx, func(ctx context.Context) error {
		q, err := pods.Patch(ctx, p.Name, types.JSONPatchType, body, metav1.PatchOptions{})
		if err == nil {
			out = q
		}
		return err
	})
	if err == nil {
		return out, nil
	}
	var cur *corev1.Pod
	gerr := b.call(context.WithoutCancel(ctx), func(ctx context.Context) error {
		q, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
		cur = q
		return err
	})
	switch {
	case gerr == nil && cur.UID == p.UID && cur.Annotations[AnnotationTaskID] == next.TaskID:
		return cur, nil
	case gerr == nil && cur.UID == p.UID && cur.Annotations[AnnotationTaskID] == r.old.id && !transient(err):
		return nil, fmt.Errorf("%w: patch pod %s/%s: %v", hostmgr.ErrNotReplaceable, p.Namespace, p.Name, err)
	case apierrors.IsNotFound(gerr) || (gerr == nil && cur.UID != p.UID):
		return nil, fmt.Errorf("%w: pod %s/%s is gone", hostmgr.ErrNotReplaceable, p.Namespace, p.Name)
	}
	return nil, errors.Join(fmt.Errorf("patch pod %s/%s: %w", p.Namespace, p.Name, err), gerr)
}
