package kubernetes

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/testing/kubetest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// fastBudgets reconciles budgets often, with a short grace after launches.
func fastBudgets(c *Config) {
	c.BudgetReconcileEvery = 200 * time.Millisecond
	c.budgetGrace = time.Second
}

// launchJob launches instances 0..n-1 of job, run 1, with budget, one per
// node (round robin), and waits until they run.
func (e *env) launchJob(job string, n int, budget *hostmgr.DisruptionBudget) []hostmgr.LaunchSpec {
	e.t.Helper()
	var specs []hostmgr.LaunchSpec
	for i := range n {
		spec := hostmgr.LaunchSpec{TaskID: fmt.Sprintf("%s-%d-1", job, i), JobID: job, InstanceID: uint32(i), RunID: 1,
			Host: e.nodes[i%len(e.nodes)], Command: []string{"server"}, Resources: resources.Resources{MilliCPU: 100, MemoryMB: 64},
			Budget: budget}
		if err := e.b.Launch(e.ctx, spec); err != nil {
			e.t.Fatal(err)
		}
		specs = append(specs, spec)
	}
	for _, s := range specs {
		e.waitFor(s.TaskID, pelotonv1.TaskState_RUNNING, 30*time.Second)
	}
	return specs
}

// pdb returns job's PodDisruptionBudget, or nil if there is none.
func (e *env) pdb(job string) *policyv1.PodDisruptionBudget {
	e.t.Helper()
	p, err := e.c.Client.PolicyV1().PodDisruptionBudgets(e.ns).Get(e.ctx, budgetName(job), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// waitPDB waits until job's PDB satisfies ok (a nil PDB: there is none).
func (e *env) waitPDB(job, what string, ok func(*policyv1.PodDisruptionBudget) bool) *policyv1.PodDisruptionBudget {
	e.t.Helper()
	var last *policyv1.PodDisruptionBudget
	err := kubetest.Poll(e.ctx, 30*time.Second, func(context.Context) (bool, error) {
		last = e.pdb(job)
		return ok(last), nil
	})
	if err != nil {
		e.t.Fatalf("%s: PodDisruptionBudget of %s is %+v: %v", what, job, last, err)
	}
	return last
}

func minAvailableIs(n int32) func(*policyv1.PodDisruptionBudget) bool {
	return func(p *policyv1.PodDisruptionBudget) bool {
		return p != nil && p.Spec.MinAvailable != nil && *p.Spec.MinAvailable == intstr.FromInt32(n) && p.Spec.MaxUnavailable == nil
	}
}

func gone(p *policyv1.PodDisruptionBudget) bool { return p == nil }

// TestBudgetFollowsTheJob: a service's first launch makes its PDB, which
// selects exactly its pods and allows its SLA's unavailable instances; a
// spec change updates it; it goes with the job, when its runs end, and an
// orphan (a Peloton PDB of a job that no longer runs) is reconciled away.
func TestBudgetFollowsTheJob(t *testing.T) {
	e := newEnvWith(t, cluster(t), 3, nil, fastBudgets)
	e.launchJob("svc", 3, &hostmgr.DisruptionBudget{Instances: 3, MaxUnavailable: 1})
	e.launchJob("batch", 1, nil)

	p := e.pdb("svc")
	if !minAvailableIs(2)(p) {
		t.Fatalf("after the first launches, PDB %+v; want minAvailable 2 (3 instances, 1 unavailable)", p)
	}
	if p.Labels[LabelManagedBy] != ManagedByValue || p.Labels[LabelJobID] != "svc" {
		t.Errorf("PDB labels %v", p.Labels)
	}
	sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := e.c.Client.CoreV1().Pods(e.ns).List(e.ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
	}
	if fmt.Sprint(names) != "[svc-0-1 svc-1-1 svc-2-1]" {
		t.Fatalf("the PDB selects %v; want the service's three pods", names)
	}
	if e.pdb("batch") != nil {
		t.Fatal("a job without a budget got a PDB")
	}

	// The spec changes the budget: the PDB follows at once.
	if err := e.b.SetDisruptionBudget(e.ctx, "svc", "", hostmgr.DisruptionBudget{Instances: 3, MaxUnavailable: 2}); err != nil {
		t.Fatal(err)
	}
	if p := e.pdb("svc"); !minAvailableIs(1)(p) {
		t.Fatalf("after the budget changed, PDB %+v; want minAvailable 1", p)
	}
	// Someone deletes it: the reconcile pass puts it back.
	if err := e.c.Client.PolicyV1().PodDisruptionBudgets(e.ns).Delete(e.ctx, budgetName("svc"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitPDB("svc", "deleted by someone else", minAvailableIs(1))

	// An orphan: a Peloton PDB of a job with no pod here (left by a
	// Peloton that crashed after its job ended) goes; another PDB stays.
	orphan := buildBudget("ghost", e.ns, 1)
	other := buildBudget("theirs", e.ns, 1)
	other.Labels = map[string]string{"app": "theirs"}
	for _, o := range []*policyv1.PodDisruptionBudget{orphan, other} {
		if _, err := e.c.Client.PolicyV1().PodDisruptionBudgets(e.ns).Create(e.ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.waitPDB("ghost", "an orphan", gone)
	if e.pdb("theirs") == nil {
		t.Fatal("a PDB Peloton did not make was deleted")
	}

	// The job is deleted: its PDB goes at once.
	if err := e.b.RemoveJobOutput(e.ctx, "svc"); err != nil {
		t.Fatal(err)
	}
	if p := e.pdb("svc"); p != nil {
		t.Fatalf("the deleted job's PDB is still there: %+v", p)
	}
}

// TestBudgetGoesWhenTheJobEnds: once a job's runs have all ended, the
// reconcile pass deletes its PDB; a restarted backend keeps the PDB of a
// job whose pods still run, and updates it once told the job's budget.
func TestBudgetGoesWhenTheJobEnds(t *testing.T) {
	e := newEnvWith(t, cluster(t), 2, nil, fastBudgets)
	ended := e.launchJob("ends", 2, &hostmgr.DisruptionBudget{Instances: 2, MaxUnavailable: 1})
	e.launchJob("lives", 2, &hostmgr.DisruptionBudget{Instances: 2, MaxUnavailable: 1})
	for _, s := range ended {
		if err := e.b.Kill(e.ctx, s.TaskID, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range ended {
		e.waitFor(s.TaskID, pelotonv1.TaskState_KILLED, 30*time.Second)
	}
	e.waitPDB("ends", "the job's runs ended", gone)

	// A new backend process: it knows no budget, keeps the live job's PDB,
	// and makes it what jobmgr tells it.
	if err := e.b.Close(); err != nil {
		t.Fatal(err)
	}
	e.b = e.start()
	if err := e.b.reconcileBudgetsOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	if p := e.pdb("lives"); !minAvailableIs(1)(p) {
		t.Fatalf("after a restart, the live job's PDB is %+v; want it kept (minAvailable 1)", p)
	}
	if err := e.b.SetDisruptionBudget(e.ctx, "lives", "", hostmgr.DisruptionBudget{Instances: 2, MaxUnavailable: 0}); err != nil {
		t.Fatal(err)
	}
	e.waitPDB("lives", "told its budget after a restart", minAvailableIs(2))
}

var (
	kcmOnce sync.Once
	kcmErr  error
)

// TestEvictionWithinTheBudget: the Eviction API (kubectl drain) evicts a
// service's pods while its budget allows, and refuses with 429 Too Many
// Requests once it is spent. The disruption controller of
// kube-controller-manager computes what the budget allows.
func TestEvictionWithinTheBudget(t *testing.T) {
	c := cluster(t)
	kcmOnce.Do(func() { kcmErr = c.StartControllerManager("disruption") })
	if kcmErr != nil {
		t.Fatal(kcmErr)
	}
	e := newEnvWith(t, c, 3, nil, fastBudgets)
	specs := e.launchJob("drained", 3, &hostmgr.DisruptionBudget{Instances: 3, MaxUnavailable: 1})
	e.waitPDB("drained", "the disruption controller's status", func(p *policyv1.PodDisruptionBudget) bool {
		return p != nil && p.Status.ObservedGeneration == p.Generation && p.Status.CurrentHealthy == 3 && p.Status.DisruptionsAllowed == 1
	})
	evict := func(s hostmgr.LaunchSpec) error {
		return e.c.Client.PolicyV1().Evictions(e.ns).Evict(e.ctx, &policyv1.Eviction{
			ObjectMeta: metav1.ObjectMeta{Name: podName(s.TaskID), Namespace: e.ns}})
	}
	if err := evict(specs[0]); err != nil {
		t.Fatalf("an eviction within the budget: %v", err)
	}
	err := evict(specs[1])
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("an eviction past the budget: %v; want 429 TooManyRequests", err)
	}
	// The evicted run ends PREEMPTED, said to be evicted; the others run on.
	evs := e.waitFor(specs[0].TaskID, pelotonv1.TaskState_PREEMPTED, 30*time.Second)
	if last := evs[len(evs)-1]; last.Reason != ReasonEvicted || !strings.HasPrefix(last.Message, "evicted: ") {
		t.Errorf("the evicted run ended %+v; want reason %q and a message \"evicted: ...\"", last, ReasonEvicted)
	}
	for _, s := range specs[1:] {
		if evs := e.rec.of(s.TaskID); evs[len(evs)-1].State != pelotonv1.TaskState_RUNNING {
			t.Errorf("%s: %s after a refused eviction", s.TaskID, states(evs))
		}
	}
	// Its next run restores the budget: one more eviction is allowed.
	next := specs[0]
	next.TaskID, next.RunID = "drained-0-2", 2
	if err := e.b.Launch(e.ctx, next); err != nil {
		t.Fatal(err)
	}
	e.waitFor(next.TaskID, pelotonv1.TaskState_RUNNING, 30*time.Second)
	e.waitPDB("drained", "the evicted instance running again", func(p *policyv1.PodDisruptionBudget) bool {
		return p != nil && p.Status.CurrentHealthy == 3 && p.Status.DisruptionsAllowed == 1
	})
	if err := evict(specs[1]); err != nil {
		t.Fatalf("an eviction within the restored budget: %v", err)
	}
}
