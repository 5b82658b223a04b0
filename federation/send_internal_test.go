package federation

import "testing"

// TestItemWhy: a CreateJobs item's refusal reads as CreateJob's would.
func TestItemWhy(t *testing.T) {
	for in, want := range map[string]string{
		"requests[3].spec.pool: pool /x does not exist":  "spec.pool: pool /x does not exist",
		"requests[12]: the store (etcd) did not take it": "the store (etcd) did not take it",
		"spec.pool: no such pool":                        "spec.pool: no such pool",
		"requests[":                                      "requests[",
	} {
		if got := itemWhy(in); got != want {
			t.Errorf("itemWhy(%q) = %q, want %q", in, got, want)
		}
	}
}
