package kubernetes

import (
	corev1 "k8s.io/api/core/v1"
)

// volumeUser is the task ID of a pod on host whose containers may still
// use the volume folder path: a pod not yet ended, or ending with a
// container that has not stopped. A volume is one instance's at a time,
// on every backend: a second run that took it while the first still
// writes would corrupt it, and a release would pull it from under a run.
func (b *Backend) volumeUser(host, path string) (string, bool) {
	if b.pods == nil {
		return "", false
	}
	objs, _ := b.pods.ByIndex(byNode, host)
	for _, obj := range objs {
		p := obj.(*corev1.Pod)
		if !podMayRun(p) || !mountsHostPath(p, path) {
			continue
		}
		if id := p.Annotations[AnnotationTaskID]; id != "" {
			return id, true
		}
		return p.Namespace + "/" + p.Name, true
	}
	return "", false
}

// podMayRun reports whether any container of p may be running: p has not
// ended, and not every container it started has stopped.
func podMayRun(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	if p.DeletionTimestamp == nil || len(p.Status.ContainerStatuses) == 0 {
		return true
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Terminated == nil {
			return true
		}
	}
	return false
}

func mountsHostPath(p *corev1.Pod, path string) bool {
	for _, v := range p.Spec.Volumes {
		if v.HostPath != nil && v.HostPath.Path == path {
			return true
		}
	}
	return false
}

// hostPathVolumes is vs without its volumes of other kinds (service account
// tokens, config maps), or nil when none is left.
func hostPathVolumes(vs []corev1.Volume) []corev1.Volume {
	var out []corev1.Volume
	for _, v := range vs {
		if v.HostPath != nil {
			out = append(out, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{HostPath: v.HostPath}})
		}
	}
	return out
}
