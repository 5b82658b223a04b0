package federation

import (
	"fmt"
	"strings"

	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// taskAsk is the most one task of a job asks, per kind, and the request
// field that asks it: what must fit on one host.
type taskAsk struct {
	res   resources.Resources
	field [resources.NumKinds]string
}

// largestTask is the per-kind most any instance of spec asks (the default
// spec and the per-instance overrides within the instance count). at is
// the job's path in the request. Bad numbers were refused before.
func largestTask(spec *pelotonv1.JobSpec, at string) taskAsk {
	var a taskAsk
	take := func(p *pelotonv1.Resources, field string) {
		r, err := resources.FromProto(p, field)
		if err != nil {
			return
		}
		for k := resources.Kind(0); k < resources.NumKinds; k++ {
			if v := r.Get(k); v > a.res.Get(k) {
				a.res = a.res.Set(k, v)
				a.field[k] = field + "." + k.String()
			}
		}
	}
	take(spec.GetDefaultSpec().GetResources(), at+".defaultSpec.resources")
	for id, o := range spec.GetInstanceSpecs() {
		if id < spec.GetInstanceCount() && o.GetResources() != nil {
			take(o.GetResources(), fmt.Sprintf("%s.instanceSpecs.%d.resources", at, id))
		}
	}
	return a
}

// fitView is what the federation knows of one eligible cluster when it
// judges a submission.
type fitView struct {
	name    string
	checked bool // a check answered since this process started
	hasPool bool // the job's pool is a leaf pool there
	// largest is its largest host, when it reported one (knowsLargest).
	largest      resources.Resources
	knowsLargest bool
}

// tooLarge says which kind of ask does not fit on largest, if any.
func tooLarge(ask taskAsk, largest resources.Resources) (resources.Kind, bool) {
	for k := resources.Kind(0); k < resources.NumKinds; k++ {
		if ask.res.Get(k) > largest.Get(k) {
			return k, true
		}
	}
	return 0, false
}

// refuseUnfitBatch refuses, before it is recorded, a batch job that no
// eligible cluster could ever run: its pool is a leaf pool in none of
// them (and is no global pool, which the federation makes there), or one
// of its tasks is larger than every one's largest host. It is pure.
// While an eligible cluster has not answered a check yet nothing is
// refused: it might take the job, which then waits for dispatch.
func refuseUnfitBatch(ask taskAsk, pool string, globalPool bool, views []fitView, at string) error {
	if len(views) == 0 {
		return nil // the selector's own check says why
	}
	var names []string
	for _, v := range views {
		if !v.checked {
			return nil
		}
		names = append(names, v.name)
	}
	withPool := views
	if !globalPool {
		withPool = nil
		for _, v := range views {
			if v.hasPool {
				withPool = append(withPool, v)
			}
		}
		if len(withPool) == 0 {
			return apierr.Invalid(at+".pool", "%s is not a leaf pool in any eligible cluster (%s); create it there (peloton --cluster NAME pool create) or as a global pool (peloton fed pool create)",
				pool, strings.Join(names, ", "))
		}
	}
	var most resources.Resources // the largest host of any, per kind
	var each []string
	for _, v := range withPool {
		if !v.knowsLargest {
			return nil // it cannot say: the dispatch finds out
		}
		k, big := tooLarge(ask, v.largest)
		if !big {
			return nil
		}
		most = most.Max(v.largest)
		each = append(each, fmt.Sprintf("%s: %s %s", v.name, k, resources.FormatAmount(k, v.largest.Get(k))))
	}
	if k, big := tooLarge(ask, most); big {
		return apierr.Invalid(ask.field[k], "asks for %s but the largest host in any eligible cluster has %s (%s); the task could never run",
			resources.AmountWithUnit(k, ask.res.Get(k)), resources.FormatAmount(k, most.Get(k)), strings.Join(each, ", "))
	}
	return apierr.Invalid(at+".defaultSpec.resources", "asks for %s per task, which no eligible cluster's largest host holds all of (%s); the task could never run",
		ask.res, strings.Join(each, ", "))
}

// refuseUnfitService refuses a service a part of which could never run in
// its cluster: the pool is no leaf pool there (and no global pool), or
// the task is larger than its largest host. It is pure; a cluster that
// has not answered a check yet is not judged.
func refuseUnfitService(ask taskAsk, pool string, globalPool bool, parts []fitView, at string) error {
	for _, v := range parts {
		if !v.checked {
			continue
		}
		if !globalPool && !v.hasPool {
			return apierr.Invalid(at+".pool", "%s is not a leaf pool in cluster %s, which the placement gives instances; create it there (peloton --cluster %s pool create) or as a global pool (peloton fed pool create)",
				pool, v.name, v.name)
		}
		if !v.knowsLargest {
			continue
		}
		if k, big := tooLarge(ask, v.largest); big {
			return apierr.Invalid(ask.field[k], "asks for %s but the largest host in cluster %s has %s, and the placement gives it instances; the task could never run there",
				resources.AmountWithUnit(k, ask.res.Get(k)), v.name, resources.FormatAmount(k, v.largest.Get(k)))
		}
	}
	return nil
}

// fitViewsLocked is how the federation sees clusters names for a job of
// pool. Caller holds mu.
func (f *Federation) fitViewsLocked(names []string, pool string) []fitView {
	out := make([]fitView, 0, len(names))
	for _, name := range names {
		m := f.clusters[name]
		if m == nil {
			continue
		}
		v := fitView{name: name, checked: m.checked, largest: m.largest, knowsLargest: m.knowsLargest}
		if p := m.pools[pool]; p != nil && len(p.Children) == 0 && pool != "/" {
			v.hasPool = true
		}
		out = append(out, v)
	}
	return out
}

// isGlobalLeafLocked says whether pool is a leaf of the global pool tree:
// the federation makes it in the clusters it splits it to. Caller holds
// mu.
func (f *Federation) isGlobalLeafLocked(pool string) bool {
	gp := f.pools[pool]
	if gp == nil {
		return false
	}
	for other := range f.pools {
		if strings.HasPrefix(other, strings.TrimSuffix(pool, "/")+"/") {
			return false
		}
	}
	return true
}
