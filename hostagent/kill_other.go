//go:build !linux

package hostagent

import "fmt"

// Kill is not supported off Linux: without /proc there are no runs found
// to kill, and without pidfds no pid can be checked before it is signalled.
func (e *EnvRuns) Kill(id string, _ RunInfo) error {
	return fmt.Errorf("hostagent: kill run %s: only on Linux", id)
}
