package cli

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"

	"github.com/peloton-sched/peloton/cluster"
	clusterapi "github.com/peloton-sched/peloton/cluster/api"
	"github.com/peloton-sched/peloton/federation"
	"github.com/peloton-sched/peloton/internal/auth"
	"github.com/peloton-sched/peloton/internal/serving"
	"github.com/peloton-sched/peloton/internal/testing/tlstest"
)

// The files that secure what deploy/ runs - one CA for the installation, a
// certificate for each daemon, the token file and README.md's policy -
// made for the tests in a temporary directory and put where the manifests
// and units read them, as the kubelet mounts a Secret or an operator
// installs /etc/peloton. TestReadmeDeploySecrets checks that README.md's
// own commands make what these tests assume.

// certID is who a certificate of the installation names: the subject's
// common name is the principal, its organizations are the groups.
type certID struct {
	CN     string
	Groups []string
}

func (c certID) identity() auth.Identity {
	return auth.Identity{Principal: c.CN, Groups: c.Groups, Method: auth.MethodCertificate}
}

// readmeIdentities are the certificates README.md's "Deploy the control
// plane" makes, by the Secret that holds each.
var readmeIdentities = map[string]certID{
	"peloton-tls":            {CN: "cluster-local", Groups: []string{"peloton-clusters"}},
	"peloton-federation-tls": {CN: "peloton-federation"},
	"peloton-hostagent-tls":  {CN: "peloton-hostagent"},
}

// readmeAdmin is the certificate README.md makes for its reader.
var readmeAdmin = certID{CN: "admin", Groups: []string{"peloton-admins"}}

// machineCluster is the identity of cluster name's certificate on machines
// (deploy/systemd, README.md's serve commands): README.md's cluster
// certificate with the machine's cluster name.
func machineCluster(name string) certID {
	id := readmeIdentities["peloton-tls"]
	return certID{CN: "cluster-" + name, Groups: id.Groups}
}

// installation is the security files of one installation.
type installation struct {
	t              *testing.T
	dir            string
	ca             *tlstest.CA
	tokens, policy string
	issued         int
}

// newInstallation makes a CA and README.md's token file and policy.
func newInstallation(t *testing.T) *installation {
	t.Helper()
	dir := t.TempDir()
	in := &installation{t: t, dir: dir, ca: tlstest.NewCA(t, dir, "installation")}
	in.tokens = writeTestFile(t, dir, "tokens.yaml", readmeHeredoc(t, "tokens.yaml"))
	in.policy = writeTestFile(t, dir, "policy.yaml", readmeHeredoc(t, "policy.yaml"))
	return in
}

// issue makes a certificate of id for serving and calling, named for
// localhost, 127.0.0.1 and dns.
func (in *installation) issue(id certID, dns ...string) (cert, key string) {
	in.t.Helper()
	in.issued++
	return in.ca.Issue(in.t, fmt.Sprintf("cert-%d", in.issued), id.CN, tlstest.Opts{Groups: id.Groups,
		DNS: append([]string{"localhost"}, dns...), IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
}

// secret returns the files of the Secret of deploy/kubernetes named name,
// by key, as README.md makes them.
func (in *installation) secret(name string) map[string]string {
	in.t.Helper()
	if name == "peloton-auth" {
		return map[string]string{"tokens.yaml": in.tokens, "policy.yaml": in.policy}
	}
	id, ok := readmeIdentities[name]
	if !ok {
		in.t.Fatalf("Secret %s: the test does not know what it holds", name)
	}
	cert, key := in.issue(id)
	return map[string]string{"tls.crt": cert, "tls.key": key, "ca.crt": in.ca.File}
}

// parsedPolicy is the installation's policy.
func (in *installation) parsedPolicy() *auth.Policy {
	in.t.Helper()
	return readPolicy(in.t, in.policy)
}

func readPolicy(t *testing.T, path string) *auth.Policy {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := auth.ParsePolicy(raw)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return p
}

// installEtc installs under a temporary root what a command line reads
// from /etc/peloton, each file made for the flag that names it (the
// certificate of id and its key, the installation's CA, tokens and
// policy), and returns the command line reading them there. A path under
// /etc/peloton the test cannot tell the contents of fails the test.
func (in *installation) installEtc(args []string, id certID) []string {
	t := in.t
	t.Helper()
	root := t.TempDir()
	cert, key := in.issue(id)
	made := map[string]string{
		"tls-cert-file": cert, "tls-key-file": key, "client-ca-file": in.ca.File,
		"auth-token-file": in.tokens, "authz-policy-file": in.policy,
		"peer-cert-file": cert, "peer-key-file": key, "peer-ca-file": in.ca.File,
	}
	out := slices.Clone(args)
	for i := 0; i < len(out); i++ {
		name, val, ok := strings.Cut(strings.TrimPrefix(out[i], "--"), "=")
		at := i
		if !ok && strings.HasPrefix(out[i], "--") && i+1 < len(out) {
			name, val, at = out[i][2:], out[i+1], i+1
		}
		if !strings.HasPrefix(val, "/etc/peloton/") {
			continue
		}
		src, known := made[name]
		if !known {
			t.Fatalf("--%s %s: the test does not know what that file holds", name, val)
		}
		dst := filepath.Join(root, val)
		copyTestFile(t, src, dst)
		out[at] = strings.Replace(out[at], val, dst, 1)
	}
	return out
}

// mountSecrets puts the files of every Secret that container c of pod
// mounts where the kubelet would, under a temporary root, and returns args
// with the mounted paths moved there; secrets gives each Secret's files by
// key. It checks the mounts as the kubelet would make them: read-only,
// whole (a subPath mount never sees a changed Secret, so a renewed
// certificate would need a restart), not optional, and readable by the
// pod's group (fsGroup, the group it runs as) and by no one else.
func mountSecrets(t *testing.T, pod corev1.PodSpec, c corev1.Container, args []string, secrets func(string) map[string]string) []string {
	t.Helper()
	root := t.TempDir()
	out := slices.Clone(args)
	for _, m := range c.VolumeMounts {
		i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 {
			t.Fatalf("mount %s: no volume %s", m.MountPath, m.Name)
		}
		sv := pod.Volumes[i].Secret
		if sv == nil {
			continue
		}
		if !m.ReadOnly || m.SubPath != "" || m.SubPathExpr != "" {
			t.Errorf("Secret %s at %s: readOnly %v, subPath %q; want read-only and whole", sv.SecretName, m.MountPath, m.ReadOnly, m.SubPath+m.SubPathExpr)
		}
		if sv.Optional != nil && *sv.Optional {
			t.Errorf("Secret %s is optional: the pod would start without its files", sv.SecretName)
		}
		if len(sv.Items) > 0 {
			t.Fatalf("Secret %s: items; the test mounts whole Secrets only", sv.SecretName)
		}
		mode := int32(0o644) // the kubelet's default
		if sv.DefaultMode != nil {
			mode = *sv.DefaultMode
		}
		sc := pod.SecurityContext
		if mode&0o007 != 0 || mode&0o040 == 0 || sc == nil || sc.FSGroup == nil || sc.RunAsGroup == nil || *sc.FSGroup != *sc.RunAsGroup {
			t.Errorf("Secret %s: mode %#o, pod securityContext %+v; want its files readable by the pod's group (fsGroup = runAsGroup, mode 0440) and by no other user",
				sv.SecretName, mode, sc)
		}
		dir := filepath.Join(root, m.MountPath)
		for key, src := range secrets(sv.SecretName) {
			copyTestFile(t, src, filepath.Join(dir, key))
		}
		for j, a := range out {
			out[j] = strings.Replace(a, "="+m.MountPath+"/", "="+dir+"/", 1)
		}
	}
	return out
}

// secretOf is the Secret that Deployment d mounts where the --flag of its
// container names a file ("" if none).
func secretOf(d appsv1.Deployment, flag string) string {
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	dir := filepath.Dir(flagValue(c.Args, flag))
	for _, m := range c.VolumeMounts {
		if m.MountPath != dir {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				return v.Secret.SecretName
			}
		}
	}
	return ""
}

// checkSecured: a daemon's listeners serve TLS, ask every client for a
// certificate of the installation's CA (mutual TLS), read tokens and a
// policy, write the audit log to standard output (the pod's log, the
// journal), answer the probes and /metrics on an admin listener of their
// own, and do not fall back on --insecure.
func checkSecured(t *testing.T, what string, sec serving.Security) {
	t.Helper()
	if sec.Insecure {
		t.Errorf("%s: --insecure", what)
	}
	if sec.TLS.CertFile == "" || sec.TLS.KeyFile == "" || sec.TLS.ClientCAFile == "" {
		t.Errorf("%s: TLS %+v; want --tls-cert-file, --tls-key-file and --client-ca-file", what, sec.TLS)
	}
	if sec.Auth.TokenFile == "" || sec.Auth.PolicyFile == "" {
		t.Errorf("%s: tokens %q, policy %q; want --auth-token-file and --authz-policy-file", what, sec.Auth.TokenFile, sec.Auth.PolicyFile)
	}
	if sec.Auth.AuditFile != "-" {
		t.Errorf("%s: --audit-log=%q; want - (standard output: the pod's log, the journal)", what, sec.Auth.AuditFile)
	}
	if sec.AdminListen == "" {
		t.Errorf("%s: no --admin-listen; the probes and Prometheus need it", what)
	}
}

// certIDOf is who the certificate in file names.
func certIDOf(t *testing.T, file string) certID {
	t.Helper()
	c := readCert(t, file)
	return certID{CN: c.Subject.CommonName, Groups: c.Subject.Organization}
}

func readCert(t *testing.T, file string) *x509.Certificate {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(raw)
	if b == nil || b.Type != "CERTIFICATE" {
		t.Fatalf("%s: no PEM certificate", file)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return c
}

// verifyCert says why the certificate in file is not one that the CA in
// caFile signed for usage, with the name dns if not empty.
func verifyCert(t *testing.T, file, caFile, dns string, usage x509.ExtKeyUsage) error {
	t.Helper()
	raw, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(raw) {
		t.Fatalf("%s: no PEM certificate", caFile)
	}
	_, err = readCert(t, file).Verify(x509.VerifyOptions{Roots: roots, DNSName: dns, KeyUsages: []x509.ExtKeyUsage{usage}})
	return err
}

// readmeHeredoc is the text README.md's examples write to file with
// `cat > file <<'EOF'`.
func readmeHeredoc(t *testing.T, file string) string {
	t.Helper()
	open := "cat > " + file + " <<'EOF'\n"
	for _, b := range readmeShellBlocks(t, "../../../README.md") {
		if _, rest, ok := strings.Cut(b.text, open); ok {
			body, _, ok := strings.Cut(rest, "\nEOF\n")
			if !ok {
				t.Fatalf("README.md:%d: %q has no EOF line", b.line, strings.TrimSpace(open))
			}
			return body + "\n"
		}
	}
	t.Fatalf("README.md: no example writes %s with %q", file, strings.TrimSpace(open))
	return ""
}

func writeTestFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// copyTestFile copies src to dst, making dst's folder; a different file
// already at dst fails the test (two flags naming one file for different
// contents).
func copyTestFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if old, err := os.ReadFile(dst); err == nil {
		if !bytes.Equal(old, b) {
			t.Fatalf("%s is named for two different files", dst)
		}
		return
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o400); err != nil {
		t.Fatal(err)
	}
}

// readmeSecretsBlock starts README.md's sh example that makes the
// installation's CA, certificates, tokens and policy; the example after it
// makes the Secrets from them with kubectl.
const readmeSecretsBlock = "# One CA for the installation"

// kubeSecret is a Secret that `kubectl create secret` would make: its
// namespace, type, and the file of each key.
type kubeSecret struct {
	namespace, typ string
	files          map[string]string
}

// TestReadmeDeploySecrets runs README.md's commands that make the Secrets
// of deploy/kubernetes, with the real openssl and a kubectl that records
// what it is asked, and checks what they make: exactly the Secrets the
// Deployments mount, with the keys they read; files the daemons take
// (their command lines run through this CLI with them mounted); private
// keys no one else may read; one CA; certificates for serving and calling
// that name what the other daemons dial; and a policy that lets each
// daemon, the host agents and the reader do their part.
func TestReadmeDeploySecrets(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is not installed; README.md makes the certificates with it")
	}
	blocks := readmeShellBlocks(t, "../../../README.md")
	i := slices.IndexFunc(blocks, func(b readmeBlock) bool { return strings.HasPrefix(b.text, readmeSecretsBlock) })
	if i < 0 || i+1 == len(blocks) || !strings.Contains(blocks[i+1].text, "create secret") {
		t.Fatalf("README.md: no sh example starting %q followed by one that creates the Secrets", readmeSecretsBlock)
	}
	dir, bin, calls := t.TempDir(), t.TempDir(), t.TempDir()
	// kubectl writes each call's arguments, NUL-separated, to a file of its
	// own, numbered in order.
	shim := "#!/bin/sh\nn=$(ls \"$KUBECTL_CALLS\" | wc -l)\nprintf '%s\\0' \"$@\" > \"$KUBECTL_CALLS/$(printf %04d \"$n\")\"\n"
	if err := os.WriteFile(filepath.Join(bin, "kubectl"), []byte(shim), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-e", "-x", "-c", blocks[i].text+blocks[i+1].text)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECTL_CALLS="+calls)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("README.md:%d and :%d: %v\n%s", blocks[i].line, blocks[i+1].line, err, out)
	}
	secrets := kubectlSecrets(t, calls, dir)

	keys, _ := filepath.Glob(filepath.Join(dir, "*.key"))
	if len(keys) == 0 {
		t.Fatal("README.md's commands made no *.key file")
	}
	for _, k := range keys {
		if st, err := os.Stat(k); err != nil || st.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: mode %v; a private key must be its owner's alone", filepath.Base(k), st.Mode())
		}
	}

	// The Secrets the Deployments mount, and the Deployments run with them.
	var dep, fedDep appsv1.Deployment
	var cm corev1.ConfigMap
	var svc, fedSvc corev1.Service
	var fedSA corev1.ServiceAccount
	var fedPDB policyv1.PodDisruptionBudget
	readManifest(t, "deployment.yaml", &dep)
	readManifest(t, "config.yaml", &cm)
	readManifest(t, "service.yaml", &svc)
	readManifests(t, "federation.yaml", &fedSA, &fedDep, &fedSvc, &fedPDB)
	mounted := func(name string) map[string]string {
		s, ok := secrets[name]
		if !ok {
			t.Fatalf("the Deployments mount Secret %s; README.md does not make it", name)
		}
		if s.namespace != dep.Namespace {
			t.Errorf("Secret %s is made in namespace %q; the Deployments run in %q", name, s.namespace, dep.Namespace)
		}
		if _, tls := s.files["tls.crt"]; tls {
			if s.typ != string(corev1.SecretTypeTLS) || !hasKeys(s.files, "tls.crt", "tls.key", "ca.crt") {
				t.Errorf("Secret %s: type %q, keys %v; want %s with tls.crt, tls.key and ca.crt (what cert-manager writes)", name, s.typ, slices.Sorted(maps.Keys(s.files)), corev1.SecretTypeTLS)
			}
		}
		return s.files
	}
	c := onlyContainer(t, dep, "cluster")
	args := mountSecrets(t, dep.Spec.Template.Spec, c, expandArgs(t, c.Args, podEnv(t, c, cm, dep.Namespace, nil)), mounted)
	var got cluster.Config
	if r := runWith(t, func(_ context.Context, cfg cluster.Config) error { got = cfg; return nil }, "", args...); r.code != exitOK {
		t.Fatalf("peloton %q with README.md's files: exit %d, stderr %q", args, r.code, r.stderr)
	}
	checkSecured(t, "cluster", got.Security)
	clusterPolicy := readPolicy(t, got.Security.Auth.PolicyFile)
	if raw, err := os.ReadFile(got.Security.Auth.TokenFile); err != nil {
		t.Fatal(err)
	} else if _, err := auth.ParseTokens(raw); err != nil {
		t.Errorf("README.md's tokens.yaml: %v", err)
	}
	fc := onlyContainer(t, fedDep, "federation")
	fedArgs := mountSecrets(t, fedDep.Spec.Template.Spec, fc, expandArgs(t, fc.Args, podEnv(t, fc, cm, fedDep.Namespace, nil)), mounted)
	var fed federation.Config
	if r := runFedWith(t, func(context.Context, cluster.Config) error { return nil },
		func(_ context.Context, cfg federation.Config) error { fed = cfg; return nil }, "", fedArgs...); r.code != exitOK {
		t.Fatalf("peloton %q with README.md's files: exit %d, stderr %q", fedArgs, r.code, r.stderr)
	}
	checkSecured(t, "federation", fed.Security)
	fedPolicy := readPolicy(t, fed.Security.Auth.PolicyFile)

	// One CA; each certificate is who the tests take it for, signed for
	// serving and calling.
	var ca []byte
	for name, want := range readmeIdentities {
		s := mounted(name)
		raw, err := os.ReadFile(s["ca.crt"])
		if err != nil {
			t.Fatal(err)
		}
		if ca == nil {
			ca = raw
		} else if !bytes.Equal(ca, raw) {
			t.Errorf("Secret %s: another ca.crt; one CA signs the whole installation", name)
		}
		if got := certIDOf(t, s["tls.crt"]); got.CN != want.CN || !slices.Equal(got.Groups, want.Groups) {
			t.Errorf("Secret %s: certificate of %+v; the tests take it for %+v", name, got, want)
		}
		for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			if err := verifyCert(t, s["tls.crt"], s["ca.crt"], "", u); err != nil {
				t.Errorf("Secret %s: %v", name, err)
			}
		}
	}
	admin := filepath.Join(dir, "admin.crt")
	if got := certIDOf(t, admin); got.CN != readmeAdmin.CN || !slices.Equal(got.Groups, readmeAdmin.Groups) {
		t.Errorf("admin.crt: certificate of %+v; the tests take it for %+v", got, readmeAdmin)
	}
	if err := verifyCert(t, admin, filepath.Join(dir, "ca.crt"), "", x509.ExtKeyUsageClientAuth); err != nil {
		t.Errorf("admin.crt: %v", err)
	}

	// Names: the cluster's certificate carries its Service's name (host
	// agents and port-forwarded clients dial it) and the name the
	// federation checks instead of a pod IP; the federation's, the host
	// the clusters dial.
	clusterCert, fedCert := mounted("peloton-tls")["tls.crt"], mounted("peloton-federation-tls")["tls.crt"]
	serverNames := map[string][]string{
		clusterCert: {svc.Name + "." + dep.Namespace + ".svc", fed.Options.ClusterCredentials.TLS.ServerName},
		fedCert:     {hostOf(t, flagValue(args, "federation"))},
	}
	for file, names := range serverNames {
		for _, n := range names {
			if err := verifyCert(t, file, filepath.Join(dir, "ca.crt"), n, x509.ExtKeyUsageServerAuth); err != nil {
				t.Errorf("%s, dialled as %q: %v", file, n, err)
			}
		}
	}

	// Who may do what: the federation runs the clusters (admin); a cluster
	// registers and asks the global SLA evaluator (what the federation's
	// rules ask); the host agents report (what the cluster's rule asks);
	// the reader administers.
	fedRules, clusterRules := (&federation.Server{}).Rules(), (&clusterapi.Server{}).Rules()
	clusterID, fedID := readmeIdentities["peloton-tls"].identity(), readmeIdentities["peloton-federation-tls"].identity()
	if !clusterPolicy.Allows(fedID, auth.Admin, "") {
		t.Errorf("the cluster's policy does not make %s an admin; the federation could not manage it", fedID.Principal)
	}
	var clusterCalls []string
	for m := range fedRules {
		if m == "/peloton.api.v1.ClusterService/RegisterCluster" || strings.HasPrefix(m, "/peloton.api.v1.GlobalSlaService/") {
			clusterCalls = append(clusterCalls, m)
		}
	}
	if len(clusterCalls) < 2 {
		t.Fatalf("the federation's rules have no RegisterCluster or GlobalSlaService: %v", clusterCalls)
	}
	for _, m := range clusterCalls {
		r := fedRules[m]
		if !fedPolicy.Allows(clusterID, r.Role, "") {
			t.Errorf("the federation's policy refuses %s to %+v (it needs %s)", m, clusterID, r.Role)
		}
	}
	agentRule := clusterRules["/peloton.api.v1.HostAgentService/ReportUsage"]
	if agent := readmeIdentities["peloton-hostagent-tls"].identity(); !clusterPolicy.Allows(agent, agentRule.Role, "") || clusterPolicy.Allows(agent, auth.Viewer, "") {
		t.Errorf("the cluster's policy: %s may report usage %v, view %v; want the one, not the other", agent.Principal,
			clusterPolicy.Allows(agent, agentRule.Role, ""), clusterPolicy.Allows(agent, auth.Viewer, ""))
	}
	if !clusterPolicy.Allows(readmeAdmin.identity(), auth.Admin, "") || !fedPolicy.Allows(readmeAdmin.identity(), auth.Admin, "") {
		t.Errorf("the policy does not make admin.crt's holder an admin")
	}
}

func hasKeys(m map[string]string, keys ...string) bool {
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			return false
		}
	}
	return true
}

func hostOf(t *testing.T, addr string) string {
	t.Helper()
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%q: %v", addr, err)
	}
	return h
}

// kubectlSecrets reads the calls the kubectl stand-in recorded in calls,
// run in dir, and returns the Secrets they would create. It knows `create
// namespace` and `create secret generic NAME [-n NS] [--type=T]
// --from-file=[KEY=]PATH...`; anything else fails the test rather than
// being read wrong.
func kubectlSecrets(t *testing.T, calls, dir string) map[string]kubeSecret {
	t.Helper()
	entries, err := os.ReadDir(calls)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	out := map[string]kubeSecret{}
	for _, n := range names {
		raw, err := os.ReadFile(filepath.Join(calls, n))
		if err != nil {
			t.Fatal(err)
		}
		argv := strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
		var words []string
		s := kubeSecret{namespace: "default", files: map[string]string{}}
		for j := 0; j < len(argv); j++ {
			a := argv[j]
			switch {
			case a == "-n" || a == "--namespace":
				if j+1 == len(argv) {
					t.Fatalf("kubectl %q: %s without a value", argv, a)
				}
				j++
				s.namespace = argv[j]
			case strings.HasPrefix(a, "--namespace="):
				s.namespace = strings.TrimPrefix(a, "--namespace=")
			case strings.HasPrefix(a, "--type="):
				s.typ = strings.TrimPrefix(a, "--type=")
			case strings.HasPrefix(a, "--from-file="):
				src := strings.TrimPrefix(a, "--from-file=")
				key, path, ok := strings.Cut(src, "=")
				if !ok {
					key, path = filepath.Base(src), src
				}
				if _, dup := s.files[key]; dup {
					t.Fatalf("kubectl %q: key %s twice", argv, key)
				}
				if !filepath.IsAbs(path) {
					path = filepath.Join(dir, path)
				}
				if _, err := os.Stat(path); err != nil {
					t.Fatalf("kubectl %q: %v", argv, err)
				}
				s.files[key] = path
			case strings.HasPrefix(a, "-"):
				t.Fatalf("kubectl %q: the test does not know %s", argv, a)
			default:
				words = append(words, a)
			}
		}
		switch {
		case len(words) == 3 && words[0] == "create" && words[1] == "namespace":
		case len(words) == 4 && slices.Equal(words[:3], []string{"create", "secret", "generic"}):
			if _, dup := out[words[3]]; dup {
				t.Fatalf("kubectl %q: Secret %s is created twice", argv, words[3])
			}
			if s.typ == "" {
				s.typ = string(corev1.SecretTypeOpaque)
			}
			out[words[3]] = s
		default:
			t.Fatalf("kubectl %q: the test knows only create namespace and create secret generic", argv)
		}
	}
	if len(out) == 0 {
		t.Fatal("README.md's commands create no Secret")
	}
	return out
}

// TestReadmeServeCommands runs README.md's `peloton serve` commands, which
// TestReadmeExamples leaves out (they need etcd and machines), through
// this CLI with fake runners, the files they read from /etc/peloton
// installed under a temporary folder: each parses and starts, and one that
// listens beyond loopback is secured as deploy/systemd's units are.
func TestReadmeServeCommands(t *testing.T) {
	in := newInstallation(t)
	secured := 0
	for _, b := range readmeShellBlocks(t, "../../../README.md") {
		for _, line := range shellLines(b.text) {
			words := strings.Fields(line)
			if len(words) < 3 || words[0] != "peloton" || words[1] != "serve" || (words[2] != "cluster" && words[2] != "federation") {
				continue
			}
			id := readmeIdentities["peloton-federation-tls"]
			if words[2] == "cluster" {
				name := "local"
				if i := slices.Index(words, "--cluster-name"); i > 0 && i+1 < len(words) {
					name = words[i+1]
				}
				id = machineCluster(name)
			}
			args := in.installEtc(words[1:], id)
			var sec serving.Security
			var listen []string
			r := runFedWith(t, func(_ context.Context, cfg cluster.Config) error {
				sec, listen = cfg.Security, []string{cfg.Listen, cfg.HTTPListen}
				return nil
			}, func(_ context.Context, cfg federation.Config) error {
				sec, listen = cfg.Security, []string{cfg.Listen, cfg.HTTPListen}
				return nil
			}, "", args...)
			if r.code != exitOK || listen == nil {
				t.Errorf("README.md:%d: peloton %q: exit %d, stderr %q", b.line, args, r.code, r.stderr)
				continue
			}
			if !serving.Loopback(listen[0]) || !serving.Loopback(listen[1]) {
				checkSecured(t, fmt.Sprintf("README.md:%d: %s", b.line, strings.Join(words[:3], " ")), sec)
				secured++
			}
		}
	}
	if secured < 3 {
		t.Errorf("README.md has %d peloton serve commands for other machines to reach; the test expects the cluster's, and the federation's with a cluster of it", secured)
	}
}

// shellLines are the commands of a shell example: lines joined at a
// trailing backslash, without comments.
func shellLines(text string) []string {
	var out []string
	cur := ""
	for _, l := range strings.Split(text, "\n") {
		if t := strings.TrimSpace(l); strings.HasPrefix(t, "#") {
			continue
		}
		if i := strings.Index(l, " #"); i >= 0 {
			l = l[:i]
		}
		if strings.HasSuffix(l, `\`) {
			cur += strings.TrimSuffix(l, `\`) + " "
			continue
		}
		out = append(out, cur+l)
		cur = ""
	}
	return out
}
