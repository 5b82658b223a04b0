package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// The tests of Config.TaskUser run real processes as the user nobody, which
// every Debian has; switching to it needs root.

// requireRoot skips a test that must switch users.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("running tasks as another user needs root")
	}
}

// nobody is the task user of these tests.
func nobody(t *testing.T) TaskUser {
	t.Helper()
	u, err := LookupTaskUser("nobody")
	if err != nil {
		t.Fatalf("the user nobody: %v", err)
	}
	return u
}

// userLayout is a data directory laid out as `peloton up` lays out its own:
// the etcd directory (0700, with a file in it) beside the tasks' directory,
// in a directory every user may search, as a data dir must be for a task
// user.
type userLayout struct {
	data, etcd, tasks string
}

func newUserLayout(t *testing.T) userLayout {
	t.Helper()
	base := t.TempDir()
	// t.TempDir makes <tmp>/<TestName><n>/<m>, both 0700.
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l := userLayout{data: filepath.Join(base, "data")}
	l.etcd, l.tasks = filepath.Join(l.data, "etcd"), filepath.Join(l.data, "tasks")
	if err := os.Mkdir(l.data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(l.etcd, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(l.etcd, "member"), []byte("raft state"), 0o600); err != nil {
		t.Fatal(err)
	}
	return l
}

// userBackend starts a backend whose tasks run as nobody.
func userBackend(t *testing.T, l userLayout) (*Backend, *recorder) {
	t.Helper()
	rec := newRecorder()
	b := mustNew(t, Config{Dir: l.tasks, TaskUser: "nobody", HostCapacity: resources.Resources{MilliCPU: 4000, MemoryMB: 4096}})
	if err := b.Start(context.Background(), rec.sink); err != nil {
		t.Fatal(err)
	}
	return b, rec
}

func modeOf(t *testing.T, path string) (os.FileMode, uint32) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm(), fi.Sys().(*syscall.Stat_t).Uid
}

// TestTaskUserRunsTasksAsIt: a task runs as nobody, in a sandbox of its
// own, and can read neither /etc/shadow nor Peloton's etcd directory, nor
// write next to its sandbox.
func TestTaskUserRunsTasksAsIt(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newUserLayout(t)
	u := nobody(t)
	b, rec := userBackend(t, l)
	s := spec("as-nobody-0-1", "sh", "-c", fmt.Sprintf(`
id -u; id -g; echo "home=$HOME"
cat /etc/shadow >/dev/null; echo "shadow=$?"
ls %[1]s >/dev/null; echo "etcd=$?"
ls %[2]s >/dev/null; echo "tasks=$?"
touch %[2]s/planted; echo "plant=$?"
echo mine > "$PELOTON_SANDBOX/mine"; echo "sandbox=$?"
`, l.etcd, l.tasks))
	launch(t, b, s)
	if ev := rec.waitTerminal(t, s.TaskID); ev.State != pelotonv1.TaskState_SUCCEEDED {
		t.Fatalf("terminal %+v", ev)
	}
	out := readLogs(t, b, s.TaskID, pelotonv1.LogStream_STDOUT, false)
	want := fmt.Sprintf("%d\n%d\nhome=%s\nshadow=1\netcd=2\ntasks=2\nplant=1\nsandbox=0\n", u.UID, u.GID, u.Home)
	if out != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out, want)
	}
	errOut := readLogs(t, b, s.TaskID, pelotonv1.LogStream_STDERR, false)
	for _, denied := range []string{"/etc/shadow", l.etcd, l.tasks} {
		if !strings.Contains(errOut, denied) || !strings.Contains(errOut, "Permission denied") {
			t.Errorf("stderr does not say %s was denied:\n%s", denied, errOut)
		}
	}

	// The layout: the sandbox and its output are nobody's, the rest is
	// root's and closed to it.
	sandbox := filepath.Join(l.tasks, s.TaskID)
	for _, c := range []struct {
		path string
		mode os.FileMode
		uid  uint32
	}{
		{l.tasks, 0o711, 0},
		{filepath.Join(l.tasks, runsDir), 0o700, 0},
		{filepath.Join(l.tasks, runsDir, s.TaskID+".json"), 0o600, 0},
		{sandbox, 0o700, u.UID},
		{filepath.Join(sandbox, "stdout"), 0o644, u.UID},
		{filepath.Join(sandbox, "mine"), 0o644, u.UID},
	} {
		if mode, uid := modeOf(t, c.path); mode != c.mode || uid != c.uid {
			t.Errorf("%s: mode %04o owner %d, want %04o owner %d", c.path, mode, uid, c.mode, c.uid)
		}
	}
	if _, err := os.Stat(filepath.Join(l.tasks, "planted")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the task wrote beside its sandbox: %v", err)
	}
}

// TestTaskUserHealthCheckAndAdoption: a command health check runs as the
// run's user; after a crash of the control plane the adopted run's check
// still does, even when the new control plane has no task user.
func TestTaskUserHealthCheckAndAdoption(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newUserLayout(t)
	u := nobody(t)
	b1, rec1 := userBackend(t, l)
	s := spec("checked-0-1", "sleep", "100")
	// Passes as nobody only: its exit status is whether it runs as nobody.
	s.HealthCheck = every1s(1, "sh", "-c", "test \"$(id -u)\" = "+strconv.Itoa(int(u.UID)))
	launch(t, b1, s)
	rec1.waitHealth(t, s.TaskID, healthy)
	b1.detach()

	b2 := mustNew(t, Config{Dir: l.tasks})
	rec2 := newRecorder()
	if err := b2.Start(context.Background(), rec2.sink); err != nil {
		t.Fatal(err)
	}
	tk, ok := b2.lookup(s.TaskID)
	if !ok || tk.user == nil || tk.user.UID != u.UID {
		t.Fatalf("the adopted run's user: %+v, %v; want nobody", tk, ok)
	}
	// The adopted run's check starts over and passes again: it runs as
	// nobody, or it would fail (threshold 1: at once).
	rec2.waitFor(t, s.TaskID, "a health check result", func(evs []hostmgr.TaskEvent) bool {
		for _, ev := range evs {
			if ev.Health == unhealthy {
				t.Fatalf("the adopted run's check failed: %+v", ev)
			}
		}
		return len(evs) > 0 && evs[len(evs)-1].Health == healthy
	})
	if err := b2.Kill(context.Background(), s.TaskID, 0); err != nil {
		t.Fatal(err)
	}
	rec2.waitFor(t, s.TaskID, "a terminal event", func(evs []hostmgr.TaskEvent) bool {
		return len(evs) > 0 && terminal(evs[len(evs)-1].State)
	})
}

// TestTaskUserHealthCheckFailsAsRoot is the other side of the check above:
// a check that passes only as root fails for a run of nobody.
func TestTaskUserHealthCheckFailsAsRoot(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	b, rec := userBackend(t, newUserLayout(t))
	s := spec("checked-root-0-1", "sleep", "100")
	s.HealthCheck = every1s(1, "sh", "-c", `test "$(id -u)" = 0`)
	launch(t, b, s)
	rec.waitHealth(t, s.TaskID, unhealthy)
	if err := b.Kill(context.Background(), s.TaskID, 0); err != nil {
		t.Fatal(err)
	}
	rec.waitTerminal(t, s.TaskID)
}

// TestTaskUserVolume: a volume made while tasks ran as root is handed to
// the task user, contents included, and the next runs use it.
func TestTaskUserVolume(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newUserLayout(t)
	u := nobody(t)
	vol := &hostmgr.Volume{ID: "vol-0"}
	run := func(b *Backend, rec *recorder, id, script string) string {
		t.Helper()
		s := spec(id, "sh", "-c", script)
		s.Volume = vol
		launch(t, b, s)
		if ev := rec.waitTerminal(t, id); ev.State != pelotonv1.TaskState_SUCCEEDED {
			t.Fatalf("%s: terminal %+v, stderr %q", id, ev, readLogs(t, b, id, pelotonv1.LogStream_STDERR, false))
		}
		return readLogs(t, b, id, pelotonv1.LogStream_STDOUT, false)
	}
	asRoot := mustNew(t, Config{Dir: l.tasks})
	recRoot := newRecorder()
	if err := asRoot.Start(context.Background(), recRoot.sink); err != nil {
		t.Fatal(err)
	}
	run(asRoot, recRoot, "vol-0-1", `mkdir "$PELOTON_VOLUME/d" && echo first > "$PELOTON_VOLUME/d/data" && ln -s /etc/shadow "$PELOTON_VOLUME/link"`)
	if err := asRoot.Close(); err != nil {
		t.Fatal(err)
	}

	b, rec := userBackend(t, l)
	got := run(b, rec, "vol-0-2", `id -u; cat "$PELOTON_VOLUME/d/data"; echo second >> "$PELOTON_VOLUME/d/data" && echo appended`)
	if want := fmt.Sprintf("%d\nfirst\nappended\n", u.UID); got != want {
		t.Errorf("the task user's run printed %q, want %q", got, want)
	}
	path := b.volumePath("local-0", vol.ID)
	if mode, uid := modeOf(t, path); mode != 0o700 || uid != u.UID {
		t.Errorf("volume: mode %04o owner %d, want 0700 owner %d", mode, uid, u.UID)
	}
	// The link was handed over itself, not what it points to.
	if _, uid := modeOf(t, filepath.Join(path, "link")); uid != u.UID {
		t.Errorf("the link in the volume is owned by %d", uid)
	}
	if _, uid := modeOf(t, "/etc/shadow"); uid != 0 {
		t.Fatalf("/etc/shadow changed owner to %d", uid)
	}
	if mode, uid := modeOf(t, filepath.Dir(path)); mode != 0o711 || uid != 0 {
		t.Errorf("the host's volume directory: mode %04o owner %d, want 0711 root", mode, uid)
	}
}

// TestTaskUserConfigErrors: an unknown user, root, a data dir the user
// cannot reach or could write above are refused at New, naming the cause.
func TestTaskUserConfigErrors(t *testing.T) {
	if _, err := New(Config{Dir: t.TempDir(), TaskUser: "peloton-no-such-user"}); err == nil || !strings.Contains(err.Error(), `config.taskUser`) {
		t.Errorf("unknown user: %v", err)
	}
	if os.Geteuid() != 0 {
		if _, err := New(Config{Dir: t.TempDir(), TaskUser: "nobody"}); err == nil || !strings.Contains(err.Error(), "needs root") {
			t.Errorf("task user without root: %v", err)
		}
		return
	}
	for _, spec := range []string{"root", "0"} {
		if _, err := New(Config{Dir: t.TempDir(), TaskUser: spec}); err == nil || !strings.Contains(err.Error(), "is root") {
			t.Errorf("TaskUser %q: %v", spec, err)
		}
	}
	// t.TempDir is 0700: nobody cannot search it.
	closed := t.TempDir()
	if _, err := New(Config{Dir: filepath.Join(closed, "tasks"), TaskUser: "nobody"}); err == nil ||
		!strings.Contains(err.Error(), "may not search "+filepath.Dir(closed)) {
		t.Errorf("a data dir nobody cannot reach: %v", err)
	}
	// Writable by all, not sticky: nobody could swap the tasks directory.
	l := newUserLayout(t)
	if err := os.Chmod(l.data, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Dir: l.tasks, TaskUser: "nobody"}); err == nil || !strings.Contains(err.Error(), "may write to "+l.data) {
		t.Errorf("a data dir nobody may write to: %v", err)
	}
	// Sticky and root's, like /tmp: fine.
	if err := os.Chmod(l.data, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Dir: l.tasks, TaskUser: "nobody", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("a sticky data dir: %v", err)
	}
	_ = b.Close()
	// Numeric uids name users too.
	u := nobody(t)
	got, err := LookupTaskUser(strconv.Itoa(int(u.UID)))
	if err != nil || got.Name != u.Name || got.GID != u.GID {
		t.Errorf("LookupTaskUser(%d) = %+v, %v; want %+v", u.UID, got, err, u)
	}
}

// TestTaskUserClosesOldRuns: sandboxes and volumes of an earlier version,
// open to all (0755), are closed to the task user when a backend with one
// starts over the same directory, their owners' rights kept.
func TestTaskUserClosesOldRuns(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newUserLayout(t)
	old := filepath.Join(l.tasks, "old-0-1")
	hostDir := filepath.Join(l.tasks, volumesDir, "local-0")
	vol := filepath.Join(hostDir, "old-vol")
	for _, d := range []string{old, vol} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(old, "stdout"), []byte("old output\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, rec := userBackend(t, l)
	for path, want := range map[string]os.FileMode{old: 0o700, hostDir: 0o711, vol: 0o700, l.tasks: 0o711} {
		if mode, uid := modeOf(t, path); mode != want || uid != 0 {
			t.Errorf("%s: mode %04o owner %d, want %04o root", path, mode, uid, want)
		}
	}
	// A task of nobody's cannot read it, though it knows its name.
	s := spec("snoop-0-1", "sh", "-c", "cat "+filepath.Join(old, "stdout")+" "+filepath.Join(vol, "x")+" 2>&1; true")
	launch(t, b, s)
	rec.waitTerminal(t, s.TaskID)
	if got := readLogs(t, b, s.TaskID, pelotonv1.LogStream_STDOUT, false); strings.Contains(got, "old output") || strings.Count(got, "Permission denied") != 2 {
		t.Errorf("nobody reading an old sandbox and volume: %q", got)
	}
	// Their logs are still served.
	if got := readLogs(t, b, "old-0-1", pelotonv1.LogStream_STDOUT, false); got != "old output\n" {
		t.Errorf("the old run's stdout: %q", got)
	}
}
