package kubetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

func TestCPUAccounting(t *testing.T) {
	// A shell that spins for a while uses CPU that /proc shows.
	p, err := StartProc(t.TempDir(), "spin", "/bin/sh", []string{"-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; sleep 30"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	testutil.Eventually(t, 20*time.Second, "the spinning shell uses 50ms of CPU", func() error {
		used, err := p.CPU()
		if err != nil {
			t.Fatal(err)
		}
		if used < 50*time.Millisecond {
			return fmt.Errorf("used %s", used)
		}
		return nil
	})
	p.Stop()
	if _, err := p.CPU(); err == nil {
		t.Error("CPU of an ended process: no error")
	}

	self := SelfCPU()
	x := 0
	for i := range 50_000_000 {
		x += i
	}
	_ = x
	if d := SelfCPU() - self; d <= 0 {
		t.Errorf("SelfCPU did not grow after a busy loop: %s", d)
	}
	busy, total, err := MachineCPU()
	if err != nil || busy <= 0 || total < busy {
		t.Errorf("MachineCPU = %s, %s, %v", busy, total, err)
	}
	if _, err := ProcCPU(1 << 30); err == nil {
		t.Error("ProcCPU of no process: no error")
	}
}
