package jobmgr

import (
	"sync"
	"sync/atomic"
)

// Watches tells watchers which jobs and instances changed, so that the API
// can stream them (WatchJobs, WatchTasks). It carries no state of its own:
// a change says only which record's published view was replaced, and the
// watcher reads the view itself, so a burst of changes to one instance
// costs the watcher one read. The writers that publish views call it in
// their turn; it must never make them wait, so each watcher has a bounded
// buffer, and a watcher whose buffer is full is told it fell behind (Lost)
// instead of being waited for.
type Watches struct {
	mu   sync.RWMutex
	subs map[*Watch]struct{}
	// n is len(subs), read without the lock so that writers with nobody
	// watching pay one atomic load.
	n atomic.Int32
}

// Change is one changed record: a job's runtime (Instance < 0), one of its
// instances, or the job gone from the store (Gone).
type Change struct {
	Job      string
	Instance int32
	Gone     bool
}

// Watch is one watcher's subscription.
type Watch struct {
	w    *Watches
	jobs map[string]bool // nil: every job
	ch   chan Change
	lost chan struct{}
	once sync.Once
}

// Watches is the part of m that tells watchers of changes.
func (m *Manager) Watches() *Watches { return m.watch }

// Subscribe starts a watch of the given jobs (none: every job) with room
// for buffer changes not yet taken. Call it before reading the state the
// changes apply to, so that no change between the two is missed; Close it
// when done.
func (w *Watches) Subscribe(jobs []string, buffer int) *Watch {
	s := &Watch{w: w, ch: make(chan Change, buffer), lost: make(chan struct{})}
	if len(jobs) > 0 {
		s.jobs = make(map[string]bool, len(jobs))
		for _, id := range jobs {
			s.jobs[id] = true
		}
	}
	w.mu.Lock()
	if w.subs == nil {
		w.subs = map[*Watch]struct{}{}
	}
	w.subs[s] = struct{}{}
	w.n.Store(int32(len(w.subs)))
	w.mu.Unlock()
	return s
}

// Changes are the watch's changes, in the order they were published.
func (s *Watch) Changes() <-chan Change { return s.ch }

// Lost is closed once a change found the watch's buffer full: the
// changes after it were not kept, and the watcher must start over.
func (s *Watch) Lost() <-chan struct{} { return s.lost }

// Close ends the watch.
func (s *Watch) Close() {
	w := s.w
	w.mu.Lock()
	delete(w.subs, s)
	w.n.Store(int32(len(w.subs)))
	w.mu.Unlock()
}

// Watchers is how many watches are open (tests, metrics).
func (w *Watches) Watchers() int { return int(w.n.Load()) }

// notify hands c to every watch of its job, never waiting for one.
func (w *Watches) notify(c Change) {
	if w == nil || w.n.Load() == 0 {
		return
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	for s := range w.subs {
		if s.jobs != nil && !s.jobs[c.Job] {
			continue
		}
		select {
		case s.ch <- c:
		default:
			s.once.Do(func() { close(s.lost) })
		}
	}
}

// taskChanged says instance inst of job id has a new view.
func (w *Watches) taskChanged(id string, inst uint32) {
	w.notify(Change{Job: id, Instance: int32(inst)})
}

// jobChanged says job id's runtime has a new view.
func (w *Watches) jobChanged(id string) { w.notify(Change{Job: id, Instance: -1}) }

// jobGone says job id left the store.
func (w *Watches) jobGone(id string) { w.notify(Change{Job: id, Instance: -1, Gone: true}) }
