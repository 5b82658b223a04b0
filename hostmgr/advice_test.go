package hostmgr

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/internal/store/memstore"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func advise(m *Manager, mode string, ttl uint32, hosts ...*pelotonv1.HostAdvice) error {
	return m.Usage().PublishAdvice(context.Background(), &pelotonv1.PublishAdviceRequest{AdvisorId: "adv-1", Mode: mode, TtlSeconds: ttl,
		Hosts: hosts, Partitions: []*pelotonv1.PartitionAdvice{{Partition: "stateless", Pressure: 0.5, Services: 2, ServicesOverSlo: 1}}})
}

// Advice shows in the hosts and partitions while it is fresh, and
// lapses: zones unknown, factors 1.
func TestAdviceShownAndLapses(t *testing.T) {
	m := partManager(t, newPartHosts(), nil)
	now := time.Now()
	m.now = func() time.Time { return now }
	if err := advise(m, "act", 10,
		&pelotonv1.HostAdvice{Host: "a", Zone: pelotonv1.HostZone_HOST_ZONE_RED, OversubscriptionFactor: 1},
		&pelotonv1.HostAdvice{Host: "b", Zone: pelotonv1.HostZone_HOST_ZONE_GREEN, OversubscriptionFactor: 1.5}); err != nil {
		t.Fatal(err)
	}
	hs := m.ListHosts()
	if hs[0].Zone != pelotonv1.HostZone_HOST_ZONE_RED || hs[1].OversubscriptionFactor != 1.5 || hs[2].Zone != pelotonv1.HostZone_HOST_ZONE_UNKNOWN || hs[2].OversubscriptionFactor != 1 {
		t.Fatalf("hosts: %v", hs)
	}
	ps, st := m.Usage().ListPartitions()
	if len(ps) != 2 || ps[0].Name != "batch" || ps[0].Hosts != 3 || ps[0].Zones["red"] != 1 || ps[0].Zones["green"] != 1 || ps[0].Zones["unknown"] != 1 ||
		ps[0].OversubscriptionFactor < 1.16 || ps[0].OversubscriptionFactor > 1.17 {
		t.Fatalf("partitions: %v", ps)
	}
	if ps[1].Name != "stateless" || ps[1].Hosts != 0 || ps[1].Pressure != 0.5 || ps[1].ServicesOverSlo != 1 || st.Mode != "act" || st.AdvisorId != "adv-1" {
		t.Fatalf("stateless %v, advisor %v", ps[1], st)
	}
	now = now.Add(11 * time.Second)
	if h := m.ListHosts()[0]; h.Zone != pelotonv1.HostZone_HOST_ZONE_UNKNOWN || h.OversubscriptionFactor != 1 {
		t.Fatalf("lapsed advice still shown: %v", h)
	}
	if _, st := m.Usage().ListPartitions(); st.Mode != "" {
		t.Fatalf("lapsed advisor status %v", st)
	}
}

func TestAdviceRefusals(t *testing.T) {
	m := partManager(t, newPartHosts(), nil)
	for _, tc := range []struct {
		req  *pelotonv1.PublishAdviceRequest
		code codes.Code
		msg  string
	}{
		{&pelotonv1.PublishAdviceRequest{Mode: "act", TtlSeconds: 10}, codes.InvalidArgument, "advisorId: required"},
		{&pelotonv1.PublishAdviceRequest{AdvisorId: "x", Mode: "yolo", TtlSeconds: 10}, codes.InvalidArgument, `mode: "yolo": want act or observe`},
		{&pelotonv1.PublishAdviceRequest{AdvisorId: "x", Mode: "act"}, codes.InvalidArgument, "ttlSeconds: 0: want 1 to 600"},
		{&pelotonv1.PublishAdviceRequest{AdvisorId: "x", Mode: "act", TtlSeconds: 10, Hosts: []*pelotonv1.HostAdvice{{Host: "zz", OversubscriptionFactor: 1}}},
			codes.InvalidArgument, `hosts[0].host: host "zz" does not exist`},
		{&pelotonv1.PublishAdviceRequest{AdvisorId: "x", Mode: "act", TtlSeconds: 10, Hosts: []*pelotonv1.HostAdvice{{Host: "a", OversubscriptionFactor: 0.5}}},
			codes.InvalidArgument, "hosts[0].oversubscriptionFactor: 0.5: want 1 to 10"},
		{&pelotonv1.PublishAdviceRequest{AdvisorId: "x", Mode: "act", TtlSeconds: 10, Hosts: []*pelotonv1.HostAdvice{{Host: "a", OversubscriptionFactor: 1, Headroom: 1.5}}},
			codes.InvalidArgument, "hosts[0].headroom: 1.5: want 0 to 1"},
		{&pelotonv1.PublishAdviceRequest{AdvisorId: "x", Mode: "observe", TtlSeconds: 10, ObservedMoves: []*pelotonv1.PartitionMove{{Host: "a", To: "Bad Name"}}},
			codes.InvalidArgument, "observedMoves[0].to:"},
	} {
		err := m.Usage().PublishAdvice(context.Background(), tc.req)
		if status.Code(err) != tc.code || !strings.HasPrefix(status.Convert(err).Message(), tc.msg) {
			t.Errorf("%v: %v; want %s %q", tc.req, err, tc.code, tc.msg)
		}
	}
	if _, st := m.Usage().ListPartitions(); st.Mode != "" {
		t.Errorf("a refused advice was kept: %v", st)
	}
}

// The move history keeps every move with its reason, and observed ones,
// in etcd: a restarted manager has it, states derived from the hosts.
func TestMoveHistory(t *testing.T) {
	st := memstore.New(memstore.Options{})
	ctx := context.Background()
	b := newPartHosts()
	m1 := partManager(t, b, st)
	if _, err := m1.Maintenance().MoveHost(ctx, "b", "stateless", "stateless pressure 0.50 >= 0.30"); err != nil {
		t.Fatal(err)
	}
	if _, err := m1.Maintenance().MoveHost(ctx, "a", "stateless", "by hand"); err != nil { // a holds a run: it stays moving
		t.Fatal(err)
	}
	if err := m1.Usage().PublishAdvice(ctx, &pelotonv1.PublishAdviceRequest{AdvisorId: "x", Mode: "observe", TtlSeconds: 10,
		ObservedMoves: []*pelotonv1.PartitionMove{{Host: "c", To: "stateless", Reason: "would"}}}); err != nil {
		t.Fatal(err)
	}
	want := "c batch>stateless OBSERVED would|a batch>stateless MOVING by hand|b batch>stateless DONE stateless pressure 0.50 >= 0.30"
	render := func(m *Manager, host string) string {
		ms, err := m.Maintenance().ListPartitionMoves(host, 0)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, mv := range ms {
			out = append(out, mv.Host+" "+mv.From+">"+mv.To+" "+mv.State+" "+mv.Reason)
		}
		return strings.Join(out, "|")
	}
	if got := render(m1, ""); got != want {
		t.Fatalf("history:\n got %s\nwant %s", got, want)
	}
	_ = m1.Close()
	m2 := partManager(t, b, st)
	if got := render(m2, ""); got != want {
		t.Fatalf("history after a restart:\n got %s\nwant %s", got, want)
	}
	if got := render(m2, "b"); got != "b batch>stateless DONE stateless pressure 0.50 >= 0.30" {
		t.Fatalf("history of b: %s", got)
	}
	// b goes back: its first move is DONE (it left from there), the new one DONE too.
	if _, err := m2.Maintenance().MoveHost(ctx, "b", "batch", "cooled"); err != nil {
		t.Fatal(err)
	}
	if got := render(m2, "b"); got != "b stateless>batch DONE cooled|b batch>stateless DONE stateless pressure 0.50 >= 0.30" {
		t.Fatalf("history of b after moving back: %s", got)
	}
	if _, err := m2.Maintenance().ListPartitionMoves("zz", 0); status.Code(err) != codes.NotFound {
		t.Errorf("moves of an unknown host: %v", err)
	}
	if _, err := m2.Maintenance().ListPartitionMoves("", 5000); status.Code(err) != codes.InvalidArgument {
		t.Errorf("limit 5000: %v", err)
	}
	if _, err := m2.Maintenance().MoveHost(ctx, "c", "stateless", strings.Repeat("x", 513)); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a 513-byte reason: %v", err)
	}
}
