package sim

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// What long-running jobs need from a backend, simulated: ports, health
// checks and persistent volumes. None of it costs a batch task anything but
// a nil pointer.

// Reasons on the RUNNING events that report a run's health.
const (
	ReasonHealthPassed = "health-check-passed"
	ReasonHealthFailed = "health-check-failed"
)

// firstPort is the first port number handed out on every host; ports are
// given lowest-free-first from there, so they are deterministic.
const firstPort = 31000

// Defaults of the HealthCheck fields left zero, as documented in the API.
const (
	defaultHealthInterval  = 10 * time.Second
	defaultHealthTimeout   = 5 * time.Second
	defaultHealthThreshold = 3
)

var _ hostmgr.VolumeReleaser = (*Backend)(nil)

// longRun is what a run has beyond a batch task. Its fields are guarded by
// Backend.mu.
type longRun struct {
	ports  map[string]uint32
	held   []uint32 // port numbers held on the run's host
	volume string   // volumeKey of the run's volume, or ""
	// health is what the run's events say; result is what it will say at
	// healthAt. hindex is the run's position in the health heap, -1 when
	// the report is made or was never due.
	health   pelotonv1.HealthState
	result   pelotonv1.HealthState
	healthAt time.Time
	hindex   int
}

// needsLongRun reports whether a spec uses anything longRun holds.
func needsLongRun(spec *hostmgr.LaunchSpec) bool {
	return len(spec.Ports) > 0 || spec.HealthCheck != nil || spec.Volume != nil
}

// validateLongRunning checks ports, health check and volume. jobmgr checks
// the same; this guards against any other caller.
func validateLongRunning(spec *hostmgr.LaunchSpec) error {
	for i, p := range spec.Ports {
		switch {
		case p.Name == "":
			return fmt.Errorf("spec.ports[%d].name: required", i)
		case p.Value > 65535:
			return fmt.Errorf("spec.ports[%d].value: at most 65535, got %d", i, p.Value)
		}
		for _, q := range spec.Ports[:i] {
			if strings.EqualFold(p.Name, q.Name) {
				return fmt.Errorf("spec.ports[%d].name: %q is named twice", i, p.Name)
			}
		}
	}
	if hc := spec.HealthCheck; hc != nil {
		switch {
		case len(hc.Command) == 0 && hc.Http == nil:
			return errors.New("spec.healthCheck: set command (exit 0 = healthy) or http (a 2xx/3xx answer = healthy)")
		case len(hc.Command) > 0 && hc.Http != nil:
			return errors.New("spec.healthCheck: set command or http, not both")
		case hc.Http != nil && !hasPort(spec.Ports, hc.Http.Port):
			return fmt.Errorf("spec.healthCheck.http.port: %q is not one of the run's ports", hc.Http.Port)
		}
	}
	if v := spec.Volume; v != nil && !validVolumeID(v.ID) {
		return fmt.Errorf("spec.volume.id: %q is not a valid file name", v.ID)
	}
	return nil
}

func hasPort(ports []hostmgr.Port, name string) bool {
	for _, p := range ports {
		if strings.EqualFold(p.Name, name) {
			return true
		}
	}
	return false
}

// validVolumeID accepts what the local backend accepts as a directory name,
// so that a spec that works here works there.
func validVolumeID(id string) bool {
	return id != "" && id != "." && id != ".." && len(id) <= 255 && !strings.ContainsAny(id, "/\\\x00")
}

func volumeKey(host, id string) string { return host + "/" + id }

// healthAfter says what a health check reports, once, and how long after
// the run starts. It simulates the checks a real backend would run: the
// first after initial_delay_seconds, then one every interval_seconds (or
// back to back, when a check takes longer). A COMMAND check is read by
// interpret: it passes if it succeeds within timeout_seconds, taking the
// time a sleep declares. An HTTP check passes at once. A check that passes
// makes the run HEALTHY at the end of the first check; one that fails makes
// it UNHEALTHY at the end of the failure_threshold-th. Since the simulated
// command gives the same answer every time, there is never a second change.
// Durations saturate at maxSleep.
func healthAfter(hc *pelotonv1.HealthCheck) (time.Duration, pelotonv1.HealthState) {
	interval := secondsOr(hc.IntervalSeconds, defaultHealthInterval)
	timeout := secondsOr(hc.TimeoutSeconds, defaultHealthTimeout)
	threshold := hc.FailureThreshold
	if threshold == 0 {
		threshold = defaultHealthThreshold
	}
	took, pass := time.Duration(0), true
	if len(hc.Command) > 0 {
		out := interpret(hc.Command)
		took, pass = out.Duration, out.State == pelotonv1.TaskState_SUCCEEDED
	}
	if took > timeout {
		took, pass = timeout, false
	}
	at := min(time.Duration(hc.InitialDelaySeconds)*time.Second, maxSleep)
	if pass {
		return min(at+took, maxSleep), pelotonv1.HealthState_HEALTHY
	}
	period := max(interval, took)
	if n := time.Duration(threshold - 1); n > 0 {
		if period > maxSleep/n {
			return maxSleep, pelotonv1.HealthState_UNHEALTHY
		}
		at = min(at+n*period, maxSleep)
	}
	return min(at+took, maxSleep), pelotonv1.HealthState_UNHEALTHY
}

func secondsOr(s uint32, def time.Duration) time.Duration {
	if s == 0 {
		return def
	}
	return time.Duration(s) * time.Second
}

// startLongRunLocked gives t what its spec asks for beyond a batch task: the
// volume (refused while another live run uses it) and the ports. It changes
// nothing when it fails. The health report is scheduled by the caller, once
// it knows the run keeps running.
func (b *Backend) startLongRunLocked(t *task, spec *hostmgr.LaunchSpec) error {
	lr := &longRun{hindex: -1}
	if v := spec.Volume; v != nil {
		key := volumeKey(spec.Host, v.ID)
		if user := b.volumes[key]; user != "" {
			return fmt.Errorf("spec.volume.id: volume %s on %s is in use by run %s", v.ID, spec.Host, user)
		}
		lr.volume = key
	}
	if len(spec.Ports) > 0 {
		ports, held, err := b.reservePortsLocked(spec.Host, spec.Ports)
		if err != nil {
			return err
		}
		lr.ports, lr.held = ports, held
	}
	if lr.volume != "" {
		b.volumes[lr.volume] = t.id
	}
	t.lr = lr
	return nil
}

// endLongRunLocked gives back an ending run's ports and volume and cancels
// its health report if it is still due.
func (b *Backend) endLongRunLocked(t *task) {
	lr := t.lr
	if lr.hindex >= 0 {
		heap.Remove(&b.health, lr.hindex)
	}
	b.releasePortsLocked(t.host, lr.held)
	lr.held = nil
	if lr.volume != "" && b.volumes[lr.volume] == t.id {
		b.volumes[lr.volume] = "" // kept, idle, for the next run
	}
}

// reservePortsLocked gives each port with Value 0 the lowest number from
// firstPort that no live run on host holds, and holds the fixed ones as
// given, counted so that a chosen port never equals a live fixed one.
func (b *Backend) reservePortsLocked(host string, ports []hostmgr.Port) (map[string]uint32, []uint32, error) {
	used := b.hostPorts[host]
	if used == nil {
		used = map[uint32]int32{}
		b.hostPorts[host] = used
	}
	byName := make(map[string]uint32, len(ports))
	held := make([]uint32, 0, len(ports))
	for _, p := range ports {
		if p.Value != 0 {
			used[p.Value]++
			held = append(held, p.Value)
			byName[p.Name] = p.Value
		}
	}
	next := uint32(firstPort)
	for i, p := range ports {
		if p.Value != 0 {
			continue
		}
		for next <= 65535 && used[next] > 0 {
			next++
		}
		if next > 65535 {
			b.releasePortsLocked(host, held)
			return nil, nil, fmt.Errorf("spec.ports[%d]: no free port left on %s", i, host)
		}
		used[next] = 1
		held = append(held, next)
		byName[p.Name] = next
	}
	return byName, held, nil
}

func (b *Backend) releasePortsLocked(host string, held []uint32) {
	used := b.hostPorts[host]
	for _, n := range held {
		if used[n]--; used[n] <= 0 {
			delete(used, n)
		}
	}
	if used != nil && len(used) == 0 {
		delete(b.hostPorts, host) // memory follows live runs, not history
	}
}

// scheduleHealthLocked queues t's one health report, due healthAfter its
// start. The caller has checked that t keeps running.
func (b *Backend) scheduleHealthLocked(t *task, hc *pelotonv1.HealthCheck, start time.Time) {
	after, result := healthAfter(hc)
	t.lr.result, t.lr.healthAt = result, start.Add(after)
	heap.Push(&b.health, t)
}

// reportHealthLocked makes t's due health report: a RUNNING event with the
// new Health, at the simulated time it was due.
func (b *Backend) reportHealthLocked(t *task) {
	lr := t.lr
	lr.health = lr.result
	reason := ReasonHealthPassed
	if lr.health == pelotonv1.HealthState_UNHEALTHY {
		reason = ReasonHealthFailed
	}
	b.setLocked(t, pelotonv1.TaskState_RUNNING, 0, reason, lr.healthAt)
}

// ReleaseVolume forgets a volume. Releasing one that does not exist (never
// used, or already released) succeeds, so that a caller may retry. It
// refuses a volume that a live run uses.
func (b *Backend) ReleaseVolume(ctx context.Context, host, volumeID string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sim: release volume %s: %w", volumeID, err)
	}
	if _, ok := b.hostSet[host]; !ok {
		return fmt.Errorf("sim: release volume %s: host: %q is not a host of the sim backend", volumeID, host)
	}
	if !validVolumeID(volumeID) {
		return fmt.Errorf("sim: release volume: volumeId: %q is not a valid file name", volumeID)
	}
	key := volumeKey(host, volumeID)
	b.mu.Lock()
	defer b.mu.Unlock()
	if user := b.volumes[key]; user != "" {
		return fmt.Errorf("sim: release volume %s on %s: in use by run %s", volumeID, host, user)
	}
	delete(b.volumes, key)
	return nil
}

// Volumes lists, sorted, the IDs of the volumes a host keeps: used by a run
// of this Backend and not released since. Scale tests use it to check that
// deleting a stateful job releases its volumes.
func (b *Backend) Volumes(host string) []string {
	prefix := host + "/"
	b.mu.Lock()
	var out []string
	for key := range b.volumes {
		if id, ok := strings.CutPrefix(key, prefix); ok {
			out = append(out, id)
		}
	}
	b.mu.Unlock()
	sort.Strings(out)
	return out
}

// healthHeap is a min-heap of runs by the time their health report is due,
// tracking each run's index in longRun.hindex so that an ending run leaves
// it in O(log n). It is kept apart from the deadline heap because a run can
// be in both at once.
type healthHeap []*task

func (h healthHeap) Len() int           { return len(h) }
func (h healthHeap) Less(i, j int) bool { return h[i].lr.healthAt.Before(h[j].lr.healthAt) }
func (h healthHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].lr.hindex = i
	h[j].lr.hindex = j
}

func (h *healthHeap) Push(x any) {
	t := x.(*task)
	t.lr.hindex = len(*h)
	*h = append(*h, t)
}

func (h *healthHeap) Pop() any {
	old := *h
	n := len(old)
	t := old[n-1]
	old[n-1] = nil
	t.lr.hindex = -1
	*h = old[:n-1]
	return t
}
