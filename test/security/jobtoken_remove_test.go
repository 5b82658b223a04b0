package security

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/internal/auth"
	"github.com/peloton-sched/peloton/internal/serving"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// removingDriver is a self-scaling job's command: instance 0, the driver,
// grows the job to 3 executors and then releases executor 1 by number
// through the REST API with its PELOTON_JOB_TOKEN, printing each answer's
// HTTP status and its token; every instance then stays up.
const removingDriver = `
if [ "$PELOTON_INSTANCE_ID" = 0 ]; then
  echo "token=$PELOTON_JOB_TOKEN"
  post() {
    curl -s -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $PELOTON_JOB_TOKEN" \
      -H 'Content-Type: application/json' -d "$1" "$PELOTON_API/v1/jobs/$PELOTON_JOB_ID:scale"
  }
  echo "scale=$(post '{"instanceCount": 3}')"
  echo "remove=$(post '{"removeInstances": [1]}')"
fi
exec sleep 600
`

// TestJobTokenRemovesItsOwnExecutors: a driver task removes one of its own
// job's instances by number with its job token; the job keeps instances 0
// and 2. The token may not remove below spec.selfScale.min nor touch
// another job.
func TestJobTokenRemovesItsOwnExecutors(t *testing.T) {
	p := newPKI(t)
	sec := serving.Security{Auth: auth.Config{TokenFile: p.tokenFile(t), PolicyFile: p.write(t, "policy.yaml", policy)}}
	s, client := startLocalStack(t, "selfremove", sec)
	root := client(tokens["root"])
	spec := batchSpec("driver", "/default")
	spec.DefaultSpec.Command = []string{"sh", "-c", removingDriver}
	spec.SelfScale = &pelotonv1.SelfScaleSpec{Min: 2, Max: 3}
	spec.InstanceCount = 2
	id := createJob(t, root, spec)
	other := createJob(t, root, batchSpec("other", "/default"))

	testutil.Eventually(t, 60*time.Second, "the driver grows its job to 3 and removes instance 1", func() error {
		j, err := root.Jobs.GetJob(ctx(t), &pelotonv1.GetJobRequest{JobId: id})
		if err != nil {
			return err
		}
		sp := j.GetJob().GetSpec()
		if sp.GetInstanceCount() != 2 || !slices.Equal(sp.GetRemovedInstances(), []uint32{1}) {
			return fmt.Errorf("spec instanceCount %d, removed %v", sp.GetInstanceCount(), sp.GetRemovedInstances())
		}
		ts, err := root.Tasks.ListTasks(ctx(t), &pelotonv1.ListTasksRequest{JobId: id})
		if err != nil {
			return err
		}
		var running []uint32
		for _, tk := range ts.GetTasks() {
			if tk.GetStatus().GetState() == pelotonv1.TaskState_RUNNING {
				running = append(running, tk.GetInstanceId())
			}
		}
		if len(ts.GetTasks()) != 2 || !slices.Equal(running, []uint32{0, 2}) {
			return fmt.Errorf("%d instances, running %v", len(ts.GetTasks()), running)
		}
		return nil
	})
	var out string
	testutil.Eventually(t, 30*time.Second, "the driver prints both answers", func() error {
		o, errOut, err := runCLIOut(s.info.GRPCAddr, tokens["root"], "task", "logs", id, "0")
		if err != nil {
			return fmt.Errorf("%v: %s", err, errOut)
		}
		if out = o; !strings.Contains(out, "remove=") {
			return fmt.Errorf("logs so far %q", out)
		}
		return nil
	})
	if !strings.Contains(out, "scale=200") || !strings.Contains(out, "remove=200") {
		t.Fatalf("the driver's calls through REST: %q, want scale=200 and remove=200", out)
	}
	tok := ""
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "token="); ok {
			tok = strings.TrimSpace(v)
		}
	}
	jc := client(tok)
	_, err := jc.Jobs.ScaleJob(ctx(t), &pelotonv1.ScaleJobRequest{JobId: id, RemoveInstances: []uint32{2}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "selfScale.min") {
		t.Errorf("removing below selfScale.min with the job token: %v, want FailedPrecondition naming selfScale.min", err)
	}
	_, err = jc.Jobs.ScaleJob(ctx(t), &pelotonv1.ScaleJobRequest{JobId: other, RemoveInstances: []uint32{0}})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("removing another job's instance with the job token: %v, want PermissionDenied", err)
	}
	if _, errOut, _ := runCLIOut(s.info.GRPCAddr, tok, "job", "scale", id, "--remove", "1"); !strings.Contains(errOut, "NotFound") || !strings.Contains(errOut, "removeInstances[0]") {
		t.Errorf("peloton job scale --remove of a removed instance with the job token: stderr %q", errOut)
	}
}
