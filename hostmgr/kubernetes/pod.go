package kubernetes

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Labels and annotations Peloton puts on the pods it runs, and reads on
// nodes. Selecting on them is how operators find Peloton's pods:
// kubectl get pods -l peloton.io/job-id=<id>.
const (
	// LabelManagedBy, with value ManagedByValue, marks Peloton's pods.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedByValue = "peloton"
	LabelJobID     = "peloton.io/job-id"
	LabelInstance  = "peloton.io/instance-id"
	LabelRunID     = "peloton.io/run-id"
	// AnnotationTaskID holds the run's task ID, which may not fit a label.
	AnnotationTaskID = "peloton.io/task-id"
	AnnotationPool   = "peloton.io/pool"
	// LabelHelper marks Peloton's short-lived helper pods: those that pull
	// an image ahead of an update, and those that delete a volume.
	LabelHelper         = "peloton.io/helper"
	helperPrefetch      = "prefetch"
	helperReleaseVolume = "release-volume"
	// LabelPartition on a node sets its host's partition.
	LabelPartition = "peloton.io/partition"
	// DefaultPartition is the partition of nodes without LabelPartition.
	DefaultPartition = "default"
	// SchedulerName is the pods' spec.schedulerName: kube-scheduler leaves
	// pods of another scheduler alone, so it never races Peloton's binding.
	SchedulerName = "peloton"
	// ContainerName is the name of the task's container in its pod.
	ContainerName = "task"
)

// Reasons on events. Fixed words users and tests can grep.
const (
	ReasonExitZero    = "exit-zero"
	ReasonExitNonzero = "exit-nonzero"
	ReasonKilled      = "killed"
	ReasonPodDeleted  = "pod-deleted"
	ReasonNodeGone    = "node-gone"
	ReasonEvicted     = "evicted"
	ReasonPodRejected = "pod-rejected"
)

// podName turns a task ID into a pod name: lower case, characters a DNS
// subdomain does not allow become '-'. Task IDs are <uuid>-<instance>-<run>,
// which it leaves as they are.
func podName(taskID string) string {
	b := []byte(strings.ToLower(taskID))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			b[i] = '-'
		}
	}
	s := strings.Trim(string(b), "-.")
	if len(s) > validation.DNS1123SubdomainMaxLength {
		s = s[:validation.DNS1123SubdomainMaxLength]
	}
	if s == "" {
		s = "task"
	}
	return s
}

// labelValue returns v if it is a valid label value, else "" (the
// annotation still carries it).
func labelValue(v string) string {
	if len(validation.IsValidLabelValue(v)) != 0 {
		return ""
	}
	return v
}

// portBase is where ports that a run leaves to the backend start: each pod
// has its own network namespace, so any fixed numbers do.
const portBase = 8000

// assignPorts gives every port without a number one, in order, avoiding the
// numbers the run chose itself.
func assignPorts(ports []hostmgr.Port) map[string]uint32 {
	if len(ports) == 0 {
		return nil
	}
	out := make(map[string]uint32, len(ports))
	used := map[uint32]bool{}
	for _, p := range ports {
		if p.Value != 0 {
			used[p.Value] = true
		}
	}
	next := uint32(portBase)
	for _, p := range ports {
		v := p.Value
		if v == 0 {
			for used[next] {
				next++
			}
			v = next
			used[v] = true
		}
		out[p.Name] = v
	}
	return out
}

// The metrics variables of a run (jobmgr's EnvMetricsPort and
// EnvMetricsHost): jobmgr sets the port of a run whose spec has metrics,
// and the backend where the run listens.
const (
	envMetricsPort = "PELOTON_METRICS_PORT"
	envMetricsHost = "PELOTON_METRICS_HOST"
)

// buildPod is the pod that runs one run, not yet bound.
func (b *Backend) buildPod(spec hostmgr.LaunchSpec, ns string, ports map[string]uint32) *corev1.Pod {
	labels := map[string]string{
		LabelManagedBy: ManagedByValue,
		LabelInstance:  strconv.FormatUint(uint64(spec.InstanceID), 10),
		LabelRunID:     strconv.FormatUint(uint64(spec.RunID), 10),
	}
	if v := labelValue(spec.JobID); v != "" {
		labels[LabelJobID] = v
	}
	annotations := map[string]string{AnnotationTaskID: spec.TaskID}
	if spec.Pool != "" {
		annotations[AnnotationPool] = spec.Pool
	}
	image := spec.Image
	if image == "" {
		image = b.cfg.DefaultImage
	}
	env := make([]corev1.EnvVar, 0, len(spec.Env)+len(ports)+4)
	for k, v := range spec.Env {
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	env = append(env,
		// The run's IDs come from the pod's metadata through the downward
		// API, which the kubelet reads when it starts the container: a pod
		// patched to a new run (Replace) starts its new container with the
		// new run's IDs, while its spec, which may not change, stays the same.
		corev1.EnvVar{Name: "PELOTON_TASK_ID", ValueFrom: fieldRef("metadata.annotations['" + AnnotationTaskID + "']")},
		corev1.EnvVar{Name: "PELOTON_RUN_ID", ValueFrom: fieldRef("metadata.labels['" + LabelRunID + "']")},
		corev1.EnvVar{Name: "PELOTON_JOB_ID", Value: spec.JobID},
		corev1.EnvVar{Name: "PELOTON_INSTANCE_ID", Value: strconv.FormatUint(uint64(spec.InstanceID), 10)},
		// The node the pod is bound to, as the other backends give the host.
		corev1.EnvVar{Name: "PELOTON_HOST", ValueFrom: fieldRef("spec.nodeName")},
	)
	if _, ok := spec.Env[envMetricsPort]; ok {
		// The host agent scrapes a run's metrics where the run listens:
		// the pod's own address, which only the kubelet knows when it
		// starts the container. Only runs with metrics get it, so other
		// pods (and their spec hash) stay as they were.
		env = append(env, corev1.EnvVar{Name: envMetricsHost, ValueFrom: fieldRef("status.podIP")})
	}
	var cports []corev1.ContainerPort
	for _, p := range spec.Ports {
		v := ports[p.Name]
		env = append(env, corev1.EnvVar{Name: hostmgr.PortEnvName(p.Name), Value: strconv.FormatUint(uint64(v), 10)})
		cports = append(cports, corev1.ContainerPort{Name: portName(p.Name), ContainerPort: int32(v), Protocol: corev1.ProtocolTCP})
	}
	sort.Slice(env, func(i, j int) bool { return env[i].Name < env[j].Name })
	rl := b.resourceList(spec.Resources)
	requests := rl
	if spec.Env[envRevocable] == "true" {
		// A revocable run rides on slack: resources other pods hold
		// but do not use. It asks the kubelet for none (so the node's
		// admission, which counts requests, lets it on) and is held to
		// what Peloton placed it with by its limits; when its node runs
		// hot, the host agent's QoS controller kills it first.
		requests = zeroRequests(rl)
	}
	c := corev1.Container{
		Name:    ContainerName,
		Image:   image,
		Command: spec.Command,
		Env:     env,
		Ports:   cports,
		// Requests equal limits: the pod is Guaranteed (for whole CPUs)
		// or Burstable at worst, and never uses more than Peloton placed.
		Resources:                corev1.ResourceRequirements{Requests: requests, Limits: rl},
		ReadinessProbe:           probe(spec.HealthCheck, ports),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName(spec.TaskID), Namespace: ns, Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{
			SchedulerName: SchedulerName,
			// A run never restarts in place: a failure is a new run (run
			// ID + 1) that Peloton places again.
			RestartPolicy:                corev1.RestartPolicyNever,
			EnableServiceLinks:           ptr(false),
			AutomountServiceAccountToken: ptr(false),
			Containers:                   []corev1.Container{c},
		},
	}
	if spec.KillGrace > 0 {
		pod.Spec.TerminationGracePeriodSeconds = ptr(int64(math.Ceil(spec.KillGrace.Seconds())))
	}
	if v := spec.Volume; v != nil {
		// A host path that outlives the pod, and node affinity to the
		// host, so that the kubelet refuses the pod anywhere else.
		pod.Spec.Volumes = []corev1.Volume{{Name: "volume", VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: b.volumePath(v.ID), Type: ptr(corev1.HostPathDirectoryOrCreate)},
		}}}
		mount := v.MountPath
		if mount == "" {
			mount = "/volume"
		}
		pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "volume", MountPath: mount}}
		pod.Spec.Containers[0].Env = append(pod.Spec.Containers[0].Env, corev1.EnvVar{Name: "PELOTON_VOLUME", Value: mount})
		pod.Spec.Affinity = pinTo(spec.Host)
	}
	pod.Spec.Tolerations = podTolerations(spec.Tolerations)
	pod.Annotations[AnnotationSpecHash] = specHash(pod)
	return pod
}

// fieldRef is an environment variable's value taken from the pod's fields.
func fieldRef(path string) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
}

// envRevocable is the variable the stack sets to "true" in a revocable
// run's environment (jobmgr's EnvRevocable; the host agents read it too).
const envRevocable = "PELOTON_REVOCABLE"

// zeroRequests is requests of zero for every resource of limits: a pod
// whose requests are left out gets its limits as requests.
func zeroRequests(limits corev1.ResourceList) corev1.ResourceList {
	out := make(corev1.ResourceList, len(limits))
	for name := range limits {
		out[name] = *resource.NewQuantity(0, resource.DecimalSI)
	}
	return out
}

// volumePath is where a volume lives on its node.
func (b *Backend) volumePath(id string) string {
	return strings.TrimRight(b.cfg.VolumeRoot, "/") + "/" + podName(id)
}

// pinTo is node affinity to exactly one node, by name.
func pinTo(node string) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
		}}},
	}}
}

// portName fits a port name into the 15 characters Kubernetes allows.
func portName(n string) string {
	n = strings.ToLower(n)
	if len(validation.IsValidPortName(n)) == 0 {
		return n
	}
	return ""
}

// probe turns a health check into a readiness probe: the kubelet runs it,
// and the pod's Ready condition becomes the run's health.
func probe(hc *pelotonv1.HealthCheck, ports map[string]uint32) *corev1.Probe {
	if hc == nil {
		return nil
	}
	p := &corev1.Probe{
		InitialDelaySeconds: int32(hc.GetInitialDelaySeconds()),
		PeriodSeconds:       int32(orDefault(hc.GetIntervalSeconds(), 10)),
		TimeoutSeconds:      int32(orDefault(hc.GetTimeoutSeconds(), 5)),
		FailureThreshold:    int32(orDefault(hc.GetFailureThreshold(), 3)),
		SuccessThreshold:    1,
	}
	switch {
	case len(hc.GetCommand()) > 0:
		p.Exec = &corev1.ExecAction{Command: hc.GetCommand()}
	case hc.GetHttp() != nil:
		path := hc.GetHttp().GetPath()
		if path == "" {
			path = "/"
		}
		p.HTTPGet = &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(int32(ports[hc.GetHttp().GetPort()]))}
	default:
		return nil
	}
	return p
}

func orDefault(v, d uint32) uint32 {
	if v == 0 {
		return d
	}
	return v
}

func ptr[T any](v T) *T { return &v }

// resourceList is a run's resources as Kubernetes quantities.
func (b *Backend) resourceList(r resources.Resources) corev1.ResourceList {
	rl := corev1.ResourceList{}
	if r.MilliCPU > 0 {
		rl[corev1.ResourceCPU] = *resource.NewMilliQuantity(r.MilliCPU, resource.DecimalSI)
	}
	if r.MemoryMB > 0 {
		rl[corev1.ResourceMemory] = *resource.NewQuantity(r.MemoryMB<<20, resource.BinarySI)
	}
	if r.DiskMB > 0 {
		rl[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(r.DiskMB<<20, resource.BinarySI)
	}
	if r.GPU > 0 {
		rl[corev1.ResourceName(b.cfg.GPUResource)] = *resource.NewQuantity(r.GPU, resource.DecimalSI)
	}
	return rl
}

// fromList converts Kubernetes quantities into Peloton's units, rounding
// down (memory and disk to whole MiB).
func (b *Backend) fromList(rl corev1.ResourceList) resources.Resources {
	var r resources.Resources
	if q, ok := rl[corev1.ResourceCPU]; ok {
		r.MilliCPU = q.MilliValue()
	}
	if q, ok := rl[corev1.ResourceMemory]; ok {
		r.MemoryMB = q.Value() >> 20
	}
	if q, ok := rl[corev1.ResourceEphemeralStorage]; ok {
		r.DiskMB = q.Value() >> 20
	}
	if q, ok := rl[corev1.ResourceName(b.cfg.GPUResource)]; ok {
		r.GPU = q.Value()
	}
	return r
}

// podRequests is what a pod holds on its node: the larger of its containers'
// sum and its largest init container, plus its overhead.
func (b *Backend) podRequests(p *corev1.Pod) resources.Resources {
	var sum resources.Resources
	for i := range p.Spec.Containers {
		sum = sum.Add(b.fromList(p.Spec.Containers[i].Resources.Requests))
	}
	for i := range p.Spec.InitContainers {
		sum = sum.Max(b.fromList(p.Spec.InitContainers[i].Resources.Requests))
	}
	return sum.Add(b.fromList(p.Spec.Overhead))
}

// podTerminal reports whether a pod's containers are done for good.
func podTerminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// observed is what a pod says about its run.
type observed struct {
	state    pelotonv1.TaskState // 0: not bound yet
	exitCode int32
	reason   string
	message  string
	health   pelotonv1.HealthState
	at       time.Time
}

// observe maps a pod to a task state: bound → LAUNCHED, a container running
// → RUNNING, Succeeded → SUCCEEDED, Failed → FAILED with the exit code,
// PREEMPTED when the kubelet evicted the pod (node pressure: whatever its
// container's exit code, not the run's fault), or LOST when the kubelet
// rejected it.
func observe(p *corev1.Pod, withHealth bool) observed {
	o := observed{at: time.Now()}
	if p.Spec.NodeName == "" {
		return o
	}
	o.state = pelotonv1.TaskState_LAUNCHED
	var term *corev1.ContainerStateTerminated
	running := false
	// A pod patched to a new run (Replace) still runs the previous run's
	// container until the kubelet restarts it: only the container started
	// after restart number runRestarts(p) is the current run's.
	since := runRestarts(p)
	for i := range p.Status.ContainerStatuses {
		cs := &p.Status.ContainerStatuses[i]
		if cs.Name != ContainerName && len(p.Status.ContainerStatuses) > 1 {
			continue
		}
		if cs.State.Running != nil && cs.RestartCount >= since {
			running = true
			if !cs.State.Running.StartedAt.IsZero() {
				o.at = cs.State.Running.StartedAt.Time
			}
		}
		if cs.State.Terminated != nil {
			term = cs.State.Terminated
		}
	}
	switch p.Status.Phase {
	case corev1.PodSucceeded:
		o.state, o.reason = pelotonv1.TaskState_SUCCEEDED, ReasonExitZero
		if term != nil {
			o.at = term.FinishedAt.Time
		}
	case corev1.PodFailed:
		switch {
		case p.Status.Reason == "Evicted":
			o.state, o.reason = pelotonv1.TaskState_PREEMPTED, ReasonEvicted
			o.message = strings.TrimSpace("evicted: " + p.Status.Message)
		case term != nil && term.ExitCode != 0:
			o.state, o.exitCode, o.reason = pelotonv1.TaskState_FAILED, term.ExitCode, ReasonExitNonzero
			o.message = strings.TrimSpace(term.Reason + " " + term.Message)
			if !term.FinishedAt.IsZero() {
				o.at = term.FinishedAt.Time
			}
		case p.Status.Reason != "":
			o.state, o.reason = pelotonv1.TaskState_LOST, ReasonPodRejected
			o.message = strings.TrimSpace(p.Status.Reason + ": " + p.Status.Message)
		default:
			o.state, o.exitCode, o.reason = pelotonv1.TaskState_FAILED, 1, ReasonExitNonzero
			o.message = fmt.Sprintf("pod failed: %s", p.Status.Message)
		}
	default:
		if running && p.Status.Phase == corev1.PodRunning {
			o.state = pelotonv1.TaskState_RUNNING
			if withHealth {
				o.health = pelotonv1.HealthState_UNHEALTHY
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
						o.health = pelotonv1.HealthState_HEALTHY
					}
				}
			}
		}
	}
	return o
}

// rank orders task states along a run's life, so events only move forward.
var rank = hostmgr.RunRank
