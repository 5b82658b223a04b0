package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadJobSpecExampleHello(t *testing.T) {
	spec, err := loadJobSpec("../../../examples/hello.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := &pelotonv1.JobSpec{
		Name:          "hello",
		Type:          pelotonv1.JobType_BATCH,
		Pool:          "/default",
		InstanceCount: 3,
		Sla:           &pelotonv1.SlaSpec{Preemptible: proto.Bool(true), MaximumUnavailableInstances: 1},
		DefaultSpec: &pelotonv1.TaskSpec{
			Command:       []string{"/bin/sh", "-c", "echo hello from instance $PELOTON_INSTANCE_ID"},
			Env:           map[string]string{"GREETING": "hi"},
			Image:         "busybox:1.36",
			Resources:     &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 32, DiskMb: 10},
			RestartPolicy: &pelotonv1.RestartPolicy{MaxFailures: 2},
		},
		InstanceSpecs: map[uint32]*pelotonv1.TaskSpec{
			2: {Command: []string{"/bin/sh", "-c", "echo override"}},
		},
	}
	if !proto.Equal(spec, want) {
		t.Errorf("hello.yaml decoded to\n%v\nwant\n%v", spec, want)
	}
}

func TestLoadOtherExamples(t *testing.T) {
	sleep, err := loadJobSpec("../../../examples/sleep.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if sleep.GetInstanceCount() != 4 || !sleep.GetSla().GetPreemptible() || sleep.GetType() != pelotonv1.JobType_BATCH {
		t.Errorf("sleep.yaml = %v", sleep)
	}
	pool, err := loadPoolSpec("../../../examples/pool.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if pool.GetReservation().GetCpu() == 0 || pool.GetLimit().GetMemoryMb() == 0 || pool.GetShare() == nil {
		t.Errorf("pool.yaml = %v", pool)
	}
}

func TestDecodeSpecErrors(t *testing.T) {
	for _, tc := range []struct {
		name, file, content, want string
	}{
		{
			name:    "a key given twice",
			file:    "job.yaml",
			content: "name: a\ndefaultSpec:\n  command: [x]\n  command: [y]\n",
			want:    `job.yaml: line 4: defaultSpec.command: given twice (first at line 3)`,
		},
		{
			name:    "a second document",
			file:    "job.yaml",
			content: "name: a\n---\nname: b\n",
			want:    `job.yaml: line 2: a second YAML document; a spec file holds one spec`,
		},
		{
			name:    "NaN names its field",
			file:    "pool.yaml",
			content: "reservation:\n  cpu: .NaN\n",
			want:    `pool.yaml: line 2: reservation.cpu: .NaN is not a number a spec can hold`,
		},
		{
			name:    "infinity names its field",
			file:    "job.yaml",
			content: "instanceSpecs:\n  \"1\": {resources: {cpu: -.inf}}\n",
			want:    `job.yaml: line 2: instanceSpecs.1.resources.cpu: -.inf is not a number a spec can hold`,
		},
		{
			name:    "unknown top-level field",
			file:    "hello.yaml",
			content: "name: hello\ninstancecount: 3\n",
			want:    `hello.yaml: unknown field "instancecount" (did you mean "instanceCount"?)`,
		},
		{
			name:    "unknown nested field",
			file:    "hello.yaml",
			content: "defaultSpec:\n  resources: {cpus: 1}\n",
			want:    `hello.yaml: defaultSpec.resources: unknown field "cpus"`,
		},
		{
			name:    "unknown field in an instance override",
			file:    "hello.yaml",
			content: "instanceSpecs:\n  \"2\": {comand: [x]}\n",
			want:    `hello.yaml: instanceSpecs[2]: unknown field "comand" (did you mean "command"?)`,
		},
		{
			name:    "wrong type names the field",
			file:    "job.yaml",
			content: "instanceCount: three\n",
			want:    `job.yaml: invalid value for uint32 field instanceCount: "three"`,
		},
		{
			name:    "unknown enum value",
			file:    "job.yaml",
			content: "type: BATCHY\n",
			want:    `job.yaml: type: "BATCHY" is not one of BATCH, SERVICE, STATEFUL, DAEMON`,
		},
		{
			name:    "unknown enum value deep down",
			file:    "job.yaml",
			content: "defaultSpec:\n  placement:\n    constraints:\n    - {label: zone, op: equal, values: [a]}\n",
			want:    `job.yaml: defaultSpec.placement.constraints[0].op: "equal" is not one of EQUALS, NOT_EQUALS, EXISTS`,
		},
		{
			name:    "bad yaml",
			file:    "job.yaml",
			content: "name: [unclosed\n",
			want:    "job.yaml: yaml: line 1:",
		},
		{
			name:    "empty",
			file:    "job.yaml",
			content: "# nothing\n",
			want:    "job.yaml: file is empty",
		},
		{
			name:    "not a mapping",
			file:    "job.yaml",
			content: "- a\n- b\n",
			want:    "job.yaml: want a mapping of JobSpec fields",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadJobSpec(writeFile(t, tc.file, tc.content), nil)
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			got := err.Error()
			if !strings.Contains(got, tc.want) {
				t.Errorf("error = %q, want it to contain %q", got, tc.want)
			}
			if strings.Contains(got, "proto:") || strings.Contains(got, "(line ") {
				t.Errorf("error %q leaks protojson noise", got)
			}
		})
	}
}

func TestDecodeSpecInstanceSpecKeys(t *testing.T) {
	// Quoted and bare keys both name instance 2.
	for _, content := range []string{
		"instanceSpecs:\n  \"2\": {image: x}\n",
		"instanceSpecs:\n  2: {image: x}\n",
	} {
		spec := &pelotonv1.JobSpec{}
		if err := decodeSpec("job.yaml", []byte(content), spec); err != nil {
			t.Fatalf("%q: %v", content, err)
		}
		if got := spec.GetInstanceSpecs()[2].GetImage(); got != "x" {
			t.Errorf("%q: instanceSpecs[2].image = %q, want x", content, got)
		}
	}
}

func TestDecodeSpecJSON(t *testing.T) {
	js := `{"name": "j", "instanceCount": 2, "instanceSpecs": {"1": {"command": ["true"]}},
	        "default_spec": {"resources": {"cpu": 0.5}}}`
	spec, err := loadJobSpec(writeFile(t, "job.json", js), nil)
	if err != nil {
		t.Fatal(err)
	}
	if spec.GetName() != "j" || spec.GetInstanceCount() != 2 ||
		spec.GetInstanceSpecs()[1].GetCommand()[0] != "true" ||
		spec.GetDefaultSpec().GetResources().GetCpu() != 0.5 {
		t.Errorf("job.json decoded to %v", spec)
	}
}

func TestLoadSpecStdin(t *testing.T) {
	spec, err := loadJobSpec("-", strings.NewReader("name: from-stdin\ninstanceCount: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if spec.GetName() != "from-stdin" {
		t.Errorf("name = %q", spec.GetName())
	}
	_, err = loadJobSpec("-", strings.NewReader("bogus: 1\n"))
	if err == nil || err.Error() != `stdin: unknown field "bogus"` {
		t.Errorf("error = %v, want stdin: unknown field \"bogus\"", err)
	}
}

func TestLoadSpecMissingFile(t *testing.T) {
	_, err := loadJobSpec("nope.yaml", nil)
	if err == nil || !strings.HasPrefix(err.Error(), "nope.yaml: ") {
		t.Errorf("error = %v, want it to name nope.yaml", err)
	}
}

// TestDecodeSpecEnumsIgnoreCase: users write enum values as they say them
// (type: batch); every enum of a spec is read whatever its case.
func TestDecodeSpecEnumsIgnoreCase(t *testing.T) {
	spec, err := loadJobSpec(writeFile(t, "job.yaml", "name: a\ntype: service\ndefaultSpec:\n  placement:\n    constraints:\n    - {label: zone, op: Not_Equals, values: [a]}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if spec.GetType() != pelotonv1.JobType_SERVICE || spec.GetDefaultSpec().GetPlacement().GetConstraints()[0].GetOp() != pelotonv1.ConstraintOp_NOT_EQUALS {
		t.Errorf("spec = %v", spec)
	}
}
