package security

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/cluster"
	pclient "github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/cmd/peloton/cli"
	"github.com/peloton-sched/peloton/internal/auth"
	"github.com/peloton-sched/peloton/internal/serving"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// selfScaleDriver is a self-scaling job's command: instance 0, the driver,
// prints its token and scales the job to 3 through the REST API with it,
// printing the answer's HTTP status; every instance then stays up.
const selfScaleDriver = `
if [ "$PELOTON_INSTANCE_ID" = 0 ]; then
  echo "token=$PELOTON_JOB_TOKEN"
  code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $PELOTON_JOB_TOKEN" \
    -H 'Content-Type: application/json' -d '{"instanceCount": 3}' "$PELOTON_API/v1/jobs/$PELOTON_JOB_ID:scale")
  echo "scale=$code"
fi
exec sleep 600
`

// TestJobTokenScalesItsOwnJob runs a self-scaling job on the local backend
// (real processes) of a stack with tokens and a policy, and of one without
// authentication: its driver scales it with the token it was given and the
// instances appear; the token reads and scales its own job only, within
// spec.selfScale, calls nothing else, and is refused once the job has
// ended. Without authentication a caller may present no token and do
// anything; one who presents a job token is held to it all the same.
func TestJobTokenScalesItsOwnJob(t *testing.T) {
	p := newPKI(t)
	for name, sec := range map[string]serving.Security{
		"auth on":  {Auth: auth.Config{TokenFile: p.tokenFile(t), PolicyFile: p.write(t, "policy.yaml", policy)}},
		"auth off": {},
	} {
		t.Run(name, func(t *testing.T) { checkJobToken(t, sec) })
	}
}

// startLocalStack starts a stack named name with sec on one local-backend
// host (real processes), and returns it with a way to call it with a
// token.
func startLocalStack(t *testing.T, name string, sec serving.Security) (*stack, func(token string) *pclient.Client) {
	e, _ := storetest.StartEtcd(t)
	s := startStack(t, name, e.Endpoints(), sec, func(c *cluster.Config) {
		c.Backend, c.Hosts, c.HostCPU, c.HostMemoryMB, c.HostDiskMB = "local", 1, 2, 2048, 10000
		c.DefaultReservesHosts = true
	})
	return s, func(token string) *pclient.Client {
		c, err := pclient.New(s.info.GRPCAddr, pclient.Options{Timeout: 20 * time.Second, Token: token})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
}

func checkJobToken(t *testing.T, sec serving.Security) {
	s, client := startLocalStack(t, "selfscale", sec)
	root := client(tokens["root"])
	spec := batchSpec("driver", "/default")
	spec.DefaultSpec.Command = []string{"sh", "-c", selfScaleDriver}
	spec.SelfScale = &pelotonv1.SelfScaleSpec{Min: 1, Max: 3}
	id := createJob(t, root, spec)
	other := createJob(t, root, batchSpec("other", "/default"))

	// The driver scaled its job: three instances, and its answer was 200.
	testutil.Eventually(t, 60*time.Second, "the driver scales its job to 3 running instances", func() error {
		j, err := root.Jobs.GetJob(ctx(t), &pelotonv1.GetJobRequest{JobId: id})
		if err != nil {
			return err
		}
		if n := j.GetJob().GetStatus().GetTaskCounts()["RUNNING"]; n != 3 {
			return fmt.Errorf("%d running, spec instanceCount %d", n, j.GetJob().GetSpec().GetInstanceCount())
		}
		return nil
	})
	var logs string
	testutil.Eventually(t, 30*time.Second, "the driver prints its token and the scale's status", func() error {
		out, errOut, err := runCLIOut(s.info.GRPCAddr, tokens["root"], "task", "logs", id, "0")
		if err != nil {
			return fmt.Errorf("%v: %s", err, errOut)
		}
		if logs = out; !strings.Contains(logs, "scale=") {
			return fmt.Errorf("logs so far %q", logs)
		}
		return nil
	})
	if !strings.Contains(logs, "scale=200") {
		t.Fatalf("the driver's scale through REST: %q, want scale=200", logs)
	}
	tok := ""
	for _, line := range strings.Split(logs, "\n") {
		if v, ok := strings.CutPrefix(line, "token="); ok {
			tok = strings.TrimSpace(v)
		}
	}
	if !strings.HasPrefix(tok, "pjt1.") {
		t.Fatalf("the driver's PELOTON_JOB_TOKEN %q is not a job token", tok)
	}
	jc := client(tok)

	// Its own job: read, scaled within 1..3 only.
	if _, err := jc.Jobs.GetJob(ctx(t), &pelotonv1.GetJobRequest{JobId: id}); err != nil {
		t.Errorf("GetJob of its own job with its token: %v", err)
	}
	_, err := jc.Jobs.ScaleJob(ctx(t), &pelotonv1.ScaleJobRequest{JobId: id, InstanceCount: 4})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "instanceCount") {
		t.Errorf("ScaleJob beyond selfScale.max: %v, want InvalidArgument naming instanceCount", err)
	}
	if _, err := root.Jobs.ScaleJob(ctx(t), &pelotonv1.ScaleJobRequest{JobId: id, InstanceCount: 3, DryRun: true}); err != nil {
		t.Errorf("root's dry-run scale: %v", err)
	}
	checkJobTokenRefusals(t, jc, id, other)
	// The CLI, as the README shows it, with the token.
	for _, args := range [][]string{{"job", "scale", id, "2"}, {"job", "get", id}} {
		if _, errOut, err := runCLIOut(s.info.GRPCAddr, tok, args...); err != nil {
			t.Errorf("peloton %s with the job token: %v: %s", strings.Join(args, " "), err, errOut)
		}
	}
	if _, errOut, _ := runCLIOut(s.info.GRPCAddr, tok, "job", "scale", id, "9"); !strings.Contains(errOut, "InvalidArgument") || !strings.Contains(errOut, "instanceCount") {
		t.Errorf("peloton job scale beyond selfScale.max with the job token: stderr %q, want InvalidArgument naming instanceCount", errOut)
	}
	// A token forged for the other job does not hold.
	forged := "pjt1." + strings.SplitN(strings.TrimPrefix(tok, "pjt1."), ".", 2)[0][:4] + "x." + strings.SplitN(tok, ".", 3)[2]
	if _, err := client(forged).Jobs.GetJob(ctx(t), &pelotonv1.GetJobRequest{JobId: id}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("a tampered job token: %v, want Unauthenticated", err)
	}

	// The job cancels itself; then its token is revoked.
	if _, err := jc.Jobs.CancelJob(ctx(t), &pelotonv1.CancelJobRequest{JobId: id}); err != nil {
		t.Fatalf("CancelJob of its own job with its token: %v", err)
	}
	testutil.Eventually(t, 60*time.Second, "the token is refused once the job has ended", func() error {
		_, err := jc.Jobs.GetJob(ctx(t), &pelotonv1.GetJobRequest{JobId: id})
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "revoked") {
			return fmt.Errorf("GetJob: %v", err)
		}
		return nil
	})
}

// checkJobTokenRefusals checks that job id's token jc calls nothing on
// another job, and no other method on its own.
func checkJobTokenRefusals(t *testing.T, jc *pclient.Client, id, other string) {
	t.Helper()
	for what, call := range map[string]func() error{
		"GetJob of another job": func() error {
			_, err := jc.Jobs.GetJob(ctx(t), &pelotonv1.GetJobRequest{JobId: other})
			return err
		},
		"ScaleJob of another job": func() error {
			_, err := jc.Jobs.ScaleJob(ctx(t), &pelotonv1.ScaleJobRequest{JobId: other, InstanceCount: 2})
			return err
		},
		"ListTasks of its own job": func() error {
			_, err := jc.Tasks.ListTasks(ctx(t), &pelotonv1.ListTasksRequest{JobId: id})
			return err
		},
		"ListJobs": func() error {
			_, err := jc.Jobs.ListJobs(ctx(t), &pelotonv1.ListJobsRequest{})
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "job token") {
			t.Errorf("%s with the job token: %v, want PermissionDenied saying what a job token may call", what, err)
		}
	}
}

// runCLIOut runs the CLI against addr with token.
func runCLIOut(addr, token string, args ...string) (string, string, error) {
	var out, errb bytes.Buffer
	cmd := cli.NewRootCommand(&out, &errb)
	cmd.SetArgs(append([]string{"--server", addr, "--token", token}, args...))
	err := cmd.Execute()
	return out.String(), errb.String(), err
}
