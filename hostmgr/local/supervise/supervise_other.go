//go:build !linux

package supervise

import (
	"errors"
	"os"
)

// Supported reports whether runs can be started under a supervisor here:
// not off Linux, where the backend starts runs as its own children.
const Supported = false

// Main is not available off Linux.
func Main() int {
	complain("supervisors need Linux")
	return 1
}

// StartInCgroup starts the process; there are no cgroups off Linux.
func StartInCgroup(path string, argv []string, attr *os.ProcAttr, cg *Cgroup) (*os.Process, error) {
	if cg != nil {
		return nil, errors.New("cgroups need Linux")
	}
	return os.StartProcess(path, argv, attr)
}
