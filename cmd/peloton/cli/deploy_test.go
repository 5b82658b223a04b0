package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/peloton-sched/peloton/cluster"
)

// readManifest decodes one single-document manifest of deploy/kubernetes.
func readManifest(t *testing.T, name string, into any) {
	t.Helper()
	raw, err := os.ReadFile("../../../deploy/kubernetes/" + name)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(raw, into); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// TestDeploymentArgs runs the command line of deploy/kubernetes'
// Deployment through this CLI, with $(VAR)s expanded from the ConfigMap as
// the kubelet would, and checks what it would run: the flags exist and
// parse, and the ports, probes and Service agree with them. The manifests
// themselves are checked against a real apiserver in deploy/kubernetes.
func TestDeploymentArgs(t *testing.T) {
	var dep appsv1.Deployment
	var cm corev1.ConfigMap
	var svc corev1.Service
	readManifest(t, "deployment.yaml", &dep)
	readManifest(t, "config.yaml", &cm)
	readManifest(t, "service.yaml", &svc)
	if len(dep.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%d containers", len(dep.Spec.Template.Spec.Containers))
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if len(c.Command) != 1 || len(c.Args) < 2 || c.Args[0] != "serve" || c.Args[1] != "cluster" {
		t.Fatalf("command %q args %q; want peloton serve cluster ...", c.Command, c.Args)
	}

	for _, pools := range []string{cm.Data["kube-pool-namespaces"], "/org/ml=ml,/org/web=web"} {
		env := map[string]string{}
		for _, e := range c.Env {
			switch {
			case e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil:
				ref := e.ValueFrom.ConfigMapKeyRef
				v, ok := cm.Data[ref.Key]
				if ref.Name != cm.Name || !ok {
					t.Fatalf("env %s: ConfigMap %s has no key %s", e.Name, ref.Name, ref.Key)
				}
				if ref.Key == "kube-pool-namespaces" {
					v = pools
				}
				env[e.Name] = v
			case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP":
				env[e.Name] = "10.1.2.3"
			default:
				env[e.Name] = e.Value
			}
		}
		args := make([]string, len(c.Args))
		for i, a := range c.Args {
			args[i] = envRef.ReplaceAllStringFunc(a, func(ref string) string {
				v, ok := env[envRef.FindStringSubmatch(ref)[1]]
				if !ok {
					t.Errorf("arg %q: %s is not in the container's env", a, ref)
				}
				return v
			})
		}

		var got cluster.Config
		r := runWith(t, func(_ context.Context, cfg cluster.Config) error { got = cfg; return nil }, "", args...)
		if r.code != exitOK {
			t.Fatalf("peloton %q: exit %d, stderr %q", args, r.code, r.stderr)
		}
		if got.Backend != "kubernetes" || !got.LeaderElect || got.AdvertiseHost != "10.1.2.3" || got.Kube.Kubeconfig != "" {
			t.Errorf("config %+v; want the kubernetes backend, in-cluster, with leader election advertising the pod IP", got)
		}
		if fmt.Sprint(got.EtcdEndpoints) != fmt.Sprint(splitComma(cm.Data["etcd-endpoints"])) || got.Kube.Namespace != cm.Data["kube-namespace"] {
			t.Errorf("etcd %v, namespace %q; want the ConfigMap's %q, %q", got.EtcdEndpoints, got.Kube.Namespace, cm.Data["etcd-endpoints"], cm.Data["kube-namespace"])
		}
		if got.ClusterName != cm.Data["cluster-name"] {
			t.Errorf("cluster name %q; want the ConfigMap's %q", got.ClusterName, cm.Data["cluster-name"])
		}
		if want := len(splitComma(pools)); len(got.Kube.PoolNamespaces) != want {
			t.Errorf("kube-pool-namespaces %q gave %v", pools, got.Kube.PoolNamespaces)
		}

		// Ports: the container's named ports are what the process listens
		// on, the Service targets them by name, and the probes use /healthz.
		ports := map[string]int32{}
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
		for name, addr := range map[string]string{"grpc": got.Listen, "http": got.HTTPListen} {
			_, port, err := net.SplitHostPort(addr)
			if err != nil || port != strconv.Itoa(int(ports[name])) {
				t.Errorf("%s listens on %q; the container port %q is %d", name, addr, name, ports[name])
			}
		}
		for _, sp := range svc.Spec.Ports {
			if sp.TargetPort.StrVal != sp.Name || ports[sp.Name] == 0 {
				t.Errorf("Service port %s targets %v; want the container port of that name", sp.Name, sp.TargetPort)
			}
		}
		for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
			if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.StrVal != "http" {
				t.Errorf("%s probe %+v; want GET /healthz on port http", name, p)
			}
		}
	}
}

func splitComma(s string) []string {
	var out []string
	for _, f := range regexp.MustCompile(`\s*,\s*`).Split(s, -1) {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}
