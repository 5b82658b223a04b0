// Package kubeharness gives `peloton bench kubernetes` its control plane:
// it adapts the test harness internal/testing/kubetest to bench.KubeHarness and
// registers it when imported. Only binaries built with -tags kubebench
// import it (cmd/peloton/kubebench.go), so the release binary links no
// test code; nothing else may import it.
package kubeharness

import (
	"context"
	"log/slog"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/peloton-sched/peloton/bench"
	"github.com/peloton-sched/peloton/internal/testing/kubetest"
)

func init() { bench.RegisterKubeHarness(Harness{}) }

// Harness is internal/testing/kubetest as a bench.KubeHarness.
type Harness struct{}

var _ bench.KubeHarness = Harness{}

// Tools is kubetest.Tools: $PELOTON_KUBE_BIN, or what make kube-tools built.
func (Harness) Tools() (string, error) { return kubetest.Tools() }

// Start starts a kubetest cluster.
func (Harness) Start(dir, bin string, logger *slog.Logger, kwokPodWorkers int) (bench.KubeCluster, error) {
	c, err := kubetest.New(dir, bin, kubetest.Options{Logger: logger, KwokPodWorkers: kwokPodWorkers})
	if err != nil {
		return nil, err
	}
	return cluster{c}, nil
}

// StartProc is kubetest.StartProc.
func (Harness) StartProc(dir, name, path string, args []string) (bench.KubeProc, error) {
	p, err := kubetest.StartProc(dir, name, path, args)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return p, nil
}

// SelfCPU is kubetest.SelfCPU.
func (Harness) SelfCPU() time.Duration { return kubetest.SelfCPU() }

// MachineCPU is kubetest.MachineCPU.
func (Harness) MachineCPU() (busy, total time.Duration, err error) { return kubetest.MachineCPU() }

// cluster is a kubetest.Cluster as a bench.KubeCluster.
type cluster struct{ *kubetest.Cluster }

var (
	_ bench.KubeCluster = cluster{}
	_ bench.KubeProc    = (*kubetest.Proc)(nil)
)

func (c cluster) Client() kubernetes.Interface { return c.Cluster.Client }
func (c cluster) RESTConfig() *rest.Config     { return c.Cluster.Config }
func (c cluster) Kubeconfig() string           { return c.Cluster.Kubeconfig }

func (c cluster) AddNodes(ctx context.Context, prefix string, count int, cpu, memory, pods string) ([]string, error) {
	return c.Cluster.AddNodes(ctx, kubetest.NodeSpec{Prefix: prefix, Count: count, CPU: cpu, Memory: memory, Pods: pods})
}
