package cli

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/cluster"
	pclient "github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/federation"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// readmeNotRun lists the README's sh examples that this test does not run,
// by their first line, with the reason. Every other sh block runs, so a new
// example is run unless someone adds it here and says why.
var readmeNotRun = map[string]string{
	"make up ":             "starts the server this test starts in-process, and runs the test suite",
	"kubectl create":       "needs a Kubernetes cluster and an external etcd (TestReadmeDeploySecrets runs the one that makes the Secrets with a stand-in kubectl)",
	"docker build":         "needs docker, a registry and a Kubernetes cluster",
	"helm install peloton": "needs an image in a registry and a Kubernetes cluster; deploy/helm's TestReadmeHelmInstall renders the chart with its values",
	readmeSecretsBlock:     "makes keys with openssl; TestReadmeDeploySecrets runs it and checks what it makes",
	"peloton serve clust":  "needs an external three-member etcd cluster; TestReadmeServeCommands parses it",
	"peloton serve feder":  "needs an external etcd cluster and machines for three clusters; TestReadmeServeCommands parses it",
	"# a Mesos master at":  "needs a Mesos master and an external etcd cluster",
	"go build -o bin/pel":  "benchmarks that run for minutes; their figures are in docs/benchmarks.md",
}

// readmeBlock is one ```sh block of the README.
type readmeBlock struct {
	line int // of the opening fence
	text string
}

func readmeShellBlocks(t *testing.T, path string) []readmeBlock {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []readmeBlock
	var cur *readmeBlock
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```sh":
			cur = &readmeBlock{line: n}
		case cur != nil && strings.TrimSpace(line) == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReadmeExamples runs every sh example of the README exactly as written,
// with /bin/sh -e, in order, against a stack started as `peloton up` starts
// one, with the peloton binary built from this tree on PATH.
func TestReadmeExamples(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("examples/service.yaml serves HTTP with python3, which is not installed")
	}
	blocks := readmeShellBlocks(t, "../../../README.md")
	if len(blocks) < 5 {
		t.Fatalf("found %d sh blocks in README.md; the parser is broken", len(blocks))
	}
	// The REST examples talk to `peloton up`'s HTTP port, 5291: the stack
	// listens there when it is free (not, say, when a `peloton up` runs).
	httpFree := false
	if l, err := net.Listen("tcp", "127.0.0.1:5291"); err == nil {
		httpFree = true
		l.Close()
	}
	s := startStack(t, func(c *cluster.Config) {
		c.DefaultReservesHosts = true
		if httpFree {
			c.HTTPListen = "127.0.0.1:5291"
		}
	})
	// The federation examples talk to a federation beside the stack, on
	// its etcd, with the stack registered as local: what `peloton up` runs.
	fed := startReadmeFederation(t, s)
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "peloton"), ".")
	build.Dir = ".." // cmd/peloton
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// The examples run in a directory of their own (they may write files)
	// that sees the repository's examples as the README's reader does.
	dir := t.TempDir()
	examples, _ := filepath.Abs("../../../examples")
	if err := os.Symlink(examples, filepath.Join(dir, "examples")); err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, b := range blocks {
		if strings.HasPrefix(b.text, "curl ") && !httpFree {
			t.Logf("README.md:%d not run: port 5291 is taken by another process", b.line)
			continue
		}
		if reason, skip := notRun(b.text); skip {
			t.Logf("README.md:%d not run: %s", b.line, reason)
			continue
		}
		ran++
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		cmd := exec.CommandContext(ctx, "/bin/sh", "-e", "-x", "-c", b.text)
		cmd.Dir = dir
		// A config file of the reader's own (a current context with TLS
		// files) must not change what the examples do.
		cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), serverEnv+"="+s.addr, federationEnv+"="+fed,
			configEnv+"="+filepath.Join(dir, "peloton-config.yaml"), tokenEnv+"=")
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("README.md:%d: %v\n%s\noutput:\n%s", b.line, err, b.text, out)
		}
	}
	if ran < 4 {
		t.Fatalf("ran %d README examples; expected the hello world, service, pool and host examples at least", ran)
	}
}

// startReadmeFederation runs a federation on the stack's etcd, registers
// the stack with it as local and returns its gRPC address.
func startReadmeFederation(t *testing.T, s *stack) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- federation.Run(ctx, federation.Config{EtcdEndpoints: s.etcd, Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0",
			OnReady: func(grpcAddr, _ string) { ready <- grpcAddr }})
	}()
	t.Cleanup(func() { cancel(); <-done })
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("federation: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("federation not serving within 60s")
	}
	fc, err := pclient.NewFederation(addr, pclient.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	if _, err := fc.Clusters.RegisterCluster(context.Background(), &pelotonv1.RegisterClusterRequest{Name: "local", Endpoint: s.addr,
		Labels: map[string]string{"backend": "local"}}); err != nil {
		t.Fatal(err)
	}
	return addr
}

func notRun(block string) (string, bool) {
	for prefix, reason := range readmeNotRun {
		if strings.HasPrefix(block, prefix) {
			return reason, true
		}
	}
	return "", false
}
