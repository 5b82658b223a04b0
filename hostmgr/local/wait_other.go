//go:build !linux

package local

import "errors"

// waitExited is unsupported off Linux; the caller then reaps without first
// killing what the process left in its group, because after reaping the
// group id may already name someone else's processes.
func waitExited(pid int) error { return errors.ErrUnsupported }

// canPeek says that waitExited does not work here.
const canPeek = false
