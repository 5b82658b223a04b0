package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	klabels "k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/peloton-sched/peloton/cmd/peloton/hostagentcmd"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/federation"
	"github.com/peloton-sched/peloton/internal/auth"
	"github.com/peloton-sched/peloton/internal/tlsfiles"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// The command lines of deploy/: the Kubernetes Deployments and the systemd
// units are run through this CLI with fake runners, so a flag that does not
// exist or a value it refuses fails here, and what they would run is
// checked against the ports, probes and Services around them. The
// manifests themselves are checked against a real apiserver in
// deploy/kubernetes.

const deployDir = "../../../deploy/"

// podIP and the namespace stand in for the downward API.
const podIP = "10.1.2.3"

// readManifest decodes one single-document manifest of deploy/kubernetes.
func readManifest(t *testing.T, name string, into any) {
	t.Helper()
	raw, err := os.ReadFile(deployDir + "kubernetes/" + name)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(raw, into); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// readManifests decodes the documents of a manifest of deploy/kubernetes,
// in order, one into each of into, whose types must be the documents'
// kinds (*corev1.Service for a Service).
func readManifests(t *testing.T, name string, into ...any) {
	t.Helper()
	raw, err := os.ReadFile(deployDir + "kubernetes/" + name)
	if err != nil {
		t.Fatal(err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			docs = append(docs, doc)
		}
	}
	if len(docs) != len(into) {
		t.Fatalf("%s: %d documents; the test reads %d", name, len(docs), len(into))
	}
	for i, doc := range docs {
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("%s, document %d: %v", name, i, err)
		}
		if want := reflect.TypeOf(into[i]).Elem().Name(); meta.Kind != want {
			t.Fatalf("%s, document %d: a %s; the test reads a %s there", name, i, meta.Kind, want)
		}
		if err := yaml.UnmarshalStrict(doc, into[i]); err != nil {
			t.Fatalf("%s, document %d: %v", name, i, err)
		}
	}
}

func stripComments(doc []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(append(out, line...), '\n')
		}
	}
	return out
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// podEnv is the environment the kubelet gives container c of a pod in
// namespace: ConfigMap keys from cm (or from override, by key), the pod's
// IP and namespace from the downward API, and literal values.
func podEnv(t *testing.T, c corev1.Container, cm corev1.ConfigMap, namespace string, override map[string]string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			v, ok := cm.Data[ref.Key]
			if ref.Name != cm.Name || !ok {
				t.Fatalf("env %s: ConfigMap %s has no key %s", e.Name, ref.Name, ref.Key)
			}
			if o, ok := override[ref.Key]; ok {
				v = o
			}
			env[e.Name] = v
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			switch p := e.ValueFrom.FieldRef.FieldPath; p {
			case "status.podIP":
				env[e.Name] = podIP
			case "metadata.namespace":
				env[e.Name] = namespace
			case "spec.nodeName":
				env[e.Name] = nodeName
			default:
				t.Fatalf("env %s: the test does not know field %s", e.Name, p)
			}
		case e.ValueFrom != nil:
			t.Fatalf("env %s: the test does not know %+v", e.Name, e.ValueFrom)
		default:
			env[e.Name] = e.Value
		}
	}
	return env
}

// expandArgs replaces every $(VAR) of args from env, as the kubelet does.
func expandArgs(t *testing.T, args []string, env map[string]string) []string {
	t.Helper()
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = envRef.ReplaceAllStringFunc(a, func(ref string) string {
			v, ok := env[envRef.FindStringSubmatch(ref)[1]]
			if !ok {
				t.Errorf("arg %q: %s is not in the container's env", a, ref)
			}
			return v
		})
	}
	return out
}

// onlyContainer is the one container of d's pods, running peloton serve
// what.
func onlyContainer(t *testing.T, d appsv1.Deployment, what string) corev1.Container {
	t.Helper()
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("Deployment %s: %d containers", d.Name, len(d.Spec.Template.Spec.Containers))
	}
	c := d.Spec.Template.Spec.Containers[0]
	if len(c.Command) != 1 || c.Command[0] != "/usr/local/bin/peloton" || len(c.Args) < 2 || c.Args[0] != "serve" || c.Args[1] != what {
		t.Fatalf("Deployment %s: command %q args %q; want /usr/local/bin/peloton serve %s ...", d.Name, c.Command, c.Args, what)
	}
	return c
}

// checkPorts: the container's named ports are what the process listens on
// (grpc, http, admin), the Service targets them by name, and the probes are
// GET readyPath and /healthz on the admin port: the API ports want TLS and
// a client certificate, which the kubelet does not have.
func checkPorts(t *testing.T, c corev1.Container, svc corev1.Service, listen map[string]string, readyPath string) {
	t.Helper()
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for name, addr := range listen {
		_, port, err := net.SplitHostPort(addr)
		if err != nil || port != strconv.Itoa(int(ports[name])) {
			t.Errorf("%s listens on %q; the container port %q is %d", name, addr, name, ports[name])
		}
	}
	for _, sp := range svc.Spec.Ports {
		if sp.TargetPort.StrVal != sp.Name || ports[sp.Name] == 0 {
			t.Errorf("Service %s port %s targets %v; want the container port of that name", svc.Name, sp.Name, sp.TargetPort)
		}
	}
	for name, want := range map[string]string{"readiness": readyPath, "liveness": "/healthz"} {
		p := map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe}[name]
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want || p.HTTPGet.Port.StrVal != "admin" || p.HTTPGet.Scheme == corev1.URISchemeHTTPS {
			t.Errorf("%s probe %+v; want GET %s on port admin, plain HTTP", name, p, want)
		}
	}
}

// TestDeploymentArgs runs the command line of deploy/kubernetes'
// Deployment through this CLI, with $(VAR)s expanded from the ConfigMap as
// the kubelet would and its Secrets mounted, and checks what it would run:
// the flags exist and parse, the listeners are secured, and the ports,
// probes and Service agree with them.
func TestDeploymentArgs(t *testing.T) {
	var dep appsv1.Deployment
	var cm corev1.ConfigMap
	var svc corev1.Service
	readManifest(t, "deployment.yaml", &dep)
	readManifest(t, "config.yaml", &cm)
	readManifest(t, "service.yaml", &svc)
	c := onlyContainer(t, dep, "cluster")
	in := newInstallation(t)

	for _, pools := range []string{cm.Data["kube-pool-namespaces"], "/org/ml=ml,/org/web=web"} {
		env := podEnv(t, c, cm, dep.Namespace, map[string]string{"kube-pool-namespaces": pools})
		args := mountSecrets(t, dep.Spec.Template.Spec, c, expandArgs(t, c.Args, env), in.secret)

		var got cluster.Config
		r := runWith(t, func(_ context.Context, cfg cluster.Config) error { got = cfg; return nil }, "", args...)
		if r.code != exitOK {
			t.Fatalf("peloton %q: exit %d, stderr %q", args, r.code, r.stderr)
		}
		if got.Backend != "kubernetes" || !got.LeaderElect || got.AdvertiseHost != podIP || got.Kube.Kubeconfig != "" {
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
		checkSecured(t, "cluster", got.Security)
		checkPorts(t, c, svc, map[string]string{"grpc": got.Listen, "http": got.HTTPListen, "admin": got.Security.AdminListen}, "/healthz")
	}
}

// TestDeploymentRegistersWithFederation: the cluster Deployment registers
// with the federation of federation.yaml, through its Service, under the
// ConfigMap's cluster name, at an endpoint the federation's pods reach
// (the pod IP on the container's ports), with the labels of its args, over
// mutual TLS as its certificate's principal, which the installation's
// policy lets register. The registration is the real one the CLI sends,
// received by a fake federation put where the Service's name would resolve
// and guarded by the federation's own rules.
func TestDeploymentRegistersWithFederation(t *testing.T) {
	var dep appsv1.Deployment
	var cm corev1.ConfigMap
	var fedSA corev1.ServiceAccount
	var fedDep appsv1.Deployment
	var fedSvc corev1.Service
	var fedPDB policyv1.PodDisruptionBudget
	readManifest(t, "deployment.yaml", &dep)
	readManifest(t, "config.yaml", &cm)
	readManifests(t, "federation.yaml", &fedSA, &fedDep, &fedSvc, &fedPDB)
	c := onlyContainer(t, dep, "cluster")
	in := newInstallation(t)
	args := mountSecrets(t, dep.Spec.Template.Spec, c, expandArgs(t, c.Args, podEnv(t, c, cm, dep.Namespace, nil)), in.secret)

	var fedPort int32
	for _, p := range fedSvc.Spec.Ports {
		if p.Name == "grpc" {
			fedPort = p.Port
		}
	}
	want := fmt.Sprintf("%s.%s.svc:%d", fedSvc.Name, fedSvc.Namespace, fedPort)
	if got := flagValue(args, "federation"); got != want {
		t.Errorf("--federation=%q; want the federation's Service, %q (write it --federation=VALUE)", got, want)
	}
	if got := flagValue(args, "cluster-labels"); got != "backend=kubernetes" {
		t.Errorf("--cluster-labels=%q; want backend=kubernetes", got)
	}

	req, cfg, id := registration(t, args, in)
	if want := certIDOf(t, cfg.Security.TLS.CertFile); id.Principal != want.CN || !slices.Equal(id.Groups, want.Groups) {
		t.Errorf("registered as %+v; want the principal of its certificate, %+v", id, want)
	}
	grpcPort, httpPort := containerPort(c, "grpc"), containerPort(c, "http")
	if req.GetName() != cm.Data["cluster-name"] || req.GetEndpoint() != net.JoinHostPort(podIP, grpcPort) ||
		req.GetHttpEndpoint() != net.JoinHostPort(podIP, httpPort) || !req.GetReplace() {
		t.Errorf("registered %v (config %+v); want cluster %q at the pod IP, ports %s and %s, replacing", req, cfg, cm.Data["cluster-name"], grpcPort, httpPort)
	}
	if !maps.Equal(req.GetLabels(), map[string]string{"backend": "kubernetes"}) {
		t.Errorf("registered labels %v; want backend=kubernetes", req.GetLabels())
	}
}

// TestFederationDeploymentArgs runs the command line of federation.yaml's
// Deployment through this CLI, its Secrets mounted, with a fake federation
// runner and checks the configuration it would run with - secured, and
// calling the clusters over mutual TLS as a principal their policy makes
// an admin - and that the Deployment, Service and PodDisruptionBudget
// around it agree with it and with the cluster's.
func TestFederationDeploymentArgs(t *testing.T) {
	var sa corev1.ServiceAccount
	var dep, clusterDep appsv1.Deployment
	var svc, clusterSvc corev1.Service
	var pdb, clusterPDB policyv1.PodDisruptionBudget
	var cm corev1.ConfigMap
	readManifests(t, "federation.yaml", &sa, &dep, &svc, &pdb)
	readManifest(t, "deployment.yaml", &clusterDep)
	readManifest(t, "service.yaml", &clusterSvc)
	readManifest(t, "pdb.yaml", &clusterPDB)
	readManifest(t, "config.yaml", &cm)
	c := onlyContainer(t, dep, "federation")
	in := newInstallation(t)
	args := mountSecrets(t, dep.Spec.Template.Spec, c, expandArgs(t, c.Args, podEnv(t, c, cm, dep.Namespace, nil)), in.secret)

	var got federation.Config
	called := false
	r := runFedWith(t, func(context.Context, cluster.Config) error {
		t.Errorf("serve federation ran a cluster")
		return nil
	}, func(_ context.Context, cfg federation.Config) error { got, called = cfg, true; return nil }, "", args...)
	if r.code != exitOK || !called {
		t.Fatalf("peloton %q: exit %d (federation run: %v), stderr %q", args, r.code, called, r.stderr)
	}
	if !got.LeaderElect || got.AdvertiseHost != podIP || got.LeaderLease <= 0 {
		t.Errorf("config %+v; want leader election advertising the pod IP", got)
	}
	// The same etcd as the cluster's: one ConfigMap says where it is.
	if fmt.Sprint(got.EtcdEndpoints) != fmt.Sprint(splitComma(cm.Data["etcd-endpoints"])) {
		t.Errorf("etcd %v; want the ConfigMap's %q", got.EtcdEndpoints, cm.Data["etcd-endpoints"])
	}
	// Every address of the pod: the Service, the kubelet's probes and the
	// other replica come from outside it.
	for _, addr := range []string{got.Listen, got.HTTPListen} {
		if host, _, _ := net.SplitHostPort(addr); host != "" && host != "0.0.0.0" && host != "::" {
			t.Errorf("listens on %q; want every address of the pod", addr)
		}
	}
	checkSecured(t, "federation", got.Security)
	checkPorts(t, c, svc, map[string]string{"grpc": got.Listen, "http": got.HTTPListen, "admin": got.Security.AdminListen}, "/readyz")

	// The clusters: over mutual TLS with its own certificate, checking
	// theirs against the CA for the cluster Service's name (a cluster
	// registers its pod IP, which no certificate names), as a principal
	// the installation's one policy makes an admin.
	creds := got.Options.ClusterCredentials.TLS
	wantName := clusterSvc.Name + "." + clusterSvc.Namespace + ".svc"
	if creds == nil || creds.CertFile != got.Security.TLS.CertFile || creds.KeyFile != got.Security.TLS.KeyFile ||
		creds.CAFile != got.Security.TLS.ClientCAFile || creds.ServerName != wantName {
		t.Errorf("calls the clusters with %+v; want its own certificate and CA, verifying the name %s", creds, wantName)
	}
	if got.Options.ClusterCredentials.Token != "" {
		t.Errorf("calls the clusters with a token; its certificate is its identity")
	}
	if fedID := certIDOf(t, got.Security.TLS.CertFile).identity(); !in.parsedPolicy().Allows(fedID, auth.Admin, "") {
		t.Errorf("the policy does not make %+v an admin of the clusters", fedID)
	}
	if a, b := secretOf(dep, "authz-policy-file"), secretOf(clusterDep, "authz-policy-file"); a == "" || a != b {
		t.Errorf("the federation reads its policy from Secret %q, the cluster from %q; want one for the installation", a, b)
	}
	if a, b := secretOf(dep, "tls-cert-file"), secretOf(clusterDep, "tls-cert-file"); a == "" || a == b {
		t.Errorf("the federation's certificate is in Secret %q, the cluster's in %q; want an identity of its own", a, b)
	}
	if grace := dep.Spec.Template.Spec.TerminationGracePeriodSeconds; grace == nil || time.Duration(*grace)*time.Second <= got.ShutdownGrace {
		t.Errorf("terminationGracePeriodSeconds %v; want more than --shutdown-grace %s", grace, got.ShutdownGrace)
	}

	// Its own identity, no token (deploy/kubernetes checks it has no rights).
	spec := dep.Spec.Template.Spec
	if spec.ServiceAccountName != sa.Name || sa.Namespace != dep.Namespace || sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Errorf("runs as %q; want its own ServiceAccount %s, which mounts no token", spec.ServiceAccountName, sa.Name)
	}
	// Locked down as the cluster's pods are.
	cc := onlyContainer(t, clusterDep, "cluster")
	if !equality.Semantic.DeepEqual(spec.SecurityContext, clusterDep.Spec.Template.Spec.SecurityContext) ||
		!equality.Semantic.DeepEqual(c.SecurityContext, cc.SecurityContext) {
		t.Errorf("securityContext %+v / %+v; want the cluster Deployment's %+v / %+v", spec.SecurityContext, c.SecurityContext,
			clusterDep.Spec.Template.Spec.SecurityContext, cc.SecurityContext)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v; want CPU and memory requests and a memory limit", c.Resources)
	}

	// Two replicas, never on one node, replaced one at a time (a surge
	// pod could not be placed on a two-node cluster), one always left.
	own := klabels.Set(dep.Spec.Template.Labels)
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
		t.Errorf("replicas %v; want 2", dep.Spec.Replicas)
	}
	spread := false
	if a := spec.Affinity; a != nil && a.PodAntiAffinity != nil {
		for _, term := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			if term.TopologyKey == "kubernetes.io/hostname" && term.LabelSelector != nil &&
				klabels.SelectorFromSet(term.LabelSelector.MatchLabels).Matches(own) && len(term.LabelSelector.MatchExpressions) == 0 {
				spread = true
			}
		}
	}
	if !spread {
		t.Errorf("affinity %+v; want a required pod anti-affinity on kubernetes.io/hostname against its own pods", spec.Affinity)
	}
	if ru := dep.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 0 {
		t.Errorf("strategy %+v; with a required anti-affinity, want maxSurge 0", dep.Spec.Strategy)
	}
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 || pdb.Spec.Selector == nil {
		t.Errorf("PodDisruptionBudget %+v; want minAvailable 1", pdb.Spec)
	}

	// Each selector takes its own pods and none of the other Deployment's:
	// a cluster pod behind the federation's Service (or the other way
	// round) would answer another API.
	clusterPods := klabels.Set(clusterDep.Spec.Template.Labels)
	for _, s := range []struct {
		what      string
		sel       map[string]string
		mine, not klabels.Set
	}{
		{"federation Deployment", dep.Spec.Selector.MatchLabels, own, clusterPods},
		{"federation Service", svc.Spec.Selector, own, clusterPods},
		{"federation PodDisruptionBudget", pdb.Spec.Selector.MatchLabels, own, clusterPods},
		{"cluster Deployment", clusterDep.Spec.Selector.MatchLabels, clusterPods, own},
		{"cluster Service", clusterSvc.Spec.Selector, clusterPods, own},
		{"cluster PodDisruptionBudget", clusterPDB.Spec.Selector.MatchLabels, clusterPods, own},
	} {
		sel := klabels.SelectorFromSet(s.sel)
		if len(s.sel) == 0 || !sel.Matches(s.mine) || sel.Matches(s.not) {
			t.Errorf("%s selects %v: want its own pods (%v), not the others (%v)", s.what, s.sel, s.mine, s.not)
		}
	}
}

// flagValue is the value of the last --name=VALUE of args ("" if none).
func flagValue(args []string, name string) string {
	v := ""
	for _, a := range args {
		if rest, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			v = rest
		}
	}
	return v
}

func containerPort(c corev1.Container, name string) string {
	for _, p := range c.Ports {
		if p.Name == name {
			return strconv.Itoa(int(p.ContainerPort))
		}
	}
	return ""
}

// registrations is a federation that only records registrations, and who
// made them.
type registrations struct {
	pelotonv1.UnimplementedClusterServiceServer
	got chan registered
}

type registered struct {
	req *pelotonv1.RegisterClusterRequest
	id  auth.Identity
}

func (r *registrations) RegisterCluster(ctx context.Context, req *pelotonv1.RegisterClusterRequest) (*pelotonv1.RegisterClusterResponse, error) {
	id, _ := auth.FromContext(ctx)
	select {
	case r.got <- registered{req, id}:
	default:
	}
	return &pelotonv1.RegisterClusterResponse{Cluster: &pelotonv1.Cluster{Name: req.GetName()}}, nil
}

// registration runs `peloton serve cluster` with args, its --federation
// pointed at a fake federation, and a cluster runner that reports ready on
// the addresses the flags ask for (a wildcard host as the kernel reports
// it); it returns the first registration the CLI sends and who sent it.
// The fake federation is secured as installation in's federation would
// be: TLS with a certificate of its CA (for 127.0.0.1, where it listens),
// mutual TLS, and the federation's own rules under the installation's
// policy, so a cluster that cannot verify it, or that it cannot verify or
// would refuse, never registers.
func registration(t *testing.T, args []string, in *installation) (*pelotonv1.RegisterClusterRequest, cluster.Config, auth.Identity) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cert, key := in.issue(readmeIdentities["peloton-federation-tls"])
	tlsCfg, err := tlsfiles.ServerConfig(tlsfiles.Server{CertFile: cert, KeyFile: key, ClientCAFile: in.ca.File}, []string{"h2"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	audit := filepath.Join(t.TempDir(), "audit.log")
	guard, err := auth.New(auth.Config{ClientCerts: true, PolicyFile: in.policy, AuditFile: audit}, (&federation.Server{}).Rules())
	if err != nil {
		t.Fatal(err)
	}
	defer guard.Close()
	fed := &registrations{got: make(chan registered, 1)}
	g := grpc.NewServer(append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(tlsCfg))}, guard.ServerOptions()...)...)
	pelotonv1.RegisterClusterServiceServer(g, fed)
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()

	args = slices.Clone(args)
	found := false
	for i, a := range args {
		if strings.HasPrefix(a, "--federation=") {
			args[i], found = "--federation="+lis.Addr().String(), true
		}
	}
	if !found {
		t.Fatalf("peloton %q: no --federation=ADDR", args)
	}
	bound := func(addr string) string {
		host, port, _ := net.SplitHostPort(addr)
		if host == "" {
			host = "::"
		}
		return net.JoinHostPort(host, port)
	}
	var reg registered
	var cfg cluster.Config
	r := runWith(t, func(ctx context.Context, c cluster.Config) error {
		cfg = c
		c.OnReady(cluster.ReadyInfo{ClusterName: c.ClusterName, GRPCAddr: bound(c.Listen), HTTPAddr: bound(c.HTTPListen)})
		select {
		case reg = <-fed.got:
		case <-time.After(20 * time.Second):
			refused, _ := os.ReadFile(audit)
			t.Errorf("peloton %q: no registration within 20s; calls the federation refused: %s", args, refused)
		case <-ctx.Done():
		}
		return nil
	}, "", args...)
	if r.code != exitOK || reg.req == nil {
		t.Fatalf("peloton %q: exit %d, stderr %q; registration %v", args, r.code, r.stderr, reg.req)
	}
	return reg.req, cfg, reg.id
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

// systemdUnit is one unit file of deploy/systemd: the example environment
// file that stands for each EnvironmentFile= it reads, and the instance it
// is tested as when it is a template.
type systemdUnit struct {
	file     string
	instance string
	envFiles map[string]string // EnvironmentFile= path (after specifiers) -> example in deploy/systemd
}

var systemdUnits = []systemdUnit{
	{file: "peloton-federation.service", envFiles: map[string]string{
		"/etc/peloton/peloton.env":    "peloton.env",
		"/etc/peloton/federation.env": "federation.env",
	}},
	{file: "peloton-cluster@.service", instance: "west-1", envFiles: map[string]string{
		"/etc/peloton/peloton.env":        "peloton.env",
		"/etc/peloton/cluster-west-1.env": "cluster.env",
	}},
}

// TestSystemdUnits expands the ExecStart of each unit of deploy/systemd as
// systemd would - specifiers, Environment= defaults overridden by the
// example environment files of the folder, ${VAR} as one argument and a
// lone $VAR split at spaces - and runs the command line through this CLI
// with fake runners: a flag that does not exist, or a value it refuses,
// fails here. The files it reads from /etc/peloton are installed under a
// temporary folder first, as docs/operations.md says: its certificate and
// key and the installation's CA in /etc/peloton/tls, the token file and
// README.md's policy in /etc/peloton/auth. It then checks what would run
// against the unit (data under its StateDirectory, listeners secured, the
// cluster registering where the environment says, over mutual TLS as its
// certificate's principal, with a federation that lets it), and, where
// systemd-analyze is installed, has it verify the units.
func TestSystemdUnits(t *testing.T) {
	for _, u := range systemdUnits {
		t.Run(u.file, func(t *testing.T) {
			unit := readUnit(t, deployDir+"systemd/"+u.file, u)
			args := unit.command(t)
			if len(args) < 3 || args[0] != "/usr/local/bin/peloton" || args[1] != "serve" {
				t.Fatalf("ExecStart %q; want /usr/local/bin/peloton serve ...", args)
			}
			args = args[1:]
			for key, want := range map[string]string{"User": "peloton", "Restart": "on-failure", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "PrivateTmp": "yes"} {
				if got := unit.last("Service", key); got != want {
					t.Errorf("%s=%q; want %q", key, got, want)
				}
			}
			env := unit.environment(t)
			for flag, dir := range map[string]string{"tls-cert-file": "/etc/peloton/tls/", "tls-key-file": "/etc/peloton/tls/",
				"client-ca-file": "/etc/peloton/tls/", "auth-token-file": "/etc/peloton/auth/", "authz-policy-file": "/etc/peloton/auth/"} {
				if v := flagValue(args, flag); !strings.HasPrefix(v, dir) {
					t.Errorf("--%s=%q; want a file in %s", flag, v, dir)
				}
			}
			id := readmeIdentities["peloton-federation-tls"]
			if args[1] == "cluster" {
				// Each cluster of the machine its own identity.
				id = machineCluster(u.instance)
				if v := flagValue(args, "tls-cert-file"); !strings.Contains(filepath.Base(v), u.instance) {
					t.Errorf("--tls-cert-file=%q; want the certificate of cluster %s", v, u.instance)
				}
			}
			in := newInstallation(t)
			args = in.installEtc(args, id)

			// The harness itself: a flag the CLI does not have fails.
			if r := runFedWith(t, func(context.Context, cluster.Config) error { return nil },
				func(context.Context, federation.Config) error { return nil }, "", append(slices.Clone(args), "--no-such-flag")...); r.code != exitUsage {
				t.Errorf("peloton %q --no-such-flag: exit %d; want a usage error", args, r.code)
			}

			switch args[1] {
			case "federation":
				var got federation.Config
				called := false
				r := runFedWith(t, func(context.Context, cluster.Config) error {
					t.Errorf("serve federation ran a cluster")
					return nil
				}, func(_ context.Context, cfg federation.Config) error { got, called = cfg, true; return nil }, "", args...)
				if r.code != exitOK || !called {
					t.Fatalf("peloton %q: exit %d, stderr %q", args, r.code, r.stderr)
				}
				if !got.LeaderElect || got.AdvertiseHost != env["PELOTON_ADVERTISE_HOST"] ||
					fmt.Sprint(got.EtcdEndpoints) != fmt.Sprint(splitComma(env["PELOTON_ETCD_ENDPOINTS"])) {
					t.Errorf("config %+v; want leader election advertising %q on etcd %q", got, env["PELOTON_ADVERTISE_HOST"], env["PELOTON_ETCD_ENDPOINTS"])
				}
				if got.Listen != env["PELOTON_LISTEN"] || got.HTTPListen != env["PELOTON_HTTP_LISTEN"] || got.Security.AdminListen != env["PELOTON_ADMIN_LISTEN"] {
					t.Errorf("listens on %q, %q and %q; want the environment's %q, %q and %q", got.Listen, got.HTTPListen, got.Security.AdminListen,
						env["PELOTON_LISTEN"], env["PELOTON_HTTP_LISTEN"], env["PELOTON_ADMIN_LISTEN"])
				}
				checkSecured(t, u.file, got.Security)
			case "cluster":
				// The run's end is for peloton to record: see the unit.
				if got := unit.last("Service", "KillMode"); got != "mixed" {
					t.Errorf("KillMode=%q; want mixed (peloton stops the local backend's runs itself)", got)
				}
				req, cfg, regID := registration(t, args, in)
				checkSecured(t, u.file, cfg.Security)
				if cfg.Security.AdminListen != env["PELOTON_ADMIN_LISTEN"] {
					t.Errorf("--admin-listen=%q; want the environment's %q", cfg.Security.AdminListen, env["PELOTON_ADMIN_LISTEN"])
				}
				if regID.Principal != id.CN || !slices.Equal(regID.Groups, id.Groups) {
					t.Errorf("registered as %+v; want its certificate's %+v", regID, id)
				}
				if cfg.ClusterName != u.instance || cfg.Backend != env["PELOTON_BACKEND"] ||
					fmt.Sprint(cfg.EtcdEndpoints) != fmt.Sprint(splitComma(env["PELOTON_ETCD_ENDPOINTS"])) {
					t.Errorf("config %+v; want cluster %q, backend %q, etcd %q", cfg, u.instance, env["PELOTON_BACKEND"], env["PELOTON_ETCD_ENDPOINTS"])
				}
				// ProtectSystem=strict: the data directory must be the
				// StateDirectory, the one place the unit may write.
				if want := "/var/lib/" + unit.last("Service", "StateDirectory"); cfg.DataDir != want {
					t.Errorf("--data-dir %q; want the StateDirectory, %q", cfg.DataDir, want)
				}
				_, port, _ := net.SplitHostPort(env["PELOTON_LISTEN"])
				wantLabels, err := parseLabels("cluster-labels", splitComma(env["PELOTON_CLUSTER_LABELS"]))
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := wantLabels["backend"]; !ok {
					wantLabels["backend"] = env["PELOTON_BACKEND"]
				}
				if req.GetName() != u.instance || req.GetEndpoint() != net.JoinHostPort(env["PELOTON_ADVERTISE_HOST"], port) || !maps.Equal(req.GetLabels(), wantLabels) {
					t.Errorf("registered %v; want %s at %s port %s with labels %v", req, u.instance, env["PELOTON_ADVERTISE_HOST"], port, wantLabels)
				}
			default:
				t.Fatalf("ExecStart runs serve %s; the test knows cluster and federation", args[1])
			}
		})
	}

	t.Run("systemd-analyze", func(t *testing.T) {
		analyze, err := exec.LookPath("systemd-analyze")
		if err != nil {
			t.Skip("systemd-analyze is not installed; the units are checked by the CLI only")
		}
		// verify wants ExecStart's program to exist: a stand-in, in copies
		// of the units that differ in that path alone.
		dir := t.TempDir()
		bin := filepath.Join(dir, "peloton")
		if err := os.WriteFile(bin, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		var names, paths []string
		for _, u := range systemdUnits {
			raw, err := os.ReadFile(deployDir + "systemd/" + u.file)
			if err != nil {
				t.Fatal(err)
			}
			copied := strings.ReplaceAll(string(raw), "/usr/local/bin/peloton", bin)
			if err := os.WriteFile(filepath.Join(dir, u.file), []byte(copied), 0o644); err != nil {
				t.Fatal(err)
			}
			name := u.file
			if u.instance != "" {
				name = strings.Replace(name, "@.", "@"+u.instance+".", 1)
			}
			names = append(names, strings.TrimSuffix(u.file, ".service"))
			paths = append(paths, filepath.Join(dir, name))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, analyze, append([]string{"verify", "--man=no"}, paths...)...).CombinedOutput()
		// Unknown keys and bad values are only warnings (exit 0): any line
		// about the units fails the test. Lines about nothing of ours
		// (a systemd too old for a flag, no access to the manager) skip it.
		var ours []string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			for _, n := range names {
				if strings.Contains(line, n) {
					ours = append(ours, line)
					break
				}
			}
		}
		switch {
		case len(ours) > 0:
			t.Errorf("systemd-analyze verify:\n%s", strings.Join(ours, "\n"))
		case err != nil:
			t.Skipf("systemd-analyze verify failed on nothing of the units (%v):\n%s", err, out)
		}
	})
}

// unitFile is the settings of a systemd unit file, by section, in order,
// with specifiers expanded for its instance.
type unitFile struct {
	path     string
	u        systemdUnit
	settings map[string][][2]string // section -> key, value
}

// readUnit parses a unit file as systemd does, as far as these units need:
// sections, comments, backslash continuations. Anything else systemd
// would read differently (quotes, escapes, specifiers the test does not
// know) fails the test rather than being read wrong.
func readUnit(t *testing.T, path string, u systemdUnit) *unitFile {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	uf := &unitFile{path: path, u: u, settings: map[string][][2]string{}}
	section := ""
	lines := strings.Split(string(raw), "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		for strings.HasSuffix(line, `\`) && i+1 < len(lines) {
			i++
			line = strings.TrimSuffix(line, `\`) + " " + strings.TrimSpace(lines[i])
		}
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = line[1 : len(line)-1]
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok || section == "" {
			t.Fatalf("%s: %q is not key=value in a section", path, line)
		}
		uf.settings[section] = append(uf.settings[section], [2]string{strings.TrimSpace(key), uf.specifiers(t, strings.TrimSpace(value))})
	}
	return uf
}

// specifiers expands %i, %S and %% (a system unit's).
func (uf *unitFile) specifiers(t *testing.T, v string) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] != '%' {
			b.WriteByte(v[i])
			continue
		}
		if i+1 == len(v) {
			t.Fatalf("%s: %q ends in %%", uf.path, v)
		}
		i++
		switch v[i] {
		case 'i':
			if uf.u.instance == "" {
				t.Fatalf("%s: %%i in a unit that is not a template", uf.path)
			}
			b.WriteString(uf.u.instance)
		case 'S':
			b.WriteString("/var/lib")
		case '%':
			b.WriteByte('%')
		default:
			t.Fatalf("%s: specifier %%%c in %q; teach the test what systemd makes of it", uf.path, v[i], v)
		}
	}
	return b.String()
}

func (uf *unitFile) all(section, key string) []string {
	var out []string
	for _, kv := range uf.settings[section] {
		if kv[0] == key {
			out = append(out, kv[1])
		}
	}
	return out
}

func (uf *unitFile) last(section, key string) string {
	all := uf.all(section, key)
	if len(all) == 0 {
		return ""
	}
	return all[len(all)-1]
}

var plainWord = regexp.MustCompile(`^[^"'\\]*$`)

// environment is what the service would run with: Environment=, then each
// EnvironmentFile= in order (its example in deploy/systemd), later ones
// overriding earlier ones.
func (uf *unitFile) environment(t *testing.T) map[string]string {
	t.Helper()
	env := map[string]string{}
	set := func(where, assignment string) {
		k, v, ok := strings.Cut(assignment, "=")
		if !ok || k == "" || !plainWord.MatchString(assignment) {
			t.Fatalf("%s: %q is not a plain VAR=value (the test reads no quotes or escapes)", where, assignment)
		}
		env[k] = v
	}
	for _, e := range uf.all("Service", "Environment") {
		for _, a := range strings.Fields(e) {
			set(uf.path, a)
		}
	}
	for _, f := range uf.all("Service", "EnvironmentFile") {
		example, ok := uf.u.envFiles[strings.TrimPrefix(f, "-")]
		if !ok {
			t.Fatalf("%s: EnvironmentFile=%s has no example in deploy/systemd that the test knows of", uf.path, f)
		}
		raw, err := os.ReadFile(deployDir + "systemd/" + example)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(raw), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || line[0] == '#' || line[0] == ';' {
				continue
			}
			set(example, line)
		}
	}
	return env
}

var (
	braced = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
	lone   = regexp.MustCompile(`^\$([A-Za-z_][A-Za-z0-9_]*)$`)
)

// command is ExecStart as systemd runs it: words split at spaces, ${VAR}
// replaced inside its word (empty when unset), a word that is only $VAR
// replaced by the variable's value split at spaces (no word when empty).
func (uf *unitFile) command(t *testing.T) []string {
	t.Helper()
	starts := uf.all("Service", "ExecStart")
	if len(starts) != 1 {
		t.Fatalf("%s: %d ExecStart=; want one", uf.path, len(starts))
	}
	env := uf.environment(t)
	var out []string
	for _, w := range strings.Fields(starts[0]) {
		if !plainWord.MatchString(w) {
			t.Fatalf("%s: ExecStart word %q has quotes or escapes; the test does not read them", uf.path, w)
		}
		if m := lone.FindStringSubmatch(w); m != nil {
			out = append(out, strings.Fields(env[m[1]])...)
			continue
		}
		w = braced.ReplaceAllStringFunc(w, func(ref string) string { return env[braced.FindStringSubmatch(ref)[1]] })
		if strings.Contains(w, "$") {
			t.Fatalf("%s: ExecStart word %q: only ${VAR} and a lone $VAR are read by the test", uf.path, w)
		}
		out = append(out, w)
	}
	return out
}

// nodeName is the node a DaemonSet's pod runs on, as the test fills it in.
const nodeName = "node-7"

// TestHostagentDaemonSetArgs runs the DaemonSet's command line through the
// CLI: an agent per node, named as its node, reporting to the cluster's
// Service, reading the node's /proc and cgroups where the pod mounts them.
func TestHostagentDaemonSetArgs(t *testing.T) {
	var sa corev1.ServiceAccount
	var ds appsv1.DaemonSet
	var svc corev1.Service
	var cm corev1.ConfigMap
	readManifests(t, "hostagent-daemonset.yaml", &sa, &ds)
	readManifest(t, "service.yaml", &svc)
	readManifest(t, "config.yaml", &cm)
	pod := ds.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("DaemonSet %s: %d containers", ds.Name, len(pod.Containers))
	}
	c := pod.Containers[0]
	in := newInstallation(t)
	args := mountSecrets(t, pod, c, expandArgs(t, c.Args, podEnv(t, c, cm, ds.Namespace, nil)), in.secret)
	// The slim agent binary, which the image holds beside peloton.
	if len(c.Command) != 1 || c.Command[0] != "/usr/local/bin/peloton-hostagent" {
		t.Fatalf("DaemonSet %s runs %q; want the slim /usr/local/bin/peloton-hostagent", ds.Name, c.Command)
	}
	dockerfile, err := os.ReadFile(filepath.Join("..", "..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(dockerfile), "-o /out/peloton-hostagent ./cmd/peloton-hostagent") ||
		!regexp.MustCompile(`COPY --from=build [^\n]*/out/peloton-hostagent [^\n]*/usr/local/bin/`).Match(dockerfile) {
		t.Errorf("the Dockerfile does not build ./cmd/peloton-hostagent into /usr/local/bin")
	}

	var out, errb bytes.Buffer
	var got agentRun
	cmd := hostagentcmd.Command(hostagentcmd.Options{Use: "peloton-hostagent", Stdout: &out, Stderr: &errb,
		RunAgent: func(_ context.Context, run agentRun, _ io.Writer) error { got = run; return nil }})
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("peloton-hostagent %q: %v, stderr %q", args, err, errb.String())
	}
	if got.Config.Host != nodeName || got.Config.Virtual || got.Config.Interval != 5*time.Second {
		t.Errorf("agent %+v; want host %s, not virtual, every 5s", got.Config, nodeName)
	}
	// Mutual TLS with its own certificate, whose principal the
	// installation's policy gives the agent role and nothing more.
	if tf := got.Conn.TLS; tf == nil || tf.CAFile == "" || tf.CertFile == "" || tf.KeyFile == "" {
		t.Errorf("the agent's connection %+v; want mutual TLS with the Secret's files", got.Conn)
	}
	id := auth.Identity{Principal: readmeIdentities["peloton-hostagent-tls"].CN, Method: auth.MethodCertificate}
	pol := in.parsedPolicy()
	if !pol.Allows(id, auth.Agent, "") || pol.Allows(id, auth.Viewer, "") {
		t.Errorf("the policy gives %s agent=%v viewer=%v; want the agent role alone", id.Principal, pol.Allows(id, auth.Agent, ""), pol.Allows(id, auth.Viewer, ""))
	}
	// The cluster's Service, on its gRPC port.
	host, port, err := net.SplitHostPort(got.Server)
	if err != nil || host != svc.Name+"."+ds.Namespace+".svc" {
		t.Errorf("--server %q; want the Service %s.%s.svc", got.Server, svc.Name, ds.Namespace)
	}
	grpcPort := ""
	for _, p := range svc.Spec.Ports {
		if p.Name == "grpc" {
			grpcPort = fmt.Sprint(p.Port)
		}
	}
	if port != grpcPort {
		t.Errorf("--server port %s; the Service serves gRPC on %s", port, grpcPort)
	}
	// The node's /proc and cgroups, read-only, where --root says.
	mounts := map[string]bool{}
	for _, m := range c.VolumeMounts {
		if !m.ReadOnly {
			t.Errorf("mount %s is writable; the agent only reads the node", m.MountPath)
		}
		mounts[m.MountPath] = true
	}
	for _, dir := range []string{"proc", "sys/fs/cgroup"} {
		if !mounts[filepath.Join(got.Root, dir)] {
			t.Errorf("--root %s: nothing mounted at %s", got.Root, filepath.Join(got.Root, dir))
		}
	}
	if !pod.HostPID || pod.ServiceAccountName != sa.Name || sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Errorf("pod: hostPID %v, service account %s (token mounted: %v); want the node's processes and no token", pod.HostPID, pod.ServiceAccountName, sa.AutomountServiceAccountToken)
	}
}
