package kubernetes

// Disruption budgets. Peloton's SLA evaluator gates only Peloton's own
// disruptions; whoever else takes pods down through the Eviction API
// (kubectl drain, a cluster autoscaler) asks the PodDisruptionBudgets
// selecting them. So each SERVICE and STATEFUL job whose runs are pods here
// has one, in its pods' namespace, made from the job's budget
// (hostmgr.DisruptionBudget, filled by jobmgr from the job's SLA).
//
// The budget is minAvailable = instances - maxUnavailable, not
// maxUnavailable: Peloton's pods have no controller owning them, and
// Kubernetes' disruption controller works out a maxUnavailable budget from
// the scale of the pods' controllers (without one it counts zero pods
// expected, and allows every eviction); only an integer minAvailable is
// honoured for pods without a controller. Against the healthy (Ready) pods
// it comes to the same: at most maxUnavailable instances down, counting
// those already down.
//
// What the backend wants is kept in memory (budgets, by job); the PDBs are
// reconciled with it, level-triggered: a pass lists the Peloton-labelled
// PDBs of its namespaces, creates or updates those of jobs with live runs
// (or a launch in the last budgetGrace), and deletes every other, so no PDB
// outlives its job, whatever crash or restart came between. A job's first
// launch (by this process) writes its PDB at once, before its pod, so that
// no run of it is ever unprotected for a reconcile interval.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"

	"github.com/peloton-sched/peloton/hostmgr"
)

// DefaultBudgetReconcileEvery is the default of Config.BudgetReconcileEvery.
const DefaultBudgetReconcileEvery = 30 * time.Second

// budgetGrace is how long after a job's last launch its PDB is kept
// although the job has no live pod: the launch's pod may not be in the
// informer's cache yet.
const budgetGrace = time.Minute

var _ hostmgr.DisruptionBudgeter = (*Backend)(nil)
var _ hostmgr.OutputPruner = (*Backend)(nil)

// wantBudget is the PDB one job should have. Guarded by Backend.mu.
type wantBudget struct {
	ns           string
	minAvailable int32
	// launched is when this process last launched a run of the job.
	launched time.Time
	// written is set once the PDB is known to say minAvailable.
	written bool
}

// budgetName is the name of job jobID's PDB.
func budgetName(jobID string) string { return podName("peloton-" + jobID) }

// minAvailable is the PDB's minAvailable for a budget.
func minAvailable(b hostmgr.DisruptionBudget) int32 {
	if b.MaxUnavailable >= b.Instances {
		return 0
	}
	return int32(b.Instances - b.MaxUnavailable)
}

// buildBudget is job jobID's PDB in namespace ns: it selects the job's
// pods by the labels every run's pod carries.
func buildBudget(jobID, ns string, minAvail int32) *policyv1.PodDisruptionBudget {
	sel := map[string]string{LabelManagedBy: ManagedByValue, LabelJobID: jobID}
	lbls := map[string]string{LabelManagedBy: ManagedByValue, LabelJobID: jobID}
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: budgetName(jobID), Namespace: ns, Labels: lbls},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr(intstr.FromInt32(minAvail)),
			Selector:     &metav1.LabelSelector{MatchLabels: sel},
		},
	}
}

// wantBudgetLocked records what job jobID's PDB should say and reports
// whether it must be written. launch is set for a launch of one of its runs.
func (b *Backend) wantBudgetLocked(jobID, ns string, bud hostmgr.DisruptionBudget, launch bool) bool {
	if b.budgets == nil {
		b.budgets = map[string]*wantBudget{}
	}
	w := b.budgets[jobID]
	if w == nil {
		w = &wantBudget{}
		b.budgets[jobID] = w
	}
	if m := minAvailable(bud); w.ns != ns || w.minAvailable != m {
		w.ns, w.minAvailable, w.written = ns, m, false
	}
	if launch {
		w.launched = time.Now()
	}
	return !w.written
}

// ensureBudget is Launch's part: the run's job gets its PDB before its
// pod is created. A failure does not stop the launch (the reconcile pass
// tries again); it is logged.
func (b *Backend) ensureBudget(ctx context.Context, spec hostmgr.LaunchSpec, ns string) {
	if spec.Budget == nil || labelValue(spec.JobID) == "" {
		return
	}
	b.mu.Lock()
	need := b.wantBudgetLocked(spec.JobID, ns, *spec.Budget, true)
	b.mu.Unlock()
	if !need {
		return
	}
	if err := b.writeBudget(ctx, spec.JobID, ns, minAvailable(*spec.Budget)); err != nil {
		b.log.Warn("cannot write the job's PodDisruptionBudget; the reconcile pass tries again", "job", spec.JobID, "namespace", ns, "err", err)
	}
}

// SetDisruptionBudget changes job jobID's budget between launches (its
// spec changed its SLA or its size): the PDB is updated at once. A job
// with no live run gets no PDB from it: the PDB comes with its next launch.
func (b *Backend) SetDisruptionBudget(ctx context.Context, jobID, pool string, bud hostmgr.DisruptionBudget) error {
	if labelValue(jobID) == "" {
		return nil
	}
	ns := b.namespaceOf(pool)
	b.mu.Lock()
	// A job this process has not launched since it started is left to
	// the reconcile pass, which compares with one list what every such
	// job has (jobmgr tells every job's budget when it starts).
	known := b.budgets[jobID] != nil
	need := b.wantBudgetLocked(jobID, ns, bud, false)
	b.mu.Unlock()
	if !known {
		return nil
	}
	if !need || !b.hasLivePods(ns, jobID) {
		return nil
	}
	if err := b.writeBudget(ctx, jobID, ns, minAvailable(bud)); err != nil {
		return fmt.Errorf("kubernetes: disruption budget of job %s: %w", jobID, err)
	}
	return nil
}

// writeBudget creates job jobID's PDB, or updates it if it exists and
// says otherwise, and records that it is written.
func (b *Backend) writeBudget(ctx context.Context, jobID, ns string, minAvail int32) error {
	want := buildBudget(jobID, ns, minAvail)
	pdbs := b.client.PolicyV1().PodDisruptionBudgets(ns)
	err := b.call(ctx, func(ctx context.Context) error {
		_, err := pdbs.Create(ctx, want, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		// Another writer (the reconcile pass, a person) may change it
		// between the read and the write: read it again and retry.
		return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			cur, err := pdbs.Get(ctx, want.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			return b.updateBudget(ctx, cur, want)
		})
	})
	if err != nil {
		return err
	}
	b.mu.Lock()
	if w := b.budgets[jobID]; w != nil && w.ns == ns && w.minAvailable == minAvail {
		w.written = true
	}
	b.mu.Unlock()
	return nil
}

// updateBudget makes cur say what want says, if it does not.
func (b *Backend) updateBudget(ctx context.Context, cur, want *policyv1.PodDisruptionBudget) error {
	if sameBudget(cur, want) {
		return nil
	}
	next := cur.DeepCopy()
	next.Spec.MinAvailable, next.Spec.MaxUnavailable, next.Spec.Selector = want.Spec.MinAvailable, nil, want.Spec.Selector
	if next.Labels == nil {
		next.Labels = map[string]string{}
	}
	for k, v := range want.Labels {
		next.Labels[k] = v
	}
	_, err := b.client.PolicyV1().PodDisruptionBudgets(cur.Namespace).Update(ctx, next, metav1.UpdateOptions{})
	return err
}

func sameBudget(cur, want *policyv1.PodDisruptionBudget) bool {
	return cur.Spec.MaxUnavailable == nil && cur.Spec.MinAvailable != nil && *cur.Spec.MinAvailable == *want.Spec.MinAvailable &&
		cur.Spec.Selector != nil && equalMaps(cur.Spec.Selector.MatchLabels, want.Spec.Selector.MatchLabels) &&
		len(cur.Spec.Selector.MatchExpressions) == 0
}

// hasLivePods reports whether job jobID has a pod in ns that has not ended.
func (b *Backend) hasLivePods(ns, jobID string) bool {
	if b.pods == nil {
		return false
	}
	objs, _ := b.pods.ByIndex(byJob, ns+"/"+jobID)
	for _, obj := range objs {
		if p, ok := obj.(*corev1.Pod); ok && !podTerminal(p) {
			return true
		}
	}
	return false
}

// liveJobs is the set of "namespace/jobID" of the jobs with pods, of this
// Peloton, that have not ended.
func (b *Backend) liveJobs() map[string]bool {
	out := map[string]bool{}
	if b.pods == nil {
		return out
	}
	for _, key := range b.pods.ListIndexFuncValues(byJob) {
		if i := strings.IndexByte(key, '/'); i > 0 && b.hasLivePods(key[:i], key[i+1:]) {
			out[key] = true
		}
	}
	return out
}

// RemoveJobOutput says job jobID is gone (hostmgr.OutputPruner): its PDB
// goes at once, in whichever of the backend's namespaces it is.
func (b *Backend) RemoveJobOutput(ctx context.Context, jobID string) error {
	if labelValue(jobID) == "" {
		return nil
	}
	b.mu.Lock()
	delete(b.budgets, jobID)
	b.mu.Unlock()
	var errs []error
	for _, ns := range b.namespaceList() {
		err := b.call(ctx, func(ctx context.Context) error {
			return b.client.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, budgetName(jobID), metav1.DeleteOptions{})
		})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("namespace %s: %w", ns, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("kubernetes: delete the PodDisruptionBudget of job %s: %w", jobID, errors.Join(errs...))
	}
	return nil
}

// namespaceList is the backend's namespaces, sorted.
func (b *Backend) namespaceList() []string {
	out := make([]string, 0, len(b.namespaces))
	for ns := range b.namespaces {
		out = append(out, ns)
	}
	sort.Strings(out)
	return out
}

// reconcileBudgets runs a reconcile pass at once and then every
// BudgetReconcileEvery, or sooner when budgetKick is signalled.
func (b *Backend) reconcileBudgets() {
	defer b.wg.Done()
	tick := time.NewTicker(b.cfg.BudgetReconcileEvery)
	defer tick.Stop()
	for {
		if b.Substrate().Reachable && b.podInf != nil && b.podInf.HasSynced() {
			if err := b.reconcileBudgetsOnce(b.stopCtx); err != nil && b.stopCtx.Err() == nil {
				b.log.Warn("reconcile PodDisruptionBudgets", "err", err)
			}
		}
		select {
		case <-b.stop:
			return
		case <-tick.C:
		}
	}
}

// reconcileBudgetsOnce makes the PDBs in the backend's namespaces what
// they should be: one per job with live pods (or launched within
// budgetGrace) and a known budget, saying it; none for any other job.
// A PDB of a job with live pods whose budget this process does not know
// (it restarted, and has not launched the job's runs since) is kept as it
// is.
func (b *Backend) reconcileBudgetsOnce(ctx context.Context) error {
	var errs []error
	for _, ns := range b.namespaceList() {
		if err := b.reconcileNamespace(ctx, ns); err != nil {
			errs = append(errs, fmt.Errorf("namespace %s: %w", ns, err))
		}
	}
	return errors.Join(errs...)
}

func (b *Backend) reconcileNamespace(ctx context.Context, ns string) error {
	var list *policyv1.PodDisruptionBudgetList
	err := b.call(ctx, func(ctx context.Context) error {
		l, err := b.client.PolicyV1().PodDisruptionBudgets(ns).List(ctx, metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + ManagedByValue})
		list = l
		return err
	})
	if err != nil {
		return err
	}
	// The pods are read after the list: a pod created since is seen, so
	// its job's PDB is not taken for an orphan.
	live := b.liveJobs()
	now := time.Now()
	keep := func(jobID string, w *wantBudget) bool {
		return live[ns+"/"+jobID] || w != nil && w.ns == ns && now.Sub(w.launched) < b.cfg.budgetGrace
	}
	var errs []error
	seen := map[string]bool{}
	for i := range list.Items {
		pdb := &list.Items[i]
		jobID := pdb.Labels[LabelJobID]
		b.mu.Lock()
		w := b.budgets[jobID]
		var want wantBudget
		if w != nil {
			want = *w
		}
		kept := jobID != "" && pdb.Name == budgetName(jobID) && keep(jobID, w)
		if !kept && w != nil && w.ns == ns {
			delete(b.budgets, jobID)
		}
		b.mu.Unlock()
		if !kept {
			uid := pdb.UID
			err := b.call(ctx, func(ctx context.Context) error {
				return b.client.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, pdb.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
			})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				errs = append(errs, fmt.Errorf("delete %s: %w", pdb.Name, err))
			} else {
				b.log.Info("deleted the PodDisruptionBudget of a job with no live run", "namespace", ns, "name", pdb.Name, "job", jobID)
			}
			continue
		}
		seen[jobID] = true
		if w == nil || want.ns != ns {
			continue // a budget this process does not know: kept as it is
		}
		target := buildBudget(jobID, ns, want.minAvailable)
		if !sameBudget(pdb, target) {
			if err := b.call(ctx, func(ctx context.Context) error { return b.updateBudget(ctx, pdb, target) }); err != nil {
				errs = append(errs, fmt.Errorf("update %s: %w", pdb.Name, err))
				continue
			}
		}
		b.markWritten(jobID, want)
	}
	errs = append(errs, b.createMissing(ctx, ns, seen, keep)...)
	return errors.Join(errs...)
}

// createMissing creates the PDBs of ns that the list did not have: those of
// the jobs with a known budget that keep says should have one.
func (b *Backend) createMissing(ctx context.Context, ns string, seen map[string]bool, keep func(string, *wantBudget) bool) []error {
	type job struct {
		id   string
		want wantBudget
	}
	var missing []job
	b.mu.Lock()
	for id, w := range b.budgets {
		if w.ns != ns || seen[id] {
			continue
		}
		if keep(id, w) {
			missing = append(missing, job{id, *w})
		} else {
			// Ended, and its PDB already gone: nothing to keep.
			delete(b.budgets, id)
		}
	}
	b.mu.Unlock()
	var errs []error
	for _, j := range missing {
		if err := b.writeBudget(ctx, j.id, ns, j.want.minAvailable); err != nil {
			errs = append(errs, fmt.Errorf("create the PodDisruptionBudget of job %s: %w", j.id, err))
		}
	}
	return errs
}

// markWritten records that job jobID's PDB says what want says, if that is
// still what is wanted.
func (b *Backend) markWritten(jobID string, want wantBudget) {
	b.mu.Lock()
	if w := b.budgets[jobID]; w != nil && w.ns == want.ns && w.minAvailable == want.minAvailable {
		w.written = true
	}
	b.mu.Unlock()
}
