package federation

import (
	"fmt"
	"maps"
	"sort"

	"google.golang.org/protobuf/proto"

	"github.com/peloton-sched/peloton/federation/split"
	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// Per-cluster overrides. A share of a service's placement may carry an
// override (image, command, env, resources, labels) for the parts of the
// clusters it names or matches. The overrides are resolved to clusters
// when a spec version is made (create, or an update that gives a
// placement) and kept with that version (ServiceVersion.overrides), so a
// part's job spec is a pure function of (version, cluster, count, budget):
// creates, rescales, set-backs and rollout steps all build it the same
// way (partSpecAt), and a change of override is a new version rolled out
// cluster by cluster like any spec change. The federation's drift check
// compares job spec versions, never specs, so an override is not drift.

// overridesFor validates pl's overrides against job and resolves them
// over the registered clusters, for the clusters of parts: each part's
// override, which must fit its cluster. at is the placement's path,
// jobAt the job's. The clusters whose override sets resources are
// dropped from parts (whose base job's fit is checked by the caller).
func (sv *Services) overridesFor(pl *pelotonv1.ServicePlacement, job *pelotonv1.JobSpec, parts map[string]uint32, at, jobAt string) (map[string]*pelotonv1.ClusterOverride, map[string]uint32, error) {
	if !hasOverrides(pl) {
		return nil, parts, nil
	}
	if err := validateOverrides(pl, job, at); err != nil {
		return nil, nil, err
	}
	by, err := split.Shares(pl, sv.registeredClusters())
	if err != nil {
		return nil, nil, err
	}
	pool, err := resmgr.NormalizePath(job.Pool, jobAt+".pool")
	if err != nil {
		return nil, nil, err
	}
	out := map[string]*pelotonv1.ClusterOverride{}
	base := maps.Clone(parts)
	for _, name := range sortedKeys(by) {
		i := by[name]
		n, ok := parts[name]
		if i < 0 || !ok || pl.Clusters[i].Override == nil {
			continue
		}
		o := pl.Clusters[i].Override
		out[name] = o
		if o.Resources == nil {
			continue
		}
		delete(base, name)
		if n == 0 && job.Type != pelotonv1.JobType_DAEMON {
			continue
		}
		sv.f.mu.Lock()
		views, global := sv.f.fitViewsLocked([]string{name}, pool), sv.f.isGlobalLeafLocked(pool)
		sv.f.mu.Unlock()
		ask := overrideAsk(o.Resources, fmt.Sprintf("%s.clusters[%d].override.resources", at, i))
		if err := refuseUnfitService(ask, pool, global, views, jobAt); err != nil {
			return nil, nil, err
		}
	}
	return out, base, nil
}

// registeredClusters is every registered cluster as the split sees it.
func (sv *Services) registeredClusters() []split.ServiceCluster {
	sv.f.mu.Lock()
	defer sv.f.mu.Unlock()
	var clusters []split.ServiceCluster
	for _, name := range sortedKeys(sv.f.clusters) {
		m := sv.f.clusters[name]
		clusters = append(clusters, split.ServiceCluster{Name: name, Labels: m.rec.Labels, Cordoned: m.cordoned()})
	}
	return clusters
}

func hasOverrides(pl *pelotonv1.ServicePlacement) bool {
	for _, s := range pl.GetClusters() {
		if s.Override != nil {
			return true
		}
	}
	return false
}

// validateOverrides refuses an override that could not be applied or
// would make job's task spec invalid, naming the override's field (at is
// the placement's path, e.g. spec.placement).
func validateOverrides(pl *pelotonv1.ServicePlacement, job *pelotonv1.JobSpec, at string) error {
	for i, s := range pl.GetClusters() {
		o := s.Override
		if o == nil {
			continue
		}
		field := fmt.Sprintf("%s.clusters[%d].override", at, i)
		if len(o.Command) > 0 && o.Command[0] == "" {
			return apierr.Invalid(field+".command", "the first word is the program to run; it must not be empty")
		}
		for k := range o.Env {
			if k == "" {
				return apierr.Invalid(field+".env", "variable names must not be empty")
			}
		}
		for k := range o.Labels {
			switch k {
			case "":
				return apierr.Invalid(field+".labels", "label keys must not be empty")
			case LabelFederatedService:
				return apierr.Invalid(field+".labels", "%s is set by the federation", LabelFederatedService)
			}
		}
		if o.Resources != nil {
			r, err := resources.FromProto(o.Resources, field+".resources")
			if err != nil {
				return err
			}
			switch {
			case r.MilliCPU == 0:
				return apierr.Invalid(field+".resources.cpu", "must be > 0: the override replaces the task's resources whole")
			case r.MemoryMB == 0:
				return apierr.Invalid(field+".resources.memoryMb", "must be > 0: the override replaces the task's resources whole")
			}
		}
		if len(o.Command) == 0 && len(job.GetDefaultSpec().GetCommand()) == 0 {
			return apierr.Invalid(field+".command", "required: the job's defaultSpec has no command either")
		}
	}
	return nil
}

// applyOverride changes spec (a part's own copy) by o.
func applyOverride(spec *pelotonv1.JobSpec, o *pelotonv1.ClusterOverride) {
	if o == nil {
		return
	}
	if spec.DefaultSpec == nil {
		spec.DefaultSpec = &pelotonv1.TaskSpec{}
	}
	t := spec.DefaultSpec
	if o.Image != "" {
		t.Image = o.Image
	}
	if len(o.Command) > 0 {
		t.Command = append([]string(nil), o.Command...)
	}
	if len(o.Env) > 0 {
		if t.Env == nil {
			t.Env = map[string]string{}
		}
		maps.Copy(t.Env, o.Env)
	}
	if o.Resources != nil {
		t.Resources = proto.Clone(o.Resources).(*pelotonv1.Resources)
	}
	if len(o.Labels) > 0 {
		if spec.Labels == nil {
			spec.Labels = map[string]string{}
		}
		maps.Copy(spec.Labels, o.Labels)
	}
}

// overriddenFields names the job spec fields o changes, in the API's
// spelling (defaultSpec.command, defaultSpec.env.KEY, labels.KEY ...).
func overriddenFields(o *pelotonv1.ClusterOverride) []string {
	if o == nil {
		return nil
	}
	var out []string
	if o.Image != "" {
		out = append(out, "defaultSpec.image")
	}
	if len(o.Command) > 0 {
		out = append(out, "defaultSpec.command")
	}
	for k := range o.Env {
		out = append(out, "defaultSpec.env."+k)
	}
	if o.Resources != nil {
		out = append(out, "defaultSpec.resources")
	}
	for k := range o.Labels {
		out = append(out, "labels."+k)
	}
	sort.Strings(out)
	return out
}

// versionOverride is the override cluster's part gets at a service's
// version v.
func versionOverride(rec *pelotonv1.FederatedService, v uint64, cluster string) *pelotonv1.ClusterOverride {
	for _, sv := range rec.Versions {
		if sv.Version == v {
			return sv.Overrides[cluster]
		}
	}
	return nil
}

// overrideAsk is what an override's resources ask, each kind named by the
// override's field, for the fit check of the clusters it applies to.
func overrideAsk(r *pelotonv1.Resources, field string) taskAsk {
	var a taskAsk
	a.res, _ = resources.FromProto(r, field) // validated before
	for k := resources.Kind(0); k < resources.NumKinds; k++ {
		a.field[k] = field + "." + k.String()
	}
	return a
}

// sameShares reports whether two placements are the same but for their
// overrides (an update may change those only).
func sameShares(a, b *pelotonv1.ServicePlacement) bool {
	strip := func(p *pelotonv1.ServicePlacement) *pelotonv1.ServicePlacement {
		p = proto.Clone(p).(*pelotonv1.ServicePlacement)
		for _, s := range p.GetClusters() {
			s.Override = nil
		}
		return p
	}
	if a == nil {
		a = &pelotonv1.ServicePlacement{}
	}
	if b == nil {
		b = &pelotonv1.ServicePlacement{}
	}
	return proto.Equal(strip(a), strip(b))
}

// validateDaemonPlacement refuses what a DAEMON service's placement cannot
// mean: a weight or a count (each cluster it selects runs it on all its
// matching hosts, so there is nothing to split), and failover (a daemon is
// tied to its cluster's hosts; the other clusters run theirs already).
func validateDaemonPlacement(pl *pelotonv1.ServicePlacement, at string) error {
	for i, s := range pl.GetClusters() {
		field := fmt.Sprintf("%s.clusters[%d]", at, i)
		switch {
		case s.Weight > 0:
			return apierr.Invalid(field+".weight", "a DAEMON runs on every matching host of each cluster it selects; there is nothing to split by weight")
		case s.Count > 0:
			return apierr.Invalid(field+".count", "a DAEMON runs on every matching host of each cluster it selects; its instances are its hosts, not a count")
		}
	}
	if pl.GetFailover() != nil {
		return apierr.Invalid(at+".failover", "does not apply to a DAEMON: its instances are tied to their cluster's hosts, and the other clusters run theirs already")
	}
	return nil
}
