package local

import (
	"fmt"
	"net"

	"github.com/peloton-sched/peloton/hostmgr"
)

// maxPortTries bounds the search for a port that the kernel says is free and
// that no live run of this Backend holds.
const maxPortTries = 64

// validatePorts checks that every port has a name, a valid number, and a
// variable of its own.
func validatePorts(ports []hostmgr.Port) error {
	seen := make(map[string]string, len(ports))
	for i, p := range ports {
		if p.Name == "" {
			return fmt.Errorf("spec.ports[%d].name: required", i)
		}
		if p.Value > 65535 {
			return fmt.Errorf("spec.ports[%d].value: at most 65535, got %d", i, p.Value)
		}
		env := hostmgr.PortEnvName(p.Name)
		if other, dup := seen[env]; dup {
			return fmt.Errorf("spec.ports[%d].name: %q and %q both become %s", i, other, p.Name, env)
		}
		seen[env] = p.Name
	}
	return nil
}

// reservePorts gives a run its ports: a non-zero Value as given, and for
// each zero Value a port that is free on 127.0.0.1 when asked and that no
// live run of this Backend holds. It returns the numbers by name and the
// list to hand to releasePorts when the run ends.
//
// Fixed ports are counted too, so that a chosen port never equals a fixed
// port of a live run; two runs asking for the same fixed port both get it
// (the second one's bind fails, which is its own affair). The kernel may
// still give a chosen port to some other process between our probe and the
// task's bind; only the task can close that window, by binding at once.
func (b *Backend) reservePorts(ports []hostmgr.Port) (map[string]uint32, []uint32, error) {
	if len(ports) == 0 {
		return nil, nil, nil
	}
	byName := make(map[string]uint32, len(ports))
	held := make([]uint32, 0, len(ports))
	b.mu.Lock()
	for _, p := range ports {
		if p.Value != 0 {
			b.portUse[p.Value]++
			held = append(held, p.Value)
			byName[p.Name] = p.Value
		}
	}
	b.mu.Unlock()
	for i, p := range ports {
		if p.Value != 0 {
			continue
		}
		n, err := b.freePort()
		if err != nil {
			b.releasePorts(held)
			return nil, nil, fmt.Errorf("spec.ports[%d]: %w", i, err)
		}
		held = append(held, n)
		byName[p.Name] = n
	}
	return byName, held, nil
}

// freePort asks the kernel for a free loopback port (bind to port 0, read
// the port, close) until it gets one that no live run holds, and reserves
// it. The probe is done without b.mu: it is a system call.
func (b *Backend) freePort() (uint32, error) {
	for range maxPortTries {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		n := uint32(l.Addr().(*net.TCPAddr).Port)
		l.Close()
		b.mu.Lock()
		free := b.portUse[n] == 0
		if free {
			b.portUse[n] = 1
		}
		b.mu.Unlock()
		if free {
			return n, nil
		}
	}
	return 0, fmt.Errorf("find a free port: every port offered in %d tries is held by a live run", maxPortTries)
}

// releasePorts gives back what reservePorts reserved.
func (b *Backend) releasePorts(held []uint32) {
	if len(held) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range held {
		if b.portUse[n]--; b.portUse[n] <= 0 {
			delete(b.portUse, n)
		}
	}
}
