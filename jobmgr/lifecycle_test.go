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

func lcTask(state taskState, change ...func(rt *pelotonv1.TaskStatus)) *pelotonv1.TaskStatus {
	rt := &pelotonv1.TaskStatus{State: state, GoalState: taskRunning, RunId: 3, SpecVersion: 2, Host: "h1",
		StartTime: timestamppb.New(lcT0), FailureCount: 1}
	for _, c := range change {
		c(rt)
	}
	return rt
}

// lcEv is an event of run 3 of the instance (another run with run set),
// a time after t0.
func lcEv(state taskState, after time.Duration, change ...func(ev *hostmgr.TaskEvent)) hostmgr.TaskEvent {
	ev := hostmgr.TaskEvent{TaskID: resmgr.RunTaskID("j", 4, 3), State: state, Time: lcT0.Add(after)}
	for _, c := range change {
		c(&ev)
	}
	return ev
}

// lcNewRun is what newRun makes of the row's instance for its run 4.
func lcNewRun(run uint32, msg string) func(rt *pelotonv1.TaskStatus) {
	return func(rt *pelotonv1.TaskStatus) {
		rt.State, rt.RunId, rt.DesiredRunId, rt.Message = taskInitialized, run, 0, msg
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
		{name: "an old run's late event", prev: lcTask(taskRunning), ev: lcEv(taskFailed, time.Second, func(ev *hostmgr.TaskEvent) { ev.TaskID = resmgr.RunTaskID("j", 4, 2) }), f: batch, fx: eventEffects{skip: true}},
		{name: "launched: written when the launch was issued", prev: lcTask(taskLaunched), ev: lcEv(taskLaunched, 0), f: batch, fx: eventEffects{skip: true}},
		{name: "running again with the same health", prev: lcTask(taskRunning), ev: lcEv(taskRunning, time.Second), f: batch, fx: eventEffects{skip: true}},
		{name: "running while being killed", prev: lcTask(taskKilling), ev: lcEv(taskRunning, time.Second), f: batch, fx: eventEffects{skip: true}},
		{name: "an end after the end", prev: lcTask(taskFailed), ev: lcEv(taskKilled, time.Second), f: batch, fx: eventEffects{skip: true}},
		{name: "an end of a run not launched yet", prev: lcTask(taskPending), ev: lcEv(taskLost, time.Second), f: batch, fx: eventEffects{skip: true}},
		{name: "an end of a run not queued yet", prev: lcTask(taskInitialized), ev: lcEv(taskFailed, time.Second), f: batch, fx: eventEffects{skip: true}},
		{name: "a task ID that is not ours", prev: lcTask(taskRunning), ev: lcEv(taskFailed, time.Second, func(ev *hostmgr.TaskEvent) { ev.TaskID = "junk" }), f: batch, fx: eventEffects{skip: true}},

		// Started, ports, health.
		{name: "launched with ports", prev: lcTask(taskRunning), ev: lcEv(taskLaunched, 0, func(ev *hostmgr.TaskEvent) { ev.Ports = ports }), f: batch,
			want: func(rt *pelotonv1.TaskStatus) { rt.Ports = ports }},
		{name: "started", prev: lcTask(taskLaunched, func(rt *pelotonv1.TaskStatus) { rt.StartTime = nil }), ev: lcEv(taskRunning, time.Second, func(ev *hostmgr.TaskEvent) { ev.Health = pelotonv1.HealthState_HEALTHY }), f: batch,
			want: func(rt *pelotonv1.TaskStatus) {
				rt.State, rt.StartTime, rt.Health = taskRunning, timestamppb.New(lcT0.Add(time.Second)), pelotonv1.HealthState_HEALTHY
			}},
		{name: "started from starting", prev: lcTask(taskStarting), ev: lcEv(taskRunning, time.Second), f: batch,
			want: func(rt *pelotonv1.TaskStatus) {
				rt.State, rt.StartTime = taskRunning, timestamppb.New(lcT0.Add(time.Second))
			}},
		{name: "health changes", prev: lcTask(taskRunning), ev: lcEv(taskRunning, time.Second, func(ev *hostmgr.TaskEvent) { ev.Health = pelotonv1.HealthState_HEALTHY }), f: batch,
			want: func(rt *pelotonv1.TaskStatus) { rt.Health = pelotonv1.HealthState_HEALTHY }},
		{name: "a batch task's failing health check is only recorded", prev: lcTask(taskRunning), ev: lcEv(taskRunning, time.Second, func(ev *hostmgr.TaskEvent) { ev.Health = pelotonv1.HealthState_UNHEALTHY }), f: batch,
			want: func(rt *pelotonv1.TaskStatus) { rt.Health = pelotonv1.HealthState_UNHEALTHY }},
		{name: "a service's failing health check restarts it", prev: lcTask(taskRunning), streak: 2, ev: lcEv(taskRunning, time.Second, func(ev *hostmgr.TaskEvent) { ev.Health = pelotonv1.HealthState_UNHEALTHY }), f: service,
			want: func(rt *pelotonv1.TaskStatus) {
				rt.Health, rt.FailureCount, rt.DesiredRunId = pelotonv1.HealthState_UNHEALTHY, 2, 4
				rt.State, rt.Reason, rt.Message = taskKilling, "unhealthy", "its health check fails; restarting it"
			},
			wantStreak: 3, fx: eventEffects{kill: resmgr.RunTaskID("j", 4, 3), grace: 7 * time.Second, backoff: 4 * time.Second}},
		{name: "a service being stopped is not restarted for its health", prev: lcTask(taskRunning, func(rt *pelotonv1.TaskStatus) { rt.GoalState = taskKilled }), ev: lcEv(taskRunning, time.Second, func(ev *hostmgr.TaskEvent) { ev.Health = pelotonv1.HealthState_UNHEALTHY }), f: service,
			want: func(rt *pelotonv1.TaskStatus) { rt.Health = pelotonv1.HealthState_UNHEALTHY }},

		// Ends of a batch task.
		{name: "succeeded", prev: lcTask(taskRunning), ev: lcEv(taskSucceeded, time.Second), f: batch,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(0)(rt)
				rt.State, rt.Reason, rt.Message = taskSucceeded, "exit-zero", ""
			}, fx: eventEffects{release: true}},
		{name: "failed within maxFailures: retried", prev: lcTask(taskRunning), ev: lcEv(taskFailed, time.Second, func(ev *hostmgr.TaskEvent) { ev.Reason, ev.ExitCode = "exited", 2 }), f: batch,
			want: func(rt *pelotonv1.TaskStatus) {
				lcNewRun(4, "run 3 failed (exited: exit code 2); retry 2 of 2")(rt)
				rt.FailureCount, rt.ExitCode = 2, 2
			}, fx: eventEffects{release: true}},
		{name: "failed beyond maxFailures", prev: lcTask(taskRunning, func(rt *pelotonv1.TaskStatus) { rt.FailureCount = 2 }), ev: lcEv(taskFailed, time.Second, func(ev *hostmgr.TaskEvent) { ev.Reason, ev.Message, ev.ExitCode = "exited", "boom", 1 }), f: batch,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(1)(rt)
				rt.FailureCount, rt.State, rt.Reason = 3, taskFailed, "exited"
				rt.Message = "run 3 failed (boom); 3 failures, restartPolicy.maxFailures is 2"
			}, fx: eventEffects{release: true}},
		{name: "killed by someone else counts as a failure", prev: lcTask(taskRunning), ev: lcEv(taskKilled, time.Second, func(ev *hostmgr.TaskEvent) { ev.Message = "oom" }), f: batch,
			want: func(rt *pelotonv1.TaskStatus) {
				lcNewRun(4, "run 3 failed (oom); retry 2 of 2")(rt)
				rt.FailureCount = 2
			}, fx: eventEffects{release: true}},
		{name: "lost: runs again after the lost backoff", prev: lcTask(taskRunning), ev: lcEv(taskLost, time.Second, func(ev *hostmgr.TaskEvent) { ev.Reason = "agent-gone" }), f: batch,
			want: lcNewRun(4, "run 3 was lost (agent-gone); running again"), fx: eventEffects{release: true, backoff: 5 * time.Second}},
		{name: "run id taken: the next at once", prev: lcTask(taskLaunched), ev: lcEv(taskFailed, 0, func(ev *hostmgr.TaskEvent) { ev.Reason = hostmgr.ReasonRunIDTaken }), f: batch,
			want: lcNewRun(4, "run id 3 was used already; running as run 4"), fx: eventEffects{release: true}},
		{name: "launch blocked: no failure, a growing backoff", prev: lcTask(taskLaunched), blkd: 1, ev: lcEv(taskLost, 0, func(ev *hostmgr.TaskEvent) { ev.Reason, ev.Message = hostmgr.ReasonLaunchBlocked, "no namespace" }), f: batch,
			want: func(rt *pelotonv1.TaskStatus) {
				lcNewRun(4, "cannot launch: no namespace; trying again in 10s")(rt)
				rt.Reason = hostmgr.ReasonLaunchBlocked
			}, wantBlkd: 2, fx: eventEffects{release: true, backoff: 10 * time.Second}},

		// Ends of a run being stopped.
		{name: "killed by us", prev: lcTask(taskKilling), ev: lcEv(taskKilled, time.Second, func(ev *hostmgr.TaskEvent) { ev.Message = "signal 15" }), f: batch,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(0)(rt)
				rt.State, rt.Reason, rt.Message = taskKilled, "killed", "signal 15"
			}, fx: eventEffects{release: true}},
		{name: "killed by us keeps the reason given", prev: lcTask(taskRunning, func(rt *pelotonv1.TaskStatus) { rt.GoalState, rt.Reason = taskKilled, "job-killed" }), ev: lcEv(taskKilled, time.Second), f: batch,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(0)(rt)
				rt.State = taskKilled
			}, fx: eventEffects{release: true}},
		{name: "a batch task killed by us that exits zero succeeded", prev: lcTask(taskKilling), ev: lcEv(taskSucceeded, time.Second), f: batch,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(0)(rt)
				rt.State, rt.Reason, rt.Message = taskSucceeded, "exit-zero", ""
			}, fx: eventEffects{release: true}},
		{name: "a service killed by us that exits zero is killed", prev: lcTask(taskKilling), ev: lcEv(taskSucceeded, time.Second), f: service,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(0)(rt)
				rt.State, rt.Reason = taskKilled, "killed"
			}, fx: eventEffects{release: true}},
		{name: "a daemon whose host left frees its slot", prev: lcTask(taskKilling, func(rt *pelotonv1.TaskStatus) { rt.Reason, rt.BoundHost = "host-removed", "h1" }), ev: lcEv(taskKilled, time.Second), f: daemon,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(0)(rt)
				rt.State, rt.BoundHost = taskKilled, ""
			}, fx: eventEffects{release: true}},
		{name: "preempted: pending again, no failure", prev: lcTask(taskPreempting, func(rt *pelotonv1.TaskStatus) { rt.Reason = "preempted-for-x" }), ev: lcEv(taskKilled, time.Second), f: batch,
			want: lcNewRun(4, "run 3 was preempted (preempted-for-x); pending again"), fx: eventEffects{release: true}},
		{name: "evicted (the backend preempted it): a service pending again, no failure, no backoff", prev: lcTask(taskRunning),
			ev: lcEv(taskPreempted, time.Second, func(ev *hostmgr.TaskEvent) { ev.Reason, ev.Message = "evicted", "evicted: low on memory" }), f: service,
			want: func(rt *pelotonv1.TaskStatus) {
				lcNewRun(4, "run 3 was preempted (evicted: low on memory); pending again")(rt)
				rt.Reason = "evicted"
			}, fx: eventEffects{release: true}},
		{name: "evicted: a batch task with no failures to spare pending again", prev: lcTask(taskLaunched, func(rt *pelotonv1.TaskStatus) { rt.FailureCount = 0 }),
			ev: lcEv(taskPreempted, time.Second, func(ev *hostmgr.TaskEvent) { ev.Reason, ev.Message = "evicted", "evicted: drained" }), f: batch,
			want: func(rt *pelotonv1.TaskStatus) {
				lcNewRun(4, "run 3 was preempted (evicted: drained); pending again")(rt)
				rt.Reason, rt.FailureCount = "evicted", 0
			}, fx: eventEffects{release: true}},
		{name: "evicted while we kill it: killed", prev: lcTask(taskKilling, func(rt *pelotonv1.TaskStatus) { rt.GoalState = taskKilled }),
			ev: lcEv(taskPreempted, time.Second, func(ev *hostmgr.TaskEvent) { ev.Reason, ev.Message = "evicted", "evicted: drained" }), f: service,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(0)(rt)
				rt.State, rt.Reason, rt.Message = taskKilled, "killed", "evicted: drained"
			}, fx: eventEffects{release: true}},
		{name: "a preempted run that succeeded meanwhile is a success", prev: lcTask(taskPreempting), ev: lcEv(taskSucceeded, time.Second), f: batch,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(0)(rt)
				rt.State, rt.Reason, rt.Message = taskSucceeded, "exit-zero", ""
			}, fx: eventEffects{release: true}},
		{name: "restarted: the desired run follows", prev: lcTask(taskKilling, func(rt *pelotonv1.TaskStatus) { rt.DesiredRunId, rt.DesiredSpecVersion = 4, 3 }), ev: lcEv(taskKilled, time.Second), f: service,
			want: func(rt *pelotonv1.TaskStatus) {
				lcNewRun(4, "run 3 ended (KILLED); restarting")(rt)
				rt.SpecVersion, rt.DesiredSpecVersion = 3, 0
			}, fx: eventEffects{release: true}},
		{name: "restarted in place: the new run takes the held room on its host", prev: lcTask(taskKilling, func(rt *pelotonv1.TaskStatus) { rt.DesiredRunId, rt.RestartInPlace = 4, true }), ev: lcEv(taskKilled, time.Second), f: service,
			want: func(rt *pelotonv1.TaskStatus) {
				lcNewRun(4, "run 3 ended (KILLED); restarting")(rt)
				rt.RestartInPlace = false
			}, fx: eventEffects{release: true, heldFor: resmgr.RunTaskID("j", 4, 4), inPlace: "h1"}},
		{name: "a restart cancelled by a kill: the held room is given back", prev: lcTask(taskKilling, func(rt *pelotonv1.TaskStatus) { rt.DesiredRunId, rt.RestartInPlace, rt.GoalState = 4, true, taskKilled }), ev: lcEv(taskKilled, time.Second), f: service,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(0)(rt)
				rt.State, rt.Reason = taskKilled, "killed"
			}, fx: eventEffects{release: true, heldFor: resmgr.RunTaskID("j", 4, 4)}},

		// Ends of a long-running task.
		{name: "a service's run ended quickly: a longer backoff", prev: lcTask(taskRunning), streak: 1, ev: lcEv(taskFailed, time.Second, func(ev *hostmgr.TaskEvent) { ev.Message, ev.ExitCode = "crash", 3 }), f: service,
			want: func(rt *pelotonv1.TaskStatus) {
				lcNewRun(4, "run 3 ended (FAILED, crash); restarting in 2s")(rt)
				rt.FailureCount, rt.ExitCode = 2, 3
			}, wantStreak: 2, fx: eventEffects{release: true, backoff: 2 * time.Second}},
		{name: "a service's run that stayed up starts the streak again", prev: lcTask(taskRunning), streak: 5, ev: lcEv(taskFailed, stableRun, func(ev *hostmgr.TaskEvent) { ev.Message = "crash" }), f: service,
			want: func(rt *pelotonv1.TaskStatus) {
				lcNewRun(4, "run 3 ended (FAILED, crash); restarting in 1s")(rt)
				rt.FailureCount = 2
			}, wantStreak: 1, fx: eventEffects{release: true, backoff: time.Second}},
		{name: "a service's lost run is no failure", prev: lcTask(taskRunning), ev: lcEv(taskLost, time.Second, func(ev *hostmgr.TaskEvent) { ev.Message = "gone" }), f: service,
			want: lcNewRun(4, "run 3 ended (LOST, gone); restarting in 1s"), wantStreak: 1, fx: eventEffects{release: true, backoff: time.Second}},
		{name: "a service's success runs again too", prev: lcTask(taskRunning), ev: lcEv(taskSucceeded, time.Second, func(ev *hostmgr.TaskEvent) { ev.Message = "done" }), f: service,
			want: func(rt *pelotonv1.TaskStatus) {
				lcNewRun(4, "run 3 ended (SUCCEEDED, done); restarting in 1s")(rt)
				rt.FailureCount = 2
			}, wantStreak: 1, fx: eventEffects{release: true, backoff: time.Second}},

		// Revoked and foreign runs.
		{name: "revoked: pending again as preempted work", prev: lcTask(taskRunning), ev: lcEv(taskKilled, time.Second), f: revoked,
			want: func(rt *pelotonv1.TaskStatus) {
				lcNewRun(4, "run 3 was revoked: its host ran hot and its agent killed it (QoS); pending again")(rt)
				rt.Reason = hostmgr.ReasonQoSRevoked
			}, fx: eventEffects{release: true}},
		{name: "revoked while being killed: killed", prev: lcTask(taskRunning, func(rt *pelotonv1.TaskStatus) { rt.GoalState = taskKilled }), ev: lcEv(taskKilled, time.Second), f: revoked,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(0)(rt)
				rt.State, rt.Reason = taskKilled, "killed"
			}, fx: eventEffects{release: true}},
		{name: "a foreign pod deleted by someone else is lost", prev: lcTask(taskRunning), ev: lcEv(taskKilled, time.Second, func(ev *hostmgr.TaskEvent) { ev.Reason, ev.Message = "deleted", "by kubectl" }), f: foreign,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(0)(rt)
				rt.State, rt.Reason, rt.Message = taskLost, "deleted", "by kubectl"
			}, fx: eventEffects{release: true}},
		{name: "a foreign pod that failed stays failed", prev: lcTask(taskRunning), ev: lcEv(taskFailed, time.Second, func(ev *hostmgr.TaskEvent) { ev.Reason, ev.ExitCode = "exited", 1 }), f: foreign,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(1)(rt)
				rt.State, rt.Reason = taskFailed, "exited"
			}, fx: eventEffects{release: true}},
		{name: "a foreign pod preempted", prev: lcTask(taskPreempting, func(rt *pelotonv1.TaskStatus) { rt.Reason = "preempted-for-x" }), ev: lcEv(taskKilled, time.Second), f: foreign,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(0)(rt)
				rt.State, rt.Message = taskKilled, "preempted; the pod was deleted"
			}, fx: eventEffects{release: true}},
		{name: "a foreign pod killed by us", prev: lcTask(taskKilling, func(rt *pelotonv1.TaskStatus) { rt.DesiredRunId = 4 }), ev: lcEv(taskKilled, time.Second, func(ev *hostmgr.TaskEvent) { ev.Message = "deleted" }), f: foreign,
			want: func(rt *pelotonv1.TaskStatus) {
				ended(0)(rt)
				rt.State, rt.Reason, rt.Message, rt.DesiredRunId = taskKilled, "killed", "deleted", 0
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
		via        []taskState
	}{
		{name: "running", ev: lcEv(taskRunning, 0), f: batch, persist: true},
		{name: "running, superseded: memory only", ev: lcEv(taskRunning, 0), f: batch, superseded: true},
		{name: "an end, superseded: written", ev: lcEv(taskFailed, 0), f: batch, superseded: true, persist: true},
		{name: "lost: through LOST", ev: lcEv(taskLost, 0), f: batch, persist: true, via: []taskState{taskLost}},
		{name: "launch blocked: not lost", ev: lcEv(taskLost, 0, func(ev *hostmgr.TaskEvent) { ev.Reason = hostmgr.ReasonLaunchBlocked }), f: batch, persist: true},
		{name: "a foreign pod lost: its end is final", ev: lcEv(taskLost, 0), f: foreign, persist: true},
		{name: "revoked: through KILLED", ev: lcEv(taskKilled, 0), f: revoked, persist: true, via: []taskState{taskKilled}},
	} {
		persist, via := eventWrite(tc.ev, tc.f, tc.superseded)
		if persist != tc.persist || len(via) != len(tc.via) || (len(via) == 1 && via[0] != tc.via[0]) {
			t.Errorf("%s: persist %v via %v; want %v %v", tc.name, persist, via, tc.persist, tc.via)
		}
	}
}
