//go:build !linux

package local

// exitNotify returns nil off Linux: there is no pidfd to wait on without
// reaping, so the caller reaps at once (a blocked thread per child) and
// does not kill what the process left in its group, because after reaping
// the group id may already name someone else's processes.
func exitNotify(pid int) <-chan struct{} { return nil }
