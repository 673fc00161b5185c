// Command manager runs the PDPM operator: the PDPMCluster controller with
// leader election, Prometheus metrics and health probes.
package main

import (
	"flag"
	"os"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"pdpm.io/pdpm/operator/internal/manager"
)

func main() {
	var cfg manager.Config
	flag.StringVar(&cfg.MetricsAddr, "metrics-bind-address", ":8080", "address the Prometheus metrics endpoint binds to; 0 disables it")
	flag.StringVar(&cfg.ProbeAddr, "health-probe-bind-address", ":8081", "address the /healthz and /readyz endpoints bind to")
	flag.BoolVar(&cfg.LeaderElect, "leader-elect", true, "elect one active operator among replicas through a Lease")
	flag.StringVar(&cfg.LeaderElectionNamespace, "leader-election-namespace", "",
		"namespace of the leader Lease; empty means the operator's own namespace")
	flag.DurationVar(&cfg.MonitorTimeout, "monitor-timeout", 3*time.Second, "bound on one call to a monitor's status API")
	flag.DurationVar(&cfg.StatusInterval, "status-interval", 30*time.Second, "how often each cluster's status is refreshed without changes")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")

	mgr, err := manager.New(ctrl.GetConfigOrDie(), cfg)
	if err != nil {
		log.Error(err, "setting up the operator")
		os.Exit(1)
	}
	log.Info("starting the PDPM operator")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "running the operator")
		os.Exit(1)
	}
}
