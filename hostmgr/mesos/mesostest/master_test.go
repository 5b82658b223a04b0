package mesostest

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	mesosv1 "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/encoding/codecs"
	"github.com/mesos/mesos-go/api/v1/lib/httpcli"
	"github.com/mesos/mesos-go/api/v1/lib/httpcli/httpsched"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"
)

// client is a bare mesos-go scheduler client of the master: the test
// decides what it acknowledges.
type client struct {
	t      *testing.T
	caller calls.Caller
	resp   mesosv1.Response
	events chan scheduler.Event
	fw     string
}

func subscribe(t *testing.T, m *Master, codec string) *client {
	t.Helper()
	cl := httpcli.New(httpcli.Endpoint(m.URL()+"/api/v1/scheduler"), httpcli.Codec(codecs.ByMediaType[codecs.MediaTypeProtobuf]))
	if codec == "json" {
		cl = httpcli.New(httpcli.Endpoint(m.URL()+"/api/v1/scheduler"), httpcli.Codec(codecs.ByMediaType[codecs.MediaTypeJSON]))
	}
	c := &client{t: t, caller: httpsched.NewCaller(cl, httpsched.EndpointCandidates(func() string { return "" })), events: make(chan scheduler.Event, 1000)}
	resp, err := c.caller.Call(context.Background(), calls.Subscribe(&mesosv1.FrameworkInfo{User: "test", Name: "raw"}))
	if err != nil {
		t.Fatal(err)
	}
	c.resp = resp
	t.Cleanup(func() { resp.Close() })
	go func() {
		for {
			var ev scheduler.Event
			if err := resp.Decode(&ev); err != nil {
				close(c.events)
				return
			}
			c.events <- ev
		}
	}()
	ev := c.next(scheduler.Event_SUBSCRIBED)

	c.fw = ev.GetSubscribed().GetFrameworkID().GetValue()
	if ev.GetSubscribed().GetHeartbeatIntervalSeconds() <= 0 {
		t.Errorf("SUBSCRIBED %+v without a heartbeat interval", ev.GetSubscribed())
	}
	return c
}

// next waits for the next event of type typ, skipping others.
func (c *client) next(typ scheduler.Event_Type) scheduler.Event {
	c.t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-c.events:
			if !ok {
				c.t.Fatalf("stream ended waiting for %s", typ)
			}
			if ev.Type == typ {
				return ev
			}
		case <-deadline:
			c.t.Fatalf("no %s event", typ)
		}
	}
}

func (c *client) update() mesosv1.TaskStatus {
	c.t.Helper()
	ev := c.next(scheduler.Event_UPDATE)
	return ev.GetUpdate().Status
}

func (c *client) call(call *scheduler.Call) error {
	call.FrameworkID = &mesosv1.FrameworkID{Value: c.fw}
	resp, err := c.caller.Call(context.Background(), call)
	if resp != nil {
		resp.Close()
	}
	return err
}

// TestUpdatesRedeliveredUntilAcknowledged: in both encodings, a task's
// update is sent again, with the same uuid, until it is acknowledged;
// then the next one comes.
func TestUpdatesRedeliveredUntilAcknowledged(t *testing.T) {
	for _, codec := range []string{"protobuf", "json"} {
		t.Run(codec, func(t *testing.T) {
			m, err := New(Config{Agents: []AgentSpec{{}}, Redeliver: 50 * time.Millisecond, Heartbeat: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			c := subscribe(t, m, codec)
			oe := c.next(scheduler.Event_OFFERS)
			offers := oe.GetOffers().GetOffers()
			o := offers[0]
			if o.Hostname != "host-0" || len(o.Resources) < 4 {
				t.Fatalf("offer %+v, want host-0's resources", o)
			}
			shell := false
			task := mesosv1.TaskInfo{Name: "t", TaskID: mesosv1.TaskID{Value: "t1"}, AgentID: o.AgentID,
				Resources: []mesosv1.Resource{scalar("cpus", 1), scalar("mem", 64)},
				Command:   &mesosv1.CommandInfo{Shell: &shell, Value: str("sleep"), Arguments: []string{"sleep", "3600"}}}
			if err := c.call(calls.Accept(calls.OfferOperations{calls.OpLaunch(task)}.WithOffers(o.ID))); err != nil {
				t.Fatal(err)
			}
			first, again := c.update(), c.update()
			if first.GetState() != mesosv1.TASK_RUNNING || first.UUID == nil || !bytes.Equal(first.UUID, again.UUID) {
				t.Fatalf("updates %v %q then %v %q; want TASK_RUNNING sent again with the same uuid", first.GetState(), first.UUID, again.GetState(), again.UUID)
			}
			if err := c.call(calls.Acknowledge(o.AgentID.Value, "t1", first.UUID)); err != nil {
				t.Fatal(err)
			}
			if err := c.call(calls.Kill("t1", o.AgentID.Value)); err != nil {
				t.Fatal(err)
			}
			for {
				u := c.update()
				if bytes.Equal(u.UUID, first.UUID) {
					continue // sent before the ack arrived
				}
				if u.GetState() != mesosv1.TASK_KILLED {
					t.Fatalf("update %v after the ack, want TASK_KILLED", u.GetState())
				}
				break
			}
			c.next(scheduler.Event_HEARTBEAT)
		})
	}
}

// TestCallsChecked: calls need the current Mesos-Stream-Id and a known
// content type, as Mesos answers them.
func TestCallsChecked(t *testing.T) {
	m, err := New(Config{Agents: []AgentSpec{{}}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c := subscribe(t, m, "protobuf")
	body, _ := (&scheduler.Call{Type: scheduler.Call_REVIVE, FrameworkID: &mesosv1.FrameworkID{Value: c.fw}}).Marshal()
	post := func(ct, stream string) int {
		req, _ := http.NewRequest(http.MethodPost, m.URL()+"/api/v1/scheduler", bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		if stream != "" {
			req.Header.Set("Mesos-Stream-Id", stream)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if got := post(typeProtobuf, ""); got != http.StatusBadRequest {
		t.Errorf("call without Mesos-Stream-Id: %d, want 400", got)
	}
	if got := post(typeProtobuf, "stale"); got != http.StatusBadRequest {
		t.Errorf("call with a stale Mesos-Stream-Id: %d, want 400", got)
	}
	if got := post("text/plain", ""); got != http.StatusUnsupportedMediaType {
		t.Errorf("call in text/plain: %d, want 415", got)
	}
	m.DropStream()
	if err := c.call(calls.Revive()); err == nil {
		t.Error("a call after the stream ended succeeded")
	}
}

// TestLaunchGroupChecked: a LAUNCH_GROUP is checked as Mesos checks it,
// and all of it fails (every task TASK_ERROR) or all of it runs in one
// default executor, whose resources come on top of its tasks'.
func TestLaunchGroupChecked(t *testing.T) {
	m, err := New(Config{Agents: []AgentSpec{{CPUs: 2, MemMB: 1024}}, Heartbeat: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c := subscribe(t, m, "protobuf")
	shell := false
	seq := 0
	taskOn := func(agent mesosv1.AgentID, cpus float64) mesosv1.TaskInfo {
		seq++
		return mesosv1.TaskInfo{Name: "t", TaskID: mesosv1.TaskID{Value: "g" + strconv.Itoa(seq)}, AgentID: agent,
			Resources: []mesosv1.Resource{scalar("cpus", cpus), scalar("mem", 64)},
			Command:   &mesosv1.CommandInfo{Shell: &shell, Value: str("sleep"), Arguments: []string{"sleep", "3600"}}}
	}
	execOf := func(id string) mesosv1.ExecutorInfo {
		return mesosv1.ExecutorInfo{Type: mesosv1.ExecutorInfo_DEFAULT, ExecutorID: mesosv1.ExecutorID{Value: id},
			FrameworkID: &mesosv1.FrameworkID{Value: c.fw}, Resources: []mesosv1.Resource{scalar("cpus", 0.1), scalar("mem", 32)}}
	}
	for _, tc := range []struct {
		name string
		op   func(o mesosv1.Offer) mesosv1.Offer_Operation
		ok   bool
	}{
		{"no executor type", func(o mesosv1.Offer) mesosv1.Offer_Operation {
			e := execOf("e1")
			e.Type = mesosv1.ExecutorInfo_UNKNOWN
			return calls.OpLaunchGroup(e, taskOn(o.AgentID, 0.5))
		}, false},
		{"executor without resources", func(o mesosv1.Offer) mesosv1.Offer_Operation {
			e := execOf("e2")
			e.Resources = nil
			return calls.OpLaunchGroup(e, taskOn(o.AgentID, 0.5))
		}, false},
		{"task on another agent", func(o mesosv1.Offer) mesosv1.Offer_Operation {
			return calls.OpLaunchGroup(execOf("e3"), taskOn(o.AgentID, 0.5), taskOn(mesosv1.AgentID{Value: "elsewhere"}, 0.5))
		}, false},
		{"tasks and executor beyond the offer", func(o mesosv1.Offer) mesosv1.Offer_Operation {
			return calls.OpLaunchGroup(execOf("e4"), taskOn(o.AgentID, 1), taskOn(o.AgentID, 1)) // 2 cpus + 0.1
		}, false},
		{"valid", func(o mesosv1.Offer) mesosv1.Offer_Operation {
			return calls.OpLaunchGroup(execOf("e5"), taskOn(o.AgentID, 0.9), taskOn(o.AgentID, 0.9))
		}, true},
	} {
		ev := c.next(scheduler.Event_OFFERS)
		o := ev.GetOffers().GetOffers()[0]
		op := tc.op(o)
		acc := calls.Accept(calls.OfferOperations{op}.WithOffers(o.ID))
		acc.Accept.Filters = &mesosv1.Filters{RefuseSeconds: new(float64)} // offer again at once
		if err := c.call(acc); err != nil {
			t.Fatal(err)
		}
		want := mesosv1.TASK_ERROR
		if tc.ok {
			want = mesosv1.TASK_RUNNING
		}
		for range op.LaunchGroup.TaskGroup.Tasks {
			u := c.update()
			if u.GetState() != want {
				t.Errorf("%s: task %s %v (%s), want %v", tc.name, u.TaskID.Value, u.GetState(), u.GetMessage(), want)
			}
			if u.UUID != nil {
				_ = c.call(calls.Acknowledge(o.AgentID.Value, u.TaskID.Value, u.UUID))
			}
		}
	}
	g := m.Groups()
	if len(g) != 1 || g[0].Executor != "e5" || len(g[0].Tasks) != 2 {
		t.Errorf("groups run %+v, want the valid one only", g)
	}
}
