// Package mesostest is a Mesos master for tests: it speaks the v1
// scheduler HTTP API (POST /api/v1/scheduler) on the wire as Mesos does,
// with mesos-go's own generated types, in protobuf and in JSON. It is not
// Mesos: its agents run no programs, and it serves one framework.
//
// What it does, as a real master would:
//   - SUBSCRIBE is answered with a RecordIO stream (Content-Type
//     application/recordio, Message-Content-Type the codec asked for in
//     Message-Accept) and a new Mesos-Stream-Id; SUBSCRIBED first, with
//     the heartbeat interval, then OFFERS, UPDATE, RESCIND, INVERSE_OFFERS,
//     FAILURE, HEARTBEAT and ERROR events.
//   - Every other call must carry the current Mesos-Stream-Id (else 400)
//     from a subscribed framework (else 403) and is answered 202 Accepted.
//   - Agents have declared resources (cpus, mem, disk, gpus, ports); what
//     is free on an agent is offered, resources that come free later in
//     an offer of their own (so an agent may have several outstanding),
//     unless the framework suppressed offers or a refuse filter holds.
//   - ACCEPT applies its operations in order: RESERVE and UNRESERVE of
//     disk for the framework's role, CREATE and DESTROY of persistent
//     volumes on reserved disk, and LAUNCH (an operation that does not
//     fit is dropped, as Mesos drops it).
//   - LAUNCH checks the offers (all valid, one agent) and that
//     each task's resources are contained in them. LAUNCH_GROUP checks
//     its executor as Mesos does (given, type DEFAULT, a framework-unique
//     ID, no command, resources of its own) and that every task is on the
//     offers' agent, has no executor of its own, and fits with the
//     executor in the offers; one bad task fails the whole group
//     (TASK_ERROR), and the executor's resources stay taken until its
//     last task ends. A task then "runs" its
//     command for the declared duration (see behave) and ends as a command
//     executor would (TASK_FINISHED, or TASK_FAILED "Command exited with
//     status N"). A task with a command health check gets a TASK_RUNNING
//     update with healthy set ("true" passes).
//   - Status updates carry a uuid and are sent, per task, one at a time
//     until acknowledged, and sent again every Redeliver and after every
//     new subscription until then.
//   - KILL ends a task TASK_KILLED (and records the kill policy's grace);
//     RECONCILE answers with the latest state of the tasks named, or of
//     all tasks (implicit); unknown tasks are TASK_LOST.
//   - A framework whose stream ends keeps its tasks; it subscribes again
//     with its framework ID and gets them back, within its failover
//     timeout.
//
// Tests drive the failures: DropStream (master failover: the stream ends,
// a new subscription gets a new stream ID), LoseAgent, Rescind,
// SendError, StallHeartbeats, ScheduleMaintenance, EndMaintenance.
package mesostest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	mesosv1 "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/recordio"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
)

const (
	typeProtobuf = "application/x-protobuf"
	typeJSON     = "application/json"
	typeRecordIO = "application/recordio"
)

// AgentSpec declares one agent.
type AgentSpec struct {
	// ID and Hostname default to agent-<i> and host-<i> (from 0).
	ID, Hostname string
	// CPUs, MemMB and DiskMB default to 8, 16384 and 65536.
	CPUs, MemMB, DiskMB, GPUs float64
	// Ports default to 31000-32000.
	Ports      []mesosv1.Value_Range
	Attributes map[string]string
}

// Config configures a Master.
type Config struct {
	Agents []AgentSpec
	// Heartbeat is the interval SUBSCRIBED advertises and HEARTBEAT events
	// keep (default 1s).
	Heartbeat time.Duration
	// Redeliver is how often an unacknowledged status update is sent
	// again (default 1s).
	Redeliver time.Duration
	// Listen is the address to serve on (default 127.0.0.1:0).
	Listen string
}

// Master is a running test master.
type Master struct {
	cfg Config
	ln  net.Listener
	srv *http.Server

	mu       sync.Mutex
	fw       *framework
	agents   map[string]*agent
	order    []string
	tasks    map[string]*task
	unacked  map[string]*task // tasks with updates to (re)send
	offers   map[string]*offer
	seq      int64
	stall    bool
	closed   bool
	counts   map[scheduler.Call_Type]int
	kills    []Kill
	accInv   []string
	execs    map[string]*executor // live default executors, by ID
	inverse  map[string]string    // outstanding inverse offers: ID → agent
	launched int
	groups   []Group
	subs     int
	sent     map[string]int // sends per update uuid
	kick     chan struct{}
	stopped  chan struct{}
	wg       sync.WaitGroup
}

// Kill is a KILL call the master received.
type Kill struct {
	TaskID string
	Grace  time.Duration
}

type framework struct {
	id         string
	info       mesosv1.FrameworkInfo
	st         *stream
	suppressed bool
	removed    bool
	filters    map[string]time.Time // agent → no offers until
}

type stream struct {
	id     string
	json   bool
	mu     sync.Mutex
	queue  [][]byte
	wake   chan struct{}
	done   chan struct{}
	closed bool
}

type agent struct {
	spec        AgentSpec
	free        res
	gone        bool
	maintenance *mesosv1.Unavailability
}

// res is an amount of an agent's resources.
type res struct {
	cpus, mem, disk, gpus float64
	ports                 []mesosv1.Value_Range
	// rdisk is disk reserved for a role (RESERVE), by role; vols are
	// persistent volumes made of reserved disk (CREATE), by ID.
	rdisk map[string]float64
	vols  map[string]vol
}

// vol is a persistent volume.
type vol struct {
	size                  float64
	role, principal, path string
}

type offer struct {
	id, agent string
	r         res
}

type task struct {
	info    mesosv1.TaskInfo
	agent   string
	r       res
	state   mesosv1.TaskState
	healthy *bool
	exec    *executor            // the default executor of its task group; nil for LAUNCH
	pending []mesosv1.TaskStatus // unacknowledged updates, oldest first
	lastTx  time.Time
	timer   *time.Timer
}

// New starts a master serving cfg's agents on loopback.
func New(cfg Config) (*Master, error) {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = time.Second
	}
	if cfg.Redeliver <= 0 {
		cfg.Redeliver = time.Second
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	m := &Master{cfg: cfg, agents: map[string]*agent{}, tasks: map[string]*task{}, unacked: map[string]*task{}, offers: map[string]*offer{},
		execs: map[string]*executor{}, inverse: map[string]string{}, counts: map[scheduler.Call_Type]int{}, sent: map[string]int{}, kick: make(chan struct{}, 1), stopped: make(chan struct{})}
	for i, a := range cfg.Agents {
		if a.ID == "" {
			a.ID = fmt.Sprintf("agent-%d", i)
		}
		if a.Hostname == "" {
			a.Hostname = fmt.Sprintf("host-%d", i)
		}
		if a.CPUs == 0 {
			a.CPUs = 8
		}
		if a.MemMB == 0 {
			a.MemMB = 16384
		}
		if a.DiskMB == 0 {
			a.DiskMB = 65536
		}
		if a.Ports == nil {
			a.Ports = []mesosv1.Value_Range{{Begin: 31000, End: 32000}}
		}
		if m.agents[a.ID] != nil {
			return nil, fmt.Errorf("mesostest: agent ID %q twice", a.ID)
		}
		m.agents[a.ID] = &agent{spec: a, free: res{cpus: a.CPUs, mem: a.MemMB, disk: a.DiskMB, gpus: a.GPUs,
			ports: append([]mesosv1.Value_Range(nil), a.Ports...)}}
		m.order = append(m.order, a.ID)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, err
	}
	m.ln = ln
	mux := http.NewServeMux()
	mux.HandleFunc("/api/v1/scheduler", m.serve)
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	m.wg.Add(2)
	go func() { defer m.wg.Done(); _ = m.srv.Serve(ln) }()
	go m.loop()
	return m, nil
}

// URL is the master's base URL, for --mesos-master.
func (m *Master) URL() string { return "http://" + m.ln.Addr().String() }

// Close stops the master.
func (m *Master) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	if m.fw != nil && m.fw.st != nil {
		m.fw.st.close()
	}
	for _, t := range m.tasks {
		if t.timer != nil {
			t.timer.Stop()
		}
	}
	m.mu.Unlock()
	close(m.stopped)
	_ = m.srv.Close()
	m.wg.Wait()
}

func (m *Master) signal() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// loop offers free resources, sends heartbeats and redelivers
// unacknowledged updates.
func (m *Master) loop() {
	defer m.wg.Done()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	lastBeat := time.Now()
	for {
		select {
		case <-m.kick:
		case <-tick.C:
		case <-m.stopped:
			return
		}
		now := time.Now()
		m.mu.Lock()
		if fw := m.fw; fw != nil && fw.st != nil && !m.stall {
			m.allocate(now)
			for _, t := range m.unacked {
				if now.Sub(t.lastTx) >= m.cfg.Redeliver {
					m.transmit(t, now)
				}
			}
			if now.Sub(lastBeat) >= m.cfg.Heartbeat {
				m.send(&scheduler.Event{Type: scheduler.Event_HEARTBEAT})
				lastBeat = now
			}
		}
		m.mu.Unlock()
	}
}

// allocate offers every agent's free resources that no offer or filter
// holds. m.mu is held.
func (m *Master) allocate(now time.Time) {
	fw := m.fw
	if fw.suppressed || fw.removed {
		return
	}
	var offers []mesosv1.Offer
	for _, id := range m.order {
		a := m.agents[id]
		if a.gone || now.Before(fw.filters[id]) || a.free.empty() {
			continue
		}
		m.seq++
		o := &offer{id: fmt.Sprintf("%s-O%d", fw.id, m.seq), agent: id, r: a.free}
		a.free = res{}
		m.offers[o.id] = o
		offers = append(offers, mesosv1.Offer{ID: mesosv1.OfferID{Value: o.id}, FrameworkID: mesosv1.FrameworkID{Value: fw.id},
			AgentID: mesosv1.AgentID{Value: id}, Hostname: a.spec.Hostname, Resources: o.r.resources(),
			Attributes: a.attributes(), Unavailability: a.maintenance})
	}
	if len(offers) > 0 {
		m.send(&scheduler.Event{Type: scheduler.Event_OFFERS, Offers: &scheduler.Event_Offers{Offers: offers}})
	}
}

func (a *agent) attributes() []mesosv1.Attribute {
	names := make([]string, 0, len(a.spec.Attributes))
	for n := range a.spec.Attributes {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]mesosv1.Attribute, 0, len(names))
	for _, n := range names {
		out = append(out, mesosv1.Attribute{Name: n, Type: mesosv1.TEXT, Text: &mesosv1.Value_Text{Value: a.spec.Attributes[n]}})
	}
	return out
}

func scalar(name string, v float64) mesosv1.Resource {
	role := "*"
	return mesosv1.Resource{Name: name, Type: mesosv1.SCALAR.Enum(), Scalar: &mesosv1.Value_Scalar{Value: v}, Role: &role}
}

func (r res) resources() []mesosv1.Resource {
	var out []mesosv1.Resource
	for _, s := range []struct {
		n string
		v float64
	}{{"cpus", r.cpus}, {"mem", r.mem}, {"disk", r.disk}, {"gpus", r.gpus}} {
		if s.v > 0 {
			out = append(out, scalar(s.n, s.v))
		}
	}
	if len(r.ports) > 0 {
		role := "*"
		out = append(out, mesosv1.Resource{Name: "ports", Type: mesosv1.RANGES.Enum(),
			Ranges: &mesosv1.Value_Ranges{Range: append([]mesosv1.Value_Range(nil), r.ports...)}, Role: &role})
	}
	for _, role := range sortedKeys(r.rdisk) {
		if r.rdisk[role] > 0 {
			out = append(out, reserved(scalar("disk", r.rdisk[role]), role, ""))
		}
	}
	for _, id := range sortedKeys(r.vols) {
		v := r.vols[id]
		d := reserved(scalar("disk", v.size), v.role, v.principal)
		mode := mesosv1.RW
		d.Disk = &mesosv1.Resource_DiskInfo{Persistence: &mesosv1.Resource_DiskInfo_Persistence{ID: id, Principal: str(v.principal)},
			Volume: &mesosv1.Volume{Mode: &mode, ContainerPath: v.path}}
		out = append(out, d)
	}
	return out
}

// reserved is r reserved for role (the pre-refinement form: role and
// reservation on the resource).
func reserved(r mesosv1.Resource, role, principal string) mesosv1.Resource {
	r.Role = &role
	r.Reservation = &mesosv1.Resource_ReservationInfo{}
	if principal != "" {
		r.Reservation.Principal = &principal
	}
	return r
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// empty: nothing worth offering.
func (r res) empty() bool {
	return r.cpus < 0.001 && r.mem < 1 && r.disk < 1 && r.gpus < 0.001 && len(r.vols) == 0 && len(r.rdisk) == 0
}

func round3(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }

func (r res) add(o res) res {
	out := res{cpus: round3(r.cpus + o.cpus), mem: round3(r.mem + o.mem), disk: round3(r.disk + o.disk), gpus: round3(r.gpus + o.gpus),
		ports: mergeRanges(append(append([]mesosv1.Value_Range(nil), r.ports...), o.ports...))}
	for _, m := range []map[string]float64{r.rdisk, o.rdisk} {
		for role, v := range m {
			if out.rdisk == nil {
				out.rdisk = map[string]float64{}
			}
			out.rdisk[role] = round3(out.rdisk[role] + v)
		}
	}
	for _, m := range []map[string]vol{r.vols, o.vols} {
		for id, v := range m {
			if out.vols == nil {
				out.vols = map[string]vol{}
			}
			out.vols[id] = v
		}
	}
	return out
}

// take subtracts o from r, or reports that r does not contain it.
func (r res) take(o res) (res, bool) {
	out := res{cpus: round3(r.cpus - o.cpus), mem: round3(r.mem - o.mem), disk: round3(r.disk - o.disk), gpus: round3(r.gpus - o.gpus)}
	if out.cpus < 0 || out.mem < 0 || out.disk < 0 || out.gpus < 0 {
		return r, false
	}
	ports := append([]mesosv1.Value_Range(nil), r.ports...)
	for _, want := range o.ports {
		for p := want.Begin; p <= want.End; p++ {
			found := false
			for i, rg := range ports {
				if p < rg.Begin || p > rg.End {
					continue
				}
				found = true
				var rest []mesosv1.Value_Range
				if p > rg.Begin {
					rest = append(rest, mesosv1.Value_Range{Begin: rg.Begin, End: p - 1})
				}
				if p < rg.End {
					rest = append(rest, mesosv1.Value_Range{Begin: p + 1, End: rg.End})
				}
				ports = append(append(append([]mesosv1.Value_Range(nil), ports[:i]...), rest...), ports[i+1:]...)
				break
			}
			if !found {
				return r, false
			}
		}
	}
	out.ports = ports
	for role, v := range r.rdisk {
		if out.rdisk == nil {
			out.rdisk = map[string]float64{}
		}
		out.rdisk[role] = v
	}
	for role, v := range o.rdisk {
		if out.rdisk[role] = round3(out.rdisk[role] - v); out.rdisk[role] < 0 {
			return r, false
		}
	}
	for id, v := range r.vols {
		if out.vols == nil {
			out.vols = map[string]vol{}
		}
		out.vols[id] = v
	}
	for id := range o.vols {
		if _, ok := out.vols[id]; !ok {
			return r, false
		}
		delete(out.vols, id)
	}
	return out, true
}

func mergeRanges(rs []mesosv1.Value_Range) []mesosv1.Value_Range {
	sort.Slice(rs, func(i, j int) bool { return rs[i].Begin < rs[j].Begin })
	var out []mesosv1.Value_Range
	for _, r := range rs {
		if n := len(out); n > 0 && r.Begin <= out[n-1].End+1 {
			if r.End > out[n-1].End {
				out[n-1].End = r.End
			}
			continue
		}
		out = append(out, r)
	}
	return out
}

// resOf sums a task's resources.
func resOf(rs []mesosv1.Resource) res {
	var out res
	for _, r := range rs {
		role := r.GetRole()
		isReserved := r.Reservation != nil || len(r.Reservations) > 0 || (role != "" && role != "*")
		switch {
		case r.Name == "ports" && r.Ranges != nil:
			out.ports = append(out.ports, r.Ranges.Range...)
		case r.Scalar == nil:
		case r.Name == "disk" && r.Disk != nil && r.Disk.Persistence != nil:
			if out.vols == nil {
				out.vols = map[string]vol{}
			}
			v := vol{size: r.Scalar.Value, role: role, principal: r.Disk.Persistence.GetPrincipal()}
			if r.Disk.Volume != nil {
				v.path = r.Disk.Volume.ContainerPath
			}
			out.vols[r.Disk.Persistence.ID] = v
		case r.Name == "disk" && isReserved:
			if out.rdisk == nil {
				out.rdisk = map[string]float64{}
			}
			out.rdisk[role] += r.Scalar.Value
		default:
			switch r.Name {
			case "cpus":
				out.cpus += r.Scalar.Value
			case "mem":
				out.mem += r.Scalar.Value
			case "disk":
				out.disk += r.Scalar.Value
			case "gpus":
				out.gpus += r.Scalar.Value
			}
		}
	}
	return out
}

// serve is /api/v1/scheduler.
func (m *Master) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		http.Error(w, "Expecting 'POST'", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var call scheduler.Call
	switch ct := req.Header.Get("Content-Type"); ct {
	case typeProtobuf:
		err = call.Unmarshal(body)
	case typeJSON:
		err = json.Unmarshal(body, &call)
	default:
		http.Error(w, fmt.Sprintf("Expecting 'Content-Type' of %s or %s", typeJSON, typeProtobuf), http.StatusUnsupportedMediaType)
		return
	}
	if err != nil {
		http.Error(w, "Failed to parse body into Call: "+err.Error(), http.StatusBadRequest)
		return
	}
	m.mu.Lock()
	m.counts[call.Type]++
	m.mu.Unlock()
	if call.Type == scheduler.Call_SUBSCRIBE {
		m.subscribe(w, req, &call)
		return
	}
	m.mu.Lock()
	status, msg := m.check(req, &call)
	if status == http.StatusAccepted {
		status, msg = m.apply(&call)
	}
	m.mu.Unlock()
	if status != http.StatusAccepted {
		http.Error(w, msg, status)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// check validates a non-SUBSCRIBE call's framework and stream. m.mu is held.
func (m *Master) check(req *http.Request, call *scheduler.Call) (int, string) {
	fw := m.fw
	if fw == nil || fw.removed || call.FrameworkID == nil || call.FrameworkID.Value != fw.id {
		return http.StatusForbidden, "Framework is not subscribed"
	}
	if fw.st == nil {
		return http.StatusForbidden, "Framework is not subscribed"
	}
	if got := req.Header.Get("Mesos-Stream-Id"); got != fw.st.id {
		return http.StatusBadRequest, fmt.Sprintf("The stream ID '%s' included in this request didn't match the stream ID currently associated with framework ID %s", got, fw.id)
	}
	return http.StatusAccepted, ""
}

func (m *Master) subscribe(w http.ResponseWriter, req *http.Request, call *scheduler.Call) {
	sub := call.GetSubscribe()
	if sub == nil || sub.FrameworkInfo == nil {
		http.Error(w, "Expecting 'subscribe' to be present", http.StatusBadRequest)
		return
	}
	// Mesos takes the message type from Message-Accept when Accept asks
	// for RecordIO, else from Accept itself (older clients, and mesos-go's
	// ResponseClassAuto); the body is RecordIO-framed either way.
	accept, recordIO := req.Header.Get("Accept"), false
	if accept == typeRecordIO {
		accept, recordIO = req.Header.Get("Message-Accept"), true
	}
	var asJSON bool
	switch accept {
	case typeProtobuf:
	case typeJSON:
		asJSON = true
	default:
		http.Error(w, "Expecting 'Accept' (or, with Accept "+typeRecordIO+", 'Message-Accept') of "+typeJSON+" or "+typeProtobuf, http.StatusNotAcceptable)
		return
	}
	info := *sub.FrameworkInfo
	id := ""
	if call.FrameworkID != nil {
		id = call.FrameworkID.Value
	}
	if info.ID != nil && info.ID.Value != id {
		http.Error(w, "'framework_id' differs from 'subscribe.framework_info.id'", http.StatusBadRequest)
		return
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		http.Error(w, "master stopped", http.StatusServiceUnavailable)
		return
	}
	fw := m.fw
	switch {
	case fw == nil:
		if id == "" {
			m.seq++
			id = fmt.Sprintf("fw-%d-%04d", time.Now().UnixNano()%1e9, m.seq)
		}
		fw = &framework{id: id, filters: map[string]time.Time{}}
		m.fw = fw
	case id == "" || id != fw.id:
		m.mu.Unlock()
		http.Error(w, "this test master serves one framework, "+fw.id, http.StatusConflict)
		return
	}
	fw.info = info
	fw.suppressed = len(sub.SuppressedRoles) > 0
	if fw.st != nil {
		fw.st.close() // failover: the old scheduler's stream ends
	}
	m.subs++
	m.seq++
	st := &stream{id: fmt.Sprintf("stream-%d-%d", m.subs, m.seq), json: asJSON, wake: make(chan struct{}, 1), done: make(chan struct{})}
	fw.st = st
	if fw.removed {
		m.sendTo(st, &scheduler.Event{Type: scheduler.Event_ERROR, Error: &scheduler.Event_Error{Message: "Framework has been removed"}})
		st.closed = true
	} else {
		hb := m.cfg.Heartbeat.Seconds()
		m.sendTo(st, &scheduler.Event{Type: scheduler.Event_SUBSCRIBED, Subscribed: &scheduler.Event_Subscribed{
			FrameworkID: &mesosv1.FrameworkID{Value: fw.id}, HeartbeatIntervalSeconds: &hb}})
		// Offers made on the old stream are void.
		for oid, o := range m.offers {
			m.unoffer(oid, o)
		}
		now := time.Now()
		for _, t := range m.sortedTasks() {
			if len(t.pending) > 0 {
				m.transmit(t, now)
			}
		}
	}
	m.mu.Unlock()
	m.signal()

	if recordIO {
		w.Header().Set("Content-Type", typeRecordIO)
		w.Header().Set("Message-Content-Type", accept)
	} else {
		w.Header().Set("Content-Type", accept)
	}
	w.Header().Set("Mesos-Stream-Id", st.id)
	w.WriteHeader(http.StatusOK)
	m.serveStream(w, req, st)
}

// serveStream writes a subscriber's events as RecordIO frames, flushing
// after each lot, until its stream is closed, it goes away or the master
// stops.
func (m *Master) serveStream(w http.ResponseWriter, req *http.Request, st *stream) {
	fl, _ := w.(http.Flusher)
	if fl != nil {
		fl.Flush()
	}
	rw := recordio.NewWriter(w)
	for {
		st.mu.Lock()
		q := st.queue
		st.queue = nil
		closed := st.closed
		st.mu.Unlock()
		for _, frame := range q {
			if err := rw.WriteFrame(frame); err != nil {
				m.streamGone(st)
				return
			}
		}
		if fl != nil && len(q) > 0 {
			fl.Flush()
		}
		if closed {
			return
		}
		select {
		case <-st.wake:
		case <-st.done:
		case <-req.Context().Done():
			m.streamGone(st)
			return
		case <-m.stopped:
			return
		}
	}
}

// streamGone: the scheduler went away (its connection closed). Its tasks
// stay; it may subscribe again.
func (m *Master) streamGone(st *stream) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st.close()
	if m.fw != nil && m.fw.st == st {
		m.fw.st = nil
		for oid, o := range m.offers {
			m.unoffer(oid, o)
		}
	}
}

func (s *stream) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
}

// send queues an event on the framework's stream, if it has one. m.mu is held.
func (m *Master) send(ev *scheduler.Event) {
	if m.fw != nil && m.fw.st != nil {
		m.sendTo(m.fw.st, ev)
	}
}

func (m *Master) sendTo(st *stream, ev *scheduler.Event) {
	var b []byte
	var err error
	if st.json {
		b, err = json.Marshal(ev)
	} else {
		b, err = ev.Marshal()
	}
	if err != nil {
		panic(fmt.Sprintf("mesostest: encoding %s: %v", ev.Type, err))
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return
	}
	st.queue = append(st.queue, b)
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// unoffer returns an offer's resources to its agent. m.mu is held.
func (m *Master) unoffer(id string, o *offer) {
	delete(m.offers, id)
	if a := m.agents[o.agent]; a != nil {
		if !a.gone {
			a.free = a.free.add(o.r)
		}
	}
}

// apply carries out a call from the subscribed framework. m.mu is held.
func (m *Master) apply(call *scheduler.Call) (int, string) {
	now := time.Now()
	fw := m.fw
	switch call.Type {
	case scheduler.Call_ACCEPT:
		m.accept(call.GetAccept(), now)
	case scheduler.Call_DECLINE:
		d := call.GetDecline()
		for _, oid := range d.OfferIDs {
			if o := m.offers[oid.Value]; o != nil {
				m.unoffer(oid.Value, o)
				fw.filters[o.agent] = now.Add(refuse(d.Filters))
			}
		}
	case scheduler.Call_REVIVE:
		fw.suppressed = false
		fw.filters = map[string]time.Time{}
		m.signal()
	case scheduler.Call_SUPPRESS:
		fw.suppressed = true
	case scheduler.Call_KILL:
		k := call.GetKill()
		grace := time.Duration(0)
		if k.KillPolicy != nil && k.KillPolicy.GracePeriod != nil {
			grace = time.Duration(k.KillPolicy.GracePeriod.Nanoseconds)
		}
		m.kills = append(m.kills, Kill{TaskID: k.TaskID.Value, Grace: grace})
		t := m.tasks[k.TaskID.Value]
		switch {
		case t == nil:
			m.send(update(mesosv1.TaskStatus{TaskID: k.TaskID, State: mesosv1.TASK_LOST.Enum(),
				Reason: mesosv1.REASON_RECONCILIATION.Enum(), Source: mesosv1.SOURCE_MASTER.Enum(), Message: str("Attempted to kill an unknown task")}))
		case !isTerminal(t.state):
			m.end(t, mesosv1.TASK_KILLED, "Command terminated with signal Terminated", nil, now)
		}
	case scheduler.Call_ACKNOWLEDGE:
		a := call.GetAcknowledge()
		t := m.tasks[a.TaskID.Value]
		if t == nil || len(t.pending) == 0 || !bytes.Equal(t.pending[0].UUID, a.UUID) {
			return http.StatusAccepted, "" // a late duplicate: ignored, as Mesos does
		}
		t.pending = t.pending[1:]
		if len(t.pending) > 0 {
			m.transmit(t, now)
		} else {
			delete(m.unacked, t.info.TaskID.Value)
			if isTerminal(t.state) {
				delete(m.tasks, t.info.TaskID.Value)
			}
		}
	case scheduler.Call_RECONCILE:
		r := call.GetReconcile()
		if len(r.Tasks) == 0 {
			for _, t := range m.sortedTasks() {
				m.send(update(m.latest(t)))
			}
			break
		}
		for _, rt := range r.Tasks {
			if t := m.tasks[rt.TaskID.Value]; t != nil {
				m.send(update(m.latest(t)))
				continue
			}
			m.send(update(mesosv1.TaskStatus{TaskID: rt.TaskID, State: mesosv1.TASK_LOST.Enum(), AgentID: rt.AgentID,
				Reason: mesosv1.REASON_RECONCILIATION.Enum(), Source: mesosv1.SOURCE_MASTER.Enum(), Message: str("Reconciliation: Task is unknown"),
				Timestamp: stamp(now)}))
		}
	case scheduler.Call_ACCEPT_INVERSE_OFFERS:
		for _, id := range call.GetAcceptInverseOffers().InverseOfferIDs {
			if _, ok := m.inverse[id.Value]; ok {
				m.accInv = append(m.accInv, id.Value)
				delete(m.inverse, id.Value)
			}
		}
	case scheduler.Call_DECLINE_INVERSE_OFFERS, scheduler.Call_MESSAGE, scheduler.Call_REQUEST:
	case scheduler.Call_TEARDOWN:
		fw.removed = true
		for _, t := range m.tasks {
			if !isTerminal(t.state) {
				m.end(t, mesosv1.TASK_KILLED, "Framework teardown", mesosv1.REASON_FRAMEWORK_REMOVED, now)
			}
		}
	default:
		return http.StatusNotImplemented, fmt.Sprintf("mesostest: call %s is not served by this test master", call.Type)
	}
	return http.StatusAccepted, ""
}

func refuse(f *mesosv1.Filters) time.Duration {
	s := 5.0 // Mesos' default refuse_seconds
	if f != nil && f.RefuseSeconds != nil {
		s = *f.RefuseSeconds
	}
	return time.Duration(s * float64(time.Second))
}

func str(s string) *string { return &s }

func stamp(t time.Time) *float64 {
	f := float64(t.UnixNano()) / 1e9
	return &f
}

func update(st mesosv1.TaskStatus) *scheduler.Event {
	return &scheduler.Event{Type: scheduler.Event_UPDATE, Update: &scheduler.Event_Update{Status: st}}
}

func isTerminal(s mesosv1.TaskState) bool {
	switch s {
	case mesosv1.TASK_STAGING, mesosv1.TASK_STARTING, mesosv1.TASK_RUNNING, mesosv1.TASK_KILLING, mesosv1.TASK_UNREACHABLE:
		return false
	}
	return true
}

// latest is a task's state for reconciliation: no uuid, reason
// RECONCILIATION, from the master.
func (m *Master) latest(t *task) mesosv1.TaskStatus {
	aid := mesosv1.AgentID{Value: t.agent}
	return mesosv1.TaskStatus{TaskID: t.info.TaskID, State: t.state.Enum(), AgentID: &aid, Healthy: t.healthy,
		Reason: mesosv1.REASON_RECONCILIATION.Enum(), Source: mesosv1.SOURCE_MASTER.Enum(), Timestamp: stamp(time.Now())}
}

func (m *Master) sortedTasks() []*task {
	out := make([]*task, 0, len(m.tasks))
	for _, t := range m.tasks {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].info.TaskID.Value < out[j].info.TaskID.Value })
	return out
}

// accept applies an ACCEPT. m.mu is held.
func (m *Master) accept(acc *scheduler.Call_Accept, now time.Time) {
	var (
		pool    res
		agentID string
		invalid string
	)
	for _, oid := range acc.OfferIDs {
		o := m.offers[oid.Value]
		switch {
		case o == nil:
			invalid = "Offer " + oid.Value + " is no longer valid"
		case agentID != "" && o.agent != agentID:
			invalid = "Aggregated offers must belong to one single agent"
		}
		if o != nil {
			agentID = o.agent
		}
	}
	if len(acc.OfferIDs) == 0 {
		invalid = "No offers given"
	}
	var launches []mesosv1.TaskInfo
	for _, op := range acc.Operations {
		if op.Launch != nil {
			launches = append(launches, op.Launch.TaskInfos...)
		} else if op.LaunchGroup != nil {
			launches = append(launches, op.LaunchGroup.TaskGroup.Tasks...)
		}
	}
	if invalid != "" {
		// As Mesos: the offers that are valid go back; every task of the
		// call is lost.
		for _, oid := range acc.OfferIDs {
			if o := m.offers[oid.Value]; o != nil {
				m.unoffer(oid.Value, o)
			}
		}
		for _, ti := range launches {
			aid := ti.AgentID
			m.send(update(mesosv1.TaskStatus{TaskID: ti.TaskID, State: mesosv1.TASK_LOST.Enum(), AgentID: &aid,
				Reason: mesosv1.REASON_INVALID_OFFERS.Enum(), Source: mesosv1.SOURCE_MASTER.Enum(), Message: str(invalid), Timestamp: stamp(now)}))
		}
		return
	}
	for _, oid := range acc.OfferIDs {
		o := m.offers[oid.Value]
		pool = pool.add(o.r)
		delete(m.offers, oid.Value)
	}
	a := m.agents[agentID]
	// Operations apply in order, each to what the ones before left; one
	// that does not fit is dropped, as Mesos drops an invalid operation.
	for _, op := range acc.Operations {
		switch op.Type {
		case mesosv1.Offer_Operation_RESERVE:
			r := resOf(op.Reserve.GetResources())
			var need res
			for _, v := range r.rdisk {
				need.disk += v
			}
			if rest, ok := pool.take(need); ok && len(r.vols) == 0 {
				pool = rest.add(res{rdisk: r.rdisk})
			}
		case mesosv1.Offer_Operation_UNRESERVE:
			r := resOf(op.Unreserve.GetResources())
			if rest, ok := pool.take(res{rdisk: r.rdisk}); ok {
				for _, v := range r.rdisk {
					rest.disk = round3(rest.disk + v)
				}
				pool = rest
			}
		case mesosv1.Offer_Operation_CREATE:
			r := resOf(op.Create.GetVolumes())
			need := res{rdisk: map[string]float64{}}
			dup := false
			for id, v := range r.vols {
				need.rdisk[v.role] += v.size
				dup = dup || m.volumeExists(agentID, id, pool)
			}
			if rest, ok := pool.take(need); ok && !dup {
				pool = rest.add(res{vols: r.vols})
			}
		case mesosv1.Offer_Operation_DESTROY:
			r := resOf(op.Destroy.GetVolumes())
			if rest, ok := pool.take(res{vols: r.vols}); ok {
				back := res{rdisk: map[string]float64{}}
				for _, v := range r.vols {
					back.rdisk[v.role] += v.size
				}
				pool = rest.add(back)
			}
		case mesosv1.Offer_Operation_LAUNCH:
			if op.Launch != nil {
				for _, ti := range op.Launch.TaskInfos {
					pool = m.launch(ti, agentID, pool, nil, now)
				}
			}
		case mesosv1.Offer_Operation_LAUNCH_GROUP:
			if op.LaunchGroup != nil {
				pool = m.launchGroup(op.LaunchGroup, agentID, pool, now)
			}
		}
	}
	a.free = a.free.add(pool)
	m.fw.filters[agentID] = now.Add(refuse(acc.Filters))
	m.signal() // what is left is offered again at once, unless filtered
}

// launch checks one task of a LAUNCH against what the offers have left
// and starts it (in executor ex, for a task group); it returns what is
// left then. m.mu is held.
func (m *Master) launch(ti mesosv1.TaskInfo, agentID string, pool res, ex *executor, now time.Time) res {
	rest, why := m.checkTask(ti, agentID, pool)
	if why != "" {
		m.taskError(ti, why, mesosv1.REASON_TASK_INVALID, now)
		return pool
	}
	t := &task{info: ti, agent: agentID, r: resOf(ti.Resources), state: mesosv1.TASK_STAGING, exec: ex}
	if ex != nil {
		ex.live++
	} else {
		m.launched++
	}
	m.tasks[ti.TaskID.Value] = t
	m.start(t, now)
	return rest
}

// checkTask says why a task cannot be launched on agentID from pool ("" if
// it can), and what the pool has left after it. m.mu is held.
func (m *Master) checkTask(ti mesosv1.TaskInfo, agentID string, pool res) (res, string) {
	need := resOf(ti.Resources)
	rest, ok := pool.take(need)
	switch {
	case m.tasks[ti.TaskID.Value] != nil:
		return pool, "Task has duplicate ID: " + ti.TaskID.Value
	case ti.AgentID.Value != agentID:
		return pool, "Task uses agent " + ti.AgentID.Value + " but the offers are of " + agentID
	case !ok:
		return pool, "Task uses more resources than available in the offers"
	case need.cpus <= 0 || need.mem <= 0:
		return pool, "Task uses no cpus or no mem"
	}
	return rest, ""
}

// taskError fails a task the master refused to launch.
func (m *Master) taskError(ti mesosv1.TaskInfo, why string, reason mesosv1.TaskStatus_Reason, now time.Time) {
	aid := ti.AgentID
	m.send(update(mesosv1.TaskStatus{TaskID: ti.TaskID, State: mesosv1.TASK_ERROR.Enum(), AgentID: &aid,
		Reason: reason.Enum(), Source: mesosv1.SOURCE_MASTER.Enum(), Message: str(why), Timestamp: stamp(now)}))
}

// launchGroup checks a LAUNCH_GROUP as Mesos does and starts its tasks in
// one default executor: the executor is required, of type DEFAULT, with
// an ID no other live executor has, this framework's, no command, and
// resources (cpus and mem); the group has tasks, none with an executor of
// its own, every one on the offers' agent; and the executor's resources
// and every task's fit in what the offers have left. The group is
// all-or-nothing: one invalid task fails every task of it (TASK_ERROR). It
// returns what the pool has left. m.mu is held.
func (m *Master) launchGroup(lg *mesosv1.Offer_Operation_LaunchGroup, agentID string, pool res, now time.Time) res {
	ei := lg.Executor
	exRes := resOf(ei.Resources)
	rest, fits := pool.take(exRes)
	why := ""
	switch {
	case len(lg.TaskGroup.Tasks) == 0:
		why = "Task group is empty"
	case ei.Type != mesosv1.ExecutorInfo_DEFAULT:
		why = "'ExecutorInfo.type' must be 'DEFAULT' for a task group, not " + ei.Type.String()
	case ei.ExecutorID.Value == "":
		why = "'ExecutorInfo.executor_id' is required"
	case m.execs[ei.ExecutorID.Value] != nil:
		why = "Executor " + ei.ExecutorID.Value + " is already in use"
	case ei.FrameworkID != nil && ei.FrameworkID.Value != m.fw.id:
		why = "ExecutorInfo has an invalid FrameworkID"
	case ei.Command != nil:
		why = "'ExecutorInfo.command' must not be set for 'DEFAULT' executor"
	case exRes.cpus <= 0 || exRes.mem <= 0:
		why = "Executor has no cpus or no mem"
	case !fits:
		why = "Executor uses more resources than available in the offers"
	}
	ids := map[string]bool{}
	for _, ti := range lg.TaskGroup.Tasks {
		if why != "" {
			break
		}
		switch {
		case ti.Executor != nil:
			why = "Task " + ti.TaskID.Value + " in a task group must not have an executor of its own"
		case ids[ti.TaskID.Value]:
			why = "Task group has duplicate task ID " + ti.TaskID.Value
		default:
			ids[ti.TaskID.Value] = true
			rest, why = m.checkTask(ti, agentID, rest)
		}
	}
	if why != "" {
		for _, ti := range lg.TaskGroup.Tasks {
			m.taskError(ti, why, mesosv1.REASON_TASK_GROUP_INVALID, now)
		}
		return pool
	}
	ex := &executor{id: ei.ExecutorID.Value, agent: agentID, r: exRes}
	m.execs[ex.id] = ex
	var tasks []string
	after := pool
	after, _ = after.take(exRes)
	for _, ti := range lg.TaskGroup.Tasks {
		after = m.launch(ti, agentID, after, ex, now)
		tasks = append(tasks, ti.TaskID.Value)
	}
	m.groups = append(m.groups, Group{Agent: agentID, Executor: ex.id, Tasks: tasks})
	return after
}

// Group is a LAUNCH_GROUP the master ran.
type Group struct {
	Agent, Executor string
	Tasks           []string
}

// executor is a default executor running a task group; its resources are
// the agent's until the last of its tasks ends.
type executor struct {
	id, agent string
	r         res
	live      int
}

// volumeExists: the agent has a volume of that ID (free, offered, in pool,
// or used by a task). m.mu is held.
func (m *Master) volumeExists(agentID, id string, pool res) bool {
	if _, ok := pool.vols[id]; ok {
		return true
	}
	if a := m.agents[agentID]; a != nil {
		if _, ok := a.free.vols[id]; ok {
			return true
		}
	}
	for _, t := range m.tasks {
		if _, ok := t.r.vols[id]; ok && t.agent == agentID && !isTerminal(t.state) {
			return true
		}
	}
	return false
}

// Volumes lists the persistent volumes of an agent that no task uses.
func (m *Master) Volumes(agentID string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.agents[agentID]
	if a == nil {
		return nil
	}
	out := sortedKeys(a.free.vols)
	for _, o := range m.offers {
		if o.agent == agentID {
			out = append(out, sortedKeys(o.r.vols)...)
		}
	}
	sort.Strings(out)
	return out
}

// start runs a launched task: RUNNING at once, its end after its command's
// duration. m.mu is held.
func (m *Master) start(t *task, now time.Time) {
	m.status(t, mesosv1.TASK_RUNNING, "", nil, now)
	if hc := t.info.HealthCheck; hc != nil && hc.Type == mesosv1.HealthCheck_COMMAND && hc.Command != nil {
		ok := behave(argvOf(hc.Command)).exit == 0
		t.healthy = &ok
		m.status(t, mesosv1.TASK_RUNNING, "", mesosv1.REASON_TASK_HEALTH_CHECK_STATUS_UPDATED.Enum(), now)
	}
	var argv []string
	if t.info.Command != nil {
		argv = argvOf(t.info.Command)
	}
	bh := behave(argv)
	id := t.info.TaskID.Value
	t.timer = time.AfterFunc(bh.runFor, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		t := m.tasks[id]
		if t == nil || isTerminal(t.state) || m.closed {
			return
		}
		if bh.exit == 0 {
			m.end(t, mesosv1.TASK_FINISHED, "Command exited with status 0", nil, time.Now())
		} else {
			m.end(t, mesosv1.TASK_FAILED, "Command exited with status "+strconv.Itoa(bh.exit),
				mesosv1.REASON_COMMAND_EXECUTOR_FAILED, time.Now())
		}
	})
}

func argvOf(c *mesosv1.CommandInfo) []string {
	if c.GetShell() {
		return []string{"sh", "-c", c.GetValue()}
	}
	return c.Arguments
}

// end moves a task to a terminal state and frees its resources. m.mu is held.
func (m *Master) end(t *task, s mesosv1.TaskState, msg string, reason interface {
	Enum() *mesosv1.TaskStatus_Reason
}, now time.Time) {
	if t.timer != nil {
		t.timer.Stop()
	}
	var r *mesosv1.TaskStatus_Reason
	if reason != nil {
		r = reason.Enum()
	}
	m.status(t, s, msg, r, now)
	free := t.r
	if ex := t.exec; ex != nil {
		if ex.live--; ex.live == 0 {
			free = free.add(ex.r)
			delete(m.execs, ex.id)
		}
	}
	if a := m.agents[t.agent]; a != nil && !a.gone {
		a.free = a.free.add(free)
		m.signal()
	}
}

// status records a new state of t and queues its update, sent (and sent
// again) until acknowledged. m.mu is held.
func (m *Master) status(t *task, s mesosv1.TaskState, msg string, reason *mesosv1.TaskStatus_Reason, now time.Time) {
	t.state = s
	m.seq++
	aid := mesosv1.AgentID{Value: t.agent}
	st := mesosv1.TaskStatus{TaskID: t.info.TaskID, State: s.Enum(), AgentID: &aid, Reason: reason, Healthy: t.healthy,
		Source: mesosv1.SOURCE_EXECUTOR.Enum(), Timestamp: stamp(now), UUID: []byte(fmt.Sprintf("u-%s-%d", t.info.TaskID.Value, m.seq))}
	if msg != "" {
		st.Message = &msg
	}
	t.pending = append(t.pending, st)
	m.unacked[t.info.TaskID.Value] = t
	if len(t.pending) == 1 {
		m.transmit(t, now)
	}
}

// transmit sends t's oldest unacknowledged update. m.mu is held.
func (m *Master) transmit(t *task, now time.Time) {
	if m.fw == nil || m.fw.st == nil {
		return
	}
	t.lastTx = now
	m.sent[string(t.pending[0].UUID)]++
	m.send(update(t.pending[0]))
}

// ---- controls for tests ----

// DropStream ends the framework's event stream as a master failover would:
// offers are void, tasks stay, and the next SUBSCRIBE gets a new stream ID.
func (m *Master) DropStream() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fw != nil && m.fw.st != nil {
		m.fw.st.close()
		m.fw.st = nil
		for oid, o := range m.offers {
			m.unoffer(oid, o)
		}
	}
}

// LoseAgent removes an agent as a master does when it stops answering:
// its tasks are TASK_LOST (REASON_AGENT_REMOVED), its offers rescinded,
// and a FAILURE event names it.
func (m *Master) LoseAgent(id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.agents[id]
	if a == nil || a.gone {
		return fmt.Errorf("mesostest: no agent %q", id)
	}
	now := time.Now()
	for oid, o := range m.offers {
		if o.agent == id {
			delete(m.offers, oid)
			m.send(&scheduler.Event{Type: scheduler.Event_RESCIND, Rescind: &scheduler.Event_Rescind{OfferID: mesosv1.OfferID{Value: oid}}})
		}
	}
	a.gone = true
	a.free = res{}
	for _, t := range m.sortedTasks() {
		if t.agent == id && !isTerminal(t.state) {
			if t.timer != nil {
				t.timer.Stop()
			}
			t.pending = nil // the agent's pending updates are gone with it
			reason := mesosv1.REASON_AGENT_REMOVED
			t.state = mesosv1.TASK_LOST
			m.status(t, mesosv1.TASK_LOST, "Agent "+id+" removed", &reason, now)
		}
	}
	aid := mesosv1.AgentID{Value: id}
	m.send(&scheduler.Event{Type: scheduler.Event_FAILURE, Failure: &scheduler.Event_Failure{AgentID: &aid}})
	return nil
}

// Fail ends a live task TASK_FAILED with message as its status message, as
// an executor that reports what its command printed does. The message is
// sent as given, whatever its bytes: Mesos does not check them either.
func (m *Master) Fail(taskID, message string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.tasks[taskID]
	if t == nil || isTerminal(t.state) {
		return fmt.Errorf("mesostest: no live task %q", taskID)
	}
	m.end(t, mesosv1.TASK_FAILED, message, mesosv1.REASON_COMMAND_EXECUTOR_FAILED, time.Now())
	return nil
}

// Rescind rescinds the outstanding offers of an agent and says how many.
func (m *Master) Rescind(agentID string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for oid, o := range m.offers {
		if o.agent == agentID {
			m.unoffer(oid, o)
			m.fw.filters[agentID] = time.Now().Add(time.Hour)
			m.send(&scheduler.Event{Type: scheduler.Event_RESCIND, Rescind: &scheduler.Event_Rescind{OfferID: mesosv1.OfferID{Value: oid}}})
			n++
		}
	}
	return n
}

// Offers is how many offers are outstanding.
func (m *Master) Offers() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.offers)
}

// SendError sends an ERROR event and removes the framework, as a master
// does when the framework's failover timeout passed.
func (m *Master) SendError(msg string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fw == nil {
		return
	}
	m.send(&scheduler.Event{Type: scheduler.Event_ERROR, Error: &scheduler.Event_Error{Message: msg}})
	m.fw.removed = true
}

// StallHeartbeats stops (or resumes) every event, heartbeats included,
// with the stream left open: a master that hangs.
func (m *Master) StallHeartbeats(stall bool) {
	m.mu.Lock()
	m.stall = stall
	m.mu.Unlock()
}

// ScheduleMaintenance puts an agent in a maintenance window starting at
// start: its offers carry the unavailability, and an inverse offer asks
// the framework to leave it.
func (m *Master) ScheduleMaintenance(agentID string, start time.Time, d time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.agents[agentID]
	if a == nil || m.fw == nil {
		return fmt.Errorf("mesostest: no agent %q or no framework", agentID)
	}
	a.maintenance = &mesosv1.Unavailability{Start: mesosv1.TimeInfo{Nanoseconds: start.UnixNano()},
		Duration: &mesosv1.DurationInfo{Nanoseconds: d.Nanoseconds()}}
	m.seq++
	aid := mesosv1.AgentID{Value: agentID}
	id := fmt.Sprintf("%s-I%d", m.fw.id, m.seq)
	m.inverse[id] = agentID
	m.send(&scheduler.Event{Type: scheduler.Event_INVERSE_OFFERS, InverseOffers: &scheduler.Event_InverseOffers{
		InverseOffers: []mesosv1.InverseOffer{{OfferID: mesosv1.OfferID{Value: id},
			FrameworkID: mesosv1.FrameworkID{Value: m.fw.id}, AgentID: &aid, Unavailability: *a.maintenance}}}})
	return nil
}

// EndMaintenance takes an agent out of its maintenance window (the
// window is over, or the operator cancelled it), as the master does when
// its schedule changes: outstanding inverse offers for the agent are
// rescinded, and so are its offers, which carried the unavailability; its
// resources are offered again at once, without one.
func (m *Master) EndMaintenance(agentID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.agents[agentID]
	if a == nil || m.fw == nil || a.maintenance == nil {
		return fmt.Errorf("mesostest: agent %q has no maintenance window", agentID)
	}
	a.maintenance = nil
	for _, id := range sortedKeys(m.inverse) {
		if m.inverse[id] == agentID {
			delete(m.inverse, id)
			m.send(&scheduler.Event{Type: scheduler.Event_RESCIND_INVERSE_OFFER,
				RescindInverseOffer: &scheduler.Event_RescindInverseOffer{InverseOfferID: mesosv1.OfferID{Value: id}}})
		}
	}
	for oid, o := range m.offers {
		if o.agent == agentID {
			m.unoffer(oid, o)
			m.send(&scheduler.Event{Type: scheduler.Event_RESCIND, Rescind: &scheduler.Event_Rescind{OfferID: mesosv1.OfferID{Value: oid}}})
		}
	}
	delete(m.fw.filters, agentID)
	m.signal()
	return nil
}

// TaskState is a task's state as the master knows it; ok is false for a
// task it does not hold (never launched, or ended and acknowledged).
func (m *Master) TaskState(id string) (s mesosv1.TaskState, agentID string, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.tasks[id]
	if t == nil {
		return 0, "", false
	}
	return t.state, t.agent, true
}

// Env is the environment of task id's command as the framework sent it in
// its TaskInfo; ok is false for a task the master does not know.
func (m *Master) Env(id string) (env map[string]string, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.tasks[id]
	if t == nil {
		return nil, false
	}
	env = map[string]string{}
	for _, v := range t.info.GetCommand().GetEnvironment().GetVariables() {
		env[v.Name] = v.GetValue()
	}
	return env, true
}

// Running counts the tasks in TASK_RUNNING.
func (m *Master) Running() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, t := range m.tasks {
		if t.state == mesosv1.TASK_RUNNING {
			n++
		}
	}
	return n
}

// Unacknowledged counts the status updates sent and not yet acknowledged.
func (m *Master) Unacknowledged() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, t := range m.tasks {
		n += len(t.pending)
	}
	return n
}

// Calls counts the calls of a type the master received.
func (m *Master) Calls(t scheduler.Call_Type) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counts[t]
}

// Groups lists the LAUNCH_GROUP operations the master ran, in order.
func (m *Master) Groups() []Group {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Group(nil), m.groups...)
}

// Launched counts the tasks the master started through LAUNCH (not
// LAUNCH_GROUP).
func (m *Master) Launched() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.launched
}

// Kills lists the KILL calls received.
func (m *Master) Kills() []Kill {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Kill(nil), m.kills...)
}

// AcceptedInverseOffers lists the inverse offers the framework accepted.
func (m *Master) AcceptedInverseOffers() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.accInv...)
}

// FrameworkID is the framework's ID ("" before the first SUBSCRIBE).
func (m *Master) FrameworkID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fw == nil {
		return ""
	}
	return m.fw.id
}

// Subscriptions counts the SUBSCRIBE calls that opened a stream.
func (m *Master) Subscriptions() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.subs
}

// MaxSends is the most times one status update was sent.
func (m *Master) MaxSends() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, c := range m.sent {
		n = max(n, c)
	}
	return n
}

// Tasks lists the tasks the master holds (ended ones until their last
// update is acknowledged) and their states.
func (m *Master) Tasks() map[string]mesosv1.TaskState {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]mesosv1.TaskState, len(m.tasks))
	for id, t := range m.tasks {
		out[id] = t.state
	}
	return out
}

// VoidOffers drops every outstanding offer without telling the framework,
// as when a RESCIND is still on its way while the framework ACCEPTs: the
// next ACCEPT names offers the master no longer has.
func (m *Master) VoidOffers() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := len(m.offers)
	for oid, o := range m.offers {
		m.unoffer(oid, o)
		if m.fw != nil {
			m.fw.filters[o.agent] = time.Now().Add(300 * time.Millisecond)
		}
	}
	return n
}
