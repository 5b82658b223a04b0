package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/cluster"
)

func TestMesosFlagsRejected(t *testing.T) {
	serve := []string{"serve", "cluster", "--etcd-endpoints", "http://e:2379"}
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"up", "--backend", "mesos"}, "--mesos-master"},
		{append(serve, "--backend", "mesos", "--mesos-master", "master:5050"), "--mesos-master"},
		{append(serve, "--backend", "mesos", "--mesos-master", "http://master"), "--mesos-master"},
		{append(serve, "--backend", "mesos", "--mesos-master", "http://master:5050/api/v1/scheduler"), "--mesos-master"},
		{append(serve, "--backend", "mesos", "--mesos-master", "http://m:5050", "--mesos-content-type", "xml"), "--mesos-content-type"},
		{append(serve, "--backend", "mesos", "--mesos-master", "http://m:5050", "--mesos-failover-timeout", "0s"), "--mesos-failover-timeout"},
		{append(serve, "--backend", "mesos", "--mesos-master", "http://m:5050", "--mesos-role", "a/b"), "--mesos-role"},
		{append(serve, "--backend", "mesos", "--mesos-master", "http://m:5050", "--mesos-framework-name", ""), "--mesos-framework-name"},
		{append(serve, "--mesos-master", "http://m:5050"), "--mesos-master"},
	} {
		r := runCLI(t, "", tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.flag) {
			t.Errorf("peloton %q: exit %d, stderr %q; want exit 2 naming %s", tc.args, r.code, r.stderr, tc.flag)
		}
	}
}

func TestMesosBackendConfig(t *testing.T) {
	var got cluster.Config
	run := func(ctx context.Context, cfg cluster.Config) error {
		got = cfg
		return nil
	}
	r := runWith(t, run, "", "serve", "cluster", "--etcd-endpoints", "http://e:2379", "--backend", "mesos",
		"--mesos-master", "http://10.0.0.5:5050", "--mesos-role", "peloton", "--mesos-principal", "svc-peloton",
		"--mesos-failover-timeout", "72h", "--mesos-content-type", "json")
	if r.code != exitOK {
		t.Fatalf("serve cluster --backend mesos: exit %d, stderr %q", r.code, r.stderr)
	}
	want := cluster.MesosConfig{Master: "http://10.0.0.5:5050", ContentType: "json", Role: "peloton", Principal: "svc-peloton",
		FrameworkName: "peloton", FailoverTimeout: 72 * time.Hour}
	if got.Backend != "mesos" || got.Mesos != want {
		t.Errorf("config backend %q, mesos %+v; want %+v", got.Backend, got.Mesos, want)
	}
}
