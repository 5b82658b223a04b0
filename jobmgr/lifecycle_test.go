package jobmgr

import (
	"testing"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The instance the table's rows start from: instance 4 of job j, run 3,
// spec version 2, on host h1, started at t0.
var lcT0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func lcTask(state ts, change ...func(rt *pelotonv1.TaskStatus)) *pelotonv1.TaskStatus {
	rt := &pelotonv1.TaskStatus{State: state, GoalState: stRunning, RunId: 3, SpecVersion: 2, Host: "h1",
		StartTime: timestamppb.New(lcT0), FailureCount: 1}
	for _, c := range change {
		c(rt)
	}
	return rt
}

// lcEv is an event of run 3 of the instance (another run with run set),
// a time after t0.
func lcEv(state ts, after time.Duration, change ...func(ev *hostmgr.TaskEvent)) hostmgr.TaskEvent {
	ev := hostmgr.TaskEvent{TaskID: resmgr.RunTaskID("j", 4, 3), State: state, Time: lcT0.Add(after)}
	for _, c := range change {
		c(&ev)
	}
	return ev
}

// lcNewRun is what newRun makes of the row's instance for its run 4.
func lcNewRun(run uint32, msg string) func(rt *pelotonv1.TaskStatus) {
	return func(rt *pelotonv1.TaskStatus) {
		rt.State, rt.RunId, rt.DesiredRunId, rt.Message = stInitialized, run, 0, msg
		rt.PreviousHost, rt.Host, rt.StartTime, rt.CompletionTime, rt.ExitCode, rt.Reason = "h1", "", nil, nil, 0, ""
	}
}

// TestDecideEvent lists every transition the task lifecycle makes on a
// backend event: each row is the instance before, the event and the facts,
// and what the instance becomes (as changes to the one before) with the
// effects the shell must carry out.
func TestDecideEvent(t *testing.T) {
	batch := eventFacts{jobType: pelotonv1.JobType_BATCH, restart: &pelotonv1.RestartPolicy{MaxFailures: 2}, grace: 7 * time.Second, lostBackoff: 5 * time.Second}
	service := batch
	service.jobType = pelotonv1.JobType_SERVICE
	daemon := batch
	daemon.jobType = pelotonv1.JobType_DAEMON
	foreign := batch
	foreign.foreign = true
	revoked := batch
	revoked.revoked = true
	ended := func(code int32) func(rt *pelotonv1.TaskStatus) {
		return func(rt *pelotonv1.TaskStatus) {
			rt.ExitCode, rt.CompletionTime = code, timestamppb.New(lcT0.Add(time.Second))
		}
	}
	ports := map[string]uint32{"http": 31000}
	for _, tc := range []struct {
		name         string
		prev         *pelotonv1.TaskStatus
		streak, blkd uint32
		ev           hostmgr.TaskEvent
		f            eventFacts
		// want changes a copy of prev into the next runtime; nil with skip.
		want                 func(rt *pelotonv1.TaskStatus)
		wantStreak, wantBlkd uint32
		fx                   eventEffects
	}{
		// Events that change nothing.
		{name: "an old run's late event", prev: lcTask(stRunning), ev: lcEv(stFailed, time.Second, func(ev *hostmgr.TaskEvent) { ev.TaskID = resmgr.RunTaskID("j", 4, 2) }), f: batch, fx: eventEffects{skip: true}},
		{name: "launched: written when the launch was issued", prev: lcTask(stLaunched), ev: lcEv(stLaunched, 0), f: batch, fx: eventEffects{skip: true}},
		{name: "running again with the same health", prev: lcTask(stRunning), ev: lcEv(stRunning, time.Second), f: batch, fx: eventEffects{skip: true}},
		{name: "running while being killed", prev: lcTask(stKilling), ev: lcEv(stRunning, time.Second), f: batch, fx: eventEffects{skip: true}},
		{name: "an end after the end", prev: lcTask(stFailed), ev: lcEv(stKilled, time.Second), f: batch, fx: eventEffects{skip: true}},
		{name: "an end of a run not launched yet", prev: lcTask(stPending), ev: lcEv(stLost, time.Second), f: batch, fx: eventEffects{skip: true}},
		{name: "an end of a run not queued yet", prev: lcTask(stInitialized), ev: lcEv(stFailed, time.Second), f: batch, fx: eventEffects{skip: true}},
		{name: "a task ID that is not ours", prev: lcTask(stRunning), ev: lcEv(stFailed, time.Second, func(ev *hostmgr.TaskEvent) { ev.TaskID = "junk" }), f: batch, fx: eventEffects{skip: true}},

		// Started, ports, health.
		{name: "launched with ports", prev: lcTask(stRunning), ev: lcEv(stLaunched, 0, func(ev *hostmgr.TaskEvent) { ev.Ports = ports }), f: batch,
			want: func(rt *pelotonv1.TaskStatus) { rt.Ports = ports }},
		{name: "started", prev: lcTask(stLaunched, func(rt *pelotonv1.TaskStatus) { rt.StartTime = nil }), ev: lcEv(stRunning, time.Second, func(ev *hostmgr.TaskEvent) { ev.Health = pelotonv1.HealthState_HEALTHY }), f: batch,
			want: func(rt *pelotonv1.TaskStatus) {
				rt.State, rt.StartTime, rt.Health = stRunning, timestamppb.New(lcT0.Add(time.Second)), pelotonv1.HealthState_HEALTHY
			}},
		{name: "started from starting", prev: lcTask(stStarting), ev: lcEv(stRunning, time.Second), f: batch,
			want: func(rt *pelotonv1.TaskStatus) {
				rt.State, rt.StartTime = stRunning, timestamppb.New(lcT0.Add(time.Second))
			}},
		{name: "health changes", prev: lcTask(stRunning), ev: lcEv(stRunning, time.Second, func(ev *hostmgr.TaskEvent) { ev.Health = pelotonv1.HealthState_HEALTHY }), f: batch,
			want: func(rt *pelotonv1.TaskStatus) { rt.Health = pelotonv1.HealthState_HEALTHY }},
		{name: "a batch task's failing health check is only recorded", prev: lcTask(stRunning), ev: lcEv(stRunning, time.Second, func(ev *hostmgr.TaskEvent) { ev.Health = pelotonv1.HealthState_UNHEALTHY }), f: batch,
			want: func(rt *pelotonv1.TaskStatus) { rt.Health = pelotonv1.HealthState_UNHEALTHY }},
		{name: "a service's failing health check restarts it", prev: lcTask(stRunning), streak: 2, ev: lcEv(stRunning, time.Second, func(ev *hostmgr.TaskEvent) { ev.Health = pelotonv1.HealthState_UNHEALTHY }), f: service,
			want: func(rt *pelotonv1.TaskStatus) {
				rt.Health, rt.FailureCount, rt.DesiredRunId = pelotonv1.HealthState_UNHEALTHY, 2, 4
				rt.State, rt.Reason, rt.Message = stKilling, "unhealthy", "its health check fails; restarting it"
			},
			wantStreak: 3, fx: eventEffects{kill: resmgr.RunTaskID("j", 4, 3), grace: 7 * time.Second, backoff: 4 * time.Second}},
		{name: "a service being stopped is not restarted for its health", prev: lcTask(stRunning, func(rt *pelotonv1.TaskStatus) { rt.GoalState = stKilled }), ev: lcEv(stRunning, time.Second, func(ev *hostmgr.TaskEvent) { ev.Health = pelotonv1.HealthState_UNHEALTHY }), f: service,
			want: func(rt *pelotonv1.TaskStatus) { rt.Health = pelotonv1.HealthState_UNHEALTHY }},

		// Ends of a batch task.
		{name: "succeeded", prev: lcTask(stRunning), ev: lcEv(stSucceeded, time.Second), f: batch,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(0)(rt)
				rt.State, rt.Reason, rt.Message = stSucceeded, "exit-zero", ""
			}, fx: eventEffects{release: true}},
		{name: "failed within maxFailures: retried", prev: lcTask(stRunning), ev: lcEv(stFailed, time.Second, func(ev *hostmgr.TaskEvent) { ev.Reason, ev.ExitCode = "exited", 2 }), f: batch,
			want: func(rt *pelotonv1.TaskStatus) {
				lcNewRun(4, "run 3 failed (exited: exit code 2); retry 2 of 2")(rt)
				rt.FailureCount, rt.ExitCode = 2, 2
			}, fx: eventEffects{release: true}},
		{name: "failed beyond maxFailures", prev: lcTask(stRunning, func(rt *pelotonv1.TaskStatus) { rt.FailureCount = 2 }), ev: lcEv(stFailed, time.Second, func(ev *hostmgr.TaskEvent) { ev.Reason, ev.Message, ev.ExitCode = "exited", "boom", 1 }), f: batch,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(1)(rt)
				rt.FailureCount, rt.State, rt.Reason = 3, stFailed, "exited"
				rt.Message = "run 3 failed (boom); 3 failures, restartPolicy.maxFailures is 2"
			}, fx: eventEffects{release: true}},
		{name: "killed by someone else counts as a failure", prev: lcTask(stRunning), ev: lcEv(stKilled, time.Second, func(ev *hostmgr.TaskEvent) { ev.Message = "oom" }), f: batch,
			want: func(rt *pelotonv1.TaskStatus) {
				lcNewRun(4, "run 3 failed (oom); retry 2 of 2")(rt)
				rt.FailureCount = 2
			}, fx: eventEffects{release: true}},
		{name: "lost: runs again after the lost backoff", prev: lcTask(stRunning), ev: lcEv(stLost, time.Second, func(ev *hostmgr.TaskEvent) { ev.Reason = "agent-gone" }), f: batch,
			want: lcNewRun(4, "run 3 was lost (agent-gone); running again"), fx: eventEffects{release: true, backoff: 5 * time.Second}},
		{name: "run id taken: the next at once", prev: lcTask(stLaunched), ev: lcEv(stFailed, 0, func(ev *hostmgr.TaskEvent) { ev.Reason = hostmgr.ReasonRunIDTaken }), f: batch,
			want: lcNewRun(4, "run id 3 was used already; running as run 4"), fx: eventEffects{release: true}},
		{name: "launch blocked: no failure, a growing backoff", prev: lcTask(stLaunched), blkd: 1, ev: lcEv(stLost, 0, func(ev *hostmgr.TaskEvent) { ev.Reason, ev.Message = hostmgr.ReasonLaunchBlocked, "no namespace" }), f: batch,
			want: func(rt *pelotonv1.TaskStatus) {
				lcNewRun(4, "cannot launch: no namespace; trying again in 10s")(rt)
				rt.Reason = hostmgr.ReasonLaunchBlocked
			}, wantBlkd: 2, fx: eventEffects{release: true, backoff: 10 * time.Second}},

		// Ends of a run being stopped.
		{name: "killed by us", prev: lcTask(stKilling), ev: lcEv(stKilled, time.Second, func(ev *hostmgr.TaskEvent) { ev.Message = "signal 15" }), f: batch,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(0)(rt)
				rt.State, rt.Reason, rt.Message = stKilled, "killed", "signal 15"
			}, fx: eventEffects{release: true}},
		{name: "killed by us keeps the reason given", prev: lcTask(stRunning, func(rt *pelotonv1.TaskStatus) { rt.GoalState, rt.Reason = stKilled, "job-killed" }), ev: lcEv(stKilled, time.Second), f: batch,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(0)(rt)
				rt.State = stKilled
			}, fx: eventEffects{release: true}},
		{name: "a batch task killed by us that exits zero succeeded", prev: lcTask(stKilling), ev: lcEv(stSucceeded, time.Second), f: batch,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(0)(rt)
				rt.State, rt.Reason, rt.Message = stSucceeded, "exit-zero", ""
			}, fx: eventEffects{release: true}},
		{name: "a service killed by us that exits zero is killed", prev: lcTask(stKilling), ev: lcEv(stSucceeded, time.Second), f: service,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(0)(rt)
				rt.State, rt.Reason = stKilled, "killed"
			}, fx: eventEffects{release: true}},
		{name: "a daemon whose host left frees its slot", prev: lcTask(stKilling, func(rt *pelotonv1.TaskStatus) { rt.Reason, rt.BoundHost = "host-removed", "h1" }), ev: lcEv(stKilled, time.Second), f: daemon,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(0)(rt)
				rt.State, rt.BoundHost = stKilled, ""
			}, fx: eventEffects{release: true}},
		{name: "preempted: pending again, no failure", prev: lcTask(stPreempting, func(rt *pelotonv1.TaskStatus) { rt.Reason = "preempted-for-x" }), ev: lcEv(stKilled, time.Second), f: batch,
			want: lcNewRun(4, "run 3 was preempted (preempted-for-x); pending again"), fx: eventEffects{release: true}},
		{name: "a preempted run that succeeded meanwhile is a success", prev: lcTask(stPreempting), ev: lcEv(stSucceeded, time.Second), f: batch,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(0)(rt)
				rt.State, rt.Reason, rt.Message = stSucceeded, "exit-zero", ""
			}, fx: eventEffects{release: true}},
		{name: "restarted: the desired run follows", prev: lcTask(stKilling, func(rt *pelotonv1.TaskStatus) { rt.DesiredRunId, rt.DesiredSpecVersion = 4, 3 }), ev: lcEv(stKilled, time.Second), f: service,
			want: func(rt *pelotonv1.TaskStatus) {
				lcNewRun(4, "run 3 ended (KILLED); restarting")(rt)
				rt.SpecVersion, rt.DesiredSpecVersion = 3, 0
			}, fx: eventEffects{release: true}},
		{name: "restarted in place: the new run takes the held room on its host", prev: lcTask(stKilling, func(rt *pelotonv1.TaskStatus) { rt.DesiredRunId, rt.RestartInPlace = 4, true }), ev: lcEv(stKilled, time.Second), f: service,
			want: func(rt *pelotonv1.TaskStatus) {
				lcNewRun(4, "run 3 ended (KILLED); restarting")(rt)
				rt.RestartInPlace = false
			}, fx: eventEffects{release: true, heldFor: resmgr.RunTaskID("j", 4, 4), inPlace: "h1"}},
		{name: "a restart cancelled by a kill: the held room is given back", prev: lcTask(stKilling, func(rt *pelotonv1.TaskStatus) { rt.DesiredRunId, rt.RestartInPlace, rt.GoalState = 4, true, stKilled }), ev: lcEv(stKilled, time.Second), f: service,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(0)(rt)
				rt.State, rt.Reason = stKilled, "killed"
			}, fx: eventEffects{release: true, heldFor: resmgr.RunTaskID("j", 4, 4)}},

		// Ends of a long-running task.
		{name: "a service's run ended quickly: a longer backoff", prev: lcTask(stRunning), streak: 1, ev: lcEv(stFailed, time.Second, func(ev *hostmgr.TaskEvent) { ev.Message, ev.ExitCode = "crash", 3 }), f: service,
			want: func(rt *pelotonv1.TaskStatus) {
				lcNewRun(4, "run 3 ended (FAILED, crash); restarting in 2s")(rt)
				rt.FailureCount, rt.ExitCode = 2, 3
			}, wantStreak: 2, fx: eventEffects{release: true, backoff: 2 * time.Second}},
		{name: "a service's run that stayed up starts the streak again", prev: lcTask(stRunning), streak: 5, ev: lcEv(stFailed, stableRun, func(ev *hostmgr.TaskEvent) { ev.Message = "crash" }), f: service,
			want: func(rt *pelotonv1.TaskStatus) {
				lcNewRun(4, "run 3 ended (FAILED, crash); restarting in 1s")(rt)
				rt.FailureCount = 2
			}, wantStreak: 1, fx: eventEffects{release: true, backoff: time.Second}},
		{name: "a service's lost run is no failure", prev: lcTask(stRunning), ev: lcEv(stLost, time.Second, func(ev *hostmgr.TaskEvent) { ev.Message = "gone" }), f: service,
			want: lcNewRun(4, "run 3 ended (LOST, gone); restarting in 1s"), wantStreak: 1, fx: eventEffects{release: true, backoff: time.Second}},
		{name: "a service's success runs again too", prev: lcTask(stRunning), ev: lcEv(stSucceeded, time.Second, func(ev *hostmgr.TaskEvent) { ev.Message = "done" }), f: service,
			want: func(rt *pelotonv1.TaskStatus) {
				lcNewRun(4, "run 3 ended (SUCCEEDED, done); restarting in 1s")(rt)
				rt.FailureCount = 2
			}, wantStreak: 1, fx: eventEffects{release: true, backoff: time.Second}},

		// Revoked and foreign runs.
		{name: "revoked: pending again as preempted work", prev: lcTask(stRunning), ev: lcEv(stKilled, time.Second), f: revoked,
			want: func(rt *pelotonv1.TaskStatus) {
				lcNewRun(4, "run 3 was revoked: its host ran hot and its agent killed it (QoS); pending again")(rt)
				rt.Reason = hostmgr.ReasonQoSRevoked
			}, fx: eventEffects{release: true}},
		{name: "revoked while being killed: killed", prev: lcTask(stRunning, func(rt *pelotonv1.TaskStatus) { rt.GoalState = stKilled }), ev: lcEv(stKilled, time.Second), f: revoked,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(0)(rt)
				rt.State, rt.Reason = stKilled, "killed"
			}, fx: eventEffects{release: true}},
		{name: "a foreign pod deleted by someone else is lost", prev: lcTask(stRunning), ev: lcEv(stKilled, time.Second, func(ev *hostmgr.TaskEvent) { ev.Reason, ev.Message = "deleted", "by kubectl" }), f: foreign,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(0)(rt)
				rt.State, rt.Reason, rt.Message = stLost, "deleted", "by kubectl"
			}, fx: eventEffects{release: true}},
		{name: "a foreign pod that failed stays failed", prev: lcTask(stRunning), ev: lcEv(stFailed, time.Second, func(ev *hostmgr.TaskEvent) { ev.Reason, ev.ExitCode = "exited", 1 }), f: foreign,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(1)(rt)
				rt.State, rt.Reason = stFailed, "exited"
			}, fx: eventEffects{release: true}},
		{name: "a foreign pod preempted", prev: lcTask(stPreempting, func(rt *pelotonv1.TaskStatus) { rt.Reason = "preempted-for-x" }), ev: lcEv(stKilled, time.Second), f: foreign,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(0)(rt)
				rt.State, rt.Message = stKilled, "preempted; the pod was deleted"
			}, fx: eventEffects{release: true}},
		{name: "a foreign pod killed by us", prev: lcTask(stKilling, func(rt *pelotonv1.TaskStatus) { rt.DesiredRunId = 4 }), ev: lcEv(stKilled, time.Second, func(ev *hostmgr.TaskEvent) { ev.Message = "deleted" }), f: foreign,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(0)(rt)
				rt.State, rt.Reason, rt.Message, rt.DesiredRunId = stKilled, "killed", "deleted", 0
			}, fx: eventEffects{release: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := proto.Clone(tc.prev)
			prev := taskSnap{rt: tc.prev, streak: tc.streak, blocked: tc.blkd}
			next, fx := decideEvent(prev, tc.ev, tc.f)
			if !proto.Equal(tc.prev, before) {
				t.Fatalf("decideEvent changed its input: %v", tc.prev)
			}
			if fx != tc.fx {
				t.Errorf("effects %+v, want %+v", fx, tc.fx)
			}
			if fx.skip {
				if next != prev {
					t.Errorf("a skipped event changed the instance: %+v", next)
				}
				return
			}
			want := proto.Clone(tc.prev).(*pelotonv1.TaskStatus)
			tc.want(want)
			if !proto.Equal(next.rt, want) {
				t.Errorf("next\n%v\nwant\n%v", next.rt, want)
			}
			if next.streak != tc.wantStreak || next.blocked != tc.wantBlkd {
				t.Errorf("streak, blocked = %d, %d; want %d, %d", next.streak, next.blocked, tc.wantStreak, tc.wantBlkd)
			}
			_, via := eventWrite(tc.ev, tc.f, false)
			if err := checkPath(tc.prev.State, via, next.rt.State); err != nil {
				t.Errorf("the decision is not in the transition table: %v", err)
			}
		})
	}
}

// TestEventWrite: how a decision is written.
func TestEventWrite(t *testing.T) {
	batch := eventFacts{jobType: pelotonv1.JobType_BATCH}
	foreign, revoked := batch, batch
	foreign.foreign, revoked.revoked = true, true
	for _, tc := range []struct {
		name       string
		ev         hostmgr.TaskEvent
		f          eventFacts
		superseded bool
		persist    bool
		via        []ts
	}{
		{name: "running", ev: lcEv(stRunning, 0), f: batch, persist: true},
		{name: "running, superseded: memory only", ev: lcEv(stRunning, 0), f: batch, superseded: true},
		{name: "an end, superseded: written", ev: lcEv(stFailed, 0), f: batch, superseded: true, persist: true},
		{name: "lost: through LOST", ev: lcEv(stLost, 0), f: batch, persist: true, via: []ts{stLost}},
		{name: "launch blocked: not lost", ev: lcEv(stLost, 0, func(ev *hostmgr.TaskEvent) { ev.Reason = hostmgr.ReasonLaunchBlocked }), f: batch, persist: true},
		{name: "a foreign pod lost: its end is final", ev: lcEv(stLost, 0), f: foreign, persist: true},
		{name: "revoked: through KILLED", ev: lcEv(stKilled, 0), f: revoked, persist: true, via: []ts{stKilled}},
	} {
		persist, via := eventWrite(tc.ev, tc.f, tc.superseded)
		if persist != tc.persist || len(via) != len(tc.via) || (len(via) == 1 && via[0] != tc.via[0]) {
			t.Errorf("%s: persist %v via %v; want %v %v", tc.name, persist, via, tc.persist, tc.via)
		}
	}
}
