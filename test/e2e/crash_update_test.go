package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
)

// upProcess is `peloton up` running as a child process of the test, so the
// test can SIGKILL it as a crash would.
type upProcess struct {
	cmd     *exec.Cmd
	api     *client.Client
	updates pelotonv1.UpdateServiceClient
	jobs    pelotonv1.JobServiceClient
	tasks   pelotonv1.TaskServiceClient
}

func buildPeloton(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "peloton")
	out, err := exec.Command("go", "build", "-o", bin, repoPath("cmd/peloton")).CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// buildHostAgent builds the slim peloton-hostagent binary.
func buildHostAgent(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "peloton-hostagent")
	out, err := exec.Command("go", "build", "-o", bin, repoPath("cmd/peloton-hostagent")).CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func startUp(t *testing.T, bin, dir string) *upProcess {
	t.Helper()
	// Both hosts in one partition, as these tests were written for: from
	// --hosts 2 up splits them into batch and stateless by default.
	return startUpWith(t, bin, dir, "--partitions", "default=2")
}

// startUpWith is startUp with more flags (later ones win).
func startUpWith(t *testing.T, bin, dir string, flags ...string) *upProcess {
	t.Helper()
	args := append([]string{"up", "--data-dir", dir, "--hosts", "2", "--host-cpu", "4", "--host-memory-mb", "4096",
		"--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--log-level", "warn"}, flags...)
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &upProcess{cmd: cmd}
	t.Cleanup(func() { p.kill() })
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "peloton is ready: grpc ") {
				ready <- strings.TrimSuffix(strings.Fields(line)[4], ",")
			}
		}
	}()
	var addr string
	select {
	case addr = <-ready:
	case <-time.After(90 * time.Second):
		t.Fatal("peloton up did not become ready within 90s")
	}
	api, err := client.New(addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p.api = api
	p.updates, p.jobs, p.tasks = api.Updates, api.Jobs, api.Tasks
	return p
}

// state says whether the process still lives, for the message of a call
// to it that failed: its /proc state line, or that it is gone (and, when
// it has been reaped, how it ended).
func (p *upProcess) state() string {
	if ps := p.cmd.ProcessState; ps != nil {
		return fmt.Sprintf("peloton up (pid %d) ended: %s", ps.Pid(), ps)
	}
	pid := p.cmd.Process.Pid
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return fmt.Sprintf("peloton up (pid %d) is gone: %v", pid, err)
	}
	return fmt.Sprintf("peloton up (pid %d) lives: %s", pid, strings.TrimSpace(string(b)))
}

// kill SIGKILLs the process (a crash: no shutdown runs) and reaps it.
func (p *upProcess) kill() {
	if p.api != nil {
		p.api.Close()
	}
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		_ = p.cmd.Wait()
	}
}

func (p *upProcess) update(t *testing.T, id string) *pelotonv1.Update {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, err := p.updates.GetUpdate(ctx, &pelotonv1.GetUpdateRequest{UpdateId: id})
	if err != nil {
		t.Fatalf("GetUpdate: %v", err)
	}
	return g.Update
}

// TestUpdateResumesAfterKill9 SIGKILLs `peloton up` in the middle of a rolling
// update and starts it again on the same data: the update goes on from where
// it was and finishes, every instance on the new spec.
func TestUpdateResumesAfterKill9(t *testing.T) {
	bin := buildPeloton(t)
	dir := t.TempDir()
	// Runs of a killed `peloton up` are orphaned (it cannot stop them); a
	// marker in their command line lets the test stop them afterwards.
	var b [6]byte
	_, _ = rand.Read(b[:])
	marker := "peloton-crash-test-" + hex.EncodeToString(b[:])
	t.Cleanup(func() { _ = exec.Command("pkill", "-f", marker).Run() })

	p := startUp(t, bin, dir)
	ctx := ctxT(t)
	spec := service("crashy", 4, 1, "sh", "-c", "exec sleep 300 # "+marker)
	cr, err := p.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	id := cr.JobId
	running := func(p *upProcess) bool {
		ts, err := p.tasks.ListTasks(ctx, &pelotonv1.ListTasksRequest{JobId: id})
		return err == nil && allRunning(4)(ts.Tasks)
	}
	testutil.Eventually(t, 60*time.Second, "the service runs", func() bool { return running(p) })
	next := proto.Clone(spec).(*pelotonv1.JobSpec)
	next.DefaultSpec.Command = []string{"sh", "-c", "exec sleep 301 # " + marker}
	cu, err := p.updates.CreateUpdate(ctx, &pelotonv1.CreateUpdateRequest{JobId: id, Spec: next,
		UpdateSpec: &pelotonv1.UpdateSpec{BatchSize: 1, MinReadySeconds: 1}})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "the update's first instance done", func() error {
		if st := p.update(t, cu.Update.Id).Status; st.InstancesDone < 1 {
			return fmt.Errorf("no progress: %v", st)
		}
		return nil
	})
	p.kill()

	p2 := startUp(t, bin, dir)
	testutil.Eventually(t, 120*time.Second, "the update succeeds after the crash", func() error {
		u := p2.update(t, cu.Update.Id)
		switch u.Status.State {
		case pelotonv1.UpdateState_UPDATE_SUCCEEDED:
			return nil
		case pelotonv1.UpdateState_UPDATE_ROLLING_FORWARD:
			return fmt.Errorf("%v", u.Status)
		}
		t.Fatalf("after the crash the update is %v", u.Status)
		return nil
	})
	ts, err := p2.tasks.ListTasks(ctx, &pelotonv1.ListTasksRequest{JobId: id})
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range ts.Tasks {
		if tk.Status.SpecVersion != 2 {
			t.Errorf("instance %d runs spec version %d", tk.InstanceId, tk.Status.SpecVersion)
		}
	}
}
