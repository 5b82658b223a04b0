package mesos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	mesosv1 "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"

	"github.com/peloton-sched/peloton/hostmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// frameworkInfo is what SUBSCRIBE says of the framework.
func (b *Backend) frameworkInfo(id string) *mesosv1.FrameworkInfo {
	timeout := b.cfg.FailoverTimeout.Seconds()
	checkpoint := true
	fi := &mesosv1.FrameworkInfo{User: b.cfg.User, Name: b.cfg.FrameworkName, FailoverTimeout: &timeout,
		Checkpoint: &checkpoint, Role: &b.cfg.Role,
		Capabilities: []mesosv1.FrameworkInfo_Capability{
			{Type: mesosv1.FrameworkInfo_Capability_TASK_KILLING_STATE},
			{Type: mesosv1.FrameworkInfo_Capability_GPU_RESOURCES},
		}}
	if b.cfg.Principal != "" {
		fi.Principal = &b.cfg.Principal
	}
	if h, err := os.Hostname(); err == nil {
		fi.Hostname = &h
	}
	if id != "" {
		fi.ID = &mesosv1.FrameworkID{Value: id}
	}
	return fi
}

// subscribeLoop subscribes, reads the event stream until it ends, and
// subscribes again with backoff, as the same framework: a master failover
// or a dropped stream keeps every task.
func (b *Backend) subscribeLoop() {
	defer b.wg.Done()
	backoff := b.cfg.MinBackoff
	for b.ctx.Err() == nil {
		b.mu.Lock()
		id := b.frameworkID
		b.mu.Unlock()
		call := calls.Subscribe(b.frameworkInfo(id))
		if id != "" {
			call.FrameworkID = &mesosv1.FrameworkID{Value: id}
		}
		began := time.Now()
		resp, err := b.caller.Load().Call(b.ctx, call)
		if stuckSubscribed(err) {
			b.log.Debug("mesos: the client still believed it was subscribed; starting afresh", "err", err)
			b.newCaller()
			resp, err = b.caller.Load().Call(b.ctx, call)
		}
		if err == nil {
			err = b.readStream(resp)
			resp.Close()
		}
		subscribed := b.disconnected()
		if b.ctx.Err() != nil {
			return
		}
		if f := b.fatalErr(); f != nil {
			b.observe(f)
			b.log.Error("mesos: the master ended the framework; not subscribing again", "err", hostmgr.ShortReason(f.Error()))
			return
		}
		if time.Since(began) > 10*b.cfg.MaxBackoff {
			backoff = b.cfg.MinBackoff
		}
		if subscribed {
			// Once a stream: the next attempt says whether the master
			// is gone.
			b.log.Warn("mesos: subscription ended; subscribing again", "master", b.cfg.Master, "err", hostmgr.ShortReason(fmt.Sprint(err)), "in", backoff)
		} else {
			b.observe(notAMaster(err))
		}
		select {
		case <-time.After(backoff):
		case <-b.ctx.Done():
			return
		}
		backoff = min(2*backoff, b.cfg.MaxBackoff)
	}
}

// disconnected forgets what a subscription held: offers are void once the
// stream is gone. It reports whether the stream had been SUBSCRIBED.
func (b *Backend) disconnected() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	was := b.connected
	b.connected = false
	b.stream = nil
	b.streamNo++
	for _, a := range b.agents {
		a.offers = map[string]*heldOffer{}
		a.inverse = map[string]bool{}
	}
	return was
}

// readStream decodes events until the stream ends or goes quiet for
// HeartbeatMisses heartbeat intervals.
func (b *Backend) readStream(resp mesosv1.Response) error {
	b.mu.Lock()
	b.stream = resp
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return errors.New("closed")
	}
	events := make(chan struct{}, 1)
	done := make(chan struct{})
	defer close(done)
	go func() { // the heartbeat watchdog
		wait := 30 * time.Second
		timer := time.NewTimer(wait)
		defer timer.Stop()
		for {
			select {
			case <-events:
				b.mu.Lock()
				if b.heartbeat > 0 {
					wait = time.Duration(b.cfg.HeartbeatMisses) * b.heartbeat
				}
				b.mu.Unlock()
				timer.Reset(wait)
			case <-timer.C:
				b.log.Warn("mesos: no event or heartbeat from the master; dropping the stream", "for", wait)
				resp.Close()
				return
			case <-b.ctx.Done():
				resp.Close()
				return
			case <-done:
				return
			}
		}
	}()
	for {
		var ev scheduler.Event
		if err := resp.Decode(&ev); err != nil {
			return err
		}
		signal(events)
		if err := b.handle(&ev); err != nil {
			return err
		}
	}
}

// handle applies one event. An error ends the stream.
func (b *Backend) handle(ev *scheduler.Event) error {
	switch ev.GetType() {
	case scheduler.Event_SUBSCRIBED:
		return b.subscribed(ev.GetSubscribed())
	case scheduler.Event_OFFERS:
		b.offers(ev.GetOffers().GetOffers())
	case scheduler.Event_INVERSE_OFFERS:
		b.inverseOffers(ev.GetInverseOffers().GetInverseOffers())
	case scheduler.Event_RESCIND:
		b.rescind(ev.GetRescind().OfferID.Value)
	case scheduler.Event_RESCIND_INVERSE_OFFER:
		b.rescindInverse(ev.GetRescindInverseOffer().InverseOfferID.Value)
	case scheduler.Event_UPDATE:
		st := ev.GetUpdate().GetStatus()
		b.update(&st)
	case scheduler.Event_FAILURE:
		f := ev.GetFailure()
		if f.AgentID != nil && f.ExecutorID == nil {
			b.agentLost(f.AgentID.GetValue())
		}
	case scheduler.Event_ERROR:
		msg := ev.GetError().GetMessage()
		b.mu.Lock()
		b.fatal = fmt.Errorf("mesos: the master sent ERROR: %s (the framework was removed or refused; check the master's log, --mesos-role and --mesos-principal)", msg)
		q := b.queue
		b.queue = nil
		b.mu.Unlock()
		b.log.Error("mesos: ERROR event from the master; the backend stops", "message", msg)
		for _, req := range q {
			req.done <- b.fatalErr()
		}
		return b.fatalErr()
	case scheduler.Event_HEARTBEAT, scheduler.Event_MESSAGE:
	}
	return nil
}

func (b *Backend) subscribed(s *scheduler.Event_Subscribed) error {
	id := s.GetFrameworkID().GetValue()
	if id == "" {
		return errors.New("mesos: SUBSCRIBED without a framework ID")
	}
	ctx, cancel := context.WithTimeout(b.ctx, b.cfg.StartTimeout)
	defer cancel()
	if err := b.saveFrameworkID(ctx, id); err != nil {
		return err
	}
	b.mu.Lock()
	b.connected = true
	if hb := s.GetHeartbeatIntervalSeconds(); hb > 0 {
		b.heartbeat = time.Duration(hb * float64(time.Second))
	}
	b.suppressed = false
	tasks := map[string]string{}
	for _, r := range b.runs {
		if !r.ended && r.accepted {
			tasks[r.id] = r.agentID
		}
	}
	b.reconciling = map[string]bool{}
	for t := range tasks {
		b.reconciling[t] = true
	}
	b.mu.Unlock()
	b.observe(nil)
	b.log.Info("mesos: subscribed", "framework", id, "master", b.cfg.Master, "reconciling", len(tasks))
	b.wg.Add(1) // from a goroutine of b.wg, so never after Close's Wait began
	go func() { defer b.wg.Done(); b.reconcile(tasks) }()
	b.maybeReady()
	signal(b.kick)
	return nil
}

// reconcile asks the master for the state of the runs Peloton believes
// exist (explicit), then of every task it has (implicit). Runs the master
// does not know come back LOST, and jobmgr runs them again.
func (b *Backend) reconcile(tasks map[string]string) {
	const chunk = 2000
	var batch []scheduler.Call_Reconcile_Task
	send := func() {
		if len(batch) == 0 {
			return
		}
		if err := b.call(b.ctx, &scheduler.Call{Type: scheduler.Call_RECONCILE, Reconcile: &scheduler.Call_Reconcile{Tasks: batch}}); err != nil && b.ctx.Err() == nil {
			b.log.Warn("mesos: explicit reconciliation failed; it runs again at the next subscription", "err", err)
		}
		batch = nil
	}
	for t, a := range tasks {
		rt := scheduler.Call_Reconcile_Task{TaskID: mesosv1.TaskID{Value: t}}
		if a != "" {
			rt.AgentID = &mesosv1.AgentID{Value: a}
		}
		batch = append(batch, rt)
		if len(batch) == chunk {
			send()
		}
	}
	send()
	if err := b.call(b.ctx, calls.Reconcile()); err != nil && b.ctx.Err() == nil {
		b.log.Warn("mesos: implicit reconciliation failed", "err", err)
	}
}

// maybeReady closes ready once subscribed and every explicit
// reconciliation answer came.
func (b *Backend) maybeReady() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.connected || len(b.reconciling) > 0 {
		return
	}
	select {
	case <-b.ready:
	default:
		close(b.ready)
	}
}

// update applies a status update and queues its acknowledgement.
func (b *Backend) update(st *mesosv1.TaskStatus) {
	id := st.TaskID.Value
	m := mapStatus(st)
	var persist *run
	b.mu.Lock()
	wasReconciling := b.reconciling[id]
	delete(b.reconciling, id)
	r := b.runs[id]
	if r == nil && !m.Skip && !terminal(m.State) && st.AgentID != nil {
		// A task of this framework that the store does not record (its
		// record was lost): adopt it, so that jobmgr sees it and kills it
		// if it knows no such run.
		if a := b.agents[st.AgentID.GetValue()]; a != nil {
			r = &run{id: id, host: a.host, agentID: a.id, accepted: true}
			b.runs[id] = r
			b.count(r)
		}
	}
	if r != nil && !r.ended && r.spec != nil && st.GetReason() == mesosv1.REASON_INVALID_OFFERS &&
		(!r.has || r.last.State == pelotonv1.TaskState_LAUNCHED) && st.GetState() != mesosv1.TASK_RUNNING {
		// The offers of its ACCEPT were gone (rescinded as the call went
		// out): the task never reached an agent, so it waits for others.
		r.accepted, r.ports = false, nil
		b.uncount(r)
		r.pending = &launchReq{spec: *r.spec, run: r, done: make(chan error, 1)}
		b.enqueue(r.pending)
		m.Skip = true
		signal(b.kick)
	}
	if m.State == pelotonv1.TaskState_RUNNING && r != nil {
		r.spec = nil
	}
	if r != nil && !r.ended && !m.Skip {
		ev := hostmgr.TaskEvent{State: m.State, ExitCode: m.ExitCode, Reason: m.Reason, Message: st.GetMessage()}
		if st.Timestamp != nil {
			ev.Time = time.Unix(0, int64(*st.Timestamp*1e9))
		}
		if m.State == pelotonv1.TaskState_RUNNING && st.Healthy != nil {
			ev.Health = pelotonv1.HealthState_UNHEALTHY
			if *st.Healthy {
				ev.Health = pelotonv1.HealthState_HEALTHY
			}
		}
		if r.agentID == "" && st.AgentID != nil {
			r.agentID = st.AgentID.GetValue()
		}
		running := m.State == pelotonv1.TaskState_RUNNING && r.last.State == pelotonv1.TaskState_RUNNING
		if running && ev.Health == pelotonv1.HealthState_HEALTH_UNKNOWN {
			ev.Health = r.last.Health
		}
		if !r.has || rank(m.State) > rank(r.last.State) || (running && ev.Health != r.last.Health) {
			b.report(r, ev)
			if r.ended {
				persist = r
			}
		}
	}
	// A redelivered update whose acknowledgement is already on its way
	// is not acknowledged twice.
	ackDue := st.UUID != nil && !b.acking[string(st.UUID)]
	if ackDue {
		b.acking[string(st.UUID)] = true
	}
	b.mu.Unlock()
	if wasReconciling {
		b.maybeReady()
	}
	if persist != nil || ackDue {
		if !ackDue {
			st.UUID = nil
		}
		a := ack{agentID: st.GetAgentID().GetValue(), taskID: id, uuid: st.UUID, persist: persist}
		select {
		case b.acks <- a:
		case <-b.ctx.Done():
		}
	}
	if persist != nil {
		signal(b.kick) // its resources may let a waiting launch fit
	}
}

// agentLost: a FAILURE event for an agent. Its runs are LOST, and it is no
// longer a host.
func (b *Backend) agentLost(agentID string) {
	var ended []*run
	b.mu.Lock()
	a := b.agents[agentID]
	for _, r := range b.runs {
		if r.agentID == agentID && !r.ended && r.accepted {
			b.report(r, hostmgr.TaskEvent{State: pelotonv1.TaskState_LOST, Reason: ReasonAgentLost,
				Message: "mesos: agent " + agentID + " was lost"})
			ended = append(ended, r)
		}
	}
	if a != nil {
		delete(b.agents, agentID)
		if b.byHost[a.host] == a {
			delete(b.byHost, a.host)
		}
		signal(b.hostK)
	}
	b.mu.Unlock()
	b.log.Warn("mesos: agent lost", "agent", agentID, "runs", len(ended))
	for _, r := range ended {
		select {
		case b.acks <- ack{taskID: r.id, persist: r}:
		case <-b.ctx.Done():
			return
		}
	}
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
