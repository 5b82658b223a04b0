package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestJSONPathTemplates: the template language -o jsonpath takes, over a
// document shaped as -o json prints a list.
func TestJSONPathTemplates(t *testing.T) {
	doc, err := decodeJSONDoc([]byte(`{"jobs":[
		{"id":"a1","spec":{"name":"one","instanceCount":3,"labels":{"team":"data","app.kubernetes.io/name":"x"}},"status":{"memoryMb":9007199254740993}},
		{"id":"b2","spec":{"name":"two","instanceCount":1,"labels":{}},"status":null}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ tmpl, want string }{
		{`{.jobs[*].id}`, "a1 b2"},
		{`{.jobs[0].spec.name}`, "one"},
		{`{.jobs[-1].id}`, "b2"},
		{`{.jobs[0:1].id}`, "a1"},
		{`{$.jobs[1].spec.instanceCount}`, "1"},
		{`{.jobs[0].status.memoryMb}`, "9007199254740993"},
		{`{.jobs[0].spec.labels['app.kubernetes.io/name']}`, "x"},
		{`{.jobs[0].spec.labels}`, `{"app.kubernetes.io/name":"x","team":"data"}`},
		{`{range .jobs[*]}{.id}{"\t"}{.spec.name}{"\n"}{end}`, "a1\tone\nb2\ttwo\n"},
		{`{range .jobs}[{@.id}]{end}`, "[a1][b2]"},
		{`{range .jobs[0:1]}{.spec.name}{end}`, "one"},
		{`{range .jobs[*].spec.labels}{.team};{end}`, "data;;"},
		{`{.jobs[1].spec}`, `{"instanceCount":1,"labels":{},"name":"two"}`},
		{`{range .jobs[1]}{.}{end}`, `{"id":"b2","spec":{"instanceCount":1,"labels":{},"name":"two"},"status":null}`},
		{`ids: {..id}`, "ids: a1 b2"},
		{`{.jobs[*].nosuch}`, ""},
		{`{.jobs[0].spec.*}`, `3 {"app.kubernetes.io/name":"x","team":"data"} one`},
	} {
		tmpl, err := parseJSONPath(tc.tmpl)
		if err != nil {
			t.Errorf("%s: %v", tc.tmpl, err)
			continue
		}
		var out bytes.Buffer
		if err := tmpl.execute(&out, doc); err != nil || out.String() != tc.want {
			t.Errorf("%s: got %q, %v; want %q", tc.tmpl, out.String(), err, tc.want)
		}
	}
}

// TestJSONPathErrors: a bad template is refused naming it and where it
// goes wrong.
func TestJSONPathErrors(t *testing.T) {
	for _, tc := range []struct{ tmpl, want string }{
		{`{.items[}`, `invalid jsonpath template "{.items[}": at position 8: unclosed [`},
		{`{.a`, `invalid jsonpath template "{.a": at position 1: unclosed {`},
		{`{range .a}x`, `invalid jsonpath template "{range .a}x": at position 1: {range} without {end}`},
		{`x{end}`, `invalid jsonpath template "x{end}": at position 2: {end} without {range}`},
		{`{name}`, `invalid jsonpath template "{name}": at position 2: path "name" must start with . or [ (or $ or @)`},
		{`{.a[?(@.b=="c")]}`, `invalid jsonpath template "{.a[?(@.b==\"c\")]}": at position 4: filters ([?(...)]) are not supported; use {range} and a script`},
		{`{.a[x]}`, `invalid jsonpath template "{.a[x]}": at position 4: [x] is not an index, a slice, * or a quoted key`},
		{`{"\q"}`, `invalid jsonpath template "{\"\\q\"}": at position 2: literal text "\q" is not a quoted string`},
	} {
		_, err := parseJSONPath(tc.tmpl)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: got %v; want %s", tc.tmpl, err, tc.want)
		}
	}
}

// TestSelectors: the terms -l takes, and the malformed ones it names.
func TestSelectors(t *testing.T) {
	labels := map[string]string{"team": "data", "tier": "web"}
	for _, tc := range []struct {
		sel  string
		want bool
	}{
		{"", true},
		{"team=data", true},
		{"team==data", true},
		{"team=ads", false},
		{"team!=ads", true},
		{"team!=data", false},
		{"owner!=x", true},
		{"tier", true},
		{"owner", false},
		{"!owner", true},
		{"!tier", false},
		{"team=data, tier=web", true},
		{"team=data,tier=db", false},
	} {
		sel, err := parseSelector(tc.sel)
		if err != nil {
			t.Errorf("%q: %v", tc.sel, err)
			continue
		}
		if got := sel.matches(labels); got != tc.want {
			t.Errorf("%q matches %v: %v, want %v", tc.sel, labels, got, tc.want)
		}
	}
	for _, bad := range []string{"=x", "team=data,", "a=b=c", "a b"} {
		_, err := parseSelector(bad)
		if err == nil || !strings.Contains(err.Error(), "is not key=value, key!=value, key or !key") {
			t.Errorf("%q: got %v, want the malformed term named", bad, err)
		}
	}
	sel, _ := parseSelector("team=data,tier!=db,owner")
	if got := sel.equalities(); len(got) != 1 || got["team"] != "data" {
		t.Errorf("equalities: %v, want only team=data", got)
	}
}

// TestResolveIDPrefix: the rules of an id prefix, over a list of ids
// paged two at a time.
func TestResolveIDPrefix(t *testing.T) {
	ids := []string{"a2f91c00-1", "a2f97d00-2", "b0000000-3", "c1230000-4", "c4560000-5"}
	var pagesRead int
	k := idKind{
		noun: "job",
		exists: func(_ context.Context, id string) error {
			if slices.Contains(ids, id) {
				return nil
			}
			return status.Errorf(codes.NotFound, "job %s does not exist", id)
		},
		pages: func(_ context.Context, each func([]string) bool) error {
			pagesRead = 0
			for i := 0; i < len(ids); i += 2 {
				pagesRead++
				if each(ids[i:min(i+2, len(ids))]) {
					return nil
				}
			}
			return nil
		},
	}
	ctx := context.Background()
	for _, tc := range []struct{ arg, want, err string }{
		{"b0000000-3", "b0000000-3", ""},
		{"b000", "b0000000-3", ""},
		{"c123", "c1230000-4", ""},
		{"a2f91", "a2f91c00-1", ""},
		{"a2f9", "", `InvalidArgument: ambiguous job id prefix "a2f9": it matches a2f91c00-1 and a2f97d00-2 (at least); give more characters`},
		{"zzzz", "", "NotFound: job zzzz does not exist"},
		{"b0", "b0", ""}, // too short to look up: the command's own NotFound says so
	} {
		got, err := resolveID(ctx, k, tc.arg)
		if tc.err != "" {
			if err == nil || formatError(err) != tc.err {
				t.Errorf("%s: got %q, %v; want error %s", tc.arg, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: got %q, %v; want %s", tc.arg, got, err, tc.want)
		}
	}
	// Two matches end the scan: the last page is never read.
	if _, err := resolveID(ctx, k, "a2f9"); err == nil || pagesRead != 1 {
		t.Errorf("ambiguous prefix read %d pages; want 1", pagesRead)
	}
}

// TestOutputValidated: -o is checked before anything is done, and a bad
// value is answered with the valid ones.
func TestOutputValidated(t *testing.T) {
	for _, tc := range []struct{ o, want string }{
		{"bogus", `Error: invalid --output "bogus": want table, wide, json, yaml, name, jsonpath=TEMPLATE, custom-columns=HEADER:PATH,... or custom-columns-file=FILE`},
		{"name=x", `Error: invalid --output "name=x": name takes no =VALUE; want table, wide`},
		{"jsonpath=", `Error: invalid --output "jsonpath=": jsonpath wants a template`},
		{"jsonpath={.a[}", `Error: invalid jsonpath template "{.a[}": at position 4: unclosed [`},
		{"custom-columns=ID", `Error: invalid --output custom-columns column "ID": want HEADER:PATH`},
		{"custom-columns=ID:id", `Error: invalid --output custom-columns column "ID:id": invalid jsonpath template "id"`},
		{"custom-columns-file=/nonexistent/cols", `Error: invalid --output "custom-columns-file=/nonexistent/cols": open /nonexistent/cols`},
	} {
		// Nothing listens on the server's address: -o is refused first.
		for _, cmd := range [][]string{{"job", "list"}, {"host", "drain", "local-0"}, {"job", "get", "a2f9"}} {
			r := runCLI(t, "", append([]string{"--server", "127.0.0.1:1", "-o", tc.o}, cmd...)...)
			if r.code != exitUsage || !strings.HasPrefix(r.stderr, tc.want) {
				t.Errorf("%s -o %s: exit %d, stderr %q; want %q...", cmd, tc.o, r.code, r.stderr, tc.want)
			}
		}
	}
}

// TestScriptingAgainstStack: -o name, jsonpath and custom-columns,
// --no-headers, -l and id prefixes, against a real stack.
func TestScriptingAgainstStack(t *testing.T) {
	s := startStack(t)
	data := writeSpec(t, "data.yaml", strings.Replace(sleeper, "labels: {}", "labels: {team: data, tier: batch}", 1))
	web := writeSpec(t, "web.yaml", strings.Replace(sleeper, "labels: {}", "labels: {team: web}", 1))
	idData := strings.TrimSpace(s.ok("job", "create", "-f", data))
	idWeb := strings.TrimSpace(s.ok("job", "create", "-f", web))

	if got := s.ok("job", "create", "-f", web, "-o", "name"); !strings.HasPrefix(got, "job/") || strings.Count(got, "\n") != 1 {
		t.Errorf("job create -o name: %q", got)
	}
	if got := s.ok("job", "get", idData, "-o", "name"); got != "job/"+idData+"\n" {
		t.Errorf("job get -o name: %q", got)
	}
	if got := s.ok("job", "list", "-l", "team=data", "-o", "name"); got != "job/"+idData+"\n" {
		t.Errorf("job list -l team=data -o name: %q", got)
	}
	if got := s.ok("job", "list", "-l", "team!=web,tier", "-o", "jsonpath={.jobs[*].id}"); got != idData {
		t.Errorf("job list -l team!=web,tier -o jsonpath: %q", got)
	}
	if got := s.ok("job", "list", "-l", "!tier,team=web", "-o", "jsonpath={range .jobs[*]}{.spec.labels.team}{\"\\n\"}{end}"); got != "web\nweb\n" {
		t.Errorf("job list -l !tier,team=web: %q", got)
	}
	if got := s.ok("job", "list", "-l", "team=nobody", "-o", "custom-columns=ID:.id"); got != "ID\n" {
		t.Errorf("an empty list's custom columns: %q, want the header alone", got)
	}
	s.fails(exitUsage, `Error: invalid --selector (-l) "team=,=x": term "=x" is not key=value, key!=value, key or !key`, "job", "list", "-l", "team=,=x")

	cols := s.ok("job", "get", idWeb, "-o", "custom-columns=ID:.id,NAME:{.spec.name},OWNER:.spec.labels.owner")
	if want := "ID" + strings.Repeat(" ", 37) + "NAME      OWNER\n" + idWeb + "   sleeper   <none>\n"; cols != want {
		t.Errorf("job get -o custom-columns:\n%q\nwant\n%q", cols, want)
	}
	file := filepath.Join(t.TempDir(), "cols")
	if err := os.WriteFile(file, []byte("ID   TEAM\n.id  .spec.labels.team\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := s.ok("job", "list", "-l", "tier", "--no-headers", "-o", "custom-columns-file="+file); got != idData+"   data\n" {
		t.Errorf("custom-columns-file with --no-headers: %q", got)
	}
	if got := s.ok("job", "get", idData, "--no-headers"); strings.HasPrefix(got, "ID") || !strings.HasPrefix(got, idData) {
		t.Errorf("job get --no-headers: %q", got)
	}
	table := s.ok("job", "list", "-l", "tier", "--no-headers")
	if strings.Contains(table, "NAME") || !strings.Contains(table, idData) || strings.Count(table, "\n") != 1 {
		t.Errorf("job list --no-headers: %q", table)
	}

	// Prefixes: a unique one stands for the job, wherever a job id goes.
	if got := s.ok("job", "get", idData[:8], "-o", "jsonpath={.id}"); got != idData {
		t.Errorf("job get %s: %q, want %s", idData[:8], got, idData)
	}
	if got := s.ok("task", "list", idData[:6], "-o", "jsonpath={.tasks[0].jobId}"); got != idData {
		t.Errorf("task list %s: %q", idData[:6], got)
	}
	if got := s.ok("task", "list", idData, "-o", "name"); got != "task/"+idData+"/0\n" {
		t.Errorf("task list -o name: %q", got)
	}
	if got := s.ok("host", "list", "-o", "name"); got != "host/local-0\nhost/local-1\n" {
		t.Errorf("host list -o name: %q", got)
	}
	if got := s.ok("host", "list", "--no-headers", "-o", "custom-columns=NAME:.name,STATE:.state"); got != "local-0   HOST_UP\nlocal-1   HOST_UP\n" {
		t.Errorf("host list -o custom-columns: %q", got)
	}
	if got := s.ok("pool", "list", "-o", "name"); !strings.Contains(got, "pool//default\n") {
		t.Errorf("pool list -o name: %q", got)
	}
	s.fails(exitError, `Error: NotFound: job ffffffff-ffff does not exist`, "job", "get", "ffffffff-ffff")
	s.fails(exitError, `Error: NotFound: job ab does not exist (an id prefix must be at least 4 characters long)`, "job", "get", "ab")
	if got := s.ok("job", "scale", idWeb[:5], "2", "-o", "name"); got != "job/"+idWeb+"\n" {
		t.Errorf("job scale %s -o name: %q", idWeb[:5], got)
	}
	if got := s.ok("job", "cancel", idWeb[:5], "-o", "name"); got != "job/"+idWeb+"\n" {
		t.Errorf("job cancel %s -o name: %q", idWeb[:5], got)
	}
}

// sleeper is a one-instance batch job that runs until it is cancelled;
// its labels: {} line is replaced to label it.
const sleeper = `name: sleeper
type: BATCH
pool: /default
instanceCount: 1
labels: {}
defaultSpec:
  command: ["/bin/sh", "-c", "sleep 600"]
  resources: {cpu: 0.1, memoryMb: 16}
`
