package local

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/internal/resources"
)

// Config.Partitions puts each virtual host in its partition; without it
// every host is in Partition. A list that does not name one per host, or
// names a bad partition, is refused naming the field.
func TestHostPartitions(t *testing.T) {
	cap := resources.Resources{MilliCPU: 1000, MemoryMB: 1024}
	b, err := New(Config{Dir: t.TempDir(), Hosts: 3, Partitions: []string{"batch", "batch", "stateless"}, HostCapacity: cap, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range b.Hosts() {
		got = append(got, h.Name+"="+h.Partition)
	}
	if s := strings.Join(got, " "); s != "local-0=batch local-1=batch local-2=stateless" {
		t.Fatalf("hosts %s", s)
	}
	b, err = New(Config{Dir: t.TempDir(), Hosts: 2, HostCapacity: cap, Logger: slog.New(slog.DiscardHandler)})
	if err != nil || b.Hosts()[1].Partition != Partition {
		t.Fatalf("default partition: %v %v", b.Hosts(), err)
	}
	for _, tc := range []struct {
		parts []string
		want  string
	}{
		{[]string{"batch"}, "config.partitions: 1 for 2 hosts"},
		{[]string{"batch", "No"}, "config.partitions[1]:"},
	} {
		if _, err := New(Config{Dir: t.TempDir(), Hosts: 2, Partitions: tc.parts, HostCapacity: cap}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.parts, err, tc.want)
		}
	}
}
