package jobmgr

import "testing"

func TestInstanceRanges(t *testing.T) {
	for _, tc := range []struct {
		in   []uint32
		want string
	}{
		{nil, ""},
		{[]uint32{3}, "3"},
		{[]uint32{0, 1}, "0-1"},
		{[]uint32{0, 1, 2, 4, 6, 7}, "0-2, 4, 6-7"},
	} {
		if got := InstanceRanges(tc.in); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.in, got, tc.want)
		}
	}
}
