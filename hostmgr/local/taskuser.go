package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
)

// Running tasks as another user (Config.TaskUser).
//
// Without it every task runs as the control plane's user: run as root, a
// task can read and change every file of the machine, Peloton's etcd data
// and every other task's sandbox included. With it, and the control plane
// running as root, every task process and every command health check runs
// as that user: its uid, its primary gid and its supplementary groups
// (SysProcAttr.Credential, set in the child between fork and exec). The
// files are laid out so that the user can reach its own sandbox and
// nothing of Peloton's:
//
//	<Dir>                      root 0711: searchable, not listable, not writable
//	<Dir>/<TaskID>/            the task user 0700: the sandbox, its stdout and stderr
//	<Dir>/runs/                root 0700: run records (they hold the tasks' environments)
//	<Dir>/volumes/<host>/      root 0711
//	<Dir>/volumes/<host>/<id>/ the task user 0700: a persistent volume
//
// The task user must be able to search every directory above Dir (it
// cannot chdir into its sandbox otherwise) and must not be able to write to
// any of them, or it could move Dir aside and put its own tree in its place
// (a sticky directory it does not own, such as /tmp, is fine). New checks
// both, by the permission bits: ACLs are not looked at.
//
// The rest of the backend needs nothing of its own for it. A run's cgroup
// is made, and the child placed in it, by the control plane before the
// child changes user (cgroup_linux.go), so the cgroup's files stay root's:
// a task can neither raise its limits nor leave its cgroup. Kills, the
// cleanup of leftover group members and of strays (strays_linux.go) are
// signals from root. A run's record names its user, so a run adopted after
// a restart keeps it, and so does its health check, whatever the task user
// of the new control plane.
//
// The tasks all run as the one user, so they can read each other's
// sandboxes and volumes: the user separates tasks from Peloton and from the
// machine, not from each other.

// TaskUser is a user tasks run as, as the kernel knows it.
type TaskUser struct {
	// Name is the user's name.
	Name string
	// UID and GID are its user id and primary group id.
	UID, GID uint32
	// Groups are its supplementary group ids.
	Groups []uint32
	// Home is its home directory: the tasks' HOME.
	Home string
}

// LookupTaskUser resolves spec, a user name or a numeric uid, with
// os/user. It refuses root (uid 0): tasks run as root are what a task user
// is there to avoid.
func LookupTaskUser(spec string) (TaskUser, error) {
	if spec == "" {
		return TaskUser{}, errors.New("no user named")
	}
	var u *user.User
	var err error
	if _, nerr := strconv.ParseUint(spec, 10, 32); nerr == nil {
		u, err = user.LookupId(spec)
	} else {
		u, err = user.Lookup(spec)
	}
	if err != nil {
		var unknownName user.UnknownUserError
		var unknownID user.UnknownUserIdError
		if errors.As(err, &unknownName) || errors.As(err, &unknownID) {
			return TaskUser{}, fmt.Errorf("no user %q on this machine", spec)
		}
		return TaskUser{}, fmt.Errorf("look up user %q: %w", spec, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return TaskUser{}, fmt.Errorf("user %q: uid %q is not a number", spec, u.Uid)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return TaskUser{}, fmt.Errorf("user %q: gid %q is not a number", spec, u.Gid)
	}
	if uid == 0 {
		return TaskUser{}, fmt.Errorf("user %q is root (uid 0): tasks would run as root; name an unprivileged user", spec)
	}
	tu := TaskUser{Name: u.Username, UID: uint32(uid), GID: uint32(gid), Home: u.HomeDir}
	ids, err := u.GroupIds()
	if err != nil {
		return TaskUser{}, fmt.Errorf("user %q: its groups: %w", spec, err)
	}
	for _, g := range ids {
		n, err := strconv.ParseUint(g, 10, 32)
		if err != nil {
			return TaskUser{}, fmt.Errorf("user %q: group id %q is not a number", spec, g)
		}
		if !slices.Contains(tu.Groups, uint32(n)) {
			tu.Groups = append(tu.Groups, uint32(n))
		}
	}
	return tu, nil
}

// credential is what the child takes on between fork and exec.
func (u *TaskUser) credential() *syscall.Credential {
	if u == nil {
		return nil
	}
	return &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: slices.Clone(u.Groups)}
}

// inGroup reports whether the user is in group gid.
func (u *TaskUser) inGroup(gid uint32) bool {
	return gid == u.GID || slices.Contains(u.Groups, gid)
}

// permBits are the permission bits of fi that apply to the user: the
// owner's, the group's or the others', as the kernel picks them.
func (u *TaskUser) permBits(st *syscall.Stat_t) uint32 {
	mode := st.Mode & 0o777
	switch {
	case st.Uid == u.UID:
		return mode >> 6 & 7
	case u.inGroup(st.Gid):
		return mode >> 3 & 7
	default:
		return mode & 7
	}
}

// checkTaskUserPath checks that the user can search every directory from
// the root down to dir, and can write to none of them except a sticky one
// it does not own. dir must exist.
func checkTaskUserPath(dir string, u *TaskUser) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	for p := real; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: cannot read its owner and mode", p)
		}
		bits := u.permBits(st)
		if bits&1 == 0 {
			return fmt.Errorf("user %s cannot reach the sandboxes under %s: it may not search %s (mode %04o, owner uid %d, group gid %d); "+
				"let it (chmod o+x) or keep the data elsewhere", u.Name, real, p, st.Mode&0o7777, st.Uid, st.Gid)
		}
		sticky := st.Mode&syscall.S_ISVTX != 0
		if bits&2 != 0 && (!sticky || st.Uid == u.UID) {
			return fmt.Errorf("user %s may write to %s (mode %04o, owner uid %d, group gid %d), above the sandboxes under %s: "+
				"its tasks could replace Peloton's files there; make it writable only by Peloton's user or keep the data elsewhere",
				u.Name, p, st.Mode&0o7777, st.Uid, st.Gid, real)
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// prepareDir lays Dir out for the tasks' user (see the top of this file):
// Dir and the volumes directory searchable only, the records private. It
// runs once, at New; Dir and runs/ exist.
func prepareDir(dir string, u *TaskUser) error {
	if err := os.Chmod(filepath.Join(dir, runsDir), 0o700); err != nil {
		return err
	}
	if u == nil {
		return nil
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return err
	}
	vols := filepath.Join(dir, volumesDir)
	if err := os.Mkdir(vols, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := os.Chmod(vols, 0o711); err != nil {
		return err
	}
	if err := closeOldRuns(dir); err != nil {
		return err
	}
	return checkTaskUserPath(dir, u)
}

// closeOldRuns closes what runs made before there was a task user left
// open to others: sandboxes were 0755, and so were the volumes and their
// hosts' directories. Without it the task user could read them, knowing
// their names. The owners keep their rights; a volume is handed to the task
// user when a run uses it (makeVolume).
func closeOldRuns(dir string) error {
	closeDir := func(path string, mode os.FileMode) error {
		fi, err := os.Lstat(path)
		if err != nil || !fi.IsDir() || fi.Mode().Perm()&0o077 == mode&0o077 {
			return err
		}
		return os.Chmod(path, fi.Mode().Perm()&0o700|mode&0o077)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == runsDir || e.Name() == volumesDir || !e.IsDir() {
			continue
		}
		if err := closeDir(filepath.Join(dir, e.Name()), 0o700); err != nil {
			return err
		}
	}
	hosts, err := os.ReadDir(filepath.Join(dir, volumesDir))
	if err != nil {
		return err
	}
	for _, h := range hosts {
		hostDir := filepath.Join(dir, volumesDir, h.Name())
		if err := closeDir(hostDir, 0o711); err != nil {
			return err
		}
		vols, err := os.ReadDir(hostDir)
		if err != nil {
			if errors.Is(err, syscall.ENOTDIR) {
				continue
			}
			return err
		}
		for _, v := range vols {
			if err := closeDir(filepath.Join(hostDir, v.Name()), 0o700); err != nil {
				return err
			}
		}
	}
	return nil
}

// makeVolume creates a run's volume, or takes an existing one, and gives
// it to the user the run runs as (u; nil: the control plane's own). A
// volume that was another user's - made before --task-user, or for another
// one - is handed over whole, its contents included, so that a stateful
// task keeps working on its data.
func makeVolume(path string, u *TaskUser) error {
	if u == nil {
		return os.MkdirAll(path, 0o755)
	}
	// The host's directory, like volumes/, only lets the user through.
	host := filepath.Dir(path)
	if err := os.Mkdir(host, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := os.Chmod(host, 0o711); err != nil {
		return err
	}
	if err := os.Mkdir(path, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok {
		return fmt.Errorf("%s is not a directory", path)
	}
	if st.Uid == u.UID && st.Gid == u.GID {
		return nil
	}
	// Lchown: a symbolic link inside the volume is handed over itself,
	// never what it points to. The volume's former user has no process
	// left (no live run uses it), so nothing changes the tree meanwhile.
	err = filepath.WalkDir(path, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(u.UID), int(u.GID))
	})
	if err != nil {
		return fmt.Errorf("give the volume to user %s: %w", u.Name, err)
	}
	return os.Chmod(path, 0o700)
}
