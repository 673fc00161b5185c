package controller

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pdpmv1alpha1 "pdpm.io/pdpm/operator/api/v1alpha1"
)

// goldenConfig is the configuration file the operator renders for a
// three-monitor cluster with embedded etcd. The C++ daemons' tests start
// pdpm-monitor from this very file (core/src/monitor/etcd/
// monitor_config_test.cc): one source of truth for the format.
// PDPM_UPDATE_GOLDEN=1 rewrites it after an intended change.
var goldenConfig = filepath.Join("testdata", "pdpm.conf.golden")

func TestClusterConfigMatchesGolden(t *testing.T) {
	c := &pdpmv1alpha1.PDPMCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "pdpm", Namespace: "golden"},
		Spec: pdpmv1alpha1.PDPMClusterSpec{
			Monitor: pdpmv1alpha1.MonitorSpec{Replicas: 3, Etcd: pdpmv1alpha1.EtcdSpec{Mode: pdpmv1alpha1.EtcdEmbedded},
				FailureDetection: pdpmv1alpha1.FailureDetectionSpec{HeartbeatIntervalMilliseconds: 200,
					SuspectAfterMilliseconds: 2000, DownAfterMilliseconds: 5000}},
			Servers: pdpmv1alpha1.ServersSpec{
				Replicas: 3,
				PM: pdpmv1alpha1.PMSource{Mode: pdpmv1alpha1.PMEmulated,
					Emulated: &pdpmv1alpha1.EmulatedSource{Size: resource.MustParse("64Mi")}},
				RDMA: pdpmv1alpha1.RDMASpec{Transport: pdpmv1alpha1.TransportTCP},
			},
			Storage: pdpmv1alpha1.StorageSpec{SegmentSize: resource.MustParse("8Mi"), ReplicaCount: 3, Tables: 16},
		},
	}
	got := clusterConfig(c)
	if os.Getenv("PDPM_UPDATE_GOLDEN") == "1" {
		if err := os.WriteFile(goldenConfig, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(goldenConfig)
	if err != nil {
		t.Fatalf("%v (PDPM_UPDATE_GOLDEN=1 writes it)", err)
	}
	if got != string(want) {
		t.Errorf("rendered configuration differs from %s (PDPM_UPDATE_GOLDEN=1 rewrites it after an intended change; the daemons' tests read it):\n%s", goldenConfig, got)
	}
}
