package e2e

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/hostmgr/mesos/mesostest"
	"github.com/peloton-sched/peloton/internal/testing/kubetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// A substrate that is down never takes the API down: the stack starts and
// serves without its Mesos master or Kubernetes apiserver, says why work
// waits, and goes on when the substrate answers, with no restart.

// logTo makes the stack log to stderr (as the other tests' stacks do) and
// to buf, at info level, for tests that read what it logged.
func logTo(buf *testutil.SyncBuffer) func(*cluster.Config) {
	return func(c *cluster.Config) {
		c.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(os.Stderr, buf), &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
}

// substrateAway checks that /readyz and host list (the CLI, and REST's
// JSON) say that the substrate is not reachable: /readyz and the CLI in
// the words of who, all of them with reasons in the reason.
func (s *stack) substrateAway(who string, reasons ...string) error {
	code, body := s.rest("GET", "/readyz", nil, nil)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, who) {
		return fmt.Errorf("/readyz: %d %q", code, body)
	}
	out, errOut, err := s.runCLI("host", "list")
	if err != nil {
		return fmt.Errorf("host list: %v %s", err, errOut)
	}
	first, _, _ := strings.Cut(out, "\n")
	if !strings.Contains(first, who) {
		return fmt.Errorf("host list:\n%s", out)
	}
	var hosts struct {
		Substrate struct {
			Reachable bool
			Reason    string
		}
	}
	if code, body := s.rest("GET", "/v1/hosts", nil, &hosts); code != http.StatusOK || hosts.Substrate.Reachable || hosts.Substrate.Reason == "" {
		return fmt.Errorf("GET /v1/hosts: %d %s", code, body)
	}
	for _, w := range reasons {
		if !strings.Contains(body, w) || !strings.Contains(first, w) || !strings.Contains(hosts.Substrate.Reason, w) {
			return fmt.Errorf("%q not in /readyz %q, host list %q, /v1/hosts' reason %q", w, body, first, hosts.Substrate.Reason)
		}
	}
	return nil
}

// substrateBack checks that /readyz answers ok and host list says nothing
// of the substrate.
func (s *stack) substrateBack() error {
	if code, body := s.rest("GET", "/readyz", nil, nil); code != http.StatusOK {
		return fmt.Errorf("/readyz: %d %q", code, body)
	}
	if out, _, err := s.runCLI("host", "list"); err != nil || strings.Contains(out, "not reachable") {
		return fmt.Errorf("host list: %v\n%s", err, out)
	}
	return nil
}

// jobWaitsSaying checks that job get and the task list say why the job
// waits, in words that contain want.
func (s *stack) jobWaitsSaying(id, want string) error {
	j, err := s.jobs.GetJob(ctxT(s.t), &pelotonv1.GetJobRequest{JobId: id})
	if err != nil {
		return err
	}
	if msg := j.Job.Status.Message; !strings.Contains(msg, "waits: ") || !strings.Contains(msg, want) {
		return fmt.Errorf("job %s: %s, message %q", id, j.Job.Status.State, msg)
	}
	out, errOut, err := s.runCLI("task", "list", id)
	if err != nil || !strings.Contains(out, want) {
		return fmt.Errorf("task list: %v %s\n%s", err, errOut, out)
	}
	return nil
}

func (s *stack) jobIn(id string, want pelotonv1.JobState) error {
	j, err := s.jobs.GetJob(ctxT(s.t), &pelotonv1.GetJobRequest{JobId: id})
	if err != nil {
		return err
	}
	if j.Job.Status.State != want {
		return fmt.Errorf("job %s is %s (%v, %q), want %s", id, j.Job.Status.State, j.Job.Status.TaskCounts, j.Job.Status.Message, want)
	}
	return nil
}

// countLogged is how many lines of a text log at level contain text.
func countLogged(log, level, text string) int {
	n := 0
	for line := range strings.Lines(log) {
		if strings.Contains(line, "level="+level+" ") && strings.Contains(line, text) {
			n++
		}
	}
	return n
}

// masterGap is how long the Mesos test serves without a master before it
// starts one.
const masterGap = 20 * time.Second

// TestMesosMasterAppearsLater: `peloton up --backend mesos` with nothing
// at --mesos-master serves at once. For the masterGap that follows, the
// API answers, /readyz and host list say the master is not reachable and
// why, and a job submitted meanwhile says it waits for the master. Then
// the protocol test master starts on that address: the stack subscribes,
// the job runs, /readyz is ok; the stack was never restarted, and it
// logged the outage once.
func TestMesosMasterAppearsLater(t *testing.T) {
	if testing.Short() {
		t.Skip("serves without a master for 20s")
	}
	addr := testutil.FreeAddr(t)
	var log testutil.SyncBuffer
	began := time.Now()
	s := startStack(t, t.TempDir(), stackOpts{backend: "mesos", configure: func(c *cluster.Config) {
		c.Mesos = cluster.MesosConfig{Master: "http://" + addr, Role: "peloton"}
		logTo(&log)(c)
	}})
	master := "the mesos master http://" + addr + " is not reachable"
	testutil.Eventually(t, 30*time.Second, "the stack says the master is not reachable", func() error {
		return s.substrateAway(master, "connection refused")
	})
	id := s.createJob(&pelotonv1.JobSpec{Name: "early", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 2,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "0.2"}, Resources: &pelotonv1.Resources{Cpu: 0.5, MemoryMb: 128}}})
	testutil.Eventually(t, 30*time.Second, "the job says it waits for the master", func() error {
		return s.jobWaitsSaying(id, master)
	})
	// The gap is the test's subject, not a wait for a condition: the
	// stack must serve through it.
	<-time.After(time.Until(began.Add(masterGap)))
	if err := s.substrateAway(master); err != nil {
		t.Fatalf("after %s without a master: %v", masterGap, err)
	}
	if err := s.jobWaitsSaying(id, master); err != nil {
		t.Fatalf("after %s without a master: %v", masterGap, err)
	}

	m, err := mesostest.New(mesostest.Config{Agents: []mesostest.AgentSpec{{CPUs: 4, MemMB: 4096}, {CPUs: 4, MemMB: 4096}},
		Listen: addr, Heartbeat: 500 * time.Millisecond, Redeliver: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	testutil.Eventually(t, 60*time.Second, "the job succeeds once the master answers", func() error {
		return s.jobIn(id, pelotonv1.JobState_JOB_SUCCEEDED)
	})
	testutil.Eventually(t, 30*time.Second, "/readyz and host list are fine", s.substrateBack)
	if hl, err := s.hosts.ListHosts(ctxT(t), &pelotonv1.ListHostsRequest{}); err != nil || len(hl.Hosts) != 2 || !hl.Substrate.GetReachable() {
		t.Fatalf("hosts %v, %v: want the master's 2 agents, reachable", hl, err)
	}
	if n := countLogged(log.String(), "WARN", "master is not reachable"); n != 1 {
		t.Errorf("%d warnings of the outage, want 1:\n%s", n, log.String())
	}
}

// TestMesosURLNotAMaster: a --mesos-master that answers with an HTML 404
// page: the stack serves, and /readyz, host list and the log give the
// status and the page's first line, never the page.
func TestMesosURLNotAMaster(t *testing.T) {
	const page = "<!DOCTYPE html>\n<html>\n<head><title>404 Not Found</title></head>\n<body><h1>Not Found</h1>\n<p>Nothing lives here.</p></body>\n</html>\n"
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, page)
	}))
	defer web.Close()
	var log testutil.SyncBuffer
	s := startStack(t, t.TempDir(), stackOpts{backend: "mesos", configure: func(c *cluster.Config) {
		c.Mesos = cluster.MesosConfig{Master: web.URL, Role: "peloton"}
		logTo(&log)(c)
	}})
	want := "the mesos master " + web.URL + " is not reachable"
	testutil.Eventually(t, 30*time.Second, "the stack says what answers is not a master", func() error {
		return s.substrateAway(want, "HTTP 404 Not Found: <!DOCTYPE html>")
	})
	_, body := s.rest("GET", "/readyz", nil, nil)
	out, _, _ := s.runCLI("host", "list", "-o", "json")
	for what, text := range map[string]string{"/readyz": body, "host list": out, "the log": log.String()} {
		if strings.Contains(text, "<body") || strings.Contains(text, "Nothing lives here") {
			t.Errorf("%s carries the page:\n%s", what, text)
		}
	}
	if _, err := s.jobs.ListJobs(ctxT(t), &pelotonv1.ListJobsRequest{}); err != nil {
		t.Fatalf("the API while the master is not there: %v", err)
	}
}

// TestKubernetesAPIServerAway: the stack on the kubernetes backend starts
// while the apiserver is stopped, serves, and says it is not reachable; a
// job waits saying so and runs once the apiserver starts. Stopped again
// under the running stack, the apiserver is reported away again, a service
// keeps its run (not taken for lost), a new job waits, and all goes on
// when the apiserver is back, with no restart.
func TestKubernetesAPIServerAway(t *testing.T) {
	if testing.Short() {
		t.Skip("stops and starts a kube-apiserver twice")
	}
	kc := kubetest.Start(t, kubetest.Options{})
	if err := kc.CreateNamespace(ctxT(t), kubeNamespace); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.AddNodes(ctxT(t), kubetest.NodeSpec{Prefix: "away", Count: 2, CPU: "4", Memory: "8Gi"}); err != nil {
		t.Fatal(err)
	}
	kc.StopAPIServer()
	var log testutil.SyncBuffer
	s := startStack(t, t.TempDir(), stackOpts{backend: "kubernetes", kube: cluster.KubeConfig{Kubeconfig: kc.Kubeconfig}, configure: logTo(&log)})
	apiserver := "the kubernetes apiserver " + kc.URL() + " is not reachable"
	testutil.Eventually(t, 30*time.Second, "the stack says the apiserver is not reachable", func() error {
		return s.substrateAway(apiserver, "connection refused")
	})
	res := &pelotonv1.Resources{Cpu: 0.5, MemoryMb: 128}
	batch := s.createJob(&pelotonv1.JobSpec{Name: "early", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 2,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "1"}, Resources: res}})
	testutil.Eventually(t, 30*time.Second, "the job says it waits for the apiserver", func() error {
		return s.jobWaitsSaying(batch, apiserver)
	})

	if err := kc.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Minute, "the job succeeds once the apiserver answers", func() error {
		return s.jobIn(batch, pelotonv1.JobState_JOB_SUCCEEDED)
	})
	testutil.Eventually(t, 30*time.Second, "/readyz and host list are fine", s.substrateBack)
	svc := s.createJob(&pelotonv1.JobSpec{Name: "svc", Type: pelotonv1.JobType_SERVICE, Pool: "/default", InstanceCount: 1,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "3600"}, Resources: res}})
	running := func() (string, error) {
		tk, err := s.tasks.GetTask(ctxT(t), &pelotonv1.GetTaskRequest{JobId: svc, InstanceId: 0})
		if err != nil {
			return "", err
		}
		if st := tk.Task.Status.State; st != pelotonv1.TaskState_RUNNING {
			return "", fmt.Errorf("service instance is %s (%q)", st, tk.Task.Status.Message)
		}
		return tk.Task.TaskId, nil
	}
	var run string
	testutil.Eventually(t, time.Minute, "the service runs", func() (err error) { run, err = running(); return err })

	kc.StopAPIServer()
	testutil.Eventually(t, time.Minute, "the stack says the apiserver is away again", func() error {
		return s.substrateAway(apiserver)
	})
	later := s.createJob(&pelotonv1.JobSpec{Name: "later", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 1,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "1"}, Resources: res}})
	testutil.Eventually(t, 30*time.Second, "the new job says it waits for the apiserver", func() error {
		return s.jobWaitsSaying(later, apiserver)
	})
	if err := kc.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Minute, "the new job succeeds once the apiserver is back", func() error {
		return s.jobIn(later, pelotonv1.JobState_JOB_SUCCEEDED)
	})
	testutil.Eventually(t, 30*time.Second, "/readyz and host list are fine again", s.substrateBack)
	if got, err := running(); err != nil || got != run {
		t.Fatalf("service run %q (%v) after the outage, want %q running on", got, err, run)
	}
	if n := countLogged(log.String(), "WARN", "apiserver is not reachable"); n != 2 {
		t.Errorf("%d warnings for two outages, want 2:\n%s", n, log.String())
	}
}
