package hostmgr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/memstore"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// testProfiles: stateless hosts take a tier label that overrides the
// host's own, an ssd label it lacks, QoS thresholds and a cap.
var testProfiles = map[string]Profile{
	"stateless": {
		Labels: map[string]string{"tier": "latency", "ssd": "true"},
		Agent:  AgentSettings{QoSCPUHigh: 0.8, QoSCPULow: 0.6, OversubscriptionCap: 1.5},
	},
	"spare": {Labels: map[string]string{"tier": "spare"}},
}

// profileHosts is newPartHosts with own labels on every host.
func profileHosts() *partHosts {
	b := newPartHosts()
	for i := range b.hosts {
		b.hosts[i].Labels = map[string]string{"zone": "z1", "tier": "own"}
	}
	return b
}

// profileManager starts a Manager with testProfiles on b (a holds j-0-1).
func profileManager(t *testing.T, b Backend, st store.Store, profiles map[string]Profile) *Manager {
	t.Helper()
	return partManagerWith(t, b, Options{LeaseTTL: time.Minute, Store: st, Profiles: profiles})
}

// hostView renders host name's labels and agent settings, e.g.
// "ssd=true,tier=latency,zone=z1 cpu=0.8/0.6 cap=1.5".
func hostView(t *testing.T, m *Manager, name string) string {
	t.Helper()
	for _, h := range m.ListHosts() {
		if h.Name != name {
			continue
		}
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(h.Labels)) {
			kv = append(kv, k+"="+h.Labels[k])
		}
		s := strings.Join(kv, ",")
		if a := h.AgentSettings; a != nil {
			s += fmt.Sprintf(" cpu=%v/%v cap=%v", a.QosCpuHigh, a.QosCpuLow, a.OversubscriptionCap)
		}
		return s
	}
	t.Fatalf("no host %s", name)
	return ""
}

const (
	ownView     = "tier=own,zone=z1"
	statelessOn = "ssd=true,tier=latency,zone=z1 cpu=0.8/0.6 cap=1.5"
)

// A move into a partition with a profile applies it (labels over the
// host's own, agent settings); the move back takes it off, and the own
// value of a label the profile overrode is back.
func TestProfileAppliedByMoveUndoneByMoveBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st := memstore.New(memstore.Options{})
	m := profileManager(t, profileHosts(), st, testProfiles)
	if got := hostView(t, m, "b"); got != ownView {
		t.Fatalf("before any move: %s", got)
	}
	if _, err := m.Maintenance().MoveHost(ctx, "b", "stateless", "test"); err != nil {
		t.Fatal(err)
	}
	waitPartitions(t, m, "a=batch b=stateless c=batch")
	if got := hostView(t, m, "b"); got != statelessOn {
		t.Fatalf("in stateless: %s", got)
	}
	if got := m.Usage().AgentSettings("b"); got.GetQosCpuHigh() != 0.8 || got.GetQosCpuLow() != 0.6 {
		t.Fatalf("agent settings of b: %v", got)
	}
	if got := m.Usage().AgentSettings("c"); got != nil {
		t.Fatalf("agent settings of c, which took no profile: %v", got)
	}
	kv, err := st.Get(ctx, partitionKey("b"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(kv.Value), `"profile":{"partition":"stateless","labels":{"ssd":"true","tier":"latency"}`) {
		t.Fatalf("record: %s", kv.Value)
	}

	// Into another partition with a profile: the old one's labels go,
	// the new one's come, and settings it does not set are the defaults.
	if _, err := m.Maintenance().MoveHost(ctx, "b", "spare", "test"); err != nil {
		t.Fatal(err)
	}
	waitPartitions(t, m, "a=batch b=spare c=batch")
	if got := hostView(t, m, "b"); got != "tier=spare,zone=z1" {
		t.Fatalf("in spare: %s", got)
	}
	if _, err := m.Maintenance().MoveHost(ctx, "b", "batch", "test"); err != nil {
		t.Fatal(err)
	}
	waitPartitions(t, m, "a=batch b=batch c=batch")
	if got := hostView(t, m, "b"); got != ownView {
		t.Fatalf("back in batch: %s", got)
	}
	if got := m.Usage().AgentSettings("b"); got != nil {
		t.Fatalf("agent settings after the move back: %v", got)
	}
}

// Placement sees a profile's labels: after the move, a constraint on one
// matches the host's offer and its class; before it, and after the move
// back, it does not.
func TestProfileLabelMatchesPlacementConstraint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m := profileManager(t, profileHosts(), memstore.New(memstore.Options{}), testProfiles)
	spec := &pelotonv1.PlacementSpec{Constraints: []*pelotonv1.Constraint{{Label: "ssd", Op: pelotonv1.ConstraintOp_EQUALS, Values: []string{"true"}}}}
	matching := func() (offers, classes []string) {
		lease, hs := m.AcquireHosts(HostFilter{Max: 10})
		for _, o := range hs {
			if Matches(spec, o.Partition, o.Labels) {
				offers = append(offers, o.Name)
			}
		}
		m.ReleaseLease(lease)
		for _, c := range m.HostClasses() {
			if Matches(spec, c.Partition, c.Labels) {
				classes = append(classes, fmt.Sprintf("%s*%d", c.Partition, c.Count))
			}
		}
		return offers, classes
	}
	if o, c := matching(); len(o)+len(c) != 0 {
		t.Fatalf("before the move, offers %v and classes %v match", o, c)
	}
	if _, err := m.Maintenance().MoveHost(ctx, "c", "stateless", ""); err != nil {
		t.Fatal(err)
	}
	waitPartitions(t, m, "a=batch b=batch c=stateless")
	if o, c := matching(); !slices.Equal(o, []string{"c"}) || !slices.Equal(c, []string{"stateless*1"}) {
		t.Fatalf("after the move, matching offers %v, classes %v; want [c] [stateless*1]", o, c)
	}
	if _, err := m.Maintenance().MoveHost(ctx, "c", "batch", ""); err != nil {
		t.Fatal(err)
	}
	waitPartitions(t, m, "a=batch b=batch c=batch")
	if o, c := matching(); len(o)+len(c) != 0 {
		t.Fatalf("after the move back, offers %v and classes %v match", o, c)
	}
}

// etcdStore is a store on an embedded etcd of the test's own.
func etcdStore(t *testing.T) store.Store {
	t.Helper()
	e, err := store.StartEmbedded(store.EmbeddedConfig{DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.NewEtcd(ctx, store.EtcdConfig{Endpoints: e.Endpoints(), Prefix: "/profiletest/"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// A restart in the middle of a move, at either end, neither loses the
// profile nor applies it twice; the profile kept is the one taken at the
// move, whatever the configuration says after the restart. On etcd, as a
// cluster keeps it.
func TestProfileSurvivesRestartMidMove(t *testing.T) {
	st := etcdStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b := profileHosts()
	b.setFail(errors.New("apiserver unreachable"))
	m1 := profileManager(t, b, st, testProfiles)
	if _, err := m1.Maintenance().MoveHost(ctx, "b", "stateless", ""); err != nil {
		t.Fatal(err)
	}
	// Drained, the backend refusing: not in the partition, no profile.
	if got := hostView(t, m1, "b"); got != ownView {
		t.Fatalf("drained for the move: %s", got)
	}
	_ = m1.Close()

	b.setFail(nil)
	m2 := profileManager(t, b, st, testProfiles)
	waitPartitions(t, m2, "a=batch b=stateless c=batch")
	if got := hostView(t, m2, "b"); got != statelessOn {
		t.Fatalf("settled after the restart: %s", got)
	}
	// The way back, cut short the same way: while the host moves it keeps
	// the profile of the partition it is in.
	b.setFail(errors.New("apiserver unreachable"))
	if _, err := m2.Maintenance().MoveHost(ctx, "b", "batch", ""); err != nil {
		t.Fatal(err)
	}
	if got := hostView(t, m2, "b"); got != statelessOn {
		t.Fatalf("moving out: %s", got)
	}
	_ = m2.Close()

	// Restarted with the profile changed: b keeps the copy it took.
	changed := map[string]Profile{"stateless": {Labels: map[string]string{"tier": "changed"}}}
	m3 := profileManager(t, b, st, changed)
	if got := partitions(m3); got != "a=batch b=stateless>batch:PARTITION_MOVE_DRAINED c=batch" {
		t.Fatalf("after the second restart: %s", got)
	}
	if got := hostView(t, m3, "b"); got != statelessOn {
		t.Fatalf("after the second restart: %s", got)
	}
	b.setFail(nil)
	waitPartitions(t, m3, "a=batch b=batch c=batch")
	if got := hostView(t, m3, "b"); got != ownView {
		t.Fatalf("back in batch: %s", got)
	}
	if got := b.appliedList(); !slices.Equal(got, []string{"b=stateless", "b=batch"}) {
		t.Fatalf("backend told %v", got)
	}
}

// A cancelled move leaves the host with the profile it had.
func TestProfileKeptOnCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b := profileHosts()
	m := profileManager(t, b, memstore.New(memstore.Options{}), testProfiles)
	if _, err := m.Maintenance().MoveHost(ctx, "b", "stateless", ""); err != nil {
		t.Fatal(err)
	}
	waitPartitions(t, m, "a=batch b=stateless c=batch")
	b.setFail(errors.New("apiserver unreachable"))
	if _, err := m.Maintenance().MoveHost(ctx, "b", "spare", ""); err != nil {
		t.Fatal(err)
	}
	b.setFail(nil)
	if _, err := m.Maintenance().CancelMove(ctx, "b", "changed my mind"); err != nil {
		t.Fatal(err)
	}
	waitPartitions(t, m, "a=batch b=stateless c=batch")
	if got := hostView(t, m, "b"); got != statelessOn {
		t.Fatalf("after the cancel: %s", got)
	}
}

// The profile's cap bounds the advisor's oversubscription factor on the
// host, in the listing and in its slack.
func TestProfileCapsOversubscription(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m := profileManager(t, profileHosts(), memstore.New(memstore.Options{}), testProfiles)
	if _, err := m.Maintenance().MoveHost(ctx, "b", "stateless", ""); err != nil {
		t.Fatal(err)
	}
	waitPartitions(t, m, "a=batch b=stateless c=batch")
	if err := advise(m, "act", 60, &pelotonv1.HostAdvice{Host: "b", OversubscriptionFactor: 3}, &pelotonv1.HostAdvice{Host: "c", OversubscriptionFactor: 3}); err != nil {
		t.Fatal(err)
	}
	factors := map[string]float64{}
	for _, h := range m.ListHosts() {
		factors[h.Name] = h.OversubscriptionFactor
	}
	if factors["b"] != 1.5 || factors["c"] != 3 {
		t.Fatalf("factors %v; want b capped at 1.5, c at the advisor's 3", factors)
	}
}

func TestParseProfiles(t *testing.T) {
	got, err := ParseProfiles([]byte(`
profiles:
  stateless:
    labels: {tier: latency}
    agent: {qosCpuHigh: 0.9, qosCpuLow: 0.75, qosMemHigh: 0.95, qosMemLow: 0.85, oversubscriptionCap: 1}
  batch:
    agent: {oversubscriptionCap: 2.5}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Profile{
		"stateless": {Labels: map[string]string{"tier": "latency"}, Agent: AgentSettings{QoSCPUHigh: 0.9, QoSCPULow: 0.75, QoSMemHigh: 0.95, QoSMemLow: 0.85, OversubscriptionCap: 1}},
		"batch":     {Agent: AgentSettings{OversubscriptionCap: 2.5}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	if got, err := ParseProfiles(nil); err != nil || len(got) != 0 {
		t.Fatalf("an empty file: %v, %v", got, err)
	}
}

// Every bad field is named, all of them at once.
func TestParseProfilesErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"profiles:\n  Batch: {}\n", `profiles.Batch: "Batch" is not a partition name`},
		{"profiles:\n  b:\n    labels: {\"\": x}\n", `profiles.b.labels[""]: a label key must be 1 to`},
		{"profiles:\n  b:\n    labels: {peloton.io/partition: x}\n", `profiles.b.labels["peloton.io/partition"]: the partition's own label`},
		{"profiles:\n  b:\n    agent: {qosCpuHigh: 1.5, qosCpuLow: 0.5}\n", "profiles.b.agent.qosCpuHigh: 1.5 is not a fraction of capacity in (0, 1]"},
		{"profiles:\n  b:\n    agent: {qosCpuHigh: 0.8, qosCpuLow: 0.9}\n", "profiles.b.agent.qosCpuLow: 0.9 must be > 0 and below qosCpuHigh 0.8"},
		{"profiles:\n  b:\n    agent: {qosMemLow: 0.5}\n", "profiles.b.agent.qosMemHigh: 0 is not a fraction"},
		{"profiles:\n  b:\n    agent: {oversubscriptionCap: 0.5}\n", "profiles.b.agent.oversubscriptionCap: 0.5: want 1 to 10 (or unset)"},
		{"profiles:\n  b:\n    agent: {qosCpuHot: 0.5}\n", "field qosCpuHot not found"},
		{"profiles: [1]\n", "profiles: yaml: unmarshal errors"},
	} {
		_, err := ParseProfiles([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v; want %q", tc.in, err, tc.want)
		}
	}
	err := ValidateProfiles(map[string]Profile{"a": {Agent: AgentSettings{OversubscriptionCap: 20}}, "b": {Agent: AgentSettings{QoSCPUHigh: 2}}})
	if err == nil || !strings.Contains(err.Error(), "profiles.a.agent.oversubscriptionCap") || !strings.Contains(err.Error(), "profiles.b.agent.qosCpuHigh") {
		t.Fatalf("both errors: %v", err)
	}
}
