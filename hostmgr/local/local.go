// Package local is the hostmgr backend that runs tasks as real processes on
// this machine, split into N virtual hosts (local-0, local-1, ...) that each
// declare a share of the machine's capacity. It is the default backend of
// `peloton up`.
//
// It owns the processes it starts, their process groups, and the per-run
// sandboxes under Config.Dir (<Dir>/<TaskID>/ with the files stdout and
// stderr). Sandboxes outlive their runs and restarts of the control plane,
// so `peloton task logs` reads finished runs, until their job leaves the
// live store (RemoveJobOutput) or, with Config.LogRetention, until that
// much time has passed since the run ended; a sweeper removes them then
// (retention.go, which lists everything kept per run and for how long).
//
// Declared capacity is bookkeeping for placement only, but each run's own
// resources are enforced where the machine allows: every run gets a cgroup
// (v2, or v1 where the controllers are there) with a memory limit of its
// memoryMb and a CPU quota of its cpu, and a run the kernel's OOM killer
// ends is FAILED with ReasonOOMKilled (cgroup.go). Where cgroups cannot be
// created, Start logs why once and runs go unlimited. Disk, GPUs and the
// virtual hosts' capacities are not enforced; one virtual host is as
// isolated from another as two processes of the same user are.
//
// Tasks run as the control plane's user, or, with Config.TaskUser and the
// control plane running as root, as that user, in sandboxes of their own
// that only it may enter, below directories it may not write to
// (taskuser.go). Output is served by Logs only if it is the run's own: a
// link that a run puts in its sandbox is never followed (openOutput).
//
// For long-running jobs it also gives runs their ports (chosen free on
// 127.0.0.1 and passed as PELOTON_PORT_<NAME>), runs their health checks
// (health.go) and keeps their persistent volumes, plain directories under
// <Dir>/volumes/<host>/<volume ID> that outlive runs and restarts until
// ReleaseVolume (volume.go). Volume sizes are not enforced either.
//
// Tasks outlive a crash of the control plane: only Close kills them. Each
// run is recorded under <Dir>/runs/ (adopt.go), and a new Backend over the
// same Dir adopts the runs of a crashed one that still live, and reports
// LOST (hostmgr.ReasonUnobservedEnd) those that ended unseen. Orphaned
// grandchildren are reparented to pid 1, which must reap them; in a
// container run `peloton up` under an init that does (docker --init, tini).
//
// Waiting for runs costs no thread per run: on Linux one goroutine waits in
// epoll on a pidfd per child (wait_linux.go) and each run's goroutine parks
// on a channel until its process has exited; 10,000 runs cost a handful of
// threads and one file descriptor each. SIGCHLD with wait4(-1) is not used
// because it would reap children that os/exec and others in the process
// wait for.
//
// The package is Linux-first: on other Unix systems it builds and runs, but
// with one blocked thread per run, without the cleanup of leftover group
// members described at Backend, and DefaultHostCapacity reports no memory. It must not import jobmgr, resmgr or
// placement: it imports only hostmgr, internal/resources and the API types.
package local

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/hostmgr/local/supervise"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// BackendName is the value of the backend flag that selects this backend.
const BackendName = "local"

// Label keys and values put on every host of this backend.
const (
	// LabelBackend is the label key naming the backend a host belongs to.
	LabelBackend = "peloton.io/backend"
	// LabelHost is the label key holding the host's own name.
	LabelHost = "host"
	// Partition is the partition every local host belongs to.
	Partition = "default"
)

const (
	// closeGrace is how long Close lets tasks handle SIGTERM before SIGKILL.
	closeGrace = 2 * time.Second
	// closeReapWait is how long Close waits, after closeGrace, for killed
	// tasks to be reaped and their last events delivered.
	closeReapWait = 3 * time.Second
	// maxFinished bounds how many finished runs Status still remembers.
	// Older ones answer ErrUnknownTask, exactly as after a restart, so a
	// control plane that runs for months does not grow without bound.
	maxFinished = 10000
	// followPoll is how often a following log reader looks for new bytes.
	followPoll = 100 * time.Millisecond
)

// inheritedEnv lists the only variables a task inherits from the control
// plane. Passing the whole environment would leak credentials and make a
// task's behaviour depend on how `peloton up` happened to be started.
var inheritedEnv = []string{"PATH", "HOME", "LANG", "TMPDIR"}

// Config configures a local Backend.
type Config struct {
	// Dir is the root for per-run sandboxes and their output. Required; it
	// is created if missing and made absolute.
	Dir string
	// Hosts is the number of virtual hosts (default 1).
	Hosts int
	// Partitions is each host's partition, in host order (local-0 first);
	// empty puts every host in Partition. Its length must be Hosts.
	Partitions []string
	// HostCapacity is what each virtual host declares. When zero, the
	// machine's capacity (DefaultHostCapacity, with disk measured on Dir's
	// file system) is divided evenly among the Hosts, so the virtual hosts
	// together never declare more than the machine has.
	HostCapacity resources.Resources
	// Logger receives operational logs (default slog.Default()).
	Logger *slog.Logger
	// LogRetention is how long a run's output (its sandbox) is kept after
	// the run ended, whatever happens to its job; 0: as long as its job is
	// in the live store, until RemoveJobOutput. It must not be negative.
	LogRetention time.Duration
	// TaskUser, if set, is the user every task and every command health
	// check runs as: a name or a numeric uid (see taskuser.go). Switching
	// users needs root: New fails when the control plane does not run as
	// root, when the user is unknown or root, and when the user could not
	// reach its sandboxes under Dir or could write above them. Empty: tasks
	// run as the control plane's user.
	TaskUser string

	// cgroupRoot prefixes the paths cgroup detection reads ("/" when
	// empty); tests point it at fixture trees.
	cgroupRoot string
	// now is the sweeper's clock (default time.Now); tests move it.
	now func() time.Time
	// sweepEvery is the time between the sweeper's walks over Dir
	// (default defaultSweepEvery); negative: no sweeper (tests).
	sweepEvery time.Duration
	// maxFinished bounds the ended runs remembered (default maxFinished).
	maxFinished int
	// direct starts runs as children of this process, without
	// supervisors (supervised.go): what a crash then loses is the exit
	// status of every run that ends before the restart. For the
	// benchmark that measures what supervisors cost; off Linux runs are
	// always started so.
	direct bool
}

// Backend runs tasks as local processes. It is safe for concurrent use.
//
// Every task runs in its own process group, and signals go to the whole
// group, so a Kill reaches the grandchildren of a shell wrapper. When a
// task's main process exits on its own, any processes it left behind in its
// group are SIGKILLed: the run is over, and leftovers would escape both
// accounting and Kill. Processes that leave the group (setsid, setpgid)
// escape Kill, but not the run's cgroup: they are SIGKILLed when the run's
// main process has exited, and the cgroup removed. Without cgroups they
// escape this package entirely.
//
// Lock order: a task's mu may be held while taking Backend.mu, never the
// reverse. The sink is never called with either held.
type Backend struct {
	dir   string
	log   *slog.Logger
	hosts []hostmgr.HostInfo
	// user is who tasks run as; nil: the control plane's own user.
	user *TaskUser

	cgroupRoot string
	direct     bool // Config.direct, or no supervisors here
	// cg is where runs get their cgroups; nil when they get none. Set by
	// Start before any run exists, read-only afterwards.
	cg *cgroups

	// parts holds the partitions hostmgr gave hosts (ApplyPartition): a
	// local host's partition is a virtual attribute, Partition until then.
	partMu sync.Mutex
	parts  map[string]string

	// health is the client of every HTTP health check.
	health *http.Client

	// mu guards the runs below; a method named ...Locked needs it held
	// (partMu, above, guards only parts; sweepMu only removedJobs).
	mu       sync.Mutex
	sink     func(hostmgr.TaskEvent)
	started  bool
	closed   bool
	tasks    map[string]*task
	finished []string // task IDs in the order they ended, for pruning
	// endedByJob holds, per job, the ended runs in tasks whose end was
	// delivered (RemoveJobOutput forgets them).
	endedByJob map[string]map[string]struct{}
	// maxFinished is Config.maxFinished or the package's.
	maxFinished int
	// portUse counts, per port number, the live runs holding it.
	portUse map[uint32]int
	// volUse names the live run using each volume (by volumeKey), and
	// releasing the volumes ReleaseVolume is deleting: a volume is never
	// used by two live runs at once, nor deleted under one.
	volUse    map[string]string
	releasing map[string]bool

	// detached: the backend let go of its runs (detach, tests only).
	detached bool

	// The output's retention and its sweeper (retention.go).
	retention  time.Duration
	now        func() time.Time
	sweepEvery time.Duration
	sweeping   bool          // the sweeper was started; under mu
	sweepKick  chan struct{} // a job was marked removed
	sweepStop  chan struct{} // closed to stop the sweeper
	sweepDone  chan struct{} // closed when it has stopped
	// stopSweepOnce closes sweepStop.
	stopSweepOnce sync.Once
	// sweepMu guards removedJobs (the jobs marked removed, whose marks
	// are under <Dir>/runs/removed) and sweepCycles (walks done, for
	// tests).
	sweepMu     sync.Mutex
	removedJobs map[string]bool
	sweepCycles int64

	closeOnce sync.Once
	closeErr  error
}

var (
	_ hostmgr.Backend          = (*Backend)(nil)
	_ hostmgr.PartitionApplier = (*Backend)(nil)
	_ hostmgr.OutputPruner     = (*Backend)(nil)
)

// New validates cfg, creates cfg.Dir and returns a Backend. Call Start
// before Launch.
func New(cfg Config) (*Backend, error) {
	if cfg.Dir == "" {
		return nil, errors.New("local: config.dir: required")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("local: config.dir: %w", err)
	}
	if cfg.LogRetention < 0 {
		return nil, fmt.Errorf("local: config.logRetention: must be >= 0, got %s", cfg.LogRetention)
	}
	if err := os.MkdirAll(filepath.Join(dir, runsDir, removedDir), 0o755); err != nil {
		return nil, fmt.Errorf("local: config.dir: %w", err)
	}
	var tu *TaskUser
	if cfg.TaskUser != "" {
		if euid := os.Geteuid(); euid != 0 {
			return nil, fmt.Errorf("local: config.taskUser: running tasks as %s needs root, and this process runs as uid %d", cfg.TaskUser, euid)
		}
		u, err := LookupTaskUser(cfg.TaskUser)
		if err != nil {
			return nil, fmt.Errorf("local: config.taskUser: %w", err)
		}
		tu = &u
	}
	if err := prepareDir(dir, tu); err != nil {
		return nil, fmt.Errorf("local: config.dir: %w", err)
	}
	n := cfg.Hosts
	switch {
	case n == 0:
		n = 1
	case n < 0:
		return nil, fmt.Errorf("local: config.hosts: must be >= 0, got %d", cfg.Hosts)
	}
	if len(cfg.Partitions) != 0 && len(cfg.Partitions) != n {
		return nil, fmt.Errorf("local: config.partitions: %d for %d hosts; name one per host", len(cfg.Partitions), n)
	}
	for i, p := range cfg.Partitions {
		if err := hostmgr.ValidatePartition(p); err != nil {
			return nil, fmt.Errorf("local: config.partitions[%d]: %w", i, err)
		}
	}
	c := cfg.HostCapacity
	if c.MilliCPU < 0 || c.MemoryMB < 0 || c.DiskMB < 0 || c.GPU < 0 {
		return nil, fmt.Errorf("local: config.hostCapacity: must be >= 0, got %v", c)
	}
	if c.IsZero() {
		m := machineCapacity(dir)
		c = resources.Resources{
			MilliCPU: m.MilliCPU / int64(n),
			MemoryMB: m.MemoryMB / int64(n),
			DiskMB:   m.DiskMB / int64(n),
			GPU:      m.GPU / int64(n),
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	b := &Backend{
		dir:        dir,
		user:       tu,
		cgroupRoot: cmp.Or(cfg.cgroupRoot, "/"),
		direct:     cfg.direct || !supervise.Supported,
		log:        log.With("component", "hostmgr/local"),
		health:     newHealthClient(),
		tasks:      map[string]*task{},
		endedByJob: map[string]map[string]struct{}{},
		portUse:    map[uint32]int{},
		volUse:     map[string]string{},
		releasing:  map[string]bool{},

		maxFinished: cmp.Or(cfg.maxFinished, maxFinished),
		retention:   cfg.LogRetention,
		now:         cfg.now,
		sweepEvery:  cmp.Or(cfg.sweepEvery, defaultSweepEvery),
		sweepKick:   make(chan struct{}, 1),
		sweepStop:   make(chan struct{}),
		sweepDone:   make(chan struct{}),
		removedJobs: map[string]bool{},
	}
	if b.now == nil {
		b.now = time.Now
	}
	for i := range n {
		name := fmt.Sprintf("local-%d", i)
		b.hosts = append(b.hosts, hostmgr.HostInfo{
			Name:      name,
			Capacity:  c,
			Labels:    map[string]string{LabelBackend: BackendName, LabelHost: name},
			Partition: cmp.Or(partitionOf(cfg.Partitions, i), Partition),
		})
	}
	return b, nil
}

// ValidatePartition says why name cannot be a host's partition, or nil
// (hostmgr.ValidatePartition), for the flags that name the partitions of
// this backend's hosts.
func ValidatePartition(name string) error { return hostmgr.ValidatePartition(name) }

func partitionOf(parts []string, i int) string {
	if i < len(parts) {
		return parts[i]
	}
	return ""
}

// Name returns "local".
func (b *Backend) Name() string { return BackendName }

// Start records sink, which receives every task event from then on. The
// sink is called from this package's goroutines, concurrently for different
// tasks and in order for each, never with a lock held, so it may call Kill,
// Status or Logs. The hosts are fixed at New, so Start does not wait for
// anything; Close ends the backend, and ctx only the sweeper of old output
// (retention.go), which Start starts once it has read the records of
// earlier backends. Start may be called once. It creates the backend's
// parent cgroup, or logs one warning saying why runs will not be limited.
func (b *Backend) Start(ctx context.Context, sink func(hostmgr.TaskEvent)) error {
	if sink == nil {
		return errors.New("local: start: nil sink")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return errors.New("local: start: backend closed")
	case b.started:
		return errors.New("local: start: already started")
	}
	b.sink = sink
	b.started = true
	// Under b.mu, so no Launch sees the backend started without its
	// cgroups; detection is a few small reads and mkdirs.
	if cg, err := detectCgroups(b.cgroupRoot, cgroupParentName(b.dir)); err != nil {
		b.log.Warn("run limits are not enforced: runs get no memory limit and no CPU quota", "reason", err.Error())
	} else {
		b.cg = cg
		b.log.Info("enforcing run limits with cgroups", "version", cg.version, "parent", cg.memory)
	}
	b.mu.Unlock()
	err := b.loadRecords()
	if err == nil {
		err = b.loadRemoved()
	}
	b.mu.Lock()
	if err == nil {
		b.startSweeperLocked(ctx)
	}
	return err
}

// Hosts returns the configured virtual hosts. The result is a copy.
func (b *Backend) Hosts() []hostmgr.HostInfo {
	b.partMu.Lock()
	defer b.partMu.Unlock()
	out := make([]hostmgr.HostInfo, len(b.hosts))
	for i, h := range b.hosts {
		h.Labels = copyMap(h.Labels)
		if p, ok := b.parts[h.Name]; ok {
			h.Partition = p
		}
		out[i] = h
	}
	return out
}

// ApplyPartition records host's partition, which Hosts reports from then
// on. It is kept in memory only: hostmgr's record is what survives a
// restart.
func (b *Backend) ApplyPartition(_ context.Context, host, partition string) error {
	b.partMu.Lock()
	defer b.partMu.Unlock()
	for _, h := range b.hosts {
		if h.Name == host {
			if b.parts == nil {
				b.parts = map[string]string{}
			}
			b.parts[host] = partition
			return nil
		}
	}
	return fmt.Errorf("local: no host %s", host)
}

// Launch creates the sandbox <Dir>/<TaskID>/ and starts spec.Command in it.
//
// It returns an error, and leaves nothing behind, when the spec is invalid,
// the backend is not started or closed, the TaskID is already known, its
// sandbox already exists on disk (a reused TaskID, possibly from before a
// restart: its output is never overwritten; an empty sandbox with no record
// of its run, left by a launch a crash cut short, is used), its volume is in use by
// another live run or being released, or no free port can be found. Once
// the sandbox exists the launch is accepted and the outcome arrives as
// events: LAUNCHED, then RUNNING and a terminal state, or FAILED with reason
// "launch-failed" when the command cannot be started. Every event carries
// the run's ports; with a health check, a RUNNING event with the new Health
// follows each change of health. spec.Resources.MemoryMB and MilliCPU
// become the limits of the run's cgroup (where cgroups are usable; see
// cgroup.go; a failure to create it is a launch-failed run); the rest of
// spec.Resources and spec.Image are ignored: processes run on the host's
// file system. So is spec.KillGrace, since this backend never kills a run on
// its own.
func (b *Backend) Launch(ctx context.Context, spec hostmgr.LaunchSpec) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("local: launch %s: %w", spec.TaskID, err)
	}
	if err := b.validate(spec); err != nil {
		return fmt.Errorf("local: launch %s: %w", spec.TaskID, err)
	}
	t := &task{
		spec:    spec,
		sandbox: filepath.Join(b.dir, spec.TaskID),
		exited:  make(chan struct{}),
		gone:    make(chan struct{}),

		statusPath: b.statusPath(spec.TaskID),
	}
	t.healthCtx, t.stopHealth = context.WithCancel(context.Background())

	// Hold t.mu from before the task becomes visible until its process is
	// started, so a concurrent Kill or Close waits for a pid to signal
	// instead of racing with fork.
	t.mu.Lock()
	defer t.mu.Unlock()
	b.mu.Lock()
	switch {
	case !b.started:
		b.mu.Unlock()
		return fmt.Errorf("local: launch %s: backend not started", spec.TaskID)
	case b.closed:
		b.mu.Unlock()
		return fmt.Errorf("local: launch %s: backend closed", spec.TaskID)
	}
	if _, ok := b.tasks[spec.TaskID]; ok {
		b.mu.Unlock()
		return fmt.Errorf("local: launch %s: spec.taskId: %w", spec.TaskID, hostmgr.ErrAlreadyLaunched)
	}
	if v := spec.Volume; v != nil {
		key := volumeKey(spec.Host, v.ID)
		if user, ok := b.volUse[key]; ok {
			b.mu.Unlock()
			return fmt.Errorf("local: launch %s: spec.volume.id: volume %s on %s is in use by run %s", spec.TaskID, v.ID, spec.Host, user)
		}
		if b.releasing[key] {
			b.mu.Unlock()
			return fmt.Errorf("local: launch %s: spec.volume.id: volume %s on %s is being released", spec.TaskID, v.ID, spec.Host)
		}
		b.volUse[key] = spec.TaskID
		t.volKey = key
	}
	b.tasks[spec.TaskID] = t
	b.mu.Unlock()

	ports, held, err := b.reservePorts(spec.Ports)
	if err != nil {
		b.abandon(t)
		return fmt.Errorf("local: launch %s: %w", spec.TaskID, err)
	}
	t.ports, t.heldPorts = ports, held
	t.user = b.user
	if v := spec.Volume; v != nil {
		t.volume = b.volumePath(spec.Host, v.ID)
		if err := makeVolume(t.volume, t.user); err != nil {
			b.abandon(t)
			return fmt.Errorf("local: launch %s: spec.volume: %w", spec.TaskID, err)
		}
	}
	if err := os.Mkdir(t.sandbox, 0o700); err != nil && !(errors.Is(err, os.ErrExist) && b.cutShort(spec.TaskID, t.sandbox)) {
		b.abandon(t)
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("local: launch %s: spec.taskId: sandbox %s already exists", spec.TaskID, t.sandbox)
		}
		return fmt.Errorf("local: launch %s: create sandbox: %w", spec.TaskID, err)
	}
	if u := t.user; u != nil {
		// Dir is not the user's to write, so the sandbox just made cannot
		// have been swapped for a link meanwhile.
		if err := os.Chown(t.sandbox, int(u.UID), int(u.GID)); err != nil {
			b.abandon(t)
			_ = os.Remove(t.sandbox)
			return fmt.Errorf("local: launch %s: give the sandbox to user %s: %w", spec.TaskID, u.Name, err)
		}
	}
	t.last = t.event(pelotonv1.TaskState_LAUNCHED, 0, "", "")
	t.env = b.taskEnv(spec, t.sandbox, t.ports, t.volume)
	// Recorded before it starts too: a control plane that dies between
	// the start and the record below leaves a record naming no process,
	// whose process the next one finds by its environment and adopts
	// (loadRecords), rather than a process no record names.
	b.writeRecord(t)
	startErr := t.start(t.env, b.cg, b.direct)
	if startErr == nil {
		b.writeRecord(t)
	}
	if startErr != nil {
		b.log.Warn("launch failed", "task", spec.TaskID, "host", spec.Host, "err", startErr)
	} else {
		b.log.Debug("launched", "task", spec.TaskID, "host", spec.Host, "pid", t.pgid)
	}
	go b.run(t, startErr)
	return nil
}

// cutShort reports whether the existing sandbox of taskID is what a launch
// cut short by a crash leaves: the directory, empty, and no record of the
// run. The record is written before the run's process starts, so without
// one no process ever ran there and the sandbox holds no output to keep;
// the launch may go on in it.
func (b *Backend) cutShort(taskID, sandbox string) bool {
	if _, err := os.Lstat(b.recordPath(taskID)); !errors.Is(err, os.ErrNotExist) {
		return false
	}
	fi, err := os.Lstat(sandbox)
	if err != nil || !fi.IsDir() {
		return false
	}
	entries, err := os.ReadDir(sandbox)
	if err != nil || len(entries) > 0 {
		return false
	}
	b.log.Info("launching into the empty sandbox of a launch a crash cut short", "task", taskID)
	return true
}

// validate checks the parts of spec this backend depends on.
func (b *Backend) validate(spec hostmgr.LaunchSpec) error {
	if !validTaskID(spec.TaskID) {
		return fmt.Errorf("spec.taskId: %q is not a valid file name", spec.TaskID)
	}
	if !b.hasHost(spec.Host) {
		return fmt.Errorf("spec.host: %q is not a host of the local backend", spec.Host)
	}
	if len(spec.Command) == 0 || spec.Command[0] == "" {
		return errors.New("spec.command: must not be empty")
	}
	for i, a := range spec.Command {
		if strings.ContainsRune(a, 0) {
			return fmt.Errorf("spec.command[%d]: must not contain NUL", i)
		}
	}
	for k, v := range spec.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("spec.env: invalid variable name %q", k)
		}
		if strings.ContainsRune(v, 0) {
			return fmt.Errorf("spec.env.%s: must not contain NUL", k)
		}
	}
	if err := validatePorts(spec.Ports); err != nil {
		return err
	}
	if spec.HealthCheck != nil {
		if err := validateHealthCheck(spec.HealthCheck, spec.Ports); err != nil {
			return err
		}
	}
	if v := spec.Volume; v != nil && !validVolumeID(v.ID) {
		return fmt.Errorf("spec.volume.id: %q is not a valid file name", v.ID)
	}
	return nil
}

// abandon undoes a Launch that fails before the run is accepted. The caller
// holds t.mu.
func (b *Backend) abandon(t *task) {
	t.removed = true
	t.stopHealth()
	close(t.exited)
	close(t.gone)
	b.mu.Lock()
	delete(b.tasks, t.spec.TaskID)
	b.mu.Unlock()
	b.releaseRun(t)
}

// releaseRun gives back a run's ports and volume, once it has ended (or was
// never accepted).
func (b *Backend) releaseRun(t *task) {
	b.releasePorts(t.heldPorts)
	if t.volKey != "" {
		b.mu.Lock()
		if b.volUse[t.volKey] == t.spec.TaskID {
			delete(b.volUse, t.volKey)
		}
		b.mu.Unlock()
	}
}

func (b *Backend) hasHost(name string) bool {
	for _, h := range b.hosts {
		if h.Name == name {
			return true
		}
	}
	return false
}

// validTaskID reports whether id can name a sandbox directory directly under
// Dir. It guards Launch and Logs against path traversal, and keeps the name
// of the volumes directory for it.
func validTaskID(id string) bool {
	return id != "" && id != "." && id != ".." && id != volumesDir && id != runsDir && len(id) <= 255 && !strings.ContainsAny(id, "/\\\x00")
}

// taskEnv is the environment of a task, and of its health check: a few
// inherited variables (HOME is the task user's home when tasks run as
// one), then spec.Env, then the PELOTON_* variables, with
// PELOTON_PORT_<NAME> for each port and PELOTON_VOLUME when it has one.
// os/exec keeps the last value of a duplicated key, so spec.Env may
// override PATH but not PELOTON_*.
func (b *Backend) taskEnv(spec hostmgr.LaunchSpec, sandbox string, ports map[string]uint32, volume string) []string {
	env := make([]string, 0, len(inheritedEnv)+len(spec.Env)+len(spec.Ports)+7)
	for _, k := range inheritedEnv {
		if k == "HOME" && b.user != nil {
			env = append(env, "HOME="+b.user.Home)
			continue
		}
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	keys := make([]string, 0, len(spec.Env))
	for k := range spec.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+spec.Env[k])
	}
	env = append(env,
		"PELOTON_JOB_ID="+spec.JobID,
		fmt.Sprintf("PELOTON_INSTANCE_ID=%d", spec.InstanceID),
		fmt.Sprintf("PELOTON_RUN_ID=%d", spec.RunID),
		"PELOTON_TASK_ID="+spec.TaskID,
		"PELOTON_HOST="+spec.Host,
		"PELOTON_SANDBOX="+sandbox,
	)
	for _, p := range spec.Ports {
		env = append(env, fmt.Sprintf("%s=%d", hostmgr.PortEnvName(p.Name), ports[p.Name]))
	}
	if volume != "" {
		env = append(env, "PELOTON_VOLUME="+volume)
	}
	return env
}

// run delivers a task's events in order and reaps its process. It sends the
// lifecycle events itself and lets the health watcher, which it starts after
// RUNNING and waits for before the terminal event, send the health changes
// in between: one sender at a time, which is what keeps them ordered. The
// ports and volume are given back before the terminal event, so that a run
// launched on it may have them.
func (b *Backend) run(t *task, startErr error) {
	defer close(t.gone)
	b.emit(t, t.event(pelotonv1.TaskState_LAUNCHED, 0, "", ""))
	var last hostmgr.TaskEvent
	if startErr != nil {
		t.stopHealth()
		last = t.event(pelotonv1.TaskState_FAILED, 0, "launch-failed", startErr.Error())
		close(t.exited)
	} else {
		b.emit(t, t.event(pelotonv1.TaskState_RUNNING, 0, "", ""))
		watched := make(chan struct{})
		if hc := t.spec.HealthCheck; hc != nil {
			go func() {
				defer close(watched)
				b.watchHealth(t, newHealthConfig(hc, t.spec.Ports, t.ports))
			}()
		} else {
			close(watched)
		}
		last = t.reap(b.log)
		t.stopHealth()
		<-watched
	}
	if b.isDetached() {
		return // let go as a crash would: nothing more is recorded or reported
	}
	b.dropCgroup(t.cg, t.spec.TaskID)
	last = t.shutdownEnd(last)
	b.releaseRun(t)
	b.log.Debug("task ended", "task", t.spec.TaskID, "state", last.State.String(), "exitCode", last.ExitCode, "reason", last.Reason)
	b.endRecord(t, last)
	// Forgotten before the event goes out, so that whoever sees the end
	// also sees the bound on remembered runs already kept.
	b.forgetOld(t.spec.TaskID)
	b.emit(t, last)
}

// emit records ev as the task's last event and passes it to the sink,
// holding no lock during the call so the sink may call back into Kill,
// Status or Logs.
func (b *Backend) emit(t *task, ev hostmgr.TaskEvent) {
	t.mu.Lock()
	t.last = ev
	t.mu.Unlock()
	b.mu.Lock()
	sink := b.sink
	b.mu.Unlock()
	sink(ev)
}

// forgetOld remembers that id has ended and drops the oldest finished runs
// beyond maxFinished.
func (b *Backend) forgetOld(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.finished = append(b.finished, id)
	if t, ok := b.tasks[id]; ok {
		b.indexEndedLocked(t.spec.JobID, id)
	}
	b.pruneFinishedLocked()
}

// pruneFinishedLocked forgets the oldest finished runs beyond maxFinished,
// and deletes their records. The caller holds b.mu. (Runs forgotten by
// RemoveJobOutput stay in finished until pruned here, as no-ops.)
func (b *Backend) pruneFinishedLocked() {
	if over := len(b.finished) - b.maxFinished; over > 0 {
		for _, old := range b.finished[:over] {
			if t, ok := b.tasks[old]; ok {
				b.unindexEndedLocked(t.spec.JobID, old)
			}
			delete(b.tasks, old)
			_ = os.Remove(b.recordPath(old))
			b.removeRunFiles(old)
		}
		b.finished = append(b.finished[:0:0], b.finished[over:]...)
	}
}

func (b *Backend) lookup(taskID string) (*task, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.tasks[taskID]
	return t, ok
}

// Kill sends SIGTERM to the task's process group and SIGKILL after grace
// (at once when grace <= 0). It does not wait: the KILLED event arrives when
// the process is reaped. Killing a finished run is a no-op. A second Kill
// with a shorter grace brings the SIGKILL forward; a longer one changes
// nothing.
func (b *Backend) Kill(ctx context.Context, taskID string, grace time.Duration) error {
	t, ok := b.lookup(taskID)
	if !ok {
		return fmt.Errorf("local: kill %s: %w", taskID, hostmgr.ErrUnknownTask)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.removed {
		return fmt.Errorf("local: kill %s: %w", taskID, hostmgr.ErrUnknownTask)
	}
	t.kill(grace, b.log)
	return nil
}

// Status returns the last event of a run this Backend launched, with its
// ports and, while it runs, its latest health; or ErrUnknownTask (always,
// for runs of a previous process lifetime).
func (b *Backend) Status(taskID string) (hostmgr.TaskEvent, error) {
	t, ok := b.lookup(taskID)
	if !ok {
		return hostmgr.TaskEvent{}, fmt.Errorf("local: status %s: %w", taskID, hostmgr.ErrUnknownTask)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.removed {
		return hostmgr.TaskEvent{}, fmt.Errorf("local: status %s: %w", taskID, hostmgr.ErrUnknownTask)
	}
	return t.last, nil
}

// Logs opens <Dir>/<TaskID>/stdout or stderr. It works for any run whose
// file is on disk, including runs of a previous process lifetime, and
// returns ErrUnknownTask when the file does not exist. It serves only the
// run's own output: never what a symbolic link in the sandbox points to, nor
// a hard link to a file elsewhere (see openOutput). With follow, reads
// wait for new output until the run ends and everything is read, or ctx is
// done, and then return io.EOF; a run this Backend is not running (finished,
// or unknown to it) is read to its current end without waiting. Since and
// Timestamps use the times its supervisor recorded (logtimes.go).
func (b *Backend) Logs(ctx context.Context, taskID string, opts hostmgr.LogOptions) (io.ReadCloser, error) {
	var name string
	switch opts.Stream {
	case pelotonv1.LogStream_STDOUT:
		name = "stdout"
	case pelotonv1.LogStream_STDERR:
		name = "stderr"
	default:
		return nil, fmt.Errorf("local: logs %s: stream: unknown log stream %v", taskID, opts.Stream)
	}
	if !validTaskID(taskID) {
		return nil, fmt.Errorf("local: logs %s: %w", taskID, hostmgr.ErrUnknownTask)
	}
	sandbox := filepath.Join(b.dir, taskID)
	f, err := openOutput(sandbox, name)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("local: logs %s: %w", taskID, hostmgr.ErrUnknownTask)
		}
		return nil, fmt.Errorf("local: logs %s: %w", taskID, err)
	}
	wrap := func(f *os.File) io.ReadCloser {
		if !opts.Follow {
			return f
		}
		t, ok := b.lookup(taskID)
		if !ok {
			return f
		}
		return newFollower(ctx, f, t.exited)
	}
	if !opts.NeedsTimes() {
		return wrap(f), nil
	}
	index, err := openTimes(sandbox, name)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("local: logs %s: %w", taskID, err)
	}
	r, err := newStampReader(f, index, opts, wrap)
	if err != nil {
		f.Close()
		index.Close()
		return nil, fmt.Errorf("local: logs %s: %w", taskID, err)
	}
	return r, nil
}

// Close kills every running task (SIGTERM, then SIGKILL after 2s; each ends
// LOST with ReasonShutdown: not the run's failure, and a restarted control
// plane runs the instance again) and its
// health check (at once), and waits, for a bounded time, until they are
// reaped, their cgroups removed and their last events delivered; then it
// removes the backend's parent cgroup if empty. It returns an error naming
// the runs still not done by then. Launch fails after Close; Close is
// idempotent and returns the same result every time.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.mu.Lock()
		b.closed = true
		b.mu.Unlock()
		b.stopSweeper()
		b.mu.Lock()
		all := make([]*task, 0, len(b.tasks))
		for _, t := range b.tasks {
			all = append(all, t)
		}
		b.mu.Unlock()

		for _, t := range all {
			t.mu.Lock()
			t.closed = true
			t.kill(closeGrace, b.log)
			t.mu.Unlock()
		}
		deadline := time.NewTimer(closeGrace + closeReapWait)
		defer deadline.Stop()
		var stuck []string
		expired := false
		for _, t := range all {
			if !expired {
				select {
				case <-t.gone:
					continue
				case <-deadline.C:
					expired = true
				}
			}
			// Past the deadline: only collect the names of the runs not done.
			select {
			case <-t.gone:
			default:
				stuck = append(stuck, t.spec.TaskID)
			}
		}
		b.health.CloseIdleConnections()
		b.mu.Lock()
		cg := b.cg
		b.mu.Unlock()
		if cg != nil {
			cg.removeParents() // stays if stuck or detached runs hold it
		}
		if len(stuck) > 0 {
			sort.Strings(stuck)
			b.closeErr = fmt.Errorf("local: close: %d tasks not reaped within %s: %s",
				len(stuck), closeGrace+closeReapWait, strings.Join(stuck, ", "))
			b.log.Error("close left tasks behind", "tasks", stuck)
		}
	})
	return b.closeErr
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	maps.Copy(out, m)
	return out
}
