package jobmgr

import (
	"fmt"
	"sort"
	"time"

	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Spec versions. Every change of a job's spec (an update, a scale, a
// rollback) stores a new version; none is ever rewritten, so the history is
// the list of versions. The job's runtime names the version in force, and
// each instance's runtime names the version its current run runs: during an
// update both exist side by side.

// jobVersion is one spec version with what is derived from it.
type jobVersion struct {
	version uint64
	spec    *pelotonv1.JobSpec
	created time.Time
	cause   string
	// res holds the effective resources per instance (nil = all defRes).
	res    []resources.Resources
	defRes resources.Resources
	// extent is one past the highest instance ID; holes the removed IDs
	// (holes.go).
	extent uint32
	holes  map[uint32]bool
}

func newJobVersion(v uint64, spec *pelotonv1.JobSpec, created time.Time, cause string) (*jobVersion, error) {
	jv := &jobVersion{version: v, spec: spec, created: created, cause: cause,
		extent: extentOf(spec.InstanceCount, spec.RemovedInstances), holes: holeSet(spec.RemovedInstances)}
	var err error
	if jv.defRes, err = resources.FromProto(spec.GetDefaultSpec().GetResources(), "spec.defaultSpec.resources"); err != nil {
		return nil, err
	}
	jv.defRes = jv.defRes.Add(volumeDisk(spec.GetDefaultSpec()))
	for inst, o := range spec.InstanceSpecs {
		if o.GetResources() == nil && o.GetVolume() == nil {
			continue
		}
		if jv.res == nil {
			jv.res = make([]resources.Resources, jv.extent)
		}
		eff := mergeTaskSpec(spec.DefaultSpec, o)
		r, err := resources.FromProto(eff.Resources, "spec.instanceSpecs")
		if err != nil {
			return nil, err
		}
		jv.res[inst] = r.Add(volumeDisk(eff))
	}
	return jv, nil
}

// volumeDisk is the disk a STATEFUL instance's volume takes on its host, on
// top of the task's own resources.
func volumeDisk(t *pelotonv1.TaskSpec) resources.Resources {
	return resources.Resources{DiskMB: int64(t.GetVolume().GetSizeMb())}
}

// resourcesOf is the effective resources of instance inst under this version.
func (v *jobVersion) resourcesOf(inst uint32) resources.Resources {
	if int(inst) < len(v.res) && v.res[inst] != (resources.Resources{}) {
		return v.res[inst]
	}
	return v.defRes
}

// taskSpec is the effective spec of instance inst under this version.
func (v *jobVersion) taskSpec(inst uint32) *pelotonv1.TaskSpec {
	return instanceSpec(v.spec, inst)
}

// sharedTaskSpec is taskSpec for a caller that only reads it: an instance
// without an override gets the version's default spec itself, so every
// launch and every event of the usual job allocates nothing for it (a copy
// per call was 7 % of the batch bench's CPU). The caller must not change
// it, nor hand it out.
func (v *jobVersion) sharedTaskSpec(inst uint32) *pelotonv1.TaskSpec {
	if v.spec.InstanceSpecs[inst] != nil {
		return instanceSpec(v.spec, inst)
	}
	if d := v.spec.DefaultSpec; d != nil {
		return d
	}
	return noTaskSpec
}

// noTaskSpec is the effective spec of a job without a default spec.
var noTaskSpec = &pelotonv1.TaskSpec{}

// sameTask reports whether instance inst runs the same thing under a and b:
// an update restarts only the instances for which it does not.
func sameTask(a, b *jobVersion, inst uint32) bool {
	if a == b {
		return true
	}
	return proto.Equal(a.sharedTaskSpec(inst), b.sharedTaskSpec(inst))
}

// sameTaskMemo is sameTask with the answer for instances that have no
// override in either version (the same for all of them) computed once per
// pair of versions: an update of a large job asks for every instance on
// every evaluation.
type sameTaskMemo map[[2]uint64]bool

func (memo sameTaskMemo) same(a, b *jobVersion, inst uint32) bool {
	if a == b {
		return true
	}
	if a.spec.InstanceSpecs[inst] != nil || b.spec.InstanceSpecs[inst] != nil {
		return sameTask(a, b, inst)
	}
	k := [2]uint64{a.version, b.version}
	v, ok := memo[k]
	if !ok {
		v = proto.Equal(mergeTaskSpec(a.spec.DefaultSpec, nil), mergeTaskSpec(b.spec.DefaultSpec, nil))
		memo[k] = v
	}
	return v
}

// record is the stored form of the version.
func (v *jobVersion) record() *pelotonv1.JobVersion {
	return &pelotonv1.JobVersion{Version: v.version, Spec: v.spec, CreateTime: timestamppb.New(v.created), Cause: v.cause}
}

func encodeVersion(v *pelotonv1.JobVersion) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(v)
	if err != nil {
		return nil, err
	}
	return zenc.EncodeAll(b, nil), nil
}

func decodeVersion(b []byte) (*pelotonv1.JobVersion, error) {
	raw, err := zdec.DecodeAll(b, nil)
	if err != nil {
		return nil, fmt.Errorf("decompress job version: %w", err)
	}
	v := &pelotonv1.JobVersion{}
	if err := proto.Unmarshal(raw, v); err != nil {
		return nil, err
	}
	if v.Spec == nil {
		return nil, fmt.Errorf("job version %d has no spec", v.Version)
	}
	return v, nil
}

// current is the version in force.
func (j *job) current() *jobVersion { return j.cur.Load() }

// spec is the spec in force.
func (j *job) spec() *pelotonv1.JobSpec { return j.cur.Load().spec }

// version returns version v, or the current one for 0 (records written
// before versions were tracked per run) or a version that is not loaded.
func (j *job) version(v uint64) *jobVersion {
	if v == 0 {
		return j.current()
	}
	j.vmu.RLock()
	jv := j.versions[v]
	j.vmu.RUnlock()
	if jv == nil {
		return j.current()
	}
	return jv
}

// addVersion makes jv known; with current it also becomes the version in force.
func (j *job) addVersion(jv *jobVersion, current bool) {
	j.vmu.Lock()
	j.versions[jv.version] = jv
	j.vmu.Unlock()
	if current {
		j.cur.Store(jv)
	}
}

// history lists the job's versions, oldest first.
func (j *job) history() []*pelotonv1.JobVersion {
	j.vmu.RLock()
	out := make([]*pelotonv1.JobVersion, 0, len(j.versions))
	for _, v := range j.versions {
		out = append(out, v.record())
	}
	j.vmu.RUnlock()
	sort.Slice(out, func(a, b int) bool { return out[a].Version < out[b].Version })
	return out
}

// latestVersion is the highest version number known.
func (j *job) latestVersion() uint64 {
	j.vmu.RLock()
	defer j.vmu.RUnlock()
	var hi uint64
	for v := range j.versions {
		hi = max(hi, v)
	}
	return hi
}

// runVersion is the version instance inst's current run runs.
func (j *job) runVersion(inst uint32) *jobVersion {
	t := j.task(inst)
	if t == nil {
		return j.current()
	}
	tv := t.view()
	v := tv.rt.SpecVersion
	return j.version(v)
}

// task returns instance inst's task, or nil if it has none (not created yet,
// or beyond the job's instances).
func (j *job) task(inst uint32) *task {
	ts := j.tasks()
	if int(inst) >= len(ts) {
		return nil
	}
	return ts[inst]
}
