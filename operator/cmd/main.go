// Command pdpm-operator runs the PDPM operator: the PDPMCluster controller
// with leader election, Prometheus metrics and health probes. Its
// subcommand node-topology is the first step of every server pod: it
// writes the server's failure domains from its Node (internal/topology).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"pdpm.io/pdpm/operator/internal/manager"
	"pdpm.io/pdpm/operator/internal/topology"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "node-topology" {
		if err := nodeTopology(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "pdpm-operator node-topology: %v\n", err)
			os.Exit(1)
		}
		return
	}
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
	// Server pods run their node-topology step from the operator's own image.
	cfg.OperatorImage = os.Getenv(manager.OperatorImageEnv)

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

// nodeTopology runs `pdpm-operator node-topology --node=NAME --out=FILE
// [--rack-label=KEY]` with the pod's service account: one attempt (the
// kubelet restarts a failed init container).
func nodeTopology(args []string) error {
	fs := flag.NewFlagSet("node-topology", flag.ContinueOnError)
	node := fs.String("node", "", "name of the server's node (required)")
	out := fs.String("out", "", "labels file to write (required)")
	rackLabel := fs.String("rack-label", "", "node label whose value is the rack; empty: no rack")
	timeout := fs.Duration("timeout", 30*time.Second, "bound on reading the node")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *node == "" || *out == "" || fs.NArg() != 0 {
		return errors.New("usage: node-topology --node=NAME --out=FILE [--rack-label=KEY]")
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	return topology.Write(ctx, c, *node, *rackLabel, *out)
}
