package bench

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// KubeHarness starts the throw-away Kubernetes control plane the
// kubernetes scenario runs against: the test harness internal/testing/kubetest,
// found as the tests find it. The production binary must not link test
// code, so bench does not import it; package bench/kubeharness adapts it
// and registers it when imported, which `peloton` does only when built
// with -tags kubebench (cmd/peloton/kubebench.go).
type KubeHarness interface {
	// Tools is the folder with kube-apiserver, kube-scheduler and kwok,
	// or an error that says how to build them.
	Tools() (string, error)
	// Start starts etcd, kube-apiserver and kwok from bin, in dir.
	Start(dir, bin string, logger *slog.Logger, kwokPodWorkers int) (KubeCluster, error)
	// StartProc runs a binary as a child process, its output kept in dir.
	StartProc(dir, name, path string, args []string) (KubeProc, error)
	// SelfCPU is the CPU this process used so far; MachineCPU the busy and
	// total CPU time of the machine (all cores, every tenant).
	SelfCPU() time.Duration
	MachineCPU() (busy, total time.Duration, err error)
}

// KubeCluster is a running control plane of a KubeHarness.
type KubeCluster interface {
	// Client and RESTConfig reach it as its administrator; Kubeconfig is a
	// file that does the same, for child processes.
	Client() kubernetes.Interface
	RESTConfig() *rest.Config
	Kubeconfig() string
	// AddNodes creates count kwok nodes named prefix-0... with the given
	// allocatable CPU, memory and pods, and waits until they are Ready.
	AddNodes(ctx context.Context, prefix string, count int, cpu, memory, pods string) ([]string, error)
	CreateNamespace(ctx context.Context, name string) error
	// CPU is what kube-apiserver and kwok used so far.
	CPU() (apiserver, kwok time.Duration)
	Close()
}

// KubeProc is a child process of a KubeHarness (kube-scheduler).
type KubeProc interface {
	Exited() bool
	Err() error
	// Tail is the last n lines of its output.
	Tail(n int) string
	Stop()
	CPU() (time.Duration, error)
}

var (
	kubeHarnessMu sync.Mutex
	kubeHarness   KubeHarness
)

// RegisterKubeHarness makes h the harness of the kubernetes scenario.
func RegisterKubeHarness(h KubeHarness) {
	kubeHarnessMu.Lock()
	defer kubeHarnessMu.Unlock()
	kubeHarness = h
}

// ErrNoKubeHarness is the kubernetes scenario's answer in a binary built
// without the harness.
var ErrNoKubeHarness = errors.New("bench kubernetes: this peloton is built without the kube test harness " +
	"(the release binary links no test code); build one with it: go build -tags kubebench -o bin/peloton-kubebench ./cmd/peloton")

func registeredKubeHarness() (KubeHarness, error) {
	kubeHarnessMu.Lock()
	defer kubeHarnessMu.Unlock()
	if kubeHarness == nil {
		return nil, ErrNoKubeHarness
	}
	return kubeHarness, nil
}
