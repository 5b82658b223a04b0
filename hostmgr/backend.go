package hostmgr

import (
	"context"
	"errors"
	"io"
	"strings"
	"time"

	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// HostInfo is what a backend reports about one host.
type HostInfo struct {
	Name      string
	Capacity  resources.Resources
	Labels    map[string]string
	Partition string
	// Unschedulable says the host takes no new runs (a cordoned or NotReady
	// Kubernetes node), while the runs it holds go on. It is not offered
	// to placement, and its capacity is not counted for admission.
	Unschedulable bool
	// Why says, when Unschedulable, why in the backend's words ("cordoned",
	// "tainted key=value:NoExecute", "not ready"); shown in host list.
	Why string
}

// LaunchSpec is everything a backend needs to start one run of one instance.
type LaunchSpec struct {
	// TaskID names the run: <jobID>-<instanceID>-<runID>. Unique forever.
	TaskID     string
	JobID      string
	InstanceID uint32
	RunID      uint32
	Host       string
	Command    []string
	Env        map[string]string
	Image      string
	Resources  resources.Resources
	// Pool is the job's resource pool (container backends map it to a namespace).
	Pool string
	// Ports the run listens on. A zero Value asks the backend to choose a
	// free port; the run finds each in PELOTON_PORT_<NAME>, and the chosen
	// numbers come back in the run's events.
	Ports []Port
	// HealthCheck, if set, is run by the backend on the run's host; results
	// come back as the Health of RUNNING events.
	HealthCheck *pelotonv1.HealthCheck
	// Volume, if set, is the instance's persistent volume: the same ID in
	// every run of the instance finds the same contents on the same host.
	Volume *Volume
	// KillGrace is the time between the polite and the forced stop when the
	// run is killed by anyone other than Kill (e.g. on a failed health check).
	KillGrace time.Duration
	// Tolerations are the host taints (LabelTaints) the run tolerates, its
	// placement's. A backend whose hosts act on taints themselves passes
	// them on (Kubernetes: as the pod's tolerations, so that the kubelet
	// and the taint manager let it stay).
	Tolerations []*pelotonv1.Toleration
	// Foreign, if set, is work that already exists in the backend (a pod
	// another client created, see ForeignSource): Launch binds it to Host
	// instead of creating anything, and the run is that object's life.
	Foreign *ForeignRef
	// Gang, if set, names the gang the run was placed with (the job's
	// minimumRunningInstances, admitted and placed all together): every
	// member launched for one placement of the gang carries the same value,
	// and jobmgr launches them at about the same time. A backend that can
	// start co-located members as one unit may use it (the mesos backend
	// sends the members on one agent in one LAUNCH_GROUP); the others
	// ignore it. Empty for a run placed alone, a restarted member of a
	// running gang included.
	Gang string
	// Budget, if set, is the disruption budget of the run's job (SERVICE
	// and STATEFUL jobs): a backend whose substrate lets others than
	// Peloton disrupt runs (Kubernetes' Eviction API) holds them to it.
	// jobmgr sets it from the job's spec version the run runs.
	Budget *DisruptionBudget
}

// DisruptionBudget is how many of a job's instances others than Peloton may
// take down at once: the job's spec.sla.maximumUnavailableInstances (for a
// federated part, its share of the service's budget) of its instances.
type DisruptionBudget struct {
	Instances      uint32
	MaxUnavailable uint32
}

// DisruptionBudgeter is implemented by backends that keep a job's
// DisruptionBudget in the substrate (the kubernetes backend's
// PodDisruptionBudgets). Launch sets a job's budget with its runs;
// SetDisruptionBudget changes it when the job's spec changes it between
// launches (jobmgr.Options.Budgets). pool is the job's pool (container
// backends map it to a namespace). A job's budget goes when the job has no
// live runs left, or when RemoveJobOutput says the job is gone.
type DisruptionBudgeter interface {
	SetDisruptionBudget(ctx context.Context, jobID, pool string, b DisruptionBudget) error
}

// ForeignRef identifies one object of a ForeignSource.
type ForeignRef struct {
	// Ref is the backend's name for it ("namespace/name" on Kubernetes).
	Ref string
	// UID tells apart objects that had the same Ref at different times.
	UID string
}

// ForeignTask is work another system created and handed to Peloton to
// place: on Kubernetes, a pod with schedulerName peloton (the
// secondary-scheduler mode). Peloton admits it through a pool like its own
// tasks, places it, and binds it; it never creates or re-creates it.
type ForeignTask struct {
	ForeignRef
	// Group keys the Peloton job it belongs to: its gang, else its
	// controlling owner, else itself. Owner describes that group.
	Group string
	Owner ForeignOwner
	// Pool is the leaf pool it asked for; Priority its priority there.
	Pool     string
	Priority uint32
	// GangSize > 1 makes the members of Group a gang: none is placed
	// until all are, together.
	GangSize  uint32
	Resources resources.Resources
	Image     string
	Command   []string
	// Placement is where it may run (a pod's nodeSelector, required node
	// affinity and tolerations); nil: anywhere without taints.
	Placement *pelotonv1.PlacementSpec
	// TaskID is the run Peloton adopted it as (empty before Adopt).
	TaskID string
	// Host is where it is bound; empty while it waits for placement.
	Host string
	// Invalid, when set, says why Peloton cannot take it (a bad annotation,
	// naming it); the backend has told its owner.
	Invalid string
	// Gone: it was deleted, or ended.
	Gone bool
}

// ForeignOwner describes a group of foreign tasks to users.
type ForeignOwner struct {
	Source, Namespace, Kind, Name, UID string
}

// ForeignSource is implemented by backends where other clients can hand
// work to Peloton (Kubernetes' secondary-scheduler mode).
type ForeignSource interface {
	// WatchForeign registers changed, which the backend then calls (from one
	// goroutine) for every foreign task that appears, changes or goes.
	WatchForeign(changed func(ForeignTask))
	// ForeignTasks lists the foreign tasks there are now.
	ForeignTasks() []ForeignTask
	// Adopt records on the object itself that it is run taskID, so that a
	// restarted Peloton finds it again. It fails if the object is gone or
	// is another object of the same name.
	Adopt(ctx context.Context, ref ForeignRef, taskID string) error
	// Reject tells the object's owner why Peloton does not place it (on
	// Kubernetes, a Warning event on the pod). It is best effort and says
	// each message once.
	Reject(ctx context.Context, ref ForeignRef, message string)
	// Waiting records on an object that still waits why it does (on
	// Kubernetes, the pod's PodScheduled condition: False, Unschedulable,
	// which kubectl shows and cluster autoscalers act on, and a
	// FailedScheduling event). Best effort; a message already recorded is
	// not written again.
	Waiting(ctx context.Context, ref ForeignRef, why string)
}

// Port is one named port of a run.
type Port struct {
	Name  string
	Value uint32
}

// PortEnvName is the variable that holds a port's number in a run's
// environment: PELOTON_PORT_ and the name upper-cased, with every character
// other than an ASCII letter or digit made '_' ("admin-api" is
// PELOTON_PORT_ADMIN_API). Two ports of one task must not share it.
func PortEnvName(name string) string {
	var sb strings.Builder
	sb.WriteString("PELOTON_PORT_")
	for _, c := range strings.ToUpper(name) {
		if c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			sb.WriteRune(c)
		} else {
			sb.WriteByte('_')
		}
	}
	return sb.String()
}

// Volume is a persistent per-instance volume (STATEFUL jobs).
type Volume struct {
	// ID is stable across runs: <jobID>-<instanceID>.
	ID     string
	SizeMB int64
	// MountPath is where container backends mount it; processes of the
	// local backend get its path in PELOTON_VOLUME.
	MountPath string
}

// TaskEvent is a state change of one run reported by a backend. State is one
// of LAUNCHED, RUNNING, SUCCEEDED, FAILED, KILLED, LOST.
type TaskEvent struct {
	TaskID   string
	Host     string
	State    pelotonv1.TaskState
	ExitCode int32
	// Reason is a fixed, greppable word (e.g. "exit-nonzero", "killed", "launch-failed").
	Reason  string
	Message string
	Time    time.Time
	// Health is what the run's health check says; set on RUNNING events of
	// runs that have one. A change of health is reported as another RUNNING
	// event.
	Health pelotonv1.HealthState
	// Ports are the port numbers given to the run, by name (on LAUNCHED and
	// later events).
	Ports map[string]uint32
}

// Prefetcher is implemented by backends that can fetch a container image to
// hosts ahead of need. A rolling update calls it for the hosts of its next
// batch while the current batch runs.
type Prefetcher interface {
	Prefetch(ctx context.Context, hosts []string, image string) error
}

// VolumeReleaser is implemented by backends that keep persistent volumes.
// ReleaseVolume deletes a volume's contents on its host; jobmgr calls it when
// a STATEFUL job is deleted.
type VolumeReleaser interface {
	ReleaseVolume(ctx context.Context, host, volumeID string) error
}

// OutputPruner is implemented by backends that keep runs' output (or other
// per-run state) of their own after the runs ended, on the hosts or beside
// the control plane: the local backend keeps each run's sandbox and record
// on disk. RemoveJobOutput says that job jobID has left the live store (it
// was deleted, or archived and removed after its time to live) and that
// nothing will ask for the state of its runs again: the backend may drop
// what it keeps for them, at once or later, as its own retention says (the
// local backend's --log-retention keeps output for a time after each run
// ended whatever happens to the job). It must be idempotent, cheap enough
// to call for every job removed, and may return before the removal is done;
// a job with no runs, or one unknown to the backend, is no error.
type OutputPruner interface {
	RemoveJobOutput(ctx context.Context, jobID string) error
}

// HostWatcher is implemented by backends whose hosts change while they run:
// nodes join and leave, are cordoned or become NotReady, or other workloads
// take part of them. hostmgr registers changed before it starts the backend;
// the backend calls it (from one goroutine, without holding a lock that Hosts
// takes) after its hosts changed, and hostmgr then reads Hosts again. Bursts
// of changes should be coalesced into one call.
type HostWatcher interface {
	WatchHosts(changed func())
}

// MaintenanceSource is implemented by backends whose substrate schedules
// host maintenance itself (Mesos' maintenance windows and inverse offers).
// hostmgr registers changed before it starts the backend, and acts on what
// the backend says: a host going down starts hostmgr maintenance
// (StartMaintenance: no new runs, and its runs are drained, SLA-checked,
// as `peloton host drain` does); a host whose window is over, or was
// cancelled, gets CompleteMaintenance, unless an operator started its
// maintenance (then it is left to them). The backend calls changed from
// one goroutine, without holding a lock that Hosts takes, when a host's
// maintenance changes, and once for each host it learns of (so that a
// restarted stack hears of windows that opened or ended while it was
// down); saying the same again changes nothing.
type MaintenanceSource interface {
	WatchMaintenance(changed func(host string, down bool))
}

// Replacer is implemented by backends that can turn a live run into the
// next run of the same instance without starting its sandbox anew: the
// kubernetes backend patches the image of the run's pod, and the kubelet
// restarts its container. An in-place update asks for it first and stops
// the run and launches the next only when the backend cannot.
type Replacer interface {
	// CheckReplace reports, changing nothing, whether Replace(oldTaskID,
	// next) would be done: nil, or an error wrapping ErrNotReplaceable
	// that says why not.
	CheckReplace(oldTaskID string, next LaunchSpec) error
	// Replace makes run oldTaskID, which must be running on next.Host,
	// into run next.TaskID of the same instance. oldTaskID then ends
	// KILLED with reason ReasonReplaced, and next's events follow as if it
	// had been launched: LAUNCHED at once, RUNNING once its new sandbox
	// runs. It returns an error wrapping ErrNotReplaceable, having changed
	// nothing, when next differs from the old run in more than its image
	// (and what the backend derives from the run's ID), the old run is not
	// running, or the host differs. After any other error the outcome is
	// unknown, and Kill(oldTaskID) must still stop the sandbox, whichever
	// run it runs by then; the caller kills it and gives next up.
	Replace(ctx context.Context, oldTaskID string, next LaunchSpec) error
}

// ReasonReplaced is the reason of the KILLED event of a run that Replace
// made into the next run.
const ReasonReplaced = "replaced-in-place"

// ErrNotReplaceable is wrapped by the errors of Replacer when a run cannot
// be replaced in place and nothing was changed.
var ErrNotReplaceable = errors.New("hostmgr: run cannot be replaced in place")

// ErrLaunchBlocked is wrapped by a backend's Launch error when nothing was
// started because of something a person must fix outside the task (a
// Kubernetes namespace missing, a right not granted, a spec the substrate
// refuses) or because the substrate is not reachable: retrying at once
// fails the same way, and the run is not at fault. jobmgr does not count it as a failure; the instance waits, says
// why, and tries again with a backoff.
var ErrLaunchBlocked = errors.New("launch blocked")

// ReasonLaunchBlocked is the reason of a run ended by ErrLaunchBlocked.
const ReasonLaunchBlocked = "launch-blocked"

// ErrAlreadyLaunched is wrapped by a backend's Launch error when it holds a
// run of that task ID already, live or ended (backends remember ended runs
// by ID): nothing was started. jobmgr takes a live one on the same host as
// the run it launched, and skips an ID an ended one has used up.
var ErrAlreadyLaunched = errors.New("task already launched")

// ReasonRunIDTaken is the reason of a run whose ID the backend had already
// used for a run that ended: it never ran, and the instance runs again
// under the next ID with no failure counted.
const ReasonRunIDTaken = "run-id-taken"

// ErrUnknownTask is returned by Kill, Status and Logs for a task the backend
// has never seen (or no longer knows, e.g. after a restart).
var ErrUnknownTask = errors.New("hostmgr: unknown task")

// RunInfo is one run a backend holds now, whoever launched it.
type RunInfo struct {
	TaskID    string
	Host      string
	Resources resources.Resources
	// Last is the run's last event; a listed run has not ended.
	Last TaskEvent
}

// RunLister is implemented by backends that can list the runs they hold,
// runs started before a restart of the control plane (adopted) included.
// jobmgr's reconciler compares the list with what it believes runs: a run
// it does not know is killed, and counts on its host until it ends. Runs
// must be cheap enough to call every few seconds with 100k runs.
type RunLister interface {
	Runs() []RunInfo
}

// ReasonUnobservedEnd is the reason of the LOST event of a run that ended
// while no backend watched it (it was adopted after a restart of the
// control plane, or ended before the restart finished): it ended, but how
// is not known, so it is neither a success nor a failure.
const ReasonUnobservedEnd = "ended-unobserved"

// Backend is a substrate that runs tasks: local processes, Kubernetes, Mesos,
// or simulated hosts. Implementations must be safe for concurrent use.
type Backend interface {
	// Name is the backend's flag value ("local", "kubernetes", ...).
	Name() string
	// Start begins running; every task state change is passed to sink, in order
	// per task. sink must not block for long. Start returns once hosts are known,
	// or, for a SubstrateReporter, once it knows that its substrate does not
	// answer (it keeps trying, and reports the hosts when it does).
	Start(ctx context.Context, sink func(TaskEvent)) error
	// Hosts returns the current hosts.
	Hosts() []HostInfo
	// Launch starts a run on spec.Host. It returns once the launch is accepted;
	// the outcome arrives as events (LAUNCHED, then RUNNING, then a terminal state,
	// or FAILED with reason "launch-failed").
	Launch(ctx context.Context, spec LaunchSpec) error
	// Kill stops a run: a graceful signal, then a forced one after grace. The
	// terminal KILLED event arrives through the sink. Killing a finished run is a
	// no-op; an unknown run (never launched, or launched by a backend instance
	// whose runs did not survive a restart) returns ErrUnknownTask and sends no
	// event. jobmgr records such a run LOST, so a backend must not say it of a
	// run that may still be running. hostmgr/backendtest checks all of this.
	Kill(ctx context.Context, taskID string, grace time.Duration) error
	// Status returns the last event of a run, or ErrUnknownTask. Used to
	// reconcile after a restart of the control plane.
	Status(taskID string) (TaskEvent, error)
	// Logs opens a run's stdout or stderr (opts.Stream). With opts.Follow,
	// the reader keeps returning new output until the run ends or ctx is
	// done, then io.EOF. opts.Since and opts.Timestamps need a time per
	// line: a backend or run without them returns an error wrapping
	// ErrNoLogTimes, saying what is missing.
	Logs(ctx context.Context, taskID string, opts LogOptions) (io.ReadCloser, error)
	// Close stops the backend; the local backend kills the processes it started.
	Close() error
}

// LogOptions says which output of a run Backend.Logs reads, and how.
type LogOptions struct {
	Stream pelotonv1.LogStream
	Follow bool
	// Since, unless zero, keeps only the lines written at or after it.
	Since time.Time
	// Timestamps prefixes each line with the time it was written, in RFC
	// 3339 with nanoseconds (UTC), and a space, as kubectl logs does.
	Timestamps bool
}

// NeedsTimes reports whether o asks for the times of lines.
func (o LogOptions) NeedsTimes() bool { return !o.Since.IsZero() || o.Timestamps }

// ErrNoLogTimes is wrapped by Logs when Since or Timestamps is asked of
// output that has no time per line (a backend that keeps none, or a run
// started before its backend recorded them). The API answers it with
// FailedPrecondition.
var ErrNoLogTimes = errors.New("no time per line is known for this output, so --since and --timestamps cannot be served")
