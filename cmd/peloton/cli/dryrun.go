package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Dry runs: `job create`, `job scale` and `update start` take --dry-run,
// which sends the request with dry_run set. The server makes every check of
// the real call and answers with what it would have done, storing nothing;
// the commands here print that answer.

// dryRunFlag registers --dry-run on cmd.
func dryRunFlag(cmd *cobra.Command, dry *bool) {
	cmd.Flags().BoolVar(dry, "dry-run", false, "have the server check the request exactly as it would the real one, and show the outcome; nothing is stored or started")
}

// dryCreateJob asks the server whether spec would be created and prints
// the spec as it would be stored.
func (a *app) dryCreateJob(ctx context.Context, c *client, p *printer, spec *pelotonv1.JobSpec) error {
	resp, err := call(ctx, c, c.Jobs.CreateJob, &pelotonv1.CreateJobRequest{Spec: spec, DryRun: true})
	if err != nil {
		return err
	}
	if p.structured() {
		return p.object(resp, nil)
	}
	s := resp.GetSpec()
	_, err = fmt.Fprintf(a.stdout, "dry run: job %q (%s, %d instances, pool %s) would be created; nothing was stored\n",
		s.GetName(), s.GetType(), s.GetInstanceCount(), s.GetPool())
	return err
}

// dryScaleJob prints what a scale would do, answered by the server.
func (a *app) dryScaleJob(ctx context.Context, c *client, p *printer, req *pelotonv1.ScaleJobRequest) error {
	req.DryRun = true
	resp, err := call(ctx, c, c.Jobs.ScaleJob, req)
	if err != nil {
		return err
	}
	if p.structured() {
		return p.object(resp, nil)
	}
	_, err = fmt.Fprintf(a.stdout, "dry run: job %s would have %s, spec version %d; nothing was changed\n",
		req.GetJobId(), scaleSummary(req.GetInstanceCount(), req.GetRemoveInstances()), resp.GetSpecVersion())
	return err
}

// dryCreateUpdate prints the update the server would create for req.
func (a *app) dryCreateUpdate(ctx context.Context, c *client, p *printer, req *pelotonv1.CreateUpdateRequest) error {
	req.DryRun, req.RequestId = true, ""
	resp, err := call(ctx, c, c.Updates.CreateUpdate, req)
	if err != nil {
		return err
	}
	if p.structured() {
		return p.object(resp, nil)
	}
	u := resp.GetUpdate()
	_, err = fmt.Fprintf(a.stdout, "dry run: an update of job %s would go from spec version %d to %d, replacing %d instances (batch size %d); nothing was created\n",
		u.GetJobId(), u.GetFromVersion(), u.GetToVersion(), u.GetStatus().GetInstancesTotal(), max(u.GetSpec().GetBatchSize(), 1))
	return err
}
