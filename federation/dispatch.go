package federation

import (
	"fmt"
	"math"
	"strings"

	"github.com/peloton-sched/peloton/federation/split"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// candidate is one cluster as the dispatcher sees it for one job.
type candidate struct {
	name   string
	labels map[string]string
	state  pelotonv1.ClusterState // effective: CORDONED wins
	// hasPool: the job's pool is a leaf pool of the cluster.
	hasPool bool
	// headroom is the pool's entitlement less its allocation and less
	// what jobs dispatched since the last check ask.
	headroom resources.Resources
	// used is the share of the cluster's capacity in use, 0..1.
	used float64
	// largest is the cluster's largest host, when it reported one
	// (knowsLargest): a task larger than it never runs there.
	largest      resources.Resources
	knowsLargest bool
}

// chooseCluster picks the cluster for a job that asks req in all, and
// task at most for one task: among the READY clusters whose labels match
// selector, that have the job's pool and a host as large as task, the one where the job fits its pool's headroom the most times
// (ties: the least used, then by name). It is pure. No cluster: "" and
// why, in words a user can act on.
func chooseCluster(req, task resources.Resources, selector map[string]string, cands []candidate) (string, string) {
	best, bestFits, bestUsed := "", math.Inf(-1), 0.0
	var matched, notReady, noPool, tooSmall []string
	for _, c := range cands {
		if !split.Matches(c.labels, selector) {
			continue
		}
		matched = append(matched, c.name)
		if c.state != pelotonv1.ClusterState_CLUSTER_READY {
			notReady = append(notReady, c.name+" "+strings.TrimPrefix(c.state.String(), "CLUSTER_"))
			continue
		}
		if !c.hasPool {
			noPool = append(noPool, c.name)
			continue
		}
		if c.knowsLargest && !task.FitsIn(c.largest) {
			tooSmall = append(tooSmall, c.name+" "+c.largest.String())
			continue
		}
		fits := timesFits(c.headroom, req)
		if best == "" || fits > bestFits || (fits == bestFits && (c.used < bestUsed || (c.used == bestUsed && c.name < best))) {
			best, bestFits, bestUsed = c.name, fits, c.used
		}
	}
	if best != "" {
		return best, ""
	}
	switch {
	case len(cands) == 0:
		return "", "no cluster is registered"
	case len(matched) == 0:
		return "", fmt.Sprintf("no cluster matches clusterSelector %s", split.FormatLabels(selector))
	case len(tooSmall) > 0:
		msg := "waiting for a larger host: one task asks " + task.String() + ", more than the largest host of every READY matching cluster that has the pool (" + strings.Join(tooSmall, "; ") + ")"
		if len(notReady) > 0 {
			msg += "; not READY: " + strings.Join(notReady, ", ")
		}
		return "", msg
	case len(noPool) == 0:
		return "", "no matching cluster takes work now (" + strings.Join(notReady, ", ") + ")"
	default:
		msg := "the job's pool is not a leaf pool in any READY matching cluster (" + strings.Join(noPool, ", ") + ")"
		if len(notReady) > 0 {
			msg += "; not READY: " + strings.Join(notReady, ", ")
		}
		return "", msg
	}
}

// timesFits is how many times req fits in room, over the kinds req asks
// for (+Inf when it asks nothing; negative when the room is overdrawn).
func timesFits(room, req resources.Resources) float64 {
	fits := math.Inf(1)
	for k := resources.Kind(0); k < resources.NumKinds; k++ {
		if need := req.Get(k); need > 0 {
			fits = math.Min(fits, float64(room.Get(k))/float64(need))
		}
	}
	return fits
}

// jobRequest is what a job asks in all: every instance's resources, the
// per-instance overrides included. at is the job's path in the request
// (spec.job in a create, job in a service update), for errors.
func jobRequest(spec *pelotonv1.JobSpec, at string) (resources.Resources, error) {
	def, err := resources.FromProto(spec.GetDefaultSpec().GetResources(), at+".defaultSpec.resources")
	if err != nil {
		return def, err
	}
	n := int64(spec.GetInstanceCount())
	var total resources.Resources
	for id, o := range spec.GetInstanceSpecs() {
		if int64(id) >= n || o.GetResources() == nil {
			continue
		}
		r, err := resources.FromProto(o.GetResources(), fmt.Sprintf("%s.instanceSpecs.%d.resources", at, id))
		if err != nil {
			return total, err
		}
		total = total.Add(r)
		n--
	}
	return total.Add(def.Scale(n)), nil
}
