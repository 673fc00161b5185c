package manager

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"pdpm.io/pdpm/operator/internal/testenv"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func httpGet(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// The operator process as it runs in a pod: it takes the leader Lease,
// answers its health probes and serves metrics, against a real API server.
func TestOperatorElectsLeaderAndServesProbesAndMetrics(t *testing.T) {
	env, err := testenv.Environment()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })

	metricsAddr, probeAddr := freeAddr(t), freeAddr(t)
	mgr, err := New(cfg, Config{
		MetricsAddr: metricsAddr, ProbeAddr: probeAddr,
		LeaderElect: true, LeaderElectionNamespace: "default",
		MonitorTimeout: time.Second, StatusInterval: 30 * time.Second,
		OperatorImage: "pdpm/operator:test",
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	clientset := kubernetes.NewForConfigOrDie(cfg)
	testenv.Eventually(t, func() error {
		lease, err := clientset.CoordinationV1().Leases("default").Get(ctx, LeaderElectionID, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if holder(lease) == "" {
			return fmt.Errorf("lease %s has no holder", LeaderElectionID)
		}
		return nil
	})
	select {
	case <-mgr.Elected():
	case <-time.After(30 * time.Second):
		t.Fatal("the operator holds the Lease but does not consider itself elected")
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		testenv.Eventually(t, func() error {
			code, body, err := httpGet("http://" + probeAddr + path)
			if err != nil || code != http.StatusOK {
				return fmt.Errorf("%s: %d %q %v", path, code, body, err)
			}
			return nil
		})
	}
	testenv.Eventually(t, func() error {
		code, body, err := httpGet("http://" + metricsAddr + "/metrics")
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("/metrics: %d %v", code, err)
		}
		for _, m := range []string{"controller_runtime_reconcile_total", "workqueue_depth", "leader_election_master_status"} {
			if !strings.Contains(body, m) {
				return fmt.Errorf("/metrics lacks %s", m)
			}
		}
		return nil
	})
}

func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// Server pods run their node-topology step from the operator's image: an
// operator that does not know it refuses to start, naming the variable.
func TestOperatorRefusesToStartWithoutItsImage(t *testing.T) {
	_, err := New(&rest.Config{Host: "https://127.0.0.1:1"}, Config{MetricsAddr: "0", ProbeAddr: "0"})
	if err == nil || !strings.Contains(err.Error(), OperatorImageEnv) {
		t.Fatalf("New without the operator image: %v, want an error naming %s", err, OperatorImageEnv)
	}
}
