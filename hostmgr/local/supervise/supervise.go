// Package supervise is the small process that stands between the local
// backend and each run it starts: the run's parent, which outlives the
// control plane and writes down how the run ended.
//
// Why it exists. A run's process must survive a crash of the control
// plane (kill -9, a panic), and a restarted control plane must learn how
// every run that ended meanwhile ended. A process that is not one's child
// cannot be waited for, so without a parent of our own the exit status of
// a run that ended while the control plane was down is lost, and the run
// has to be reported LOST and run again: every crash would redo all work
// in flight. The kubelet (with containerd's shim), Mesos' agent and
// Nomad's executor keep a process of their own as the parent of the work
// for the same reason.
//
// The local backend starts one supervisor per run by executing its own
// binary again (/proc/self/exe) with SupervisorEnv set: the init function of
// this package sees the variable and runs Main instead of the program.
// This package imports only the standard library, so its init runs before
// the heavy packages of the binary (protobuf registries, clients) are
// initialised: Go initialises packages in the order of their import paths
// among those whose imports are done, and everything here is ready early.
//
// The protocol, all on one machine:
//   - the backend writes a Config as JSON on descriptor 3 and closes it;
//   - the supervisor starts the run (in its own process group, its cgroup
//     and as its user), answers a Report as one line of JSON on descriptor
//     4, and closes it;
//   - a kill is a KillFile holding a deadline followed by SIGTERM: the
//     supervisor sends SIGTERM to the run's process group and SIGKILL to
//     the group and its cgroup at the earliest deadline it was given, so
//     the grace period holds even when the control plane dies during it;
//   - when the run's process exits, the supervisor SIGKILLs what is left of
//     its process group (while the leader is still a zombie, so the group
//     id cannot have been reused), reaps it, writes the Status to
//     Config.StatusPath durably (write, fsync, rename, fsync of the
//     directory) and exits 0.
//
// The supervisor never touches the network or the store. The run's output
// goes to the files the backend opened (descriptors 1 and 2): with
// Config.Times through pipes the supervisor copies unchanged, recording
// when each line arrived (logtimes.go), otherwise handed to the run as
// they are. Its own complaints go to the run's stderr too, prefixed
// "peloton-supervisor:".
package supervise

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// SupervisorEnv is the environment variable that turns a process of the
// binary into a supervisor. Its value is the run's Config.StatusPath, so
// that a scan of /proc can tell which run a supervisor belongs to.
const SupervisorEnv = "PELOTON_SUPERVISOR"

// ProcessName is argv[0] of a supervisor, so that ps shows what it is
// ("peloton-supervisor <task id>").
const ProcessName = "peloton-supervisor"

// Config is what the backend tells a supervisor about the run to start.
type Config struct {
	TaskID string   `json:"taskId"`
	Path   string   `json:"path"` // the executable, resolved by the backend
	Argv   []string `json:"argv"`
	Env    []string `json:"env"`
	Dir    string   `json:"dir"`
	// User, when set, is who the run runs as.
	User *User `json:"user,omitempty"`
	// Cgroup, when set, is the cgroup the run is born in.
	Cgroup *Cgroup `json:"cgroup,omitempty"`
	// KillGrace is the grace period of a kill that names no deadline.
	KillGrace time.Duration `json:"killGrace"`
	// StatusPath is where the Status is written; KillPath (StatusPath's
	// sibling) is where kill deadlines are read.
	StatusPath string `json:"statusPath"`
	// Times: the run's stdout and stderr go through pipes that the
	// supervisor copies to its descriptors 1 and 2, writing the times of
	// their lines to descriptors 5 and 6 (logtimes.go). Without it the run
	// writes to descriptors 1 and 2 itself.
	Times bool `json:"times,omitempty"`
}

// User is the identity a run takes on between fork and exec.
type User struct {
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups,omitempty"`
}

// Cgroup names a run's cgroup: on version 2 one directory; on version 1
// one directory per controller hierarchy.
type Cgroup struct {
	Version int      `json:"version"`
	Dirs    []string `json:"dirs"`
}

// Report is the supervisor's answer to a start: the run's pid, or why it
// could not start.
type Report struct {
	Pid   int    `json:"pid,omitempty"`
	Error string `json:"error,omitempty"`
}

// Status is how a run ended, as its supervisor saw it.
type Status struct {
	TaskID string `json:"taskId"`
	// Exited: the process exited with ExitCode; otherwise a signal
	// (Signal) ended it.
	Exited   bool  `json:"exited"`
	ExitCode int32 `json:"exitCode"`
	Signal   int32 `json:"signal,omitempty"`
	// Killed: a kill was asked for before the run ended.
	Killed bool `json:"killed,omitempty"`
	// WaitError is set when the run's end could not be read.
	WaitError string    `json:"waitError,omitempty"`
	Time      time.Time `json:"time"`
}

// KillPath is the file through which the backend gives a supervisor a kill
// deadline: the sibling of statusPath with the suffix ".kill".
func KillPath(statusPath string) string {
	return strings.TrimSuffix(statusPath, StatusSuffix) + KillSuffix
}

// File name suffixes of the files a supervisor reads and writes beside the
// run's record. The partial status is never ".tmp": the backend removes
// those at start, and a supervisor may be writing one right then.
const (
	StatusSuffix  = ".exit"
	KillSuffix    = ".kill"
	partialSuffix = ".exit.new"
)

// PartialPath is where a supervisor writes the status before renaming it.
func PartialPath(statusPath string) string {
	return strings.TrimSuffix(statusPath, StatusSuffix) + partialSuffix
}

// ReadStatus reads the status a supervisor wrote. An error wrapping
// os.ErrNotExist means it wrote none (yet).
func ReadStatus(path string) (Status, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Status{}, err
	}
	var st Status
	if err := json.Unmarshal(data, &st); err != nil {
		return Status{}, fmt.Errorf("supervise: status %s: %w", path, err)
	}
	return st, nil
}

// WriteKill asks the supervisor of the run whose status goes to
// statusPath to SIGKILL the run at deadline (a later deadline than one it
// already has changes nothing). The caller then sends it SIGTERM.
func WriteKill(statusPath string, deadline time.Time) error {
	path := KillPath(statusPath)
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(deadline.UnixNano(), 10)), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// readKill reads a kill deadline; ok is false when there is none.
func readKill(statusPath string) (time.Time, bool) {
	data, err := os.ReadFile(KillPath(statusPath))
	if err != nil {
		return time.Time{}, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, n), true
}

// writeStatus writes st to path so that it survives a crash of the
// machine once this returns: a whole file or none, never a torn one.
func writeStatus(path string, st Status) error {
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := PartialPath(path)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}

// readConfig reads the Config from r (descriptor 3).
func readConfig(r io.Reader) (Config, error) {
	var cfg Config
	data, err := io.ReadAll(io.LimitReader(r, 64<<20))
	if err != nil {
		return cfg, err
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return cfg, fmt.Errorf("config: %w", err)
	}
	switch {
	case cfg.Path == "" || len(cfg.Argv) == 0:
		return cfg, errors.New("config: no command")
	case cfg.StatusPath == "":
		return cfg, errors.New("config: no status path")
	}
	return cfg, nil
}

// complain writes a line about the supervisor itself to the run's stderr.
func complain(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "peloton-supervisor: "+format+"\n", args...)
}
