// Package helmchart holds only tests: they keep the Helm chart in
// deploy/helm/peloton from rotting and from drifting away from
// deploy/kubernetes. They run a real helm (built by `make helm-tools`, as
// `make test` does): `helm lint --strict`, values refused by the chart's
// schema, and every rendering applied to a real kube-apiserver with a strict
// server-side dry run. With its default values the chart renders the very
// objects of deploy/kubernetes, whose own tests check the RBAC rules against
// the backend's calls and the command lines against the CLI's flags.
package helmchart

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/peloton-sched/peloton/internal/testing/kubetest"
)

// envHelm names the folder holding helm (the Makefile sets it).
const envHelm = "PELOTON_HELM_BIN"

// chart is the chart's folder, from this package's.
const chart = "peloton"

// manifests is the folder of the plain manifests the chart must match.
const manifests = "../kubernetes"

// etcdEndpoints are deploy/kubernetes/config.yaml's example endpoints.
var etcdEndpoints = []string{"http://etcd-0.etcd:2379", "http://etcd-1.etcd:2379", "http://etcd-2.etcd:2379"}

// helmBin is the helm binary: $PELOTON_HELM_BIN/helm, else the newest build
// in the per-machine cache. Without one the test is skipped, saying how to
// build it (`make test` always builds it first).
func helmBin(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv(envHelm); dir != "" {
		bin := filepath.Join(dir, "helm")
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("%s=%s holds no helm; run `make helm-tools`", envHelm, dir)
		}
		return bin
	}
	if cache := kubetest.CacheDir(); cache != "" {
		bins, _ := filepath.Glob(filepath.Join(cache, "helm", "*", "bin", "helm"))
		sort.Strings(bins)
		if len(bins) > 0 {
			return bins[len(bins)-1]
		}
	}
	t.Skip("helm is not built; run `make helm-tools` (or `make test`, which builds it)")
	return ""
}

// helm runs helm with args and returns its standard output, or an error
// carrying its standard error.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helmBin(t), args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// values is one set of --set flags.
type values []string

func (v values) args() []string {
	var out []string
	for _, s := range v {
		out = append(out, "--set", s)
	}
	return out
}

// withEtcd is the one value the chart requires.
func withEtcd(more ...string) values {
	return append(values{"etcdEndpoints={" + strings.Join(etcdEndpoints, ",") + "}"}, more...)
}

// render is `helm template RELEASE --namespace NS` of the chart.
func render(t *testing.T, release, namespace string, v values) []*unstructured.Unstructured {
	t.Helper()
	args := append([]string{"template", release, chart, "--namespace", namespace}, v.args()...)
	out, err := helm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := kubetest.DecodeObjects([]byte(out))
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	return objs
}

func key(u *unstructured.Unstructured) string {
	return u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
}

// TestChartLints: `helm lint --strict` passes with the default values and
// with every optional part switched off or set.
func TestChartLints(t *testing.T) {
	for _, v := range variants() {
		if _, err := helm(t, append([]string{"lint", "--strict", chart}, v.values.args()...)...); err != nil {
			t.Errorf("%s: %v", v.name, err)
		}
	}
}

// TestChartRefusesBadValues: a value the chart cannot use is refused by
// helm, naming it, before anything reaches a cluster.
func TestChartRefusesBadValues(t *testing.T) {
	for _, c := range []struct {
		values values
		want   string
	}{
		{nil, "etcdEndpoints: give the client URLs of your etcd cluster"},
		{withEtcd("controlPlane.replica=3"), "at '/controlPlane': additional properties 'replica' not allowed"},
		{withEtcd("controlPlane.replicas=0"), "/controlPlane/replicas"},
		{withEtcd("clusterName=Prod_1"), "/clusterName"},
		{values{"etcdEndpoints={etcd-0:2379}"}, "/etcdEndpoints/0"},
		{withEtcd("hostAgent.interval=often"), "/hostAgent/interval"},
		{withEtcd("kube.poolNamespaces[0].pool=/org/ml"), "/kube/poolNamespaces/0"},
		{withEtcd("image.pullPolicy=Sometimes"), "/image/pullPolicy"},
	} {
		_, err := helm(t, append([]string{"template", "peloton", chart}, c.values.args()...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--set %v: error %v; want one saying %q", c.values, err, c.want)
		}
	}
}

// TestChartDefaultsAreTheManifests: with the default values (and the
// release and namespace deploy/kubernetes uses), the chart renders the
// objects of deploy/kubernetes, field for field, but for what Helm adds:
// its labels (also in selectors), the config checksum that rolls the pods
// when the ConfigMap changes, the image and its pull policy. The Namespace
// is Helm's (`--create-namespace`), not the chart's.
func TestChartDefaultsAreTheManifests(t *testing.T) {
	want := map[string]*unstructured.Unstructured{}
	files, err := filepath.Glob(filepath.Join(manifests, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := kubetest.DecodeObjects(raw)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, u := range objs {
			if u.GetKind() != "Namespace" {
				want[key(u)] = u
			}
		}
	}
	got := map[string]*unstructured.Unstructured{}
	for _, u := range render(t, "peloton", "peloton", withEtcd()) {
		got[key(u)] = u
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s is in deploy/kubernetes but not in the chart", k)
			continue
		}
		dropStandardLabels(g, w)
		gn, wn := normalize(g.Object), normalize(w.Object)
		if !reflect.DeepEqual(gn, wn) {
			gj, _ := json.MarshalIndent(gn, "", " ")
			wj, _ := json.MarshalIndent(wn, "", " ")
			t.Errorf("%s differs from deploy/kubernetes:\n%s", k, firstDifference(string(gj), string(wj)))
		}
	}
	for k := range got {
		if want[k] == nil {
			t.Errorf("the chart renders %s, which deploy/kubernetes does not have", k)
		}
	}
}

// dropStandardLabels drops from got's own labels the standard ones
// (app.kubernetes.io/...) that the chart puts on every object and want has
// not.
func dropStandardLabels(got, want *unstructured.Unstructured) {
	labels, wl := got.GetLabels(), want.GetLabels()
	for k := range labels {
		if _, ok := wl[k]; !ok && (helmOnly(k) || strings.HasPrefix(k, "app.kubernetes.io/")) {
			delete(labels, k)
		}
	}
	if len(labels) == 0 {
		unstructured.RemoveNestedField(got.Object, "metadata", "labels")
		return
	}
	got.SetLabels(labels)
}

// helmOnly are the keys only the chart writes: Helm's standard labels and
// the checksum annotation, wherever they are.
func helmOnly(k string) bool {
	switch k {
	case "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by", "helm.sh/chart", "image", "imagePullPolicy":
		return true
	}
	return strings.HasPrefix(k, "checksum/")
}

// normalize copies v without the chart's own keys, and with numbers in one
// form (the two decoders differ on 0440 as int64 or float64).
func normalize(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range v {
			if !helmOnly(k) {
				out[k] = normalize(e)
			}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = normalize(e)
		}
		return out
	case int64:
		return float64(v)
	case int:
		return float64(v)
	}
	return v
}

// firstDifference shows the lines around where two renderings first part.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		if i >= len(g) || i >= len(w) || g[i] != w[i] {
			lo := max(0, i-3)
			return fmt.Sprintf("chart:\n%s\ndeploy/kubernetes:\n%s", strings.Join(g[lo:min(len(g), i+4)], "\n"), strings.Join(w[lo:min(len(w), i+4)], "\n"))
		}
	}
	return ""
}

// variant is one installation the tests render.
type variant struct {
	name, release, namespace string
	values                   values
}

func variants() []variant {
	return []variant{
		{"defaults", "peloton", "peloton", withEtcd()},
		{"cluster only, elsewhere", "sched", "sched-system", withEtcd(
			"federation.enabled=false", "hostAgent.enabled=false", "kube.secondaryScheduler=false",
			"kube.namespace=tasks", "kube.poolNamespaces[0].pool=/org/ml", "kube.poolNamespaces[0].namespace=ml",
			"kube.poolNamespaces[1].pool=/org/web", "kube.poolNamespaces[1].namespace=tasks",
			"controlPlane.federationAddress=fed.example.internal:5392", "controlPlane.clusterLabels={region=west,backend=kubernetes}",
			"image.repository=registry.example/peloton", "image.tag=1.2.3", "imagePullSecrets[0].name=regcred",
			"controlPlane.nodeSelector.pool=control", "controlPlane.replicas=3", "controlPlane.podDisruptionBudget=false",
		)},
	}
}

// TestChartOptions: each value does what values.yaml says.
func TestChartOptions(t *testing.T) {
	v := variants()[1]
	objs := render(t, v.release, v.namespace, v.values)
	byKey := map[string]*unstructured.Unstructured{}
	for _, u := range objs {
		byKey[key(u)] = u
		if strings.Contains(u.GetName(), "federation") || strings.Contains(u.GetName(), "hostagent") || strings.HasSuffix(u.GetName(), "-secondary") {
			t.Errorf("%s is rendered with its part switched off", key(u))
		}
		if u.GetKind() == "PodDisruptionBudget" {
			t.Errorf("%s is rendered with controlPlane.podDisruptionBudget=false", key(u))
		}
	}
	dep := byKey["Deployment sched-system/sched-peloton"]
	if dep == nil {
		t.Fatalf("no Deployment sched-system/sched-peloton among %v", slices.Sorted(maps.Keys(byKey)))
	}
	c := container(t, dep)
	args := strings.Join(stringsOf(c["args"]), " ")
	for _, want := range []string{"--kube-secondary=false", "--federation=fed.example.internal:5392", "--cluster-labels=region=west,backend=kubernetes"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if c["image"] != "registry.example/peloton:1.2.3" {
		t.Errorf("image %v; want registry.example/peloton:1.2.3", c["image"])
	}
	if n, _, _ := unstructured.NestedFieldNoCopy(dep.Object, "spec", "replicas"); fmt.Sprint(n) != "3" {
		t.Errorf("replicas %v; want 3", n)
	}
	if sel, _, _ := unstructured.NestedStringMap(dep.Object, "spec", "template", "spec", "nodeSelector"); sel["pool"] != "control" {
		t.Errorf("nodeSelector %v; want pool=control", sel)
	}
	if ps, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "imagePullSecrets"); len(ps) != 1 {
		t.Errorf("imagePullSecrets %v; want regcred", ps)
	}
	cm := byKey["ConfigMap sched-system/sched-peloton"]
	if cm == nil {
		t.Fatal("no ConfigMap")
	}
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	if data["kube-namespace"] != "tasks" || data["kube-pool-namespaces"] != "/org/ml=ml,/org/web=tasks" {
		t.Errorf("ConfigMap data %v", data)
	}
	// Peloton's Role, and its binding to the release's account, in every
	// namespace its pods may go to, once each.
	for _, ns := range []string{"ml", "tasks"} {
		rb := byKey["RoleBinding "+ns+"/sched-peloton-tasks"]
		if byKey["Role "+ns+"/sched-peloton-tasks"] == nil || rb == nil {
			t.Errorf("no Role or RoleBinding sched-peloton-tasks in %s", ns)
			continue
		}
		subj, _, _ := unstructured.NestedSlice(rb.Object, "subjects")
		if len(subj) != 1 || subj[0].(map[string]any)["namespace"] != "sched-system" {
			t.Errorf("RoleBinding in %s binds %v; want the account in sched-system", ns, subj)
		}
	}
	if byKey["Role sched-system/sched-peloton-tasks"] != nil {
		t.Error("a Role in the release's namespace, where no pod goes")
	}
}

func container(t *testing.T, u *unstructured.Unstructured) map[string]any {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	if len(cs) != 1 {
		t.Fatalf("%s has %d containers; want 1", key(u), len(cs))
	}
	return cs[0].(map[string]any)
}

func stringsOf(v any) []string {
	var out []string
	for _, e := range v.([]any) {
		out = append(out, fmt.Sprint(e))
	}
	return out
}

// TestChartOnARealAPIServer is `helm template | kubectl apply
// --server-side --dry-run=server` of each variant against a real
// kube-apiserver: strict field validation (an unknown or duplicate field is
// an error) and every admission check. The namespaces are created for
// real first, as `helm install --create-namespace` would.
func TestChartOnARealAPIServer(t *testing.T) {
	helmBin(t) // skip before starting an apiserver when there is no helm
	c := kubetest.Start(t, kubetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	applier, err := kubetest.NewApplier(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range variants() {
		objs := render(t, v.release, v.namespace, v.values)
		namespaces := map[string]bool{v.namespace: true}
		for _, u := range objs {
			if ns := u.GetNamespace(); ns != "" {
				namespaces[ns] = true
			}
		}
		for ns := range namespaces {
			if err := c.CreateNamespace(ctx, ns); err != nil {
				t.Fatal(err)
			}
		}
		kinds := map[string]bool{}
		for _, u := range objs {
			if err := applier.Apply(ctx, u, true); err != nil {
				t.Errorf("%s: %s: server-side dry run: %v", v.name, key(u), err)
			}
			kinds[u.GetKind()] = true
		}
		if v.name == "defaults" {
			for _, k := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "DaemonSet"} {
				if !kinds[k] {
					t.Errorf("no %s among the default rendering", k)
				}
			}
		}
	}
}

// TestValuesFileIsItsOwnSchema: values.yaml holds every key the schema
// names at the top level, so `helm show values` documents each.
func TestValuesFileIsItsOwnSchema(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var vals map[string]any
	if err := yaml.Unmarshal(raw, &vals); err != nil {
		t.Fatal(err)
	}
	raw, err = os.ReadFile(filepath.Join(chart, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties map[string]any `json:"properties"`
	}
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	for k := range schema.Properties {
		if _, ok := vals[k]; !ok {
			t.Errorf("values.schema.json knows %q; values.yaml does not show it", k)
		}
	}
	for k := range vals {
		if _, ok := schema.Properties[k]; !ok {
			t.Errorf("values.yaml has %q; values.schema.json does not know it", k)
		}
	}
}

// TestReadmeHelmInstall renders the chart with the values of README.md's
// `helm install` command (its placeholders filled in), so the command a
// reader copies works as far as helm is concerned.
func TestReadmeHelmInstall(t *testing.T) {
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	i := strings.Index(text, "helm install peloton deploy/helm/peloton")
	if i < 0 {
		t.Fatal("README.md has no `helm install peloton deploy/helm/peloton` command")
	}
	cmd := text[i:]
	cmd = cmd[:strings.Index(cmd, "\nkubectl")]
	cmd = strings.NewReplacer("\\\n", " ", "<repository>", "registry.example", "<tag>", "1.0.0", "'", "").Replace(cmd)
	fields := strings.Fields(cmd)
	var v values
	namespace := ""
	for j := 0; j < len(fields)-1; j++ {
		switch fields[j] {
		case "--set":
			v = append(v, fields[j+1])
		case "--namespace":
			namespace = fields[j+1]
		}
	}
	if namespace == "" || len(v) == 0 {
		t.Fatalf("cannot read the namespace and values of %q", cmd)
	}
	objs := render(t, "peloton", namespace, v)
	for _, u := range objs {
		if u.GetKind() == "Deployment" && u.GetName() == "peloton" {
			if img := container(t, u)["image"]; img != "registry.example/peloton:1.0.0" {
				t.Errorf("image %v; want the one the README's values name", img)
			}
			return
		}
	}
	t.Error("no Deployment peloton rendered")
}
