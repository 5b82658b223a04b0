package split

import (
	"fmt"
	"sort"
	"strings"

	"github.com/peloton-sched/peloton/internal/apierr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// ServiceCluster is one registered cluster as the service split sees it.
type ServiceCluster struct {
	Name     string
	Labels   map[string]string
	Cordoned bool // takes no new work: a selector skips it, a name does not
}

// Service divides total instances over the clusters pl names, in clusters
// (the registered ones). It is pure. Fixed counts are given
// first; what is left is split by weight, largest remainder first (ties
// by name), so the parts always add up to total. Only clusters that get
// instances are in the result. A placement that cannot be met is an
// InvalidArgument naming the field.
//
// A selector share covers every matching cluster that is not cordoned, each
// with the share's weight; a named cluster is taken even when cordoned (the
// user asked for it by name). An empty placement is every cluster that is
// not cordoned, weight 1 each.
func Service(total uint32, pl *pelotonv1.ServicePlacement, clusters []ServiceCluster) (map[string]uint32, error) {
	claims, err := serviceClaims(pl, clusters)
	if err != nil {
		return nil, err
	}
	out, err := divideClaims(total, claims)
	if err != nil {
		return nil, err
	}
	if min := pl.GetMinClusters(); uint32(len(out)) < min {
		return nil, apierr.Invalid("spec.placement.minClusters", "%d, but the placement gives instances to %d cluster(s) (%s)", min, len(out), strings.Join(sortedKeys(out), ", "))
	}
	return out, nil
}

// claim is what a placement asks of one cluster: a weight or a fixed
// count, and the share (index into the placement's clusters) that named
// or selected it (-1: the empty placement's every cluster).
type claim struct {
	weight, count uint32
	by            int
}

// serviceClaims reads a placement into what it asks of each registered
// cluster, and refuses a placement that cannot be met, naming the field.
func serviceClaims(pl *pelotonv1.ServicePlacement, clusters []ServiceCluster) (map[string]*claim, error) {
	byName := map[string]ServiceCluster{}
	var names []string
	for _, c := range clusters {
		byName[c.Name] = c
		names = append(names, c.Name)
	}
	sort.Strings(names)
	claims := map[string]*claim{}
	add := func(name string, i int, weight, count uint32) error {
		if prev, ok := claims[name]; ok {
			return apierr.Invalid(fmt.Sprintf("spec.placement.clusters[%d]", i), "cluster %s is also given by clusters[%d]; name each cluster once", name, prev.by)
		}
		claims[name] = &claim{weight: weight, count: count, by: i}
		return nil
	}
	shares := pl.GetClusters()
	if len(shares) == 0 {
		for _, n := range names {
			if !byName[n].Cordoned {
				claims[n] = &claim{weight: 1, by: -1}
			}
		}
		if len(claims) == 0 {
			return nil, apierr.FailedPrecondition("spec.placement.clusters: none given, and no registered cluster takes work (%s)", registeredList(names))
		}
	}
	for i, s := range shares {
		field := fmt.Sprintf("spec.placement.clusters[%d]", i)
		if err := checkShare(s, field); err != nil {
			return nil, err
		}
		if s.Name != "" {
			if _, ok := byName[s.Name]; !ok {
				return nil, apierr.Invalid(field+".name", "cluster %s is not registered (%s)", s.Name, registeredList(names))
			}
			if err := add(s.Name, i, s.Weight, s.Count); err != nil {
				return nil, err
			}
			continue
		}
		if err := ValidateLabels(s.Selector, field+".selector"); err != nil {
			return nil, err
		}
		matched := 0
		for _, n := range names {
			c := byName[n]
			if c.Cordoned || !Matches(c.Labels, s.Selector) {
				continue
			}
			matched++
			if err := add(n, i, s.Weight, 0); err != nil {
				return nil, err
			}
		}
		if matched == 0 {
			return nil, apierr.Invalid(field+".selector", "%s matches no registered cluster that takes work (%s)", FormatLabels(s.Selector), registeredList(names))
		}
	}
	return claims, nil
}

// checkShare refuses a share that is not one name or one selector with a
// weight or (for a name) a count.
func checkShare(s *pelotonv1.ClusterShare, field string) error {
	switch {
	case s.Name != "" && len(s.Selector) > 0:
		return apierr.Invalid(field, "give a name or a selector, not both")
	case s.Name == "" && len(s.Selector) == 0:
		return apierr.Invalid(field, "give a name or a selector")
	case s.Count > 0 && s.Weight > 0:
		return apierr.Invalid(field, "give a weight or a count, not both")
	case s.Count > 0 && s.Name == "":
		return apierr.Invalid(field+".count", "a fixed count is for one named cluster; a selector takes a weight")
	}
	return nil
}

// divideClaims gives each claim its fixed count, then splits what is left
// of total by weight, largest remainder first (ties by name), so the parts
// always add up to total. Only clusters that get instances are in the
// result.
func divideClaims(total uint32, claims map[string]*claim) (map[string]uint32, error) {
	out := map[string]uint32{}
	var fixed, weights uint64
	var weighted []string
	for _, n := range sortedKeys(claims) {
		c := claims[n]
		fixed += uint64(c.count)
		if c.count > 0 {
			out[n] = c.count
		}
		if c.weight > 0 {
			weights += uint64(c.weight)
			weighted = append(weighted, n)
		}
	}
	if fixed > uint64(total) {
		return nil, apierr.Invalid("spec.placement.clusters", "fixed counts add up to %d, above spec.job.instanceCount %d", fixed, total)
	}
	left := uint64(total) - fixed
	if left == 0 {
		return out, nil
	}
	if weights == 0 {
		return nil, apierr.Invalid("spec.placement.clusters", "%d instances are left after the fixed counts and the weights sum to 0", left)
	}
	type rem struct {
		name string
		frac uint64 // numerator over weights
	}
	var rems []rem
	given := uint64(0)
	for _, n := range weighted {
		w := uint64(claims[n].weight)
		part := left * w / weights
		given += part
		if part > 0 {
			out[n] += uint32(part)
		}
		rems = append(rems, rem{n, left * w % weights})
	}
	sort.SliceStable(rems, func(a, b int) bool {
		if rems[a].frac != rems[b].frac {
			return rems[a].frac > rems[b].frac
		}
		return rems[a].name < rems[b].name
	})
	for i := uint64(0); i < left-given; i++ {
		out[rems[i].name]++
	}
	return out, nil
}

// Budget divides a service's budget of unavailable instances over its
// clusters in proportion to their parts (largest remainder, ties by name),
// so that the shares add up to the budget and never to more. A share is
// what a cluster decides on alone, while it cannot reach the federation's
// global evaluator (which lets any cluster use the whole budget): a
// cluster whose share is 0 then takes none of its instances down, which
// is the fail-safe answer.
func Budget(budget uint32, parts map[string]uint32) map[string]uint32 {
	var total uint64
	for _, n := range parts {
		total += uint64(n)
	}
	out := map[string]uint32{}
	if total == 0 {
		return out
	}
	type rem struct {
		name string
		frac uint64
	}
	var rems []rem
	given := uint64(0)
	for _, name := range sortedKeys(parts) {
		share := uint64(budget) * uint64(parts[name])
		out[name] = uint32(share / total)
		given += share / total
		rems = append(rems, rem{name, share % total})
	}
	sort.SliceStable(rems, func(a, b int) bool { return rems[a].frac > rems[b].frac })
	for i := uint64(0); i < uint64(budget)-given && int(i) < len(rems); i++ {
		out[rems[i].name]++
	}
	return out
}

func registeredList(names []string) string {
	if len(names) == 0 {
		return "no cluster is registered"
	}
	return "registered: " + strings.Join(names, ", ")
}

// Shares says which share of pl (an index into pl.Clusters, -1 for the
// empty placement's every cluster) takes each cluster it places on, for
// every cluster it names or its selectors match, whether or not the
// split gives it instances. It is pure, and refuses what Service refuses
// about the shares themselves.
func Shares(pl *pelotonv1.ServicePlacement, clusters []ServiceCluster) (map[string]int, error) {
	claims, err := serviceClaims(pl, clusters)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int, len(claims))
	for name, c := range claims {
		out[name] = c.by
	}
	return out, nil
}
