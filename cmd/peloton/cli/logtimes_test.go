package cli

import (
	"strings"
	"testing"
	"time"
)

// task logs --timestamps prefixes each line with its time; --since keeps
// the lines written since then (with --tail, the last N of those); -f goes
// on stamping. A --since that is no time is refused naming the flag.
func TestTaskLogsSinceAndTimestamps(t *testing.T) {
	s := startStack(t)
	spec := strings.Replace(batchYAML, `["sleep", "1"]`, `["sh", "-c", "echo a; echo b; sleep 1; echo c; echo d"]`, 1)
	spec = strings.Replace(spec, "instanceCount: 2", "instanceCount: 1", 1)
	job := strings.TrimSpace(s.ok("job", "create", "-f", writeSpec(t, "stamped.yaml", spec)))
	s.waitFor(60*time.Second, "b written", func() (bool, string) {
		r := s.run("task", "logs", job, "0")
		return strings.Contains(r.stdout, "b\n"), r.stdout + r.stderr
	})
	followed := s.ok("task", "logs", job, "0", "-f", "--timestamps")
	stamped := s.ok("task", "logs", job, "0", "--timestamps")
	if followed != stamped {
		t.Errorf("task logs -f --timestamps = %q; want what --timestamps gives once the run ended, %q", followed, stamped)
	}
	var times []string
	for _, l := range strings.SplitAfter(stamped, "\n") {
		if l == "" {
			continue
		}
		ts, _, _ := strings.Cut(l, " ")
		if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		times = append(times, ts)
	}
	if len(times) != 4 {
		t.Fatalf("task logs --timestamps = %q; want 4 lines", stamped)
	}
	if out := s.ok("task", "logs", job, "0", "--since", times[2]); out != "c\nd\n" {
		t.Errorf("task logs --since %s (c's time) = %q, want c and d", times[2], out)
	}
	if out := s.ok("task", "logs", job, "0", "--since", "10m", "--tail", "3"); out != "b\nc\nd\n" {
		t.Errorf("task logs --since 10m --tail 3 = %q", out)
	}
	if out := s.ok("task", "logs", job, "0", "--since", times[2], "--tail", "1", "-f", "--timestamps"); !strings.HasSuffix(stamped, out) || strings.Count(out, "\n") != 1 {
		t.Errorf("task logs --since --tail 1 -f --timestamps = %q; want the last line of %q", out, stamped)
	}
	if out := s.ok("task", "logs", job, "0", "--since", time.Now().Add(time.Hour).Format(time.RFC3339)); out != "" {
		t.Errorf("task logs --since an hour ahead = %q", out)
	}
	s.fails(exitUsage, `Error: invalid --since "yesterday": want an RFC 3339 time (2026-01-02T15:04:05Z) or how long ago (24h, 90m, 7d)`,
		"task", "logs", job, "0", "--since", "yesterday")
}
