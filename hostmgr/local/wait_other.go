//go:build !linux

package local

import "errors"

// errNoProc is returned by procStartTicks where /proc does not tell.
var errNoProc = errors.New("local: process start times are not available here")

// exitNotify returns nil off Linux: there is no pidfd to wait on without
// reaping, so the caller reaps at once (a blocked thread per child) and
// does not kill what the process left in its group, because after reaping
// the group id may already name someone else's processes.
func exitNotify(pid int) <-chan struct{} { return nil }

// procStartTicks: without /proc no start time can be read, so no run of an
// earlier backend is adopted.
func procStartTicks(pid int) (uint64, error) { return 0, errNoProc }

func watchAdopted(pid int, ticks uint64) (<-chan struct{}, bool) { return nil, false }
