// Command manager runs the PDPM operator: the PDPMCluster controller with
// leader election, Prometheus metrics and health probes.
package main

import (
	"flag"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	pdpmv1alpha1 "pdpm.io/pdpm/operator/api/v1alpha1"
	"pdpm.io/pdpm/operator/internal/controller"
)

func main() {
	var metricsAddr, probeAddr string
	var leaderElect bool
	var monitorTimeout, resync time.Duration
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "address the Prometheus metrics endpoint binds to; 0 disables it")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address the /healthz and /readyz endpoints bind to")
	flag.BoolVar(&leaderElect, "leader-elect", true, "elect one active operator among replicas through a Lease")
	flag.DurationVar(&monitorTimeout, "monitor-timeout", 3*time.Second, "bound on one call to a monitor's status API")
	flag.DurationVar(&resync, "status-interval", 30*time.Second, "how often each cluster's status is refreshed without changes")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		log.Error(err, "registering Kubernetes types")
		os.Exit(1)
	}
	if err := pdpmv1alpha1.AddToScheme(scheme); err != nil {
		log.Error(err, "registering PDPM types")
		os.Exit(1)
	}

	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         leaderElect,
		LeaderElectionID:       "pdpm-operator.pdpm.io",
		// A new leader starts only after the old one stopped reconciling.
		LeaderElectionReleaseOnCancel: true,
		Cache:                         controller.CacheOptions(),
	})
	if err != nil {
		log.Error(err, "creating the manager")
		os.Exit(1)
	}
	r := &controller.PDPMClusterReconciler{
		Client:         mgr.GetClient(),
		APIReader:      mgr.GetAPIReader(),
		Scheme:         mgr.GetScheme(),
		Recorder:       mgr.GetEventRecorderFor("pdpm-operator"),
		MonitorStatus:  controller.GetClusterStatus,
		MonitorAddress: controller.MonitorAddress,
		MonitorTimeout: monitorTimeout,
		ResyncPeriod:   resync,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		log.Error(err, "setting up the PDPMCluster controller")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "adding the health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		log.Error(err, "adding the readiness check")
		os.Exit(1)
	}
	log.Info("starting the PDPM operator")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "running the manager")
		os.Exit(1)
	}
}
