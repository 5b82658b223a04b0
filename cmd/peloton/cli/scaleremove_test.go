package cli

import (
	"slices"
	"strings"
	"testing"
)

// instanceIDs is the instance IDs of a job's tasks, as task list shows them.
func (s *stack) instanceIDs(job string) []uint32 {
	s.t.Helper()
	var out []uint32
	for _, tk := range s.tasks(job) {
		out = append(out, tk.GetInstanceId())
	}
	return out
}

// TestJobScaleRemove removes chosen instances of a service with
// `job scale --remove`, with and without COUNT, and refuses bad lists in
// the server's words.
func TestJobScaleRemove(t *testing.T) {
	s := startStack(t)
	job := strings.TrimSpace(s.ok("job", "create", "-f", writeSpec(t, "web.yaml", serviceYAML("300", 4))))
	s.waitRunning(job, 4)

	if out := s.ok("job", "scale", job, "--remove", "1,2"); out != "job "+job+": removed instances 1,2, spec version 2\n" {
		t.Errorf("job scale --remove: %q", out)
	}
	s.waitRunning(job, 2)
	if got := s.instanceIDs(job); !slices.Equal(got, []uint32{0, 3}) {
		t.Errorf("instances after removing 1 and 2: %v", got)
	}
	s.fails(exitError, "Error: NotFound: job "+job+" has no instance 1: it was removed by a scale (spec.removedInstances)", "task", "get", job, "1")
	s.fails(exitError, "Error: NotFound: removeInstances[0]: job "+job+" has no instance 2", "job", "scale", job, "--remove", "2")
	s.fails(exitError, "Error: InvalidArgument: removeInstances[1]: instance 0 is listed twice (also removeInstances[0])", "job", "scale", job, "--remove", "0,0")
	s.fails(exitUsage, "Error: missing COUNT", "job", "scale", job)

	// With COUNT: 0 goes, and the total is 3: two new IDs above the highest.
	if out := s.ok("job", "scale", job, "3", "--remove", "0"); out != "job "+job+": 3 instances, removed instances 0, spec version 3\n" {
		t.Errorf("job scale 3 --remove 0: %q", out)
	}
	s.waitRunning(job, 3)
	if got := s.instanceIDs(job); !slices.Equal(got, []uint32{3, 4, 5}) {
		t.Errorf("instances after scale 3 --remove 0: %v", got)
	}
	rs := rows(s.ok("job", "versions", job))
	if len(rs) != 4 || strings.Join(rs[3][3:], " ") != "scaled from 2 to 3 instances, removing 0" {
		t.Errorf("job versions:\n%v", rs)
	}
}
