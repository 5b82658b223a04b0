package sla

import (
	"container/heap"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"
)

// maxExpiredLog bounds how many expired grants the core keeps for the next
// expire call. Grants expire lazily inside any call; keeping them lets the
// caller log every holder that died, but a caller that never asks must not
// make the evaluator grow without bound. Beyond the bound, expiries are not
// logged (they still take effect).
const maxExpiredLog = 1024

// core holds every decision of the evaluator. It is pure: no clock, no
// goroutine, no I/O, no lock. Every method takes the current time and first
// expires the grants due by then, so a grant stops counting at its expiry
// instant whichever call comes next.
type core struct {
	jobs     map[string]*jobState
	leases   map[string]*lease
	byExpiry leaseHeap
	// expired holds grants that expired and were not yet returned by expire.
	expired []Grant
	newID   func() string
}

// jobState is one job's accounting.
type jobState struct {
	sla  JobSLA
	down map[uint32]struct{} // reported down, all below InstanceCount
	// held maps an instance to the live grants on it. All of them have the
	// same holder: a different holder is refused while one is live.
	held   map[uint32]hold
	leases map[string]*lease
	// unavailable is |(down ∪ held) ∩ [0, InstanceCount)|, kept up to date
	// so a request costs O(|request|), not O(|job|).
	unavailable int
}

// hold is who holds an instance and through how many live grants (the same
// holder may ask twice; the instance is free only when both are gone).
type hold struct {
	holder string
	n      int
}

// lease is a live grant.
type lease struct {
	grant Grant
	job   *jobState
	index int // position in core.byExpiry
}

func newCore(newID func() string) *core {
	if newID == nil {
		newID = randomID
	}
	return &core{jobs: map[string]*jobState{}, leases: map[string]*lease{}, newID: newID}
}

// randomID returns 128 random bits in hex: unguessable, so a holder cannot
// release or renew another holder's grant by counting.
func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand crashes the program instead)
	return hex.EncodeToString(b[:])
}

// advance drops every grant whose expiry is at or before now.
func (c *core) advance(now time.Time) {
	for len(c.byExpiry) > 0 && !now.Before(c.byExpiry[0].grant.Expires) {
		l := c.byExpiry[0]
		c.drop(l)
		if len(c.expired) < maxExpiredLog {
			c.expired = append(c.expired, l.grant)
		}
	}
}

// expire drops the grants due by now and returns every grant that expired
// since the previous call, including those dropped lazily by other calls.
func (c *core) expire(now time.Time) []Grant {
	c.advance(now)
	out := c.expired
	c.expired = nil
	return out
}

func (c *core) setJob(now time.Time, s JobSLA) {
	c.advance(now)
	j := c.jobs[s.JobID]
	if j == nil {
		j = &jobState{down: map[uint32]struct{}{}, held: map[uint32]hold{}, leases: map[string]*lease{}}
		c.jobs[s.JobID] = j
	}
	j.sla = s
	for i := range j.down {
		if i >= s.InstanceCount {
			delete(j.down, i)
		}
	}
	// Grants are kept even when the budget shrinks below what they hold:
	// their holders are already taking the instances down, and revoking
	// would not bring the instances back. New requests are refused until
	// the job is within budget again.
	j.recount()
}

func (c *core) removeJob(now time.Time, jobID string) {
	c.advance(now)
	j := c.jobs[jobID]
	if j == nil {
		return
	}
	for _, l := range j.leases {
		c.drop(l)
	}
	delete(c.jobs, jobID)
}

func (c *core) report(now time.Time, jobID string, down []uint32) {
	c.advance(now)
	j := c.jobs[jobID]
	if j == nil {
		return
	}
	clear(j.down)
	for _, i := range down {
		// jobmgr may report against an instance count that has just
		// changed; an instance that does not exist cannot be unavailable.
		if i < j.sla.InstanceCount {
			j.down[i] = struct{}{}
		}
	}
	j.recount()
}

func (c *core) request(now time.Time, req Request) (Grant, error) {
	c.advance(now)
	j := c.jobs[req.JobID]
	if j == nil {
		return Grant{}, fmt.Errorf("job %s: %w", req.JobID, ErrUnknownJob)
	}
	switch {
	case len(req.Instances) == 0:
		return Grant{}, fmt.Errorf("job %s: %w: no instances", req.JobID, ErrInvalidRequest)
	case req.Holder == "":
		return Grant{}, fmt.Errorf("job %s: %w: holder must not be empty", req.JobID, ErrInvalidRequest)
	case req.TTL <= 0:
		return Grant{}, fmt.Errorf("job %s: %w: ttl must be > 0, got %v", req.JobID, ErrInvalidRequest, req.TTL)
	}
	for _, i := range req.Instances {
		if i >= j.sla.InstanceCount {
			return Grant{}, fmt.Errorf("job %s: instance %d: %w (the job has %d)",
				req.JobID, i, ErrUnknownInstance, j.sla.InstanceCount)
		}
	}
	take, err := j.fit(req)
	if err != nil {
		return Grant{}, err
	}

	id := c.newID()
	for c.leases[id] != nil {
		id = c.newID()
	}
	l := &lease{job: j, grant: Grant{
		ID: id, JobID: req.JobID, Instances: take, Holder: req.Holder, Reason: req.Reason,
		Expires: now.Add(req.TTL),
	}}
	for _, i := range take {
		h, ok := j.held[i]
		if !ok {
			h.holder = req.Holder
			if !j.isDown(i) {
				j.unavailable++
			}
		}
		h.n++
		j.held[i] = h
	}
	c.leases[id] = l
	j.leases[id] = l
	heap.Push(&c.byExpiry, l)
	return cloneGrant(l.grant), nil
}

func (c *core) release(now time.Time, grantID string) error {
	c.advance(now)
	l := c.leases[grantID]
	if l == nil {
		return fmt.Errorf("grant %s: %w", grantID, ErrUnknownGrant)
	}
	c.drop(l)
	return nil
}

func (c *core) renew(now time.Time, grantID string, ttl time.Duration) error {
	// Expire first: a lease that ran out at or before now is gone even if
	// nobody noticed yet, and its instances may be granted to someone else
	// the moment after, so it must not come back to life.
	c.advance(now)
	l := c.leases[grantID]
	if l == nil {
		return fmt.Errorf("grant %s: %w", grantID, ErrUnknownGrant)
	}
	if ttl <= 0 {
		return fmt.Errorf("grant %s: %w: ttl must be > 0, got %v", grantID, ErrInvalidRequest, ttl)
	}
	l.grant.Expires = now.Add(ttl)
	heap.Fix(&c.byExpiry, l.index)
	return nil
}

func (c *core) status(now time.Time, jobID string) (JobStatus, bool) {
	c.advance(now)
	j := c.jobs[jobID]
	if j == nil {
		return JobStatus{}, false
	}
	st := JobStatus{JobSLA: j.sla, Unavailable: j.unavailable, Down: make([]uint32, 0, len(j.down))}
	for i := range j.down {
		st.Down = append(st.Down, i)
	}
	slices.Sort(st.Down)
	for _, l := range j.leases {
		st.Grants = append(st.Grants, cloneGrant(l.grant))
	}
	slices.SortFunc(st.Grants, func(a, b Grant) int { return strings.Compare(a.ID, b.ID) })
	return st, true
}

// drop removes a live grant and frees its instances.
func (c *core) drop(l *lease) {
	heap.Remove(&c.byExpiry, l.index)
	delete(c.leases, l.grant.ID)
	j := l.job
	delete(j.leases, l.grant.ID)
	for _, i := range l.grant.Instances {
		h := j.held[i]
		if h.n--; h.n > 0 {
			j.held[i] = h
			continue
		}
		delete(j.held, i)
		if i < j.sla.InstanceCount && !j.isDown(i) {
			j.unavailable--
		}
	}
}

func (j *jobState) isDown(i uint32) bool {
	_, ok := j.down[i]
	return ok
}

// recount recomputes unavailable from scratch, after the down set or the
// instance count changed.
func (j *jobState) recount() {
	n := len(j.down)
	for i := range j.held {
		if i < j.sla.InstanceCount && !j.isDown(i) {
			n++
		}
	}
	j.unavailable = n
}

// cost is 1 if granting instance i makes one more instance unavailable, 0 if
// it is down or already held (by the requesting holder; fit checks that).
func (j *jobState) cost(i uint32) int {
	if _, ok := j.held[i]; ok || j.isDown(i) {
		return 0
	}
	return 1
}

// fit returns the instances of req to grant, deduplicated and in request
// order, or a *RefusedError. All-or-nothing: every instance, if
// |unavailable ∪ S| ≤ budget and no instance is held by another holder.
// Partial: the longest prefix of S for which the same holds; since adding an
// instance never lowers the count, that is the prefix before the first
// instance that does not fit.
func (j *jobState) fit(req Request) ([]uint32, error) {
	take := dedupe(req.Instances)
	budget := int(j.sla.MaximumUnavailableInstances)
	if !req.Partial {
		added, conflict := 0, -1
		for n, i := range take {
			if h, ok := j.held[i]; ok && h.holder != req.Holder && conflict < 0 {
				conflict = n
			}
			added += j.cost(i)
		}
		if conflict >= 0 {
			return nil, j.conflict(take[conflict], added)
		}
		if j.unavailable+added > budget {
			return nil, j.overBudget(added)
		}
		return take, nil
	}
	added := 0
	for n, i := range take {
		h, held := j.held[i]
		conflict := held && h.holder != req.Holder
		cost := j.cost(i)
		if !conflict && j.unavailable+added+cost <= budget {
			added += cost
			continue
		}
		if n > 0 {
			return take[:n], nil
		}
		if conflict {
			return nil, j.conflict(i, cost)
		}
		return nil, j.overBudget(cost)
	}
	return take, nil
}

// dedupe returns the distinct elements of in, first occurrences in order, in
// a new slice (the grant must not alias the caller's request).
func dedupe(in []uint32) []uint32 {
	out := make([]uint32, 0, len(in))
	if len(in) <= 16 {
		for _, i := range in {
			if !slices.Contains(out, i) {
				out = append(out, i)
			}
		}
		return out
	}
	seen := make(map[uint32]struct{}, len(in))
	for _, i := range in {
		if _, ok := seen[i]; !ok {
			seen[i] = struct{}{}
			out = append(out, i)
		}
	}
	return out
}

func (j *jobState) refused(added int, reason string) *RefusedError {
	return &RefusedError{
		JobID: j.sla.JobID, Requested: added, Unavailable: j.unavailable + added,
		Budget: int(j.sla.MaximumUnavailableInstances), Reason: reason,
	}
}

func (j *jobState) conflict(i uint32, added int) *RefusedError {
	return j.refused(added, fmt.Sprintf(
		"instance %d is already granted to %s; two disruptions of one instance must not overlap",
		i, j.held[i].holder))
}

func (j *jobState) overBudget(added int) *RefusedError {
	budget := j.sla.MaximumUnavailableInstances
	var reason string
	switch {
	case budget == 0:
		reason = "maximumUnavailableInstances is 0: no voluntary disruption is allowed"
	case added == 0:
		reason = fmt.Sprintf("already has %d unavailable, over its budget of %d (%s); nothing more is granted until it is back within budget",
			j.unavailable, budget, j.breakdown())
	default:
		reason = fmt.Sprintf("taking down %d more %s would make %d unavailable, over its budget of %d (%s)",
			added, plural(added, "instance", "instances"), j.unavailable+added, budget, j.breakdown())
	}
	return j.refused(added, reason)
}

// breakdown says what makes the job's instances unavailable now, e.g.
// "2 down, 1 granted to update/abc". An instance both down and granted
// counts as down, so the numbers add up to the unavailable count.
func (j *jobState) breakdown() string {
	if j.unavailable == 0 {
		return "none unavailable now"
	}
	byHolder := map[string]int{}
	for i, h := range j.held {
		if i < j.sla.InstanceCount && !j.isDown(i) {
			byHolder[h.holder]++
		}
	}
	var parts []string
	if len(j.down) > 0 {
		parts = append(parts, fmt.Sprintf("%d down", len(j.down)))
	}
	holders := make([]string, 0, len(byHolder))
	for h := range byHolder {
		holders = append(holders, h)
	}
	slices.Sort(holders)
	for _, h := range holders {
		parts = append(parts, fmt.Sprintf("%d granted to %s", byHolder[h], h))
	}
	return strings.Join(parts, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func cloneGrant(g Grant) Grant {
	g.Instances = slices.Clone(g.Instances)
	return g
}

// leaseHeap orders live grants by expiry, soonest first.
type leaseHeap []*lease

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(a, b int) bool { return h[a].grant.Expires.Before(h[b].grant.Expires) }
func (h leaseHeap) Swap(a, b int) {
	h[a], h[b] = h[b], h[a]
	h[a].index = a
	h[b].index = b
}
func (h *leaseHeap) Push(x any) {
	l := x.(*lease)
	l.index = len(*h)
	*h = append(*h, l)
}
func (h *leaseHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return l
}
