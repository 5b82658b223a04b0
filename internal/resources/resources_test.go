package resources

import (
	"math"
	"testing"
	"testing/quick"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func TestFromProto(t *testing.T) {
	r, err := FromProto(&pelotonv1.Resources{Cpu: 0.1, MemoryMb: 32.5, DiskMb: 10, Gpu: 1}, "x")
	if err != nil {
		t.Fatal(err)
	}
	if r != (Resources{MilliCPU: 100, MemoryMB: 33, DiskMB: 10, GPU: 1}) {
		t.Fatalf("got %+v", r)
	}
	for _, tc := range []struct {
		p     *pelotonv1.Resources
		field string
	}{
		{&pelotonv1.Resources{Cpu: -1}, "x.cpu"},
		{&pelotonv1.Resources{MemoryMb: -0.5}, "x.memoryMb"},
		{&pelotonv1.Resources{Gpu: 0.5}, "x.gpu"},
		{&pelotonv1.Resources{DiskMb: math.Inf(1)}, "x.diskMb"},
		{&pelotonv1.Resources{Cpu: math.NaN()}, "x.cpu"},
	} {
		_, err := FromProto(tc.p, "x")
		fe, ok := err.(*FieldError)
		if !ok || fe.Field != tc.field {
			t.Errorf("%v: got %v, want error on %s", tc.p, err, tc.field)
		}
	}
}

func TestSaturatingArithmetic(t *testing.T) {
	if got := Unlimited.Add(Resources{MilliCPU: 1}); got.MilliCPU != math.MaxInt64 {
		t.Fatalf("add did not saturate: %v", got)
	}
	if got := (Resources{MilliCPU: 1}).Sub(Resources{MilliCPU: 5}); got.MilliCPU != 0 {
		t.Fatalf("sub went below zero: %v", got)
	}
	// (a+b)-b >= a's lower bound and never negative, for any non-negative inputs.
	f := func(a, b uint32) bool {
		x, y := Resources{MilliCPU: int64(a)}, Resources{MilliCPU: int64(b)}
		return x.Add(y).Sub(y) == x && x.Sub(y).MilliCPU >= 0
	}
	if err := quick.Check(f, nil); err != nil {
		t.Fatal(err)
	}
}
