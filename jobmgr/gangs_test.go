package jobmgr

import (
	"testing"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func TestGangLayout(t *testing.T) {
	seven := MakeJob("x").Instances(7).With(func(s *pelotonv1.JobSpec) {
		s.Gang = &pelotonv1.GangSpec{Size: 3, AllowPartialLast: true}
	}).Obj()
	l := gangLayoutOf(seven)
	if !l.ganged() || l.count() != 3 {
		t.Fatalf("layout %+v: ganged %v count %d", l, l.ganged(), l.count())
	}
	if g, r, ok := l.of(4); !ok || g != 1 || r != 1 {
		t.Errorf("instance 4: gang %d rank %d ok %v", g, r, ok)
	}
	if first, end := l.members(2); first != 6 || end != 7 {
		t.Errorf("last gang: [%d, %d)", first, end)
	}

	legacy := gangLayoutOf(MakeJob("x").Instances(5).With(func(s *pelotonv1.JobSpec) {
		s.Sla = &pelotonv1.SlaSpec{MinimumRunningInstances: 2}
	}).Obj())
	if legacy.count() != 1 {
		t.Errorf("minimumRunningInstances 2 of 5: %d gangs", legacy.count())
	}
	if _, _, ok := legacy.of(3); ok {
		t.Error("instance 3 is in no gang of minimumRunningInstances 2")
	}
	if first, end := legacy.members(0); first != 0 || end != 2 {
		t.Errorf("legacy gang: [%d, %d)", first, end)
	}
	if none := gangLayoutOf(MakeJob("x").Instances(3).Obj()); none.ganged() || none.count() != 0 {
		t.Errorf("no gang: %+v", none)
	}
}
