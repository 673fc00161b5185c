// Package testenv holds what the operator's tests share: a real
// kube-apiserver and etcd with the PDPMCluster CRD installed (envtest), and
// waiting for a condition.
package testenv

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Environment is an envtest control plane with the generated CRDs. Its
// binaries come from KUBEBUILDER_ASSETS, which scripts/operator-test.sh sets
// after building kube-apiserver.
func Environment() (*envtest.Environment, error) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, errors.New("KUBEBUILDER_ASSETS is not set: run the operator tests with scripts/operator-test.sh " +
			"(it builds kube-apiserver and points envtest at it)")
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	return &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}, nil
}

// Eventually retries f until it succeeds, and fails the test when 30 s
// pass first.
func Eventually(t *testing.T, f func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within 30s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
