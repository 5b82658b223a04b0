package sim

import (
	"context"
	"testing"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
)

// TestHostLabelsNotUTF8: the simulator reports the labels and partition it
// was given as they are, as a substrate reports its nodes' (the
// simulator's come from --host-labels). Bytes that are not UTF-8 reach the
// stack's hosts, through hostmgr, valid: the hosts can be listed (a label
// that is not UTF-8 fails the marshal of the whole answer) and gauged.
func TestHostLabelsNotUTF8(t *testing.T) {
	b, err := New(Config{Hosts: 2, HostCapacity: resources.Resources{MilliCPU: 1000, MemoryMB: 1024},
		Labels: []string{"zone=a\xff", "ra\xfeck=r1", LabelPartition + "=p\xfe"}})
	if err != nil {
		t.Fatal(err)
	}
	hm := hostmgr.NewManager(b, hostmgr.Options{})
	if err := hm.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer hm.Close()
	hosts := hm.ListHosts()
	if len(hosts) != 2 {
		t.Fatalf("hosts: %v", hosts)
	}
	if _, err := proto.Marshal(&pelotonv1.ListHostsResponse{Hosts: hosts}); err != nil {
		t.Fatalf("the hosts do not marshal: %v", err)
	}
	for _, h := range hosts {
		if h.Labels["zone"] != "a\uFFFD" || h.Labels["ra\uFFFDck"] != "r1" || h.Partition != "p\uFFFD" {
			t.Errorf("host %s: labels %q, partition %q", h.Name, h.Labels, h.Partition)
		}
	}
}
