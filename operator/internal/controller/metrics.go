package controller

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	pdpmv1alpha1 "pdpm.io/pdpm/operator/api/v1alpha1"
)

// Metrics beside controller-runtime's own (reconcile counts and latencies,
// work queue, client): what reconciles decided, and each cluster's state.
var (
	reconcileOutcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pdpm_operator_reconcile_outcomes_total",
		Help: "Reconciles of PDPMClusters by outcome: reconciled, error, scale_down_refused, rollout_paused, finalizing.",
	}, []string{"outcome"})
	clusterServersReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "pdpm_cluster_servers_ready",
		Help: "Server pods ready, per PDPMCluster.",
	}, []string{"namespace", "name"})
	clusterMonitorReachable = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "pdpm_cluster_monitor_reachable",
		Help: "1 when the operator's last call to the cluster's monitor status API succeeded.",
	}, []string{"namespace", "name"})
	clusterReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "pdpm_cluster_ready",
		Help: "1 when the PDPMCluster's Ready condition is True.",
	}, []string{"namespace", "name"})
)

func init() {
	metrics.Registry.MustRegister(reconcileOutcomes, clusterServersReady, clusterMonitorReachable, clusterReady)
}

func countOutcome(outcome string) { reconcileOutcomes.WithLabelValues(outcome).Inc() }

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func setClusterMetrics(c *pdpmv1alpha1.PDPMCluster, obs *observation) {
	clusterServersReady.WithLabelValues(c.Namespace, c.Name).Set(float64(c.Status.ServersReady))
	clusterMonitorReachable.WithLabelValues(c.Namespace, c.Name).Set(boolGauge(obs.monitorErr == nil))
	clusterReady.WithLabelValues(c.Namespace, c.Name).Set(boolGauge(c.Status.Phase == pdpmv1alpha1.PhaseReady))
}

func forgetClusterMetrics(namespace, name string) {
	for _, g := range []*prometheus.GaugeVec{clusterServersReady, clusterMonitorReachable, clusterReady} {
		g.DeleteLabelValues(namespace, name)
	}
}
