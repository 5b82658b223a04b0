package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"sigs.k8s.io/yaml"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func helloJob() *pelotonv1.Job {
	return makeJob("7f3c").Name("hello").Instances(3).
		State(pelotonv1.JobState_JOB_RUNNING).
		Tasks("SUCCEEDED", 1).Tasks("RUNNING", 2).Tasks("PENDING", 0).
		Created(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)).
		Obj()
}

func render(t *testing.T, format string, m proto.Message, table func(io.Writer, bool)) string {
	t.Helper()
	var buf bytes.Buffer
	if err := (&printer{w: &buf, format: format}).object(m, table); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func TestJobTable(t *testing.T) {
	job := helloJob()
	got := render(t, formatTable, job, func(w io.Writer, wide bool) {
		writeJobTable(w, []*pelotonv1.Job{job}, wide)
	})
	want := "" +
		"ID     NAME    TYPE    POOL       STATE         INSTANCES   TASKS                   CREATED\n" +
		"7f3c   hello   BATCH   /default   JOB_RUNNING   3           RUNNING=2 SUCCEEDED=1   2026-03-04T05:06:07Z\n"
	if got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

func TestJobJSONAndYAML(t *testing.T) {
	job := helloJob()
	got := render(t, formatJSON, job, nil)
	if !strings.HasPrefix(got, "{\n  \"id\": \"7f3c\",\n") {
		t.Errorf("json is not indented protojson with camelCase names:\n%s", got)
	}
	if !strings.Contains(got, `"instanceCount": 3`) || !strings.Contains(got, `"createTime": "2026-03-04T05:06:07Z"`) {
		t.Errorf("json lacks camelCase fields:\n%s", got)
	}
	// Zero values are printed too: scripts read any field without knowing
	// which values protobuf would leave out.
	for _, want := range []string{`"description": ""`, `"goalState": "JOB_STATE_UNSPECIFIED"`, `"message": ""`} {
		if !strings.Contains(got, want) {
			t.Errorf("json lacks the zero-valued field %s:\n%s", want, got)
		}
	}
	back := &pelotonv1.Job{}
	if err := protojson.Unmarshal([]byte(got), back); err != nil || !proto.Equal(back, job) {
		t.Errorf("json does not round-trip: %v\n%s", err, got)
	}

	y := render(t, formatYAML, job, nil)
	if !strings.Contains(y, "instanceCount: 3\n") || !strings.Contains(y, "id: 7f3c\n") {
		t.Errorf("yaml:\n%s", y)
	}
	js, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	back = &pelotonv1.Job{}
	if err := protojson.Unmarshal(js, back); err != nil || !proto.Equal(back, job) {
		t.Errorf("yaml does not round-trip: %v\n%s", err, y)
	}
}

func taskList() *pelotonv1.ListTasksResponse {
	t0 := makeTask("7f3c", 0, pelotonv1.TaskState_SUCCEEDED)
	t0.Status.Host = "host-0"
	t0.Status.Reason = "exit-zero"
	t1 := makeTask("7f3c", 1, pelotonv1.TaskState_FAILED)
	t1.Status.Host = "host-1"
	t1.Status.ExitCode = 3
	t1.Status.Reason = "exit-nonzero"
	t1.Status.FailureCount = 2
	t1.Status.Message = "exited with\tcode 3"
	t2 := makeTask("7f3c", 2, pelotonv1.TaskState_PENDING)
	t2.Status.PendingReason = "waiting for admission in pool /default"
	return &pelotonv1.ListTasksResponse{Tasks: []*pelotonv1.Task{t0, t1, t2}}
}

func TestTaskTable(t *testing.T) {
	resp := taskList()
	table := func(w io.Writer, wide bool) { writeTaskTable(w, resp.GetTasks(), wide) }
	got := render(t, formatTable, resp, table)
	want := "" +
		"INSTANCE   TASK ID    STATE       HOST     EXIT   REASON\n" +
		"0          7f3c-0-1   SUCCEEDED   host-0   0      exit-zero\n" +
		"1          7f3c-1-1   FAILED      host-1   3      exit-nonzero\n" +
		"2          7f3c-2-1   PENDING     -        -      waiting for admission in pool /default\n"
	if got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
	wide := render(t, formatWide, resp, table)
	lines := strings.Split(wide, "\n")
	for _, col := range []string{"GOAL", "RUN", "FAILURES", "MESSAGE"} {
		if !strings.Contains(lines[0], col) {
			t.Errorf("wide header %q lacks %s", lines[0], col)
		}
	}
	if !strings.Contains(lines[2], "exited with code 3") || !strings.Contains(lines[2], "TASK_STATE_UNSPECIFIED   1     2") {
		t.Errorf("wide row = %q", lines[2])
	}
}

func TestListJSONAndYAML(t *testing.T) {
	var buf bytes.Buffer
	p := &printer{w: &buf, format: formatJSON}
	resp := taskList()
	if err := p.list(resp, "tasks", len(resp.Tasks), nil); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Tasks []map[string]any `json:"tasks"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil || len(doc.Tasks) != 3 {
		t.Fatalf("json list = %v, %s", err, buf.String())
	}
	if doc.Tasks[1]["taskId"] != "7f3c-1-1" {
		t.Errorf("tasks[1] = %v", doc.Tasks[1])
	}
	// Instance 0 has its instanceId, and a task that exited 0 its exitCode.
	if id, ok := doc.Tasks[0]["instanceId"]; !ok || id != float64(0) {
		t.Errorf("tasks[0] has no instanceId 0: %v", doc.Tasks[0])
	}
	if st, _ := doc.Tasks[0]["status"].(map[string]any); st == nil || st["exitCode"] != float64(0) {
		t.Errorf("tasks[0].status has no exitCode 0: %v", doc.Tasks[0])
	}
	buf.Reset()
	p = &printer{w: &buf, format: formatYAML}
	if err := p.list(resp, "tasks", len(resp.Tasks), nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "- instanceId: 0\n") && !strings.Contains(buf.String(), "  instanceId: 0\n") {
		t.Errorf("yaml lacks instanceId: 0:\n%s", buf.String())
	}

	// Empty lists are still lists.
	for format, want := range map[string]string{
		formatJSON: "{\n  \"tasks\": []\n}\n",
		formatYAML: "tasks: []\n",
	} {
		buf.Reset()
		p := &printer{w: &buf, format: format}
		if err := p.list(&pelotonv1.ListTasksResponse{}, "tasks", 0, nil); err != nil {
			t.Fatal(err)
		}
		if buf.String() != want {
			t.Errorf("%s empty list = %q, want %q", format, buf.String(), want)
		}
	}
}

func TestPoolAndHostTables(t *testing.T) {
	var buf bytes.Buffer
	writePoolTable(&buf, []*pelotonv1.Pool{{
		Path: "/org/team",
		Spec: &pelotonv1.PoolSpec{
			Reservation: &pelotonv1.Resources{Cpu: 2, MemoryMb: 2048},
			Share:       &pelotonv1.Resources{Cpu: 1, MemoryMb: 1},
		},
		Status: &pelotonv1.PoolStatus{
			Entitlement: &pelotonv1.Resources{Cpu: 4, MemoryMb: 4096},
			Allocation:  &pelotonv1.Resources{Cpu: 0.5, MemoryMb: 64},
			Demand:      &pelotonv1.Resources{},
		},
	}}, false)
	want := "" +
		"PATH\tRESERVATION\tLIMIT\tSHARE\tENTITLEMENT\tALLOCATION\tDEMAND\n" +
		"/org/team\t2/2048\tunlimited\t1/1\t4/4096\t0.5/64\t0/0\n"
	if buf.String() != want {
		t.Errorf("pool rows:\n%q\nwant\n%q", buf.String(), want)
	}
	// Limits are per kind: a kind left unset is unlimited, not 0.
	buf.Reset()
	writePoolTable(&buf, []*pelotonv1.Pool{{Path: "/bc", Spec: &pelotonv1.PoolSpec{Limit: &pelotonv1.Resources{Cpu: 30}}}}, false)
	if want := "/bc\t-\t30/unlimited\t-\t-\t-\t-\n"; !strings.HasSuffix(buf.String(), want) {
		t.Errorf("cpu-only limit row: %q, want %q", buf.String(), want)
	}

	buf.Reset()
	writeHostTable(&buf, []*pelotonv1.Host{{
		Name:      "host-0",
		State:     pelotonv1.HostState_HOST_UP,
		Capacity:  &pelotonv1.Resources{Cpu: 8, MemoryMb: 16384},
		Allocated: &pelotonv1.Resources{Cpu: 1.5, MemoryMb: 512},
		Labels:    map[string]string{"zone": "a", "rack": "r1"},
		TaskCount: 3,
		Usage: &pelotonv1.HostUsage{Cpu: 0.934, MemoryUsedMb: 120,
			ReceiveTime: timestamppb.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))},
		Slack: &pelotonv1.Resources{Cpu: 0.4, MemoryMb: 200},
		Zone:  pelotonv1.HostZone_HOST_ZONE_ORANGE,
	}, {
		Name:               "host-1",
		State:              pelotonv1.HostState_HOST_DRAINING,
		Capacity:           &pelotonv1.Resources{Cpu: 8, MemoryMb: 16384},
		Allocated:          &pelotonv1.Resources{Cpu: 1, MemoryMb: 64},
		TaskCount:          2,
		MaintenanceMessage: "draining: 2 tasks left",
	}}, false, time.Date(2026, 1, 1, 0, 0, 3, 0, time.UTC))
	want = "" +
		"NAME\tSTATE\tPARTITION\tZONE\tCPU\tMEM\tTASKS\tCPU USED\tMEM USED\tREPORTED\tSLACK\tLABELS\tMESSAGE\n" +
		"host-0\tHOST_UP\t-\torange\t1.5/8\t512/16384\t3\t0.93\t120\t3s ago\t0.4/200\track=r1,zone=a\t-\n" +
		"host-1\tHOST_DRAINING\t-\t-\t1/8\t64/16384\t2\t-\t-\t-\t-\t-\tdraining: 2 tasks left\n"
	if buf.String() != want {
		t.Errorf("host rows:\n%q\nwant\n%q", buf.String(), want)
	}
}

func TestOutputFlagValidated(t *testing.T) {
	r := runCLI(t, "", "job", "get", "x", "-o", "xml")
	if r.code != exitUsage || !strings.Contains(r.stderr, `invalid --output "xml"`) {
		t.Errorf("-o xml: code %d, stderr %q", r.code, r.stderr)
	}
}

func TestInstanceRanges(t *testing.T) {
	for _, tc := range []struct {
		in   []uint32
		want string
	}{
		{nil, ""},
		{[]uint32{4}, "4"},
		{[]uint32{3, 0, 1, 2, 7, 9, 10, 9}, "0-3,7,9-10"},
		{[]uint32{0, 2, 4, 6, 8, 10, 12, 14, 16, 18}, "0,2,4,6,8,10,12,14,..."},
	} {
		if got := instanceRanges(tc.in); got != tc.want {
			t.Errorf("instanceRanges(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestUpdateTableAndProgress(t *testing.T) {
	created := timestamppb.New(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))
	forward := &pelotonv1.Update{Id: "u1", JobId: "7f3c", FromVersion: 1, ToVersion: 2, Cause: "update",
		Spec: &pelotonv1.UpdateSpec{BatchSize: 2},
		Status: &pelotonv1.UpdateStatus{State: pelotonv1.UpdateState_UPDATE_ROLLING_FORWARD, InstancesTotal: 10,
			InstancesDone: 4, InstancesFailed: 1, InstancesCurrent: []uint32{5, 6}, CreateTime: created,
			Message: "waiting for the SLA: 1 of 1 instances unavailable"}}
	back := &pelotonv1.Update{Id: "u0", JobId: "7f3c", FromVersion: 2, ToVersion: 3, RollbackVersion: 4, Cause: "update",
		Status: &pelotonv1.UpdateStatus{State: pelotonv1.UpdateState_UPDATE_ROLLED_BACK, InstancesTotal: 3, InstancesDone: 3,
			CreateTime: created, CompletionTime: created}}
	restart := &pelotonv1.Update{Id: "u2", JobId: "7f3c", FromVersion: 4, ToVersion: 4, Cause: "restart",
		Status: &pelotonv1.UpdateStatus{State: pelotonv1.UpdateState_UPDATE_PAUSED, InstancesTotal: 3}}
	var buf bytes.Buffer
	writeUpdateTable(&buf, []*pelotonv1.Update{forward, back, restart}, false)
	want := "" +
		"ID\tJOB\tSTATE\tVERSIONS\tDONE\tFAILED\tCURRENT\tMESSAGE\n" +
		"u1\t7f3c\tUPDATE_ROLLING_FORWARD\t1->2\t4/10\t1\t5-6\twaiting for the SLA: 1 of 1 instances unavailable\n" +
		"u0\t7f3c\tUPDATE_ROLLED_BACK\t2->3->4\t3/3\t0\t-\t-\n" +
		"u2\t7f3c\tUPDATE_PAUSED\t4\t0/3\t0\t-\t-\n"
	if buf.String() != want {
		t.Errorf("update rows:\n%q\nwant\n%q", buf.String(), want)
	}
	buf.Reset()
	writeUpdateTable(&buf, []*pelotonv1.Update{forward, back}, true)
	want = "" +
		"ID\tJOB\tSTATE\tVERSIONS\tDONE\tFAILED\tCURRENT\tCAUSE\tBATCH\tCREATED\tCOMPLETED\tMESSAGE\n" +
		"u1\t7f3c\tUPDATE_ROLLING_FORWARD\t1->2\t4/10\t1\t5-6\tupdate\t2\t2026-03-04T05:06:07Z\t-\twaiting for the SLA: 1 of 1 instances unavailable\n" +
		"u0\t7f3c\tUPDATE_ROLLED_BACK\t2->3->4\t3/3\t0\t-\tupdate\t1\t2026-03-04T05:06:07Z\t2026-03-04T05:06:07Z\t-\n"
	if buf.String() != want {
		t.Errorf("wide update rows:\n%q\nwant\n%q", buf.String(), want)
	}

	if got, want := progressLine(forward), "UPDATE_ROLLING_FORWARD 4/10 done, 1 failed, replacing 5-6: waiting for the SLA: 1 of 1 instances unavailable"; got != want {
		t.Errorf("progress line = %q, want %q", got, want)
	}
	if got, want := updateSummary(forward), "update u1 of job 7f3c: spec version 1 -> 2, 10 instances to replace, batch size 2, UPDATE_ROLLING_FORWARD"; got != want {
		t.Errorf("summary = %q, want %q", got, want)
	}
}

// The long-running columns show only what is set: a batch task has no
// health, bound host or ports; a task being restarted onto a new spec
// shows both versions.
func TestTaskLongRunningColumns(t *testing.T) {
	svc := makeTask("7f3c", 0, pelotonv1.TaskState_RUNNING)
	svc.Status.Host, svc.Status.BoundHost = "host-1", "host-1"
	svc.Status.SpecVersion, svc.Status.DesiredSpecVersion = 2, 3
	svc.Status.Health = pelotonv1.HealthState_HEALTHY
	svc.Status.Ports = map[string]uint32{"http": 31000, "admin": 8081}
	svc.Status.Usage = &pelotonv1.TaskUsage{Cpu: 1.004, MemoryUsedMb: 64, LatencyP99Seconds: 0.0125}
	batch := makeTask("7f3c", 1, pelotonv1.TaskState_RUNNING)
	batch.Status.SpecVersion = 1
	noReading := makeTask("7f3c", 2, pelotonv1.TaskState_RUNNING)
	noReading.Status.Usage = &pelotonv1.TaskUsage{Cpu: 0.5, MemoryUsedMb: 32, LatencyError: "no requests in the window"}
	var buf bytes.Buffer
	writeTaskColumns(&buf, []*pelotonv1.Task{svc, batch, noReading}, false, true)
	want := "" +
		"INSTANCE\tTASK ID\tSTATE\tHOST\tEXIT\tREASON\tSPEC VERSION\tHEALTH\tBOUND HOST\tPORTS\tCPU USED\tMEM USED\tP99\n" +
		"0\t7f3c-0-1\tRUNNING\thost-1\t-\t-\t2->3\tHEALTHY\thost-1\tadmin=8081,http=31000\t1.00\t64\t12.5ms\n" +
		"1\t7f3c-1-1\tRUNNING\t-\t-\t-\t1\t-\t-\t-\t-\t-\t-\n" +
		"2\t7f3c-2-1\tRUNNING\t-\t-\t-\t-\t-\t-\t-\t0.50\t32\t-\n"
	if buf.String() != want {
		t.Errorf("task rows:\n%q\nwant\n%q", buf.String(), want)
	}
}

// TestLatencyCell: three significant digits in the unit that reads best,
// nothing for no reading.
func TestLatencyCell(t *testing.T) {
	for in, want := range map[float64]string{
		0:           "",
		-1:          "",
		math.NaN():  "",
		0.0125:      "12.5ms",
		0.01:        "10ms",
		0.012345:    "12.3ms",
		0.4:         "400ms",
		0.0009996:   "1ms",
		0.000123456: "123µs",
		1.5:         "1.5s",
		125.4:       "2m5s",
		1e-12:       "1ns",
		1e12:        "1e+12s",
	} {
		if got := latencyCell(in); got != want {
			t.Errorf("latencyCell(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestVersionTable(t *testing.T) {
	created := timestamppb.New(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))
	var buf bytes.Buffer
	writeVersionTable(&buf, []*pelotonv1.JobVersion{
		{Version: 1, CreateTime: created, Cause: "created", Spec: &pelotonv1.JobSpec{InstanceCount: 3,
			DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "300"}, Image: "busybox:1.36"}}},
		{Version: 2, CreateTime: created, Cause: "scaled from 3 to 5 instances", Spec: &pelotonv1.JobSpec{InstanceCount: 5}},
	}, true)
	want := "" +
		"VERSION\tCREATED\tINSTANCES\tCAUSE\tCOMMAND\tIMAGE\n" +
		"1\t2026-03-04T05:06:07Z\t3\tcreated\tsleep 300\tbusybox:1.36\n" +
		"2\t2026-03-04T05:06:07Z\t5\tscaled from 3 to 5 instances\t-\t-\n"
	if buf.String() != want {
		t.Errorf("version rows:\n%q\nwant\n%q", buf.String(), want)
	}
}

// TestTaskListRevocable: a revocable job's tasks say so in a column of
// their own; other lists keep theirs.
func TestTaskListRevocable(t *testing.T) {
	tk := makeTask("r1", 0, pelotonv1.TaskState_RUNNING)
	tk.Status.Host, tk.Status.Revocable = "host-1", true
	var buf bytes.Buffer
	writeTaskTable(&buf, []*pelotonv1.Task{tk}, false)
	want := "" +
		"INSTANCE\tTASK ID\tSTATE\tHOST\tEXIT\tREASON\tREVOCABLE\n" +
		"0\tr1-0-1\tRUNNING\thost-1\t-\t-\tyes\n"
	if buf.String() != want {
		t.Errorf("revocable tasks:\n%q\nwant\n%q", buf.String(), want)
	}
}

// TestSixtyFourBitIntegersPrintAsNumbers: protojson writes int64 and uint64
// as strings; -o json and -o yaml print them as the numbers they are, and
// leave strings that merely look like numbers alone.
func TestSixtyFourBitIntegersPrintAsNumbers(t *testing.T) {
	task := makeTask("j1", 0, pelotonv1.TaskState_RUNNING)
	task.Status.SpecVersion = 3
	task.Status.Message = "56"
	task.Status.Reason = "moved a->b & <back>"
	task.Status.Usage = &pelotonv1.TaskUsage{Cpu: 0.5, MemoryUsedMb: 56}
	task.Status.Ports = map[string]uint32{"http": 31000}
	resp := &pelotonv1.ListTasksResponse{Tasks: []*pelotonv1.Task{task}}

	js := render(t, formatJSON, resp, nil)
	for _, want := range []string{`"memoryUsedMb": 56`, `"specVersion": 3`, `"desiredSpecVersion": 0`, `"message": "56"`, `"http": 31000`, `"cpu": 0.5`, `"reason": "moved a->b & <back>"`} {
		if !strings.Contains(js, want) {
			t.Errorf("json lacks %s:\n%s", want, js)
		}
	}
	if strings.Index(js, `"jobId"`) > strings.Index(js, `"instanceId"`) {
		t.Errorf("json fields are not in the proto's order:\n%s", js)
	}
	back := &pelotonv1.ListTasksResponse{}
	if err := protojson.Unmarshal([]byte(js), back); err != nil || !proto.Equal(back, resp) {
		t.Errorf("json does not round-trip: %v\n%s", err, js)
	}

	y := render(t, formatYAML, resp, nil)
	for _, want := range []string{"memoryUsedMb: 56\n", "specVersion: 3\n", `message: "56"` + "\n"} {
		if !strings.Contains(y, want) {
			t.Errorf("yaml lacks %q:\n%s", want, y)
		}
	}

	// The largest uint64 stays exact: no trip through a float.
	v := &pelotonv1.JobVersion{Version: math.MaxUint64}
	if js := render(t, formatJSON, v, nil); !strings.Contains(js, `"version": 18446744073709551615`) {
		t.Errorf("json of the largest version:\n%s", js)
	}
}
