//go:build !linux

package local

// Without /proc the processes of runs cannot be found: nothing is adopted
// off Linux, and nothing is stopped.
type liveProcs struct {
	runs map[string][]int
	sups map[string]int
}

func (b *Backend) runProcs() liveProcs { return liveProcs{} }

func runLeader([]int) (int, uint64, bool) { return 0, 0, false }

func (b *Backend) killStrays(map[string]bool) {}
