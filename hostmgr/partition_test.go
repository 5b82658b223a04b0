package hostmgr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	peltest "github.com/peloton-sched/peloton/internal/testing/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/memstore"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// partHosts is a backend that keeps each host's partition as an attribute
// it applies when told, and can be made to refuse.
type partHosts struct {
	mu      sync.Mutex
	hosts   []HostInfo
	applied []string
	fail    error
	// failTo, if set, refuses applies of that partition alone.
	failTo string
}

func (p *partHosts) Name() string                                      { return "parts" }
func (p *partHosts) Start(context.Context, func(TaskEvent)) error      { return nil }
func (p *partHosts) Launch(context.Context, LaunchSpec) error          { return nil }
func (p *partHosts) Kill(context.Context, string, time.Duration) error { return ErrUnknownTask }
func (p *partHosts) Status(string) (TaskEvent, error)                  { return TaskEvent{}, ErrUnknownTask }
func (p *partHosts) Close() error                                      { return nil }
func (p *partHosts) Logs(context.Context, string, LogOptions) (io.ReadCloser, error) {
	return nil, ErrUnknownTask
}

func (p *partHosts) Hosts() []HostInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.hosts)
}

func (p *partHosts) ApplyPartition(_ context.Context, host, partition string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail != nil {
		return p.fail
	}
	if p.failTo != "" && partition == p.failTo {
		return fmt.Errorf("partition %s refused", partition)
	}
	p.applied = append(p.applied, host+"="+partition)
	for i := range p.hosts {
		if p.hosts[i].Name == host {
			p.hosts[i].Partition = partition
		}
	}
	return nil
}

func (p *partHosts) setFail(err error) {
	p.mu.Lock()
	p.fail = err
	p.mu.Unlock()
}

// setFailTo refuses applies of partition alone ("": none).
func (p *partHosts) setFailTo(partition string) {
	p.mu.Lock()
	p.failTo = partition
	p.mu.Unlock()
}

func (p *partHosts) appliedList() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.applied)
}

var (
	_ Backend          = (*partHosts)(nil)
	_ PartitionApplier = (*partHosts)(nil)
)

var hostCap = resources.Resources{MilliCPU: 1000, MemoryMB: 100}

func newPartHosts() *partHosts {
	var hs []HostInfo
	for _, n := range []string{"a", "b", "c"} {
		hs = append(hs, HostInfo{Name: n, Capacity: hostCap, Partition: "batch"})
	}
	return &partHosts{hosts: hs}
}

// partManager starts a Manager on b whose host a holds run j-0-1.
func partManager(t *testing.T, b Backend, st store.Store) *Manager {
	t.Helper()
	return partManagerWith(t, b, Options{LeaseTTL: time.Minute, Store: st})
}

// partManagerWith is partManager with opts.
func partManagerWith(t *testing.T, b Backend, opts Options) *Manager {
	t.Helper()
	m := NewManager(b, opts)
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	m.Recover("j-0-1", "a", resources.Resources{MilliCPU: 100, MemoryMB: 10})
	m.Recovered()
	return m
}

// partitions renders every host's partition and move, e.g.
// "a=batch>stateless:PARTITION_MOVING b=stateless c=batch".
func partitions(m *Manager) string {
	var parts []string
	for _, h := range m.ListHosts() {
		s := h.Name + "=" + h.Partition
		if h.PartitionState != pelotonv1.PartitionMoveState_PARTITION_SETTLED {
			s += ">" + h.TargetPartition + ":" + h.PartitionState.String()
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

func waitPartitions(t *testing.T, m *Manager, want string) {
	t.Helper()
	peltest.Eventually(t, 10*time.Second, "partitions "+want, func() error {
		if p := partitions(m); p != want {
			return fmt.Errorf("partitions: %s", p)
		}
		return nil
	})
}

func TestPartitionMoveTableGolden(t *testing.T) {
	peltest.Golden(t, "testdata/partition_move.golden", partitionTransitions.Render(), *update, "partition move table")
	for v := range pelotonv1.PartitionMoveState_name {
		if s := moveState(v); s != pelotonv1.PartitionMoveState_PARTITION_MOVE_STATE_UNSPECIFIED && !partitionTransitions.Has(s) {
			t.Errorf("partition move state %s has no row in the table", s)
		}
	}
}

func TestValidatePartition(t *testing.T) {
	for _, ok := range []string{"batch", "stateless", "gpu-a100", "x", "team_1.prod", strings.Repeat("a", 63)} {
		if err := ValidatePartition(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "Batch", "-x", "x-", "a b", "a/b", strings.Repeat("a", 64)} {
		if err := ValidatePartition(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestMoveHostRefusals(t *testing.T) {
	ctx := context.Background()
	m := partManager(t, newPartHosts(), nil)
	if _, err := m.Maintenance().StartMaintenance(ctx, []string{"c"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Maintenance().MoveHost(ctx, "a", "stateless", ""); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host, part string
		code       codes.Code
		msg        string
	}{
		{"zz", "stateless", codes.NotFound, "host: host zz does not exist"},
		{"", "stateless", codes.InvalidArgument, "host: required"},
		{"b", "", codes.InvalidArgument, "partition: required"},
		{"b", "No Way", codes.InvalidArgument, `partition: "No Way" is not a partition name`},
		{"c", "stateless", codes.FailedPrecondition, "host: host c is HOST_DRAINED; complete its maintenance before moving it"},
		{"a", "gpu", codes.FailedPrecondition, "host: host a is already moving to partition stateless"},
		{"b", "batch", codes.FailedPrecondition, "partition: host b is already in partition batch"},
	} {
		_, err := m.Maintenance().MoveHost(ctx, tc.host, tc.part, "")
		if status.Code(err) != tc.code || !strings.HasPrefix(status.Convert(err).Message(), tc.msg) {
			t.Errorf("move %q to %q: %v, want %s %q", tc.host, tc.part, err, tc.code, tc.msg)
		}
	}
	// Maintenance waits for a move to finish.
	_, err := m.Maintenance().StartMaintenance(ctx, []string{"a"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "host a is moving to partition stateless") {
		t.Fatalf("maintenance of a moving host: %v", err)
	}
	if got := partitions(m); got != "a=batch>stateless:PARTITION_MOVING b=batch c=batch" {
		t.Fatalf("refusals changed something: %s", got)
	}
}

func TestMoveEmptyHostMovesAtOnce(t *testing.T) {
	ctx := context.Background()
	b := newPartHosts()
	var seen []resources.ByPartition
	var mu sync.Mutex
	m := NewManager(b, Options{LeaseTTL: time.Minute, OnCapacity: func(c resources.ByPartition) {
		mu.Lock()
		seen = append(seen, c)
		mu.Unlock()
	}})
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.Recovered()
	h, err := m.Maintenance().MoveHost(ctx, "b", "stateless", "")
	if err != nil {
		t.Fatal(err)
	}
	if h.Partition != "stateless" || h.PartitionState != pelotonv1.PartitionMoveState_PARTITION_SETTLED || h.PartitionMessage != "" {
		t.Fatalf("answer: %+v", h)
	}
	if got := b.appliedList(); !slices.Equal(got, []string{"b=stateless"}) {
		t.Fatalf("backend told %v", got)
	}
	want := resources.ByPartition{"batch": hostCap.Scale(2), "stateless": hostCap}
	if got := m.CapacityByPartition(); !got.Equal(want) {
		t.Fatalf("capacity by partition %v, want %v", got, want)
	}
	mu.Lock()
	last := seen[len(seen)-1]
	mu.Unlock()
	if !last.Equal(want) {
		t.Fatalf("OnCapacity last told %v, want %v", last, want)
	}
	if _, offers := m.AcquireHosts(HostFilter{Max: 3, Partitions: []string{"stateless"}}); len(offers) != 1 || offers[0].Name != "b" {
		t.Fatalf("stateless offers: %+v", offers)
	}
	var classes []string
	for _, c := range m.HostClasses() {
		classes = append(classes, fmt.Sprintf("%s:%d", c.Partition, c.Count))
	}
	if got := strings.Join(classes, " "); got != "batch:2 stateless:1" {
		t.Fatalf("classes %s", got)
	}
}

func TestMoveDrainsTheHostFirst(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b := newPartHosts()
	m := partManager(t, b, nil)
	h, err := m.Maintenance().MoveHost(ctx, "a", "stateless", "")
	if err != nil {
		t.Fatal(err)
	}
	if h.PartitionState != pelotonv1.PartitionMoveState_PARTITION_MOVING || h.PartitionMessage != "moving to partition stateless: draining 1 task" {
		t.Fatalf("answer: %+v", h)
	}
	ds := m.Drains(ctx)
	if len(ds) != 1 || ds[0].Host != "a" || !slices.Equal(ds[0].TaskIDs, []string{"j-0-1"}) || ds[0].Why != "to move to partition stateless" {
		t.Fatalf("drain requests: %+v", ds)
	}
	if !m.Draining("a") || m.HostUp("a") {
		t.Fatal("a moving host must be draining and not up")
	}
	// Not offered, and not counted in any partition's capacity.
	if _, offers := m.AcquireHosts(HostFilter{Max: 3}); len(offers) != 2 {
		t.Fatalf("offers while a moves: %+v", offers)
	} else {
		for _, o := range offers {
			if o.Name == "a" {
				t.Fatal("a moving host was offered")
			}
		}
	}
	if got := m.CapacityByPartition(); !got.Equal(resources.ByPartition{"batch": hostCap.Scale(2)}) {
		t.Fatalf("capacity while a moves: %v", got)
	}
	m.SetDrainNote("a", "instance 3 of job j waits for its SLA")
	if got := m.ListHosts()[0].PartitionMessage; got != "moving to partition stateless: draining 1 task; instance 3 of job j waits for its SLA" {
		t.Fatalf("message %q", got)
	}
	m.ReleaseTask("j-0-1")
	waitPartitions(t, m, "a=stateless b=batch c=batch")
	if m.Draining("a") || !m.HostUp("a") {
		t.Fatal("a moved host must be back in service")
	}
	// The note of the move does not leak into a later drain.
	m.Recover("k-0-1", "a", resources.Resources{MilliCPU: 100, MemoryMB: 10})
	if _, err := m.Maintenance().StartMaintenance(ctx, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	if got := m.ListHosts()[0].MaintenanceMessage; got != "draining: 1 task left" {
		t.Fatalf("maintenance message after the move: %q", got)
	}
}

// TestMoveResumesAfterRestart: each step of a move is in the store; a new
// Manager on the same store goes on with the move, asks again for the drain
// that was under way, and afterwards keeps the partition it gave the host
// even when the backend reports another.
func TestMoveResumesAfterRestart(t *testing.T) {
	st := memstore.New(memstore.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b := newPartHosts()
	m1 := partManager(t, b, st)
	if _, err := m1.Maintenance().MoveHost(ctx, "a", "stateless", ""); err != nil {
		t.Fatal(err)
	}
	kv, err := st.Get(ctx, "hosts/a/partition")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(kv.Value); got != `{"partition":"batch","state":"PARTITION_MOVING","target":"stateless"}` {
		t.Fatalf("record: %s", got)
	}
	_ = m1.Close()

	// The restart: the drain goes on once recovery re-reserved a's run.
	m2 := NewManager(b, Options{Store: st})
	if err := m2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if got := partitions(m2); got != "a=batch>stateless:PARTITION_MOVING b=batch c=batch" {
		t.Fatalf("after restart: %s", got)
	}
	m2.Recover("j-0-1", "a", resources.Resources{MilliCPU: 100, MemoryMB: 10})
	m2.Recovered()
	ds := m2.Drains(ctx)
	if len(ds) != 1 || ds[0].Host != "a" {
		t.Fatalf("drain not asked again: %+v", ds)
	}
	m2.ReleaseTask("j-0-1")
	waitPartitions(t, m2, "a=stateless b=batch c=batch")
	_ = m2.Close()

	// hostmgr owns the partition now: a backend that still says batch
	// (say, its label was reset) does not move the host back.
	b2 := newPartHosts()
	m3 := partManager(t, b2, st)
	if got := partitions(m3); got != "a=stateless b=batch c=batch" {
		t.Fatalf("after a second restart: %s", got)
	}
}

// TestMoveResumesFromDrained: a restart between the drained step and the
// backend's answer applies the partition again.
func TestMoveResumesFromDrained(t *testing.T) {
	st := memstore.New(memstore.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b := newPartHosts()
	b.setFail(errors.New("apiserver unreachable"))
	failed := testutil.ToFloat64(metrics.HostMoves.WithLabelValues("apply-failed"))
	moved := testutil.ToFloat64(metrics.HostMoves.WithLabelValues("moved"))
	m1 := partManager(t, b, st)
	h, err := m1.Maintenance().MoveHost(ctx, "b", "stateless", "")
	if err != nil {
		t.Fatal(err)
	}
	if h.PartitionState != pelotonv1.PartitionMoveState_PARTITION_MOVE_DRAINED ||
		!strings.Contains(h.PartitionMessage, "the parts backend did not take the partition: apiserver unreachable; retrying") {
		t.Fatalf("answer while the backend refuses: %+v", h)
	}
	if m1.HostUp("b") {
		t.Fatal("b is in service before its move is done")
	}
	if got := testutil.ToFloat64(metrics.HostMoves.WithLabelValues("apply-failed")) - failed; got < 1 {
		t.Fatalf("peloton_host_partition_moves_total{step=apply-failed} grew by %v", got)
	}
	_ = m1.Close()

	b.setFail(nil)
	m2 := partManager(t, b, st)
	waitPartitions(t, m2, "a=batch b=stateless c=batch")
	// The move's end is counted just after the host shows its partition.
	peltest.Eventually(t, 10*time.Second, "peloton_host_partition_moves_total{step=moved} grows by 1", func() error {
		if got := testutil.ToFloat64(metrics.HostMoves.WithLabelValues("moved")) - moved; got != 1 {
			return fmt.Errorf("grew by %v", got)
		}
		return nil
	})
	if got := b.appliedList(); !slices.Equal(got, []string{"b=stateless"}) {
		t.Fatalf("backend told %v", got)
	}
}
