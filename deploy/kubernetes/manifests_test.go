// Package manifests holds only tests: they keep the Kubernetes manifests of
// this folder from rotting. Every manifest is applied to a real
// kube-apiserver (internal/testing/kubetest) with a strict server-side dry run, and
// the RBAC rules are checked, through the apiserver's own authorizer,
// against the calls the kubernetes backend makes: it gets every right it
// needs and nothing else; the federation's service account may do nothing
// at all. The command lines of the Deployments are checked by
// cmd/peloton/cli's TestDeploymentArgs and TestFederationDeploymentArgs.
package manifests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/peloton-sched/peloton/internal/testing/kubetest"
)

// serviceAccount is who the Deployment runs as (rbac.yaml).
const serviceAccount = "system:serviceaccount:peloton:peloton"

// ns is the namespace the pods go to (config.yaml's kube-namespace).
const ns = "peloton"

// federationAccount is the service account of the federation
// (federation.yaml) in ns. The federation talks to etcd and to the
// clusters' APIs only: it must have no Kubernetes rights at all.
const federationAccount = "peloton-federation"

// hostagentAccount is the service account of the host agents' DaemonSet
// (hostagent-daemonset.yaml): they read their node's /proc and cgroups
// and talk to the cluster's API only, so it has no rights either.
const hostagentAccount = "peloton-hostagent"

// serviceAccountGroups are the groups the apiserver puts a service account
// of ns in when it authenticates with its token. Rights bound to a group
// are rights too, so the federation's checks ask with them.
var serviceAccountGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}

// access is one kind of request to the apiserver, in a namespace or, with
// Namespace empty, cluster-wide.
type access struct {
	Group, Resource, Subresource, Verb string
	Namespace                          string
}

func (a access) String() string {
	r := a.Resource
	if a.Subresource != "" {
		r += "/" + a.Subresource
	}
	if a.Group != "" {
		r += "." + a.Group
	}
	scope := "cluster-wide"
	if a.Namespace != "" {
		scope = "in namespace " + a.Namespace
	}
	return fmt.Sprintf("%s %s %s", a.Verb, r, scope)
}

// backendCalls is every request hostmgr/kubernetes makes, with where in
// the package. When the backend starts calling something new, add it here
// (the test then fails until rbac.yaml grants it); when it stops, remove it
// (the test then fails until rbac.yaml stops granting it).
var backendCalls = []access{
	{Resource: "nodes", Verb: "list"},                                                  // the Node informer (Start)
	{Resource: "nodes", Verb: "watch"},                                                 // the Node informer
	{Resource: "nodes", Verb: "patch"},                                                 // ApplyPartition: the peloton.io/partition label of a moved host
	{Resource: "pods", Verb: "list"},                                                   // the Pod informer, every namespace: other pods take room on the nodes
	{Resource: "pods", Verb: "watch"},                                                  // the Pod informer
	{Resource: "pods", Verb: "create", Namespace: ns},                                  // Launch (createAndBind), Prefetch, ReleaseVolume
	{Resource: "pods", Verb: "get", Namespace: ns},                                     // createAndBind, after AlreadyExists or a failed bind; Replace, after a failed patch
	{Resource: "pods", Verb: "patch", Namespace: ns},                                   // Replace (inplace.go): a new image for a running pod
	{Resource: "pods", Verb: "delete", Namespace: ns},                                  // Kill, failed launches, orphans, finished runs, helper pods
	{Resource: "pods", Subresource: "binding", Verb: "create", Namespace: ns},          // createAndBind: Peloton is the scheduler
	{Resource: "pods", Subresource: "log", Verb: "get", Namespace: ns},                 // Logs
	{Group: "policy", Resource: "poddisruptionbudgets", Verb: "create", Namespace: ns}, // budget.go: a job's PodDisruptionBudget, at its first launch
	{Group: "policy", Resource: "poddisruptionbudgets", Verb: "get", Namespace: ns},    // budget.go: after AlreadyExists on create
	{Group: "policy", Resource: "poddisruptionbudgets", Verb: "update", Namespace: ns}, // budget.go: its SLA or size changed
	{Group: "policy", Resource: "poddisruptionbudgets", Verb: "list", Namespace: ns},   // budget.go: the reconcile pass
	{Group: "policy", Resource: "poddisruptionbudgets", Verb: "delete", Namespace: ns}, // budget.go: the job is gone, or has no live run
	// The secondary-scheduler mode (secondary.go), on pods of any namespace.
	{Resource: "pods", Verb: "patch"},                                      // Adopt: the run's task ID on the pod
	{Resource: "pods", Verb: "delete"},                                     // Kill of an adopted pod (preemption)
	{Resource: "pods", Subresource: "binding", Verb: "create"},             // launchForeign
	{Resource: "pods", Subresource: "status", Verb: "patch"},               // Waiting: PodScheduled=False, Unschedulable
	{Resource: "events", Verb: "create"},                                   // Reject: why a pod is not scheduled
	{Group: "scheduling.k8s.io", Resource: "priorityclasses", Verb: "get"}, // podPriority: a class the apiserver did not resolve
}

// grantedButNotCalled are rights rbac.yaml gives that the backend does not
// use today, each harmless: reading one node or pod is no more than
// listing them, and kubectl-style debugging as the service account wants it.
var grantedButNotCalled = []access{
	{Resource: "nodes", Verb: "get"},
	{Resource: "pods", Verb: "get"},
}

// refused are rights the service account must not have: secrets and
// config, changing nodes other than patching a partition label (update,
// delete), replacing pods whole (update), running commands in pods,
// creating pods outside its namespaces, and what the backend could be
// expected to do but does not (hold Leases: leader election is
// in etcd).
var refused = []access{
	{Resource: "secrets", Verb: "get", Namespace: ns},
	{Resource: "secrets", Verb: "list"},
	{Resource: "configmaps", Verb: "list", Namespace: ns},
	{Resource: "serviceaccounts", Subresource: "token", Verb: "create", Namespace: ns},
	{Resource: "nodes", Verb: "update"},
	{Resource: "nodes", Verb: "delete"},
	{Resource: "pods", Verb: "update", Namespace: ns},
	{Resource: "pods", Subresource: "exec", Verb: "create", Namespace: ns},
	{Resource: "pods", Subresource: "eviction", Verb: "create", Namespace: ns},
	{Group: "coordination.k8s.io", Resource: "leases", Verb: "create", Namespace: ns},
	{Group: "apps", Resource: "deployments", Verb: "create", Namespace: ns},
	{Group: "rbac.authorization.k8s.io", Resource: "roles", Verb: "create", Namespace: ns},
	{Resource: "pods", Verb: "create", Namespace: "kube-system"},
}

// kustomization is the part of kustomization.yaml the tests read.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
}

func readKustomization(t *testing.T) kustomization {
	t.Helper()
	raw, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(raw, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Fatalf("kustomization.yaml: apiVersion %q, kind %q", k.APIVersion, k.Kind)
	}
	return k
}

// object is one document of a manifest.
type object struct {
	file string
	u    *unstructured.Unstructured
}

func (o object) String() string {
	return fmt.Sprintf("%s: %s %s", o.file, o.u.GetKind(), o.u.GetName())
}

// readObjects decodes every document of the files, in order.
func readObjects(t *testing.T, files []string) []object {
	t.Helper()
	var out []object
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		us, err := kubetest.DecodeObjects(raw)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, u := range us {
			out = append(out, object{file: f, u: u})
		}
	}
	return out
}

// TestKustomizationListsEveryManifest: `kubectl apply -k` applies exactly
// the manifests of this folder, and the image is the placeholder that
// kustomization.yaml replaces, not a registry of anyone's.
func TestKustomizationListsEveryManifest(t *testing.T) {
	k := readKustomization(t)
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = slices.DeleteFunc(files, func(f string) bool { return f == "kustomization.yaml" })
	listed := slices.Clone(k.Resources)
	sort.Strings(listed)
	if !slices.Equal(files, listed) {
		t.Fatalf("kustomization.yaml lists %v; the folder has %v", listed, files)
	}
	if len(k.Images) != 1 || k.Images[0].Name != "peloton" || k.Images[0].NewName == "" || k.Images[0].NewTag == "" {
		t.Fatalf("kustomization.yaml images = %+v; want one entry for the placeholder image peloton", k.Images)
	}
	for _, o := range readObjects(t, k.Resources) {
		if o.u.GetKind() != "Deployment" {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(o.u.Object, "spec", "template", "spec", "containers")
		for _, c := range cs {
			if img := c.(map[string]any)["image"]; img != "peloton" {
				t.Errorf("%s: image %v; keep the placeholder peloton and set the real one in kustomization.yaml", o, img)
			}
		}
	}
}

// TestManifestsOnARealAPIServer applies every manifest to a real
// kube-apiserver with a strict server-side dry run (unknown or duplicate
// fields are errors, and every admission check runs), then creates the RBAC
// objects for real and asks the apiserver what the service account may do.
func TestManifestsOnARealAPIServer(t *testing.T) {
	c := kubetest.Start(t, kubetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	applier, err := kubetest.NewApplier(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	objs := readObjects(t, readKustomization(t).Resources)

	// apply is `kubectl apply --server-side`, as a dry run or not.
	apply := func(o object, dryRun bool) error { return applier.Apply(ctx, o.u, dryRun) }

	t.Run("dry-run", func(t *testing.T) {
		// The namespaces these manifests create must hold every namespaced
		// object, or a real apply would fail on a fresh cluster.
		declared := map[string]bool{}
		for _, o := range objs {
			if o.u.GetKind() == "Namespace" {
				declared[o.u.GetName()] = true
			}
		}
		for _, o := range objs {
			if ns := o.u.GetNamespace(); ns != "" && !declared[ns] {
				t.Errorf("%s: namespace %q is not in namespace.yaml", o, ns)
			}
		}
		// A dry run does not create the namespaces, so the objects in them
		// would be refused for that alone: the namespaces go first, for
		// real, once their own dry run passed.
		kinds := map[string]int{}
		for _, o := range objs {
			if o.u.GetKind() == "Namespace" {
				if err := apply(o, true); err != nil {
					t.Fatalf("%s: %v", o, err)
				}
				if err := c.CreateNamespace(ctx, o.u.GetName()); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, o := range objs {
			if err := apply(o, true); err != nil {
				t.Errorf("%s: server-side dry run: %v", o, err)
			}
			kinds[o.u.GetKind()]++
		}
		for _, k := range []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap", "Deployment", "Service", "PodDisruptionBudget"} {
			if kinds[k] == 0 {
				t.Errorf("no %s among the manifests", k)
			}
		}
		// The apiserver here runs without the ServiceAccount admission
		// plugin (nothing would create the namespaces' default accounts),
		// so a pod naming an account that does not exist passes the dry
		// run; a real cluster would refuse it.
		accounts := map[string]bool{}
		for _, o := range objs {
			if o.u.GetKind() == "ServiceAccount" {
				accounts[o.u.GetNamespace()+"/"+o.u.GetName()] = true
			}
		}
		for _, o := range objs {
			if o.u.GetKind() != "Deployment" {
				continue
			}
			sa, _, _ := unstructured.NestedString(o.u.Object, "spec", "template", "spec", "serviceAccountName")
			if sa == "" || !accounts[o.u.GetNamespace()+"/"+sa] {
				t.Errorf("%s: runs as service account %q, which is not among the manifests", o, sa)
			}
		}
	})

	// applyRBAC creates the identities and their rights for real (server-
	// side apply is idempotent, so each subtest may do it).
	applyRBAC := func(t *testing.T) []object {
		t.Helper()
		var rbacObjs []object
		for _, o := range objs {
			switch o.u.GetKind() {
			case "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
				rbacObjs = append(rbacObjs, o)
			}
		}
		for _, o := range rbacObjs {
			if err := apply(o, false); err != nil {
				t.Fatalf("%s: %v", o, err)
			}
		}
		return rbacObjs
	}

	t.Run("rbac", func(t *testing.T) {
		rbacObjs := applyRBAC(t)
		checkRulesAreNarrow(t, rbacObjs)

		// The apiserver's authorizer decides, as it will for the pods.
		may := func(a access) bool {
			t.Helper()
			ra := &authorizationv1.ResourceAttributes{Verb: a.Verb, Group: a.Group, Resource: a.Resource, Subresource: a.Subresource, Namespace: a.Namespace}
			sar, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{User: serviceAccount, ResourceAttributes: ra},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return sar.Status.Allowed
		}
		for _, a := range backendCalls {
			if !may(a) {
				t.Errorf("the backend needs %s; rbac.yaml does not grant it", a)
			}
		}
		for _, a := range grantedButNotCalled {
			if !may(a) {
				t.Errorf("%s is listed as granted but is not; drop it from grantedButNotCalled", a)
			}
		}
		for _, a := range refused {
			if may(a) {
				t.Errorf("the service account may %s; it must not", a)
			}
		}
	})

	t.Run("no-rights-accounts", func(t *testing.T) {
		rbacObjs := applyRBAC(t)
		checkNoRightsAccount(ctx, t, c.Config, c.Client, objs, rbacObjs, federationAccount, "the federation")
		checkNoRightsAccount(ctx, t, c.Config, c.Client, objs, rbacObjs, hostagentAccount, "the host agent")
	})
}

// checkNoRightsAccount: the service account of who (the federation, the
// host agent) exists, mounts
// no token, is the subject of no binding, and the apiserver's authorizer
// gives it nothing: not one of the rights the cluster's account has or is
// refused, and, rule for rule, no more than an account no binding names
// (what every authenticated client may do: discovery and asking about its
// own rights).
func checkNoRightsAccount(ctx context.Context, t *testing.T, admin *rest.Config, client kubernetes.Interface, objs, rbacObjs []object, account, who string) {
	user := "system:serviceaccount:" + ns + ":" + account
	found := false
	for _, o := range objs {
		switch {
		case o.u.GetKind() == "ServiceAccount" && o.u.GetNamespace() == ns && o.u.GetName() == account:
			found = true
			if mount, ok, _ := unstructured.NestedBool(o.u.Object, "automountServiceAccountToken"); !ok || mount {
				t.Errorf("%s: automountServiceAccountToken is not false; %s needs no Kubernetes token", o, who)
			}
		case o.u.GetKind() == "Deployment" || o.u.GetKind() == "DaemonSet":
			sa, _, _ := unstructured.NestedString(o.u.Object, "spec", "template", "spec", "serviceAccountName")
			if sa != account {
				continue
			}
			if mount, ok, _ := unstructured.NestedBool(o.u.Object, "spec", "template", "spec", "automountServiceAccountToken"); ok && mount {
				t.Errorf("%s: mounts the token of %s", o, account)
			}
		}
	}
	if !found {
		t.Fatalf("no ServiceAccount %s/%s among the manifests", ns, account)
	}
	for _, o := range rbacObjs {
		var subjects []rbacv1.Subject
		switch o.u.GetKind() {
		case "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.u.Object, &b); err != nil {
				t.Fatal(err)
			}
			subjects = b.Subjects
		case "RoleBinding":
			var b rbacv1.RoleBinding
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.u.Object, &b); err != nil {
				t.Fatal(err)
			}
			subjects = b.Subjects
		default:
			continue
		}
		for _, s := range subjects {
			if (s.Kind == "ServiceAccount" && s.Name == account) || (s.Kind != "ServiceAccount" && s.Name == user) || (s.Kind == "Group" && slices.Contains(serviceAccountGroups, s.Name)) {
				t.Errorf("%s: binds %s %s; %s must have no Kubernetes rights", o, s.Kind, s.Name, who)
			}
		}
	}

	for _, a := range slices.Concat(backendCalls, grantedButNotCalled, refused, []access{
		{Resource: "configmaps", Verb: "get", Namespace: ns},
		{Resource: "services", Verb: "list"},
		{Resource: "endpoints", Verb: "list", Namespace: ns},
		{Group: "discovery.k8s.io", Resource: "endpointslices", Verb: "list", Namespace: ns},
		{Group: "coordination.k8s.io", Resource: "leases", Verb: "get", Namespace: ns},
		{Resource: "namespaces", Verb: "get"},
	}) {
		ra := &authorizationv1.ResourceAttributes{Verb: a.Verb, Group: a.Group, Resource: a.Resource, Subresource: a.Subresource, Namespace: a.Namespace}
		sar, err := client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: serviceAccountGroups, ResourceAttributes: ra},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed {
			t.Errorf("the service account of %s may %s; it must have no rights", who, a)
		}
	}

	// What each may do, as the apiserver lists it to the account itself.
	rules := func(user, namespace string) string {
		t.Helper()
		cfg := rest.CopyConfig(admin)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: serviceAccountGroups}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r, err := cs.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx, &authorizationv1.SelfSubjectRulesReview{
			Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: namespace},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Incomplete {
			t.Fatalf("rules of %s in %s: incomplete (%s)", user, namespace, r.Status.EvaluationError)
		}
		var lines []string
		for _, rr := range r.Status.ResourceRules {
			lines = append(lines, fmt.Sprintf("%v %v %v %v", rr.Verbs, rr.APIGroups, rr.Resources, rr.ResourceNames))
		}
		for _, nr := range r.Status.NonResourceRules {
			lines = append(lines, fmt.Sprintf("%v %v", nr.Verbs, nr.NonResourceURLs))
		}
		sort.Strings(lines)
		return strings.Join(lines, "\n")
	}
	nobody := "system:serviceaccount:" + ns + ":no-binding-names-this"
	for _, namespace := range []string{ns, "default"} {
		if got, base := rules(user, namespace), rules(nobody, namespace); got != base {
			t.Errorf("in namespace %s the service account of %s may\n%s\nbut an account no binding names only\n%s", namespace, who, got, base)
		}
	}
}

// checkRulesAreNarrow: no wildcard anywhere, and every (resource, verb) a
// rule grants is one the backend calls or one of grantedButNotCalled, at a
// scope no wider than needed (a ClusterRole grants everywhere, a Role only
// in its namespace, which is narrower than everywhere).
func checkRulesAreNarrow(t *testing.T, objs []object) {
	t.Helper()
	allowed := map[access]bool{}
	for _, a := range slices.Concat(backendCalls, grantedButNotCalled) {
		allowed[a] = true
	}
	for _, o := range objs {
		var rules []rbacv1.PolicyRule
		namespace := "" // of a Role
		switch o.u.GetKind() {
		case "ClusterRole":
			var r rbacv1.ClusterRole
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.u.Object, &r); err != nil {
				t.Fatal(err)
			}
			if r.AggregationRule != nil {
				t.Errorf("%s: aggregates other roles; list its rules", o)
			}
			rules = r.Rules
		case "Role":
			var r rbacv1.Role
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.u.Object, &r); err != nil {
				t.Fatal(err)
			}
			rules, namespace = r.Rules, r.Namespace
		default:
			continue
		}
		for _, rule := range rules {
			if len(rule.NonResourceURLs) > 0 {
				t.Errorf("%s: grants non-resource URLs %v", o, rule.NonResourceURLs)
			}
			for _, s := range slices.Concat(rule.APIGroups, rule.Resources, rule.Verbs) {
				if strings.Contains(s, "*") {
					t.Errorf("%s: a rule with %q; name each group, resource and verb", o, s)
				}
			}
			for _, g := range rule.APIGroups {
				for _, res := range rule.Resources {
					resource, sub, _ := strings.Cut(res, "/")
					for _, v := range rule.Verbs {
						a := access{Group: g, Resource: resource, Subresource: sub, Verb: v, Namespace: namespace}
						everywhere := a
						everywhere.Namespace = ""
						// In a namespace, what is allowed everywhere is
						// allowed too (if redundant). A cluster-wide grant
						// of something needed only in the namespaces is
						// wider than needed.
						if !allowed[a] && !allowed[everywhere] {
							if namespace == "" && allowed[access{Group: g, Resource: resource, Subresource: sub, Verb: v, Namespace: ns}] {
								t.Errorf("%s: grants %s; the backend needs it only in its namespaces (a Role)", o, a)
							} else {
								t.Errorf("%s: grants %s, which the backend does not call (add it to backendCalls if it does)", o, a)
							}
						}
					}
				}
			}
		}
	}
}
