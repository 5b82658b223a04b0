//go:build !linux

package local

import "os"

// Off Linux there are no cgroups: detectCgroups finds no
// /proc/self/mountinfo, so no run ever has a runCgroup and these are never
// reached with one.

func (rc *runCgroup) startProcess(path string, argv []string, attr *os.ProcAttr) (*os.Process, error) {
	return os.StartProcess(path, argv, attr)
}

func killCgroupProcs(dir string) {}

func isCgroupDir(dir string) bool { return false }
