package resources

import (
	"math"
	"testing"
	"testing/quick"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestFromProtoBadNumbers: every number a user cannot mean is refused as
// InvalidArgument naming the field, in reservations, limits and job resources.
func TestFromProtoBadNumbers(t *testing.T) {
	for _, v := range []float64{-1, math.NaN(), math.Inf(1), math.Inf(-1), 1e308} {
		for _, conv := range []func(*pelotonv1.Resources, string) (Resources, error){FromProto, LimitFromProto} {
			_, err := conv(&pelotonv1.Resources{MemoryMb: v}, "spec.reservation")
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("memoryMb %g: got %v, want InvalidArgument", v, err)
			}
			want := "spec.reservation.memoryMb: must be a finite number >= 0"
			if v == 1e308 {
				want = "spec.reservation.memoryMb: too large"
			}
			if msg := status.Convert(err).Message(); len(msg) < len(want) || msg[:len(want)] != want {
				t.Errorf("memoryMb %g: message %q, want prefix %q", v, msg, want)
			}
		}
	}
}

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

// TestLimitFromProto states the rule for pool limits: per kind, and a kind
// left unset is unlimited. nil is unlimited everywhere.
func TestLimitFromProto(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    *pelotonv1.Resources
		want Resources
	}{
		{"nil", nil, Unlimited},
		{"empty", &pelotonv1.Resources{}, Unlimited},
		{"cpu only", &pelotonv1.Resources{Cpu: 30}, Resources{30000, math.MaxInt64, math.MaxInt64, math.MaxInt64}},
		{"memory and gpu", &pelotonv1.Resources{MemoryMb: 512, Gpu: 2}, Resources{math.MaxInt64, 512, math.MaxInt64, 2}},
		{"all", &pelotonv1.Resources{Cpu: 0.5, MemoryMb: 1, DiskMb: 2, Gpu: 3}, Resources{500, 1, 2, 3}},
	} {
		got, err := LimitFromProto(tc.p, "spec.limit")
		if err != nil || got != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	if _, err := LimitFromProto(&pelotonv1.Resources{Cpu: -1}, "spec.limit"); err == nil || err.Error() != "spec.limit.cpu: must be a finite number >= 0, got -1" {
		t.Errorf("negative limit: %v", err)
	}
	// A reservation is the other way round: unset is zero.
	if r, _ := FromProto(&pelotonv1.Resources{Cpu: 30}, "spec.reservation"); r != (Resources{MilliCPU: 30000}) {
		t.Errorf("reservation {cpu: 30} = %+v, want only cpu", r)
	}
}

// TestFormatAmount: user-facing amounts are in the units users write.
func TestFormatAmount(t *testing.T) {
	for _, tc := range []struct {
		k    Kind
		v    int64
		want string
	}{
		{CPU, 2000, "2"}, {CPU, 1500, "1.5"}, {CPU, 1, "0.001"}, {Memory, 2048, "2048"},
		{GPU, 1, "1"}, {Disk, math.MaxInt64, "unlimited"}, {CPU, math.MaxInt64, "unlimited"},
	} {
		if got := FormatAmount(tc.k, tc.v); got != tc.want {
			t.Errorf("FormatAmount(%s, %d) = %q, want %q", tc.k, tc.v, got, tc.want)
		}
	}
	if got := (Resources{MilliCPU: 30000, MemoryMB: math.MaxInt64}).String(); got != "cpu=30 memoryMb=unlimited diskMb=0 gpu=0" {
		t.Errorf("String() = %q", got)
	}
}
