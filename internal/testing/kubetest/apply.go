package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// DecodeObjects decodes every document of a YAML (or JSON) stream of
// Kubernetes objects, in order, skipping empty documents. A document
// without apiVersion, kind or name is an error naming its index.
func DecodeObjects(raw []byte) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for i := 0; ; i++ {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetKind() == "" || u.GetAPIVersion() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("document %d: no apiVersion, kind or name", i)
		}
		out = append(out, u)
	}
}

// Applier is `kubectl apply --server-side` for the tests that check
// manifests against a real apiserver.
type Applier struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

// NewApplier applies with the rights of cfg.
func NewApplier(cfg *rest.Config) (*Applier, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))}, nil
}

// Apply applies u server-side, forcing ownership, with strict field
// validation (an unknown or duplicate field is an error) and, with dryRun,
// every admission check but nothing stored. A namespaced object must name
// its namespace and a cluster-wide one must not.
func (a *Applier) Apply(ctx context.Context, u *unstructured.Unstructured, dryRun bool) error {
	gvk := u.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return err
	}
	body, err := runtime.Encode(unstructured.UnstructuredJSONScheme, u)
	if err != nil {
		return err
	}
	force := true
	opts := metav1.PatchOptions{FieldManager: "peloton-manifest-test", Force: &force, FieldValidation: "Strict"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	var ri dynamic.ResourceInterface = a.dyn.Resource(m.Resource)
	if m.Scope.Name() == "namespace" {
		if u.GetNamespace() == "" {
			return errors.New("a namespaced object without a namespace")
		}
		ri = a.dyn.Resource(m.Resource).Namespace(u.GetNamespace())
	} else if u.GetNamespace() != "" {
		return fmt.Errorf("a cluster-wide object with namespace %q", u.GetNamespace())
	}
	_, err = ri.Patch(ctx, u.GetName(), types.ApplyPatchType, body, opts)
	return err
}
