package jobmgr

import (
	"testing"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func TestForeignJobIDs(t *testing.T) {
	a0, a1, b0 := foreignJobID("kubernetes/owner/a", 0), foreignJobID("kubernetes/owner/a", 1), foreignJobID("kubernetes/owner/b", 0)
	if a0 != foreignJobID("kubernetes/owner/a", 0) {
		t.Error("the ID of a group changes between calls")
	}
	if a0 == a1 || a0 == b0 || a1 == b0 {
		t.Errorf("IDs collide: %s %s %s", a0, a1, b0)
	}
	// Task IDs made from it parse back.
	if id, inst, run, ok := parseTaskID(a0 + "-12-1"); !ok || id != a0 || inst != 12 || run != 1 {
		t.Errorf("parseTaskID(%s-12-1) = %s %d %d %v", a0, id, inst, run, ok)
	}
}

func TestForeignSpec(t *testing.T) {
	owner := hostmgr.ForeignOwner{Source: "kubernetes", Namespace: "ml", Kind: "Gang", Name: "train"}
	driver := hostmgr.ForeignTask{Owner: owner, Pool: "/ml", Priority: 3, GangSize: 3, Image: "spark:3",
		Resources: resources.Resources{MilliCPU: 1000, MemoryMB: 2048}, Placement: &pelotonv1.PlacementSpec{
			Constraints: []*pelotonv1.Constraint{{Label: "disk", Op: pelotonv1.ConstraintOp_EQUALS, Values: []string{"ssd"}},
				{Label: "zone", Op: pelotonv1.ConstraintOp_EQUALS, Values: []string{"a"}}},
			Tolerations: []*pelotonv1.Toleration{{Key: "gpu", Op: pelotonv1.TolerationOp_TOLERATE_EXISTS}}}}
	exec := driver
	exec.Resources = resources.Resources{MilliCPU: 4000, MemoryMB: 8192}
	empty := driver
	empty.Resources = resources.Resources{}
	spec := foreignSpec([]hostmgr.ForeignTask{driver, exec, exec}, "/ml")
	if spec.Name != "ml/Gang/train" || spec.Type != pelotonv1.JobType_BATCH || spec.InstanceCount != 3 || spec.Pool != "/ml" ||
		spec.Sla.Priority != 3 || spec.Sla.MinimumRunningInstances != 3 || spec.Foreign.GetKind() != "Gang" ||
		spec.Labels[LabelForeignSource] != "kubernetes" {
		t.Fatalf("spec %+v", spec)
	}
	if len(spec.InstanceSpecs) != 2 || spec.InstanceSpecs[0] != nil || spec.InstanceSpecs[1].Resources.Cpu != 4 {
		t.Errorf("overrides %v, want instances 1 and 2 (the executors) only", spec.InstanceSpecs)
	}
	c := spec.DefaultSpec.Placement.GetConstraints()
	if len(c) != 2 || c[0].Label != "disk" || c[1].Label != "zone" || c[1].Values[0] != "a" {
		t.Errorf("constraints %v, want disk and zone from the nodeSelector, sorted", c)
	}
	if tol := spec.DefaultSpec.Placement.GetTolerations(); len(tol) != 1 || tol[0].Key != "gpu" {
		t.Errorf("tolerations %v, want the pod's", tol)
	}
	if spec.DefaultSpec.Placement == driver.Placement {
		t.Error("the job's spec shares the task's placement: it must be a copy")
	}
	if spec.DefaultSpec.RestartPolicy.GetMaxFailures() != 0 {
		t.Error("a foreign task must never be retried by Peloton")
	}
	addInstances(spec, []hostmgr.ForeignTask{empty})
	if r := spec.InstanceSpecs[3].Resources; spec.InstanceCount != 4 || r.Cpu <= 0 || r.MemoryMb <= 0 {
		t.Errorf("a pod that requests nothing: %v; it must still count in its pool", r)
	}
}
