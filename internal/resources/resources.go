// Package resources holds the one integer representation of an amount of
// cluster resources that every component does arithmetic on: milli-CPU, MiB
// of memory and disk, and whole GPUs. The public API speaks decimals (cpu: 0.1);
// converting at the edge keeps sums exact and comparisons free of float drift.
//
// It imports nothing of Peloton but the generated API types.
package resources

import (
	"fmt"
	"math"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Resources is an amount of each resource kind. All fields are >= 0 in any
// value produced by this package's constructors and saturating operations.
type Resources struct {
	MilliCPU int64
	MemoryMB int64
	DiskMB   int64
	GPU      int64
}

// Kind names one resource dimension.
type Kind int

// The resource kinds, in the order used by Get and Set.
const (
	CPU Kind = iota
	Memory
	Disk
	GPU
	NumKinds
)

// String returns the API field name of the kind.
func (k Kind) String() string {
	switch k {
	case CPU:
		return "cpu"
	case Memory:
		return "memoryMb"
	case Disk:
		return "diskMb"
	case GPU:
		return "gpu"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Get returns the quantity of one kind.
func (r Resources) Get(k Kind) int64 {
	switch k {
	case CPU:
		return r.MilliCPU
	case Memory:
		return r.MemoryMB
	case Disk:
		return r.DiskMB
	case GPU:
		return r.GPU
	}
	return 0
}

// Set returns r with the quantity of one kind replaced.
func (r Resources) Set(k Kind, v int64) Resources {
	switch k {
	case CPU:
		r.MilliCPU = v
	case Memory:
		r.MemoryMB = v
	case Disk:
		r.DiskMB = v
	case GPU:
		r.GPU = v
	}
	return r
}

// Add returns r+o, saturating at MaxInt64.
func (r Resources) Add(o Resources) Resources {
	return Resources{satAdd(r.MilliCPU, o.MilliCPU), satAdd(r.MemoryMB, o.MemoryMB), satAdd(r.DiskMB, o.DiskMB), satAdd(r.GPU, o.GPU)}
}

// Sub returns r-o, floored at zero per kind.
func (r Resources) Sub(o Resources) Resources {
	return Resources{satSub(r.MilliCPU, o.MilliCPU), satSub(r.MemoryMB, o.MemoryMB), satSub(r.DiskMB, o.DiskMB), satSub(r.GPU, o.GPU)}
}

// Min returns the per-kind minimum of r and o.
func (r Resources) Min(o Resources) Resources {
	return Resources{min(r.MilliCPU, o.MilliCPU), min(r.MemoryMB, o.MemoryMB), min(r.DiskMB, o.DiskMB), min(r.GPU, o.GPU)}
}

// Max returns the per-kind maximum of r and o.
func (r Resources) Max(o Resources) Resources {
	return Resources{max(r.MilliCPU, o.MilliCPU), max(r.MemoryMB, o.MemoryMB), max(r.DiskMB, o.DiskMB), max(r.GPU, o.GPU)}
}

// Scale returns r multiplied by n, saturating.
func (r Resources) Scale(n int64) Resources {
	return Resources{satMul(r.MilliCPU, n), satMul(r.MemoryMB, n), satMul(r.DiskMB, n), satMul(r.GPU, n)}
}

// FitsIn reports whether r <= o in every kind.
func (r Resources) FitsIn(o Resources) bool {
	return r.MilliCPU <= o.MilliCPU && r.MemoryMB <= o.MemoryMB && r.DiskMB <= o.DiskMB && r.GPU <= o.GPU
}

// IsZero reports whether every kind is zero.
func (r Resources) IsZero() bool { return r == Resources{} }

// String renders r for logs and error messages, in the units users write
// (cpu in cores, memory and disk in MiB); an unlimited kind reads "unlimited".
func (r Resources) String() string {
	return fmt.Sprintf("cpu=%s memoryMb=%s diskMb=%s gpu=%s",
		FormatAmount(CPU, r.MilliCPU), FormatAmount(Memory, r.MemoryMB), FormatAmount(Disk, r.DiskMB), FormatAmount(GPU, r.GPU))
}

// FormatAmount renders a quantity of kind k in the units of the API, the
// units users write in specs: cores for cpu ("0.5", never 500 milli-units),
// MiB for memory and disk, whole GPUs. math.MaxInt64, the quantity of an
// unlimited kind, reads "unlimited". Every amount in a user-facing message
// goes through here.
func FormatAmount(k Kind, v int64) string {
	if v == math.MaxInt64 {
		return "unlimited"
	}
	if k == CPU {
		return FormatCPU(v)
	}
	return fmt.Sprintf("%d", v)
}

// AmountWithUnit renders an amount of kind k for people, with its unit:
// "64 CPUs", "1 GPU", "512 MiB".
func AmountWithUnit(k Kind, v int64) string {
	n := FormatAmount(k, v)
	switch k {
	case CPU:
		if v == 1000 {
			return n + " CPU"
		}
		return n + " CPUs"
	case GPU:
		if v == 1 {
			return n + " GPU"
		}
		return n + " GPUs"
	}
	return n + " MiB"
}

// FormatCPU renders milli-CPU as decimal cores ("0.1", "4").
func FormatCPU(milli int64) string {
	if milli%1000 == 0 {
		return fmt.Sprintf("%d", milli/1000)
	}
	return fmt.Sprintf("%g", float64(milli)/1000)
}

// Unlimited is the largest amount, used for "no limit".
var Unlimited = Resources{math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64}

// FieldError is a validation failure of one field of a Resources object.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// GRPCStatus makes a FieldError InvalidArgument wherever it is returned, so
// no caller can let bad user numbers surface as Internal.
func (e *FieldError) GRPCStatus() *status.Status {
	return status.New(codes.InvalidArgument, e.Error())
}

// FromProto converts API resources to integers, validating each field.
// field is the path of the Resources object in the request, used in errors
// (e.g. "spec.defaultSpec.resources"). cpu rounds up to whole milli-cores and
// memory/disk up to whole MiB, so a task never gets less than it asked for;
// gpu must be a whole number. nil means zero.
func FromProto(p *pelotonv1.Resources, field string) (Resources, error) {
	if p == nil {
		return Resources{}, nil
	}
	conv := func(name string, v float64, scale float64) (int64, error) {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return 0, &FieldError{field + "." + name, fmt.Sprintf("must be a finite number >= 0, got %g", v)}
		}
		x := math.Ceil(v*scale - 1e-9)
		if x > 1<<53 {
			return 0, &FieldError{field + "." + name, fmt.Sprintf("too large: %g", v)}
		}
		return int64(x), nil
	}
	var r Resources
	var err error
	if r.MilliCPU, err = conv("cpu", p.Cpu, 1000); err != nil {
		return r, err
	}
	if r.MemoryMB, err = conv("memoryMb", p.MemoryMb, 1); err != nil {
		return r, err
	}
	if r.DiskMB, err = conv("diskMb", p.DiskMb, 1); err != nil {
		return r, err
	}
	if p.Gpu != math.Trunc(p.Gpu) {
		return r, &FieldError{field + ".gpu", fmt.Sprintf("must be a whole number, got %g", p.Gpu)}
	}
	if r.GPU, err = conv("gpu", p.Gpu, 1); err != nil {
		return r, err
	}
	return r, nil
}

// LimitFromProto converts a pool limit. Limits are per kind: a kind the user
// did not set (zero, as proto3 cannot tell unset from zero) is unlimited, so
// {cpu: 30} caps cpu only and leaves memory, disk and gpu unlimited. nil
// means unlimited in every kind. Reservations use FromProto instead, where
// an unset kind is zero: nothing reserved.
func LimitFromProto(p *pelotonv1.Resources, field string) (Resources, error) {
	r, err := FromProto(p, field)
	if err != nil {
		return r, err
	}
	for k := Kind(0); k < NumKinds; k++ {
		if r.Get(k) == 0 {
			r = r.Set(k, math.MaxInt64)
		}
	}
	return r, nil
}

// ToProto converts integers back to API resources. Unlimited kinds are
// reported as 0 only by callers that choose to; ToProto renders them as is.
func (r Resources) ToProto() *pelotonv1.Resources {
	return &pelotonv1.Resources{
		Cpu:      float64(r.MilliCPU) / 1000,
		MemoryMb: float64(r.MemoryMB),
		DiskMb:   float64(r.DiskMB),
		Gpu:      float64(r.GPU),
	}
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	if b < 0 && a < math.MinInt64-b {
		return math.MinInt64
	}
	return a + b
}

func satSub(a, b int64) int64 {
	if b >= a {
		return 0
	}
	return a - b
}

func satMul(a, n int64) int64 {
	if a == 0 || n == 0 {
		return 0
	}
	if a > math.MaxInt64/n {
		return math.MaxInt64
	}
	return a * n
}
