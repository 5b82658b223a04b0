package resmgr

import (
	"math"
	"strings"
	"testing"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestSpecToNodeRefusesBadNumbers: bad numbers anywhere in a pool spec are
// InvalidArgument naming the field (they used to surface as Internal), and a
// share that is 0 in every kind is refused rather than read as 1.
func TestSpecToNodeRefusesBadNumbers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spec   *pelotonv1.PoolSpec
		prefix string
	}{
		{"negative reservation", &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: -1}}, "spec.reservation.cpu: must be a finite number >= 0"},
		{"NaN reservation", &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Gpu: math.NaN()}}, "spec.reservation.gpu: "},
		{"infinite limit", &pelotonv1.PoolSpec{Limit: &pelotonv1.Resources{DiskMb: math.Inf(1)}}, "spec.limit.diskMb: must be a finite number >= 0"},
		{"huge limit", &pelotonv1.PoolSpec{Limit: &pelotonv1.Resources{MemoryMb: 1e308}}, "spec.limit.memoryMb: too large"},
		{"NaN share", &pelotonv1.PoolSpec{Share: &pelotonv1.Resources{Cpu: math.NaN()}}, "spec.share.cpu: "},
		{"infinite share", &pelotonv1.PoolSpec{Share: &pelotonv1.Resources{Cpu: math.Inf(1)}}, "spec.share.cpu: "},
		{"zero share", &pelotonv1.PoolSpec{Share: &pelotonv1.Resources{}}, "spec.share: must be > 0 in at least one kind"},
	} {
		_, _, _, err := specToNode(tc.spec)
		if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tc.prefix) {
			t.Errorf("%s: got %v, want InvalidArgument %q", tc.name, err, tc.prefix)
		}
	}
	// A share with one kind set keeps 1 for the kinds left at 0 (unset).
	_, _, share, err := specToNode(&pelotonv1.PoolSpec{Share: &pelotonv1.Resources{Cpu: 2}})
	if err != nil || share.MilliCPU != 2000 || share.MemoryMB != 1000 {
		t.Errorf("share {cpu: 2}: got %+v, %v", share, err)
	}
}
