package cli

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestExplainDescriptorsMatchAPI: the embedded documentation describes the
// API this binary speaks: `make proto` regenerated both together.
func TestExplainDescriptorsMatchAPI(t *testing.T) {
	files, err := loadAPIDoc()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := files.FindFileByPath(pelotonv1.File_peloton_api_v1_peloton_proto.Path())
	if err != nil {
		t.Fatal(err)
	}
	doc := protodesc.ToFileDescriptorProto(fd)
	doc.SourceCodeInfo = nil
	gen := protodesc.ToFileDescriptorProto(pelotonv1.File_peloton_api_v1_peloton_proto)
	if !proto.Equal(doc, gen) {
		t.Fatal("cmd/peloton/cli/apidoc.binpb does not describe the generated API: run make proto")
	}
}

func TestExplain(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string // lines of stdout, in order
	}{
		{[]string{"JobSpec.sla"}, []string{
			"FIELD: JobSpec.sla",
			"TYPE:  SlaSpec",
			"Priority, preemption, disruption budget and gang of the job.",
			"MESSAGE: SlaSpec",
			"SlaSpec is a job's service-level agreement with the scheduler.",
			"FIELDS:",
			"  priority                      uint32   Higher runs first and may displace lower inside a pool.",
			"  minimumRunningInstances       uint32   Instances 0..k-1 form a gang: scheduled together or not at all.",
		}},
		// Proto names, any case, through a map's values; the first
		// sentence is not cut at "e.g.".
		{[]string{"jobspec.instance_specs.HEALTH_CHECK.http.port"}, []string{
			"FIELD: JobSpec.instanceSpecs.healthCheck.http.port",
			"TYPE:  string",
			"Name of one of the task's ports.",
		}},
		{[]string{"JobSpec"}, []string{
			"  pool                      string                  Leaf resource pool path, e.g. /default or /org/team.",
			"  instanceSpecs             map<uint32, TaskSpec>   Per-instance overrides, merged field by field over default_spec.",
		}},
		{[]string{"peloton.api.v1.JobType"}, []string{
			"ENUM: JobType",
			"JobType says how a job's instances are kept.",
			"VALUES:",
			"  JOB_TYPE_UNSPECIFIED",
			"  BATCH                  Runs to completion.",
			"  DAEMON                 One instance on every matching host.",
		}},
		{[]string{"TaskSpec.ports"}, []string{"TYPE:  repeated PortSpec", "MESSAGE: PortSpec"}},
	} {
		r := runCLI(t, "", append([]string{"explain"}, c.args...)...)
		if r.code != exitOK {
			t.Errorf("explain %v: exit %d: %s", c.args, r.code, r.stderr)
			continue
		}
		lines := strings.Split(r.stdout, "\n")
		i := 0
		for _, l := range lines {
			if strings.TrimRight(l, " \t") != l {
				t.Errorf("explain %v: trailing blanks in %q", c.args, l)
			}
			if i < len(c.want) && l == c.want[i] {
				i++
			}
		}
		if i < len(c.want) {
			t.Errorf("explain %v: missing line %q (or out of order) in\n%s", c.args, c.want[i], r.stdout)
		}
	}
	for _, c := range []struct {
		arg, want string
	}{
		{"JobSepc", `Error: no message or enum "JobSepc" in the API; did you mean JobSpec?`},
		{"JobSpec.slaa", `Error: JobSpec has no field "slaa"; did you mean sla?`},
		{"JobSpec.sla.prio", `Error: JobSpec.sla has no field "prio"; did you mean priority?`},
		{"JobSpec.type.x", `Error: JobSpec.type is enum, which has no fields; "x" names nothing`},
		{"JobSpec.name.x", `Error: JobSpec.name is string, which has no fields; "x" names nothing`},
		{"Zzzzzz", `Error: no message or enum "Zzzzzz" in the API`},
	} {
		r := runCLI(t, "", "explain", c.arg)
		if line, _, _ := strings.Cut(r.stderr, "\n"); r.code != exitUsage || line != c.want {
			t.Errorf("explain %s: exit %d, %q; want exit %d, %q", c.arg, r.code, r.stderr, exitUsage, c.want)
		}
	}
}
