package federation

import (
	"context"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/store/storetest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestCordonMovesStateSince: cordoning and uncordoning change a cluster's
// state, so its state time moves with them; a cordon that changes nothing
// leaves it.
func TestCordonMovesStateSince(t *testing.T) {
	_, st := storetest.StartEtcd(t)
	clk := newClock()
	f := New(st, Options{Now: clk.now, CallTimeout: 200 * time.Millisecond})
	defer f.Close()
	ctx := context.Background()
	if _, err := f.Register(ctx, &pelotonv1.RegisterClusterRequest{Name: "c", Endpoint: "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	for i, step := range []struct {
		cordon bool
		moves  bool
		state  pelotonv1.ClusterState
	}{
		{true, true, pelotonv1.ClusterState_CLUSTER_CORDONED},
		{true, false, pelotonv1.ClusterState_CLUSTER_CORDONED},
		{false, true, pelotonv1.ClusterState_CLUSTER_UNREACHABLE},
	} {
		before, err := f.Get("c")
		if err != nil {
			t.Fatal(err)
		}
		clk.advance(time.Minute)
		c, err := f.Cordon(ctx, "c", step.cordon)
		if err != nil {
			t.Fatal(err)
		}
		want := before.GetStateTime().AsTime()
		if step.moves {
			want = clk.now()
		}
		if c.GetState() != step.state || !c.GetStateTime().AsTime().Equal(want) {
			t.Errorf("step %d (cordon %v): %s since %v, want %s since %v", i, step.cordon, c.GetState(), c.GetStateTime().AsTime(), step.state, want)
		}
	}
}
