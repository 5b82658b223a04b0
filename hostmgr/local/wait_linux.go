package local

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/peloton-sched/peloton/hostmgr/local/supervise"
	"golang.org/x/sys/unix"
)

// Why a pidfd reaper. A goroutine blocked in wait4 or waitid holds an OS
// thread for as long as the child runs, so one waiting goroutine per run
// cost one thread per run (2,000 runs, 2,007 threads). Instead one goroutine
// waits in epoll on a pidfd per child (Linux >= 5.3): a pidfd becomes
// readable when its process exits, and the exit is then reaped with a
// waitid that returns at once. However many runs there are, waiting costs
// the one thread blocked in epoll_wait.
//
// The other single mechanism, SIGCHLD with wait4(-1, WNOHANG), is not used
// because wait4(-1) reaps any child of the process: it would steal the exit
// statuses that os/exec, the health checks, tests, etcd or kube tooling in
// the same process wait for. A pidfd only ever names our own child.
//
// The reaper does not reap: it only says that a process has exited, leaving
// it a zombie, so that its pid (the process group id) cannot be reused until
// its owner has signalled the rest of the group and called Wait.

// reaper is the epoll loop. Its goroutine runs only while some process is
// watched, so an idle process (and a test's leak check) has none.
type reaper struct {
	mu      sync.Mutex
	epfd    int // -1 while the loop is not running
	next    uint32
	waiting map[uint32]pidWatch // by the token in the epoll event
}

type pidWatch struct {
	pid   int
	pidfd int
	done  chan struct{}
}

// theReaper is shared by every Backend and health check of the process: one
// thread for all of them.
var theReaper = &reaper{epfd: -1, waiting: map[uint32]pidWatch{}}

// exitNotify returns a channel closed once process pid, a child of this
// process that nobody has reaped yet, has exited; the child is left
// unreaped. It never returns nil on Linux: if no pidfd can be had (a kernel
// before 5.3, or out of descriptors) it falls back to one goroutine blocked
// in waitid, which is correct but costs a thread while the child runs.
func exitNotify(pid int) <-chan struct{} {
	done, err := theReaper.watch(pid)
	if err == nil {
		return done
	}
	return blockingNotify(pid)
}

func blockingNotify(pid int) chan struct{} {
	done := make(chan struct{})
	go func() {
		// An error here (never expected for an unreaped child) still
		// closes done: the caller's Wait then blocks until the exit.
		waitExited(pid)
		close(done)
	}()
	return done
}

// watch registers pid with the loop, starting it if needed.
func (r *reaper) watch(pid int) (chan struct{}, error) {
	// pidfd_open sets close-on-exec, so runs do not inherit each other's
	// pidfds. The pid is stable here: only our caller reaps it.
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	epfd, fresh := r.epfd, false
	if epfd < 0 {
		if epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
			unix.Close(fd)
			return nil, err
		}
		fresh = true
	}
	// The event carries a token, not the fd: fd numbers are reused as soon
	// as they are closed, tokens only after 2^32 watches, and never while
	// still waiting.
	r.next++
	for _, busy := r.waiting[r.next]; busy; _, busy = r.waiting[r.next] {
		r.next++
	}
	tok := r.next
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLONESHOT, Fd: int32(tok)}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		unix.Close(fd)
		if fresh {
			unix.Close(epfd)
		}
		return nil, err
	}
	done := make(chan struct{})
	r.waiting[tok] = pidWatch{pid: pid, pidfd: fd, done: done}
	if fresh {
		// Started only once something is registered: the loop stops when
		// nothing is, and must not block in epoll_wait with nothing to wait for.
		r.epfd = epfd
		go r.loop(epfd)
	}
	return done, nil
}

// loop waits for exits and closes their channels, until nothing is watched.
func (r *reaper) loop(epfd int) {
	events := make([]unix.EpollEvent, 256)
	for {
		n, err := unix.EpollWait(epfd, events, -1)
		if err == unix.EINTR {
			continue
		}
		r.mu.Lock()
		if err != nil {
			// Not expected (the arguments are ours). Hand every watch to a
			// blocking waiter rather than claim exits that did not happen.
			for tok, w := range r.waiting {
				delete(r.waiting, tok)
				unix.Close(w.pidfd)
				go func(done chan struct{}, pid int) {
					<-blockingNotify(pid)
					close(done)
				}(w.done, w.pid)
			}
			n = 0
		}
		for _, ev := range events[:n] {
			tok := uint32(ev.Fd)
			w, ok := r.waiting[tok]
			if !ok {
				continue
			}
			delete(r.waiting, tok)
			unix.EpollCtl(epfd, unix.EPOLL_CTL_DEL, w.pidfd, nil)
			unix.Close(w.pidfd)
			close(w.done)
		}
		if len(r.waiting) == 0 {
			unix.Close(epfd)
			r.epfd = -1
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
	}
}

// waitExited blocks (holding a thread) until process pid has exited,
// without reaping it. It is the fallback of exitNotify.
var waitExited = supervise.WaitExited

// procStartTicks is the start time of process pid, in clock ticks since
// boot (field 22 of /proc/<pid>/stat): with the pid, it names a process
// uniquely, since a reused pid starts later.
func procStartTicks(pid int) (uint64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold anything;
	// the fields after its last ')' start with field 3.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("local: /proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("local: /proc/%d/stat: %d fields after the command name", pid, len(f))
	}
	if f[0] == "Z" || f[0] == "X" {
		return 0, fmt.Errorf("local: process %d has exited", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// watchAdopted returns a channel closed once process pid, which need not be
// our child, has exited, and whether pid (still) names the process that
// started at ticks.
func watchAdopted(pid int, ticks uint64) (<-chan struct{}, bool) {
	if t, err := procStartTicks(pid); err != nil || t != ticks {
		return nil, false
	}
	done, err := theReaper.watch(pid)
	if err != nil {
		return pollAdopted(pid, ticks), true
	}
	// The pidfd names the process that had pid when it was opened: if the
	// start time still matches now, that was ours.
	if t, err := procStartTicks(pid); err != nil || t != ticks {
		return nil, false
	}
	return done, true
}
