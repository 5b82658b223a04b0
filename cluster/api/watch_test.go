package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func isTerminalTask(s pelotonv1.TaskState) bool {
	switch s {
	case pelotonv1.TaskState_SUCCEEDED, pelotonv1.TaskState_FAILED, pelotonv1.TaskState_KILLED, pelotonv1.TaskState_LOST:
		return true
	}
	return false
}

// WatchTasks sends each instance, the synced marker, then the changes
// until every instance has ended; what it last sent of each instance is
// what ListTasks answers then.
func TestWatchTasksSendsStateThenChanges(t *testing.T) {
	s := startArchiveStack(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	spec := batchSpec("watched", nil)
	spec.DefaultSpec.Command = []string{"sleep", "0.3"}
	r, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := s.tasks.WatchTasks(ctx, &pelotonv1.WatchTasksRequest{JobId: r.JobId})
	if err != nil {
		t.Fatal(err)
	}
	last := map[uint32]*pelotonv1.Task{}
	synced := false
	states := map[uint32][]pelotonv1.TaskState{}
	for !synced || len(last) < 3 || !allEnded(last) {
		c, err := stream.Recv()
		if err != nil {
			t.Fatalf("recv: %v (last %v)", err, last)
		}
		if c.Synced {
			if synced {
				t.Fatal("a second synced marker")
			}
			synced = true
			if len(last) != 3 {
				t.Fatalf("initial state has %d instances, want 3", len(last))
			}
			continue
		}
		if c.Task.GetSpec() != nil {
			t.Fatalf("instance %d sent with its spec", c.Task.InstanceId)
		}
		last[c.Task.InstanceId] = c.Task
		states[c.Task.InstanceId] = append(states[c.Task.InstanceId], c.Task.Status.State)
	}
	lt, err := s.tasks.ListTasks(ctx, &pelotonv1.ListTasksRequest{JobId: r.JobId})
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range lt.Tasks {
		if got := last[tk.InstanceId].Status.State; got != tk.Status.State {
			t.Errorf("instance %d: watch last said %v, ListTasks %v", tk.InstanceId, got, tk.Status.State)
		}
		if n := len(states[tk.InstanceId]); n < 2 {
			t.Errorf("instance %d: %d messages (%v), want its start and its end", tk.InstanceId, n, states[tk.InstanceId])
		}
	}
	if got := last[2].Status.State; got != pelotonv1.TaskState_FAILED {
		t.Errorf("instance 2 ended %v, want FAILED", got)
	}
}

func allEnded(ts map[uint32]*pelotonv1.Task) bool {
	for _, t := range ts {
		if !isTerminalTask(t.Status.State) {
			return false
		}
	}
	return true
}

// WatchJobs of one job sends it, the marker, and its changes until it
// ends; deleting it sends deleted. Watching every job sees a job created
// after the watch began.
func TestWatchJobsFollowsAJobToItsEndAndDeletion(t *testing.T) {
	s := startArchiveStack(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	all, err := s.jobs.WatchJobs(ctx, &pelotonv1.WatchJobsRequest{Labels: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := all.Recv(); err != nil || !c.Synced {
		t.Fatalf("first message of a watch of no jobs: %v, %v; want the synced marker", c, err)
	}
	other, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: batchSpec("other", map[string]string{"team": "b"})})
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: batchSpec("mine", map[string]string{"team": "a"})})
	if err != nil {
		t.Fatal(err)
	}
	one, err := s.jobs.WatchJobs(ctx, &pelotonv1.WatchJobsRequest{JobIds: []string{r.JobId}})
	if err != nil {
		t.Fatal(err)
	}
	first, err := one.Recv()
	if err != nil || first.Job.GetId() != r.JobId || first.Job.GetSpec().GetDefaultSpec() == nil {
		t.Fatalf("first message: %v, %v; want job %s with its whole spec", first, err, r.JobId)
	}
	if c, err := one.Recv(); err != nil || !c.Synced {
		t.Fatalf("second message: %v, %v; want the synced marker", c, err)
	}
	var end *pelotonv1.Job
	for end == nil {
		c, err := one.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if c.Job.GetId() != r.JobId {
			t.Fatalf("a watch of %s sent job %s", r.JobId, c.Job.GetId())
		}
		if c.Job.Status.State == pelotonv1.JobState_JOB_FAILED {
			end = c.Job
		}
	}
	if end.Status.TaskCounts["FAILED"] != 1 || end.Status.TaskCounts["SUCCEEDED"] != 2 {
		t.Errorf("last job sent counts %v, want 2 SUCCEEDED and 1 FAILED", end.Status.TaskCounts)
	}
	// The watch of every job with team=a saw mine, never other.
	testutil.Eventually(t, 30*time.Second, "the all-jobs watch sees mine end", func() error {
		c, err := all.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if c.Job.GetId() == other.JobId {
			t.Fatalf("a watch of team=a sent job %s of team=b", other.JobId)
		}
		if c.Job.GetId() == r.JobId && c.Job.Status.State == pelotonv1.JobState_JOB_FAILED {
			return nil
		}
		return fmt.Errorf("%v", c.Job.GetStatus().GetState())
	})
	if _, err := s.jobs.DeleteJob(ctx, &pelotonv1.DeleteJobRequest{JobId: r.JobId}); err != nil {
		t.Fatal(err)
	}
	for {
		c, err := one.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if c.Deleted {
			if c.Job.GetId() != r.JobId {
				t.Fatalf("deleted %q, want %s", c.Job.GetId(), r.JobId)
			}
			break
		}
	}
}

// A watch of a job that does not exist is NotFound, of an empty job id
// InvalidArgument; a server that ends its streams ends watches with
// Unavailable; a deleted job ends its tasks' watch with NotFound.
func TestWatchEnds(t *testing.T) {
	s := startArchiveStack(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	recvCode := func(st interface {
		Recv() (*pelotonv1.TaskChange, error)
	}) codes.Code {
		for {
			if _, err := st.Recv(); err != nil {
				return status.Code(err)
			}
		}
	}
	st, err := s.tasks.WatchTasks(ctx, &pelotonv1.WatchTasksRequest{JobId: "nope"})
	if err == nil {
		if code := recvCode(st); code != codes.NotFound {
			t.Errorf("watch of a missing job: %v, want NotFound", code)
		}
	}
	st, err = s.tasks.WatchTasks(ctx, &pelotonv1.WatchTasksRequest{})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("watch with no job id: %v, want InvalidArgument", err)
	}
	id := s.finished(t, batchSpec("gone", nil))
	st, err = s.tasks.WatchTasks(ctx, &pelotonv1.WatchTasksRequest{JobId: id})
	if err != nil {
		t.Fatal(err)
	}
	for {
		c, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if c.Synced {
			break
		}
	}
	if _, err := s.jobs.DeleteJob(ctx, &pelotonv1.DeleteJobRequest{JobId: id}); err != nil {
		t.Fatal(err)
	}
	if code := recvCode(st); code != codes.NotFound {
		t.Errorf("watch of a deleted job ended %v, want NotFound", code)
	}
	r, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: batchSpec("ending", nil)})
	if err != nil {
		t.Fatal(err)
	}
	st, err = s.tasks.WatchTasks(ctx, &pelotonv1.WatchTasksRequest{JobId: r.JobId})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	s.srv.EndStreams()
	if code := recvCode(st); code != codes.Unavailable {
		t.Errorf("watch ended by EndStreams: %v, want Unavailable", code)
	}
}

// Over REST, GET /v1/jobs/{id}/tasks:watch streams one JSON object per
// line, the synced marker at once; a stack that stops ends the stream
// with the error saying to watch again, and stops without waiting for it.
func TestWatchTasksOverRESTEndsWhenTheStackStops(t *testing.T) {
	base, stop := startSimStack(t, t.TempDir())
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	job := `{"name":"w","type":"SERVICE","pool":"/default","instanceCount":2,"defaultSpec":{"command":["sleep","600"],"resources":{"cpu":0.1,"memoryMb":8}}}`
	resp, err := http.Post(base+"/v1/jobs", "application/json", strings.NewReader(job))
	if err != nil {
		t.Fatal(err)
	}
	var created struct{ JobId string }
	err = json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	if err != nil || created.JobId == "" {
		t.Fatalf("create: %d %v", resp.StatusCode, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/jobs/"+created.JobId+"/tasks:watch", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("watch: %d", resp.StatusCode)
	}
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(nil, 1<<20)
	var msg struct {
		Result *struct {
			Task   *struct{ InstanceId uint32 }
			Synced bool
		}
		Error *struct {
			Code    int
			Message string
		}
	}
	n := 0
	for lines.Scan() {
		if err := json.Unmarshal(lines.Bytes(), &msg); err != nil || msg.Result == nil {
			t.Fatalf("line %q: %v", lines.Text(), err)
		}
		if msg.Result.Synced {
			break
		}
		n++
	}
	if n != 2 {
		t.Fatalf("%d instances before the synced marker, want 2", n)
	}
	stop()
	stopped = true
	var last string
	for lines.Scan() {
		last = lines.Text()
	}
	if err := json.Unmarshal([]byte(last), &msg); err != nil || msg.Error == nil || !strings.Contains(msg.Error.Message, "watch again") {
		t.Fatalf("last line after the stack stopped: %q; want the error saying to watch again", last)
	}
}

// A job archived while watched: its tasks' watch ends without an error
// (nothing more can change), and a watch of it sends it as the archive
// has it, marked archived, not deleted.
func TestWatchOfAJobThatIsArchived(t *testing.T) {
	h := openBolt(t)
	s := startArchiveStack(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id := s.finished(t, batchSpec("archived-while-watched", nil))
	live := s.view(t, id)
	tasks, err := s.tasks.WatchTasks(ctx, &pelotonv1.WatchTasksRequest{JobId: id})
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := s.jobs.WatchJobs(ctx, &pelotonv1.WatchJobsRequest{JobIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		c, err := tasks.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if c.Synced {
			break
		}
	}
	for {
		c, err := jobs.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if c.Synced {
			break
		}
	}
	s.archive(t, h, live)
	for {
		_, err := tasks.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the tasks' watch of an archived job ended with %v, want its end", err)
		}
	}
	c, err := jobs.Recv()
	if err != nil || c.Deleted || !c.Job.GetStatus().GetArchived() {
		t.Fatalf("the job's watch after it was archived sent %v, %v; want the job marked archived", c, err)
	}
}
