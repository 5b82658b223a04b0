package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// `job apply -f FILE` creates or updates a job by its name. Job names are
// not unique (the id is), so apply's rule is: the job it acts on is the one
// job with the spec's name in the spec's pool that has not finished. None:
// the spec is created. One: its spec is compared with the file's, the
// difference shown, and a long-running job is updated (a rolling update
// with the server's update defaults); a BATCH job cannot be updated, so a
// change to one is refused. More than one: refused, naming them.

func (a *app) jobApplyCommand() *cobra.Command {
	var file string
	var dry bool
	cmd := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Create a job, or update the job of the same name, showing the difference",
		Long: `Create the job in FILE, or update the job it names: the one job with the spec's
name in the spec's pool that has not finished. The difference between the job's
spec and the file's is shown first, as a unified diff of their YAML; an unchanged
spec does nothing. A SERVICE, STATEFUL or DAEMON job is updated by a rolling
update with the default update settings (use "update start" for others); a
BATCH job cannot be updated, so a change to one is refused. When more than one
unfinished job has the name in that pool, apply refuses and names them.
--dry-run shows the difference and has the server check the change, doing nothing.`,
		Example: `  peloton job apply -f web.yaml             # creates the job (web.yaml: say, from job init)
  peloton job apply -f web.yaml --dry-run   # after an edit: shows the diff only
  peloton job apply -f web.yaml             # rolls the edit out`,
		Args: argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			if file == "" {
				return usageErrorf("missing --file (-f): the job spec to apply")
			}
			spec, err := loadJobSpec(file, cmd.InOrStdin())
			if err != nil {
				return err
			}
			return a.withClient(func(c *client) error {
				return a.apply(cmd.Context(), c, p, spec, file, dry)
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", `job spec file, YAML or JSON ("-" for stdin)`)
	dryRunFlag(cmd, &dry)
	return cmd
}

// apply acts on spec as `job apply` does.
func (a *app) apply(ctx context.Context, c *client, p *printer, spec *pelotonv1.JobSpec, file string, dry bool) error {
	// The server resolves the pool (default -> /default) and checks the
	// spec; a dry-run create does both and stores nothing.
	checked, err := call(ctx, c, c.Jobs.CreateJob, &pelotonv1.CreateJobRequest{Spec: spec, DryRun: true})
	if err != nil {
		return err
	}
	spec.Pool = checked.GetSpec().GetPool()
	cur, err := applyTarget(ctx, c, spec)
	if err != nil {
		return err
	}
	if cur == nil {
		if err := a.showDiff(p, nil, spec, "(none)", file); err != nil {
			return err
		}
		if dry {
			return a.dryCreateJob(ctx, c, p, spec)
		}
		resp, err := create(ctx, c, c.Jobs.CreateJob, &pelotonv1.CreateJobRequest{Spec: spec, RequestId: requestIDOrFresh()})
		if err != nil {
			return err
		}
		return p.changed("created job "+resp.GetJobId(), a.getJob(ctx, c, resp.GetJobId()))
	}
	id, ver := cur.GetId(), cur.GetStatus().GetSpecVersion()
	if proto.Equal(cur.GetSpec(), spec) {
		return p.changed(fmt.Sprintf("job %s unchanged (spec version %d)", id, ver), a.getJob(ctx, c, id))
	}
	if err := a.showDiff(p, cur.GetSpec(), spec, fmt.Sprintf("job %s (spec version %d)", id, ver), file); err != nil {
		return err
	}
	if cur.GetSpec().GetType() == pelotonv1.JobType_BATCH {
		return fmt.Errorf("job %s is a BATCH job, whose spec cannot be updated: cancel it and create the new spec, or change only its instance count with `job scale`", id)
	}
	req := &pelotonv1.CreateUpdateRequest{JobId: id, Spec: spec, JobVersion: ver}
	if dry {
		return a.dryCreateUpdate(ctx, c, p, req)
	}
	req.RequestId = requestIDOrFresh()
	resp, err := create(ctx, c, c.Updates.CreateUpdate, req)
	if err != nil {
		return err
	}
	if p.structured() {
		return p.object(resp.GetUpdate(), nil)
	}
	_, err = fmt.Fprintln(a.stdout, updateSummary(resp.GetUpdate()))
	return err
}

// requestIDOrFresh is a fresh request id, for apply's own retries.
func requestIDOrFresh() string {
	id, _ := requestID("")
	return id
}

// applyTarget is the job apply acts on: the one unfinished job named as
// spec is in spec's pool, or nil when there is none.
func applyTarget(ctx context.Context, c *client, spec *pelotonv1.JobSpec) (*pelotonv1.Job, error) {
	req := &pelotonv1.ListJobsRequest{Pool: spec.GetPool(), Name: spec.GetName(), States: []pelotonv1.JobState{
		pelotonv1.JobState_JOB_INITIALIZED, pelotonv1.JobState_JOB_PENDING, pelotonv1.JobState_JOB_RUNNING}}
	var ids []string
	for {
		resp, err := call(ctx, c, c.Jobs.ListJobs, req)
		if err != nil {
			return nil, err
		}
		for _, j := range resp.GetJobs() {
			if j.GetSpec().GetName() == spec.GetName() { // the filter matches substrings
				ids = append(ids, j.GetId())
			}
		}
		if resp.GetNextPageToken() == "" {
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	switch len(ids) {
	case 0:
		return nil, nil
	case 1:
		resp, err := call(ctx, c, c.Jobs.GetJob, &pelotonv1.GetJobRequest{JobId: ids[0]})
		return resp.GetJob(), err
	}
	return nil, fmt.Errorf("%d unfinished jobs are named %q in pool %s: %s; apply acts on one: update one with `update start`, or cancel the others",
		len(ids), spec.GetName(), spec.GetPool(), strings.Join(ids, ", "))
}

// showDiff prints the unified diff of the YAML of from (nil: nothing) and
// to, to stderr under -o json|yaml so that stdout stays one document.
func (a *app) showDiff(p *printer, from, to *pelotonv1.JobSpec, fromName, toName string) error {
	x, err := specText(from)
	if err != nil {
		return err
	}
	y, err := specText(to)
	if err != nil {
		return err
	}
	d, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{A: difflib.SplitLines(x), B: difflib.SplitLines(y),
		FromFile: fromName, ToFile: toName, Context: 3})
	if err != nil {
		return err
	}
	w := a.stdout
	if p.structured() {
		w = a.stderr
	}
	_, err = fmt.Fprint(w, d)
	return err
}

// specText is s as YAML, only the fields set, keys sorted; "" for nil.
func specText(s *pelotonv1.JobSpec) (string, error) {
	if s == nil {
		return "", nil
	}
	j, err := protojson.Marshal(s)
	if err != nil {
		return "", err
	}
	y, err := yaml.JSONToYAML(j)
	return string(y), err
}
