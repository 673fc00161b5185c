package controller

import (
	"context"
	"os"
	"path/filepath"
	"testing"

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
