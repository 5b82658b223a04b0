package cli

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// FuzzDecodeSpec feeds any bytes to the spec file decoder as each kind of
// spec file the CLI reads (job, pool, federated service, and a job or
// federated job). It never panics, every error names the file, and a spec
// it decodes, printed back as JSON and as YAML (what -o json and -o yaml
// print), decodes to the same spec: what the CLI shows, it reads.
func FuzzDecodeSpec(f *testing.F) {
	for _, s := range []string{
		"",
		"null",
		"---\n",
		"[]",
		"42",
		"name: x\ntype: BATCH\ninstanceCount: 3\npool: /default\ndefaultSpec:\n  command: [sleep, '1']\n  resources: {cpu: 0.5, memoryMb: 64}\n",
		`{"name":"x","instanceCount":1,"defaultSpec":{"resources":{"cpu":1}}}`,
		`{"name":"x","name":"y"}`,
		"name: a\nname: b\n",
		"name: a\n---\nname: b\n",
		"instanceCount: 1e99\n",
		"instanceCount: -1\n",
		"instanceCount: 4294967296\n",
		"defaultSpec: {resources: {cpu: .nan}}\n",
		"defaultSpec: {resources: {cpu: -.inf}}\n",
		`{"defaultSpec":{"resources":{"cpu":"NaN","memoryMb":"Infinity"}}}`,
		"defaultSpec: {resources: {cpu: 1e400}}\n",
		"instanceCoutn: 3\n",
		"instance_count: 3\n",
		"labels: {a: 1, b: [x]}\n",
		"instanceSpecs: {'0': {command: [x]}, 'x': {}}\n",
		"type: NOT_A_TYPE\n",
		"type: 99\n",
		"name: \"\\xff\\xfe\"\n",
		"name: \xff\xfe\n",
		"reservation: {cpu: 2}\nlimit: {cpu: 1}\nshare: {gpu: 3}\n",
		"job: {name: web, instanceCount: 2}\nplacement: {clusters: [{name: a, count: 1}]}\n",
		"&a [*a]\n",
		"a: &a {b: *a}\n",
		strings.Repeat("[", 5000) + strings.Repeat("]", 5000),
		strings.Repeat("{a: ", 2000) + "1" + strings.Repeat("}", 2000),
		"description: " + strings.Repeat("x", 100000) + "\n",
		"? [a, b]\n: c\n",
		"!!binary aGVsbG8=\n",
		"name: !!int x\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<20 {
			return
		}
		for _, m := range []proto.Message{&pelotonv1.JobSpec{}, &pelotonv1.PoolSpec{}, &pelotonv1.FederatedServiceSpec{}} {
			checkDecode(t, data, m)
		}
		spec, err := loadFederatedJobSpec("-", strings.NewReader(string(data)))
		if err != nil {
			if !strings.HasPrefix(err.Error(), stdinName+":") {
				t.Fatalf("error %q does not name the file", err)
			}
		} else if spec == nil {
			t.Fatal("no error and no spec")
		}
	})
}

// checkDecode decodes data into m and, when it decodes, checks that m
// printed as JSON and YAML decodes to the same message.
func checkDecode(t *testing.T, data []byte, m proto.Message) {
	t.Helper()
	if err := decodeSpec("spec.yaml", data, m); err != nil {
		if !strings.HasPrefix(err.Error(), "spec.yaml: ") {
			t.Fatalf("error %q does not name the file", err)
		}
		return
	}
	js, err := protojson.Marshal(m)
	if err != nil {
		t.Fatalf("a decoded %T does not print as JSON: %v", m, err)
	}
	ys, err := yaml.JSONToYAML(js)
	if err != nil {
		t.Fatalf("a decoded %T does not print as YAML: %v", m, err)
	}
	for _, out := range [][]byte{js, ys} {
		again := m.ProtoReflect().New().Interface()
		if err := decodeSpec("printed", out, again); err != nil {
			t.Fatalf("%T printed as\n%s\ndoes not decode: %v", m, out, err)
		}
		if !proto.Equal(m, again) {
			t.Fatalf("%T printed as\n%s\ndecodes to %v, not %v", m, out, again, m)
		}
	}
}
