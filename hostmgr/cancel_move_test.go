package hostmgr

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestCancelMoveReturnsTheHost: a move under way is cancelled; the host
// settles back in the partition it was leaving, is offered again, no longer
// drains, and the cancel is in etcd (it survives a restart) and in the move
// history.
func TestCancelMoveReturnsTheHost(t *testing.T) {
	_, st := storetest.StartEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := newPartHosts()
	m1 := partManager(t, b, st)
	mt := m1.Maintenance()
	if _, err := mt.MoveHost(ctx, "a", "stateless", "by hand"); err != nil {
		t.Fatal(err)
	}
	h, err := mt.CancelMove(ctx, "a", "changed my mind")
	if err != nil {
		t.Fatal(err)
	}
	if h.Partition != "batch" || h.PartitionState != pelotonv1.PartitionMoveState_PARTITION_SETTLED || h.PartitionMessage != "" || h.TargetPartition != "" {
		t.Fatalf("answer: %+v", h)
	}
	if m1.Draining("a") || !m1.HostUp("a") {
		t.Fatal("a cancelled move must leave the host in service, not draining")
	}
	if _, offers := m1.AcquireHosts(HostFilter{Max: 3, Hosts: []string{"a"}}); len(offers) == 0 || offers[0].Name != "a" {
		t.Fatalf("a not offered after the cancel: %+v", offers)
	}
	kv, err := st.Get(ctx, "hosts/a/partition")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(kv.Value); got != `{"partition":"batch","state":"PARTITION_SETTLED"}` {
		t.Fatalf("record: %s", got)
	}
	moves, err := mt.ListPartitionMoves("a", 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mv := range moves {
		got = append(got, mv.From+">"+mv.To+":"+mv.State+":"+mv.Reason)
	}
	want := []string{"batch>stateless:CANCELLED:changed my mind", "batch>stateless:CANCELLED:by hand"}
	if !slices.Equal(got, want) {
		t.Fatalf("history %q, want %q", got, want)
	}
	// Nothing to cancel now.
	_, err = mt.CancelMove(ctx, "a", "")
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "host a is not moving; there is no move to cancel") {
		t.Fatalf("second cancel: %v", err)
	}
	if _, err := mt.CancelMove(ctx, "zz", ""); status.Code(err) != codes.NotFound {
		t.Fatalf("cancel of an unknown host: %v", err)
	}
	_ = m1.Close()

	// After a restart the host is settled in batch and the history holds.
	m2 := partManager(t, b, st)
	if got := partitions(m2); got != "a=batch b=batch c=batch" {
		t.Fatalf("after restart: %s", got)
	}
	if moves, err := m2.Maintenance().ListPartitionMoves("a", 0); err != nil || len(moves) != 2 || moves[0].State != "CANCELLED" || moves[1].State != "CANCELLED" {
		t.Fatalf("history after restart: %v %v", moves, err)
	}
	// And it can move again.
	if _, err := m2.Maintenance().MoveHost(ctx, "a", "stateless", ""); err != nil {
		t.Fatal(err)
	}
}

// TestCancelMoveFromDrained: a host drained for its move, whose backend may
// have taken the new partition, is given its old one back before it settles.
func TestCancelMoveFromDrained(t *testing.T) {
	_, st := storetest.StartEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := newPartHosts()
	b.setFail(errors.New("apiserver unreachable"))
	m := partManager(t, b, st)
	h, err := m.Maintenance().MoveHost(ctx, "b", "stateless", "")
	if err != nil || h.PartitionState != pelotonv1.PartitionMoveState_PARTITION_MOVE_DRAINED {
		t.Fatalf("move: %+v %v", h, err)
	}
	// A backend that refuses refuses the cancel too: nothing changes.
	if _, err := m.Maintenance().CancelMove(ctx, "b", ""); status.Code(err) != codes.Unavailable {
		t.Fatalf("cancel while the backend refuses: %v", err)
	}
	// The backend takes the old partition back but still not the new
	// one, so the manager's retries cannot finish the move first.
	b.setFailTo("stateless")
	b.setFail(nil)
	if h, err = m.Maintenance().CancelMove(ctx, "b", ""); err != nil || h.Partition != "batch" || h.PartitionState != pelotonv1.PartitionMoveState_PARTITION_SETTLED {
		t.Fatalf("cancel: %+v %v", h, err)
	}
	if got := b.appliedList(); !slices.Contains(got, "b=batch") {
		t.Fatalf("backend told %v", got)
	}
	waitPartitions(t, m, "a=batch b=batch c=batch")
}

// TestLeaving: the runs of the leaving hosts, and the classes of the hosts
// that stay in service (not the leaving ones, not those out of service).
func TestLeaving(t *testing.T) {
	ctx := context.Background()
	m := partManager(t, newPartHosts(), nil)
	m.Recover("k-1-1", "b", resources.Resources{MilliCPU: 200, MemoryMB: 20})
	if _, err := m.Maintenance().StartMaintenance(ctx, []string{"c"}); err != nil {
		t.Fatal(err)
	}
	if _, _, known := m.Maintenance().Leaving([]string{"a", "zz"}); known {
		t.Fatal("zz is no host")
	}
	runs, stay, known := m.Maintenance().Leaving([]string{"a"})
	if !known || len(runs) != 1 || runs[0].TaskID != "j-0-1" || runs[0].JobID != "j" || runs[0].Host != "a" || runs[0].Res.MilliCPU != 100 {
		t.Fatalf("runs %+v", runs)
	}
	if len(stay) != 1 || stay[0].Count != 1 || stay[0].Partition != "batch" {
		t.Fatalf("stay %+v (want b alone)", stay)
	}
	if _, stay, _ := m.Maintenance().Leaving([]string{"a", "b"}); len(stay) != 0 {
		t.Fatalf("stay %+v, want none", stay)
	}
}
