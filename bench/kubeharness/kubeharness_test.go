package kubeharness

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestHarnessRunsAControlPlane drives the adapter as the kubernetes
// scenario does: a cluster with a node and a namespace, reachable through
// the client and the kubeconfig file, with CPU accounted; and a child
// process. It skips, as the kube tests do, when the binaries are not built.
func TestHarnessRunsAControlPlane(t *testing.T) {
	h := Harness{}
	bin, err := h.Tools()
	if err != nil {
		t.Skip(err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, err := h.Start(dir, bin, slog.New(slog.DiscardHandler), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	nodes, err := c.AddNodes(ctx, "kh", 1, "4", "8Gi", "110")
	if err != nil || len(nodes) != 1 {
		t.Fatalf("AddNodes = %v, %v", nodes, err)
	}
	if err := c.CreateNamespace(ctx, "kh"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client().CoreV1().Namespaces().Get(ctx, "kh", metav1.GetOptions{}); err != nil {
		t.Errorf("the namespace through Client: %v", err)
	}
	if c.RESTConfig() == nil || c.RESTConfig().Host == "" {
		t.Error("RESTConfig has no host")
	}
	if st, err := os.Stat(c.Kubeconfig()); err != nil || st.Size() == 0 {
		t.Errorf("Kubeconfig file %q: %v", c.Kubeconfig(), err)
	}
	if api, _ := c.CPU(); api <= 0 {
		t.Errorf("kube-apiserver CPU = %s, want > 0 after it served requests", api)
	}
	if h.SelfCPU() <= 0 {
		t.Error("SelfCPU = 0")
	}
	p, err := h.StartProc(dir, "sleeper", "/bin/sh", []string{"-c", "echo hello; exec sleep 60"})
	if err != nil {
		t.Fatal(err)
	}
	p.Stop()
	if !p.Exited() {
		t.Error("a stopped process has not exited")
	}
	if _, err := h.StartProc(dir, "missing", filepath.Join(dir, "no-such-binary"), nil); err == nil {
		t.Error("StartProc of a missing binary succeeded")
	}
}
