// Package manager assembles the operator process: the PDPMCluster
// controller in a controller-runtime manager with leader election,
// Prometheus metrics and health probes.
package manager

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	pdpmv1alpha1 "pdpm.io/pdpm/operator/api/v1alpha1"
	"pdpm.io/pdpm/operator/internal/controller"
)

// LeaderElectionID names the Lease through which one operator is active.
const LeaderElectionID = "pdpm-operator.pdpm.io"

// OperatorImageEnv names the environment variable holding the operator's
// own image (the chart and config/manager set it): server pods run their
// node-topology step from it.
const OperatorImageEnv = "PDPM_OPERATOR_IMAGE"

// Config is what the operator's command line sets.
type Config struct {
	// MetricsAddr serves /metrics; "0" disables it.
	MetricsAddr string
	// ProbeAddr serves /healthz and /readyz.
	ProbeAddr string
	// LeaderElect makes replicas elect one active operator through a Lease
	// in LeaderElectionNamespace ("" means the operator's own namespace
	// when it runs in a pod).
	LeaderElect             bool
	LeaderElectionNamespace string
	// MonitorTimeout bounds one call to a monitor's status API.
	MonitorTimeout time.Duration
	// StatusInterval is how often each cluster's status is refreshed.
	StatusInterval time.Duration
	// OperatorImage is the operator's own image, which server pods run
	// their node-topology step from.
	OperatorImage string
}

// New returns a manager running the PDPMCluster controller; Start runs it.
func New(restConfig *rest.Config, cfg Config) (ctrl.Manager, error) {
	if cfg.OperatorImage == "" {
		return nil, fmt.Errorf("the operator's own image is not set (%s): server pods run their node-topology step from it",
			OperatorImageEnv)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := pdpmv1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: cfg.MetricsAddr},
		HealthProbeBindAddress:  cfg.ProbeAddr,
		LeaderElection:          cfg.LeaderElect,
		LeaderElectionID:        LeaderElectionID,
		LeaderElectionNamespace: cfg.LeaderElectionNamespace,
		// A new leader starts only after the old one stopped reconciling.
		LeaderElectionReleaseOnCancel: true,
		Cache:                         controller.CacheOptions(),
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	r := &controller.PDPMClusterReconciler{
		Client:         mgr.GetClient(),
		APIReader:      mgr.GetAPIReader(),
		Scheme:         mgr.GetScheme(),
		Recorder:       mgr.GetEventRecorderFor("pdpm-operator"),
		MonitorStatus:  controller.GetClusterStatus,
		MonitorDrain:   controller.DrainServer,
		MonitorAddress: controller.MonitorAddress,
		MonitorTimeout: cfg.MonitorTimeout,
		ResyncPeriod:   cfg.StatusInterval,
		OperatorImage:  cfg.OperatorImage,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the PDPMCluster controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	// Ready once the caches are synced: before that the operator cannot
	// reconcile anything.
	if err := mgr.AddReadyzCheck("caches", func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), time.Second)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("caches not synced")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return mgr, nil
}
