package controller

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	pdpmv1alpha1 "pdpm.io/pdpm/operator/api/v1alpha1"
)

// Every sample is accepted by the API server, and together they cover every
// PM mode.
func TestSamplesAreValid(t *testing.T) {
	ns := newNamespace(t)
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "config", "samples", "pdpm_*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	modes := map[pdpmv1alpha1.PMMode]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c := &pdpmv1alpha1.PDPMCluster{}
		if err := yaml.UnmarshalStrict(data, c); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		c.Namespace = ns
		if err := k8s.Create(context.Background(), c, client.DryRunAll); err != nil {
			t.Errorf("%s rejected: %v", f, err)
		}
		modes[c.Spec.Servers.PM.Mode] = true
	}
	for _, m := range []pdpmv1alpha1.PMMode{pdpmv1alpha1.PMDevDax, pdpmv1alpha1.PMFSDax, pdpmv1alpha1.PMPVC, pdpmv1alpha1.PMEmulated} {
		if !modes[m] {
			t.Errorf("no sample for PM mode %s", m)
		}
	}
}

// The operator's own manifests (RBAC, Deployment, Services) are accepted by
// the API server as they are.
func TestManifestsAreValid(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "pdpm-system"}}
	if err := k8s.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	var files []string
	for _, dir := range []string{"rbac", "manager"} {
		found, err := filepath.Glob(filepath.Join("..", "..", "..", "config", dir, "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, found...)
	}
	objects := 0
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(data), "\n---\n") {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			objects++
			if err := k8s.Create(ctx, u, client.DryRunAll); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Errorf("%s: %s %s rejected: %v", f, u.GetKind(), u.GetName(), err)
			}
		}
	}
	if objects < 8 {
		t.Errorf("only %d objects in the operator's manifests", objects)
	}
}
