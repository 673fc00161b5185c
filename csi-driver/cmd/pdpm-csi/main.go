// pdpm-csi: the PDPM CSI driver (docs/csi.md). --mode controller serves
// the identity and controller services (beside a pdfs-volume-api it calls),
// --mode node the identity and node services, --mode all both (tests). A
// node plugin started with --mounter makes no mounts itself: it forwards
// the node service to the pdpm-csi that --mounter reaches (the mount
// DaemonSet's, which outlives the plugin's pod).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"pdpm.io/pdpm/csi-driver/internal/pdpmv1"
	"pdpm.io/pdpm/csi-driver/pkg/driver"
)

// version is set at build time (-ldflags -X main.version=...).
var version = "dev"

func main() {
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet("pdpm-csi", flag.ContinueOnError)
	endpoint := fs.String("endpoint", "unix:///csi/csi.sock", "where to serve CSI: unix:///PATH or tcp://HOST:PORT")
	mode := fs.String("mode", "all", "controller, node or all")
	volumeAPI := fs.String("volume-api", "", "controller: the pdfs-volume-api address (HOST:PORT or unix:///PATH)")
	nodeID := fs.String("node-id", "", "node: this node's name (default: the host name)")
	stateDir := fs.String("state-dir", "/var/lib/pdpm-csi", "node: where the staged volumes are recorded")
	fuseBinary := fs.String("pdfs-fuse", "pdfs-fuse", "node: the pdfs-fuse binary")
	mountTimeout := fs.Duration("mount-timeout", 30*time.Second, "node: how long a stage waits for pdfs-fuse to mount")
	clusterName := fs.String("cluster-name", "", "the cluster requests without a cluster parameter are about, and ListVolumes/GetCapacity's")
	monitors := fs.String("monitors", "", "with --cluster-name: its monitors (host:port, comma-separated)")
	secretFile := fs.String("secret-file", "", "with --cluster-name: file holding its cluster secret")
	transport := fs.String("transport", "", "with --cluster-name: tcp (default) or verbs")
	registrationSocket := fs.String("registration-socket", "",
		"node: serve kubelet's plugin registration here (in kubelet's plugins_registry); empty: do not register")
	kubeletEndpoint := fs.String("kubelet-endpoint", "",
		"node: the CSI socket's path as kubelet sees it (default: --endpoint's path)")
	healthz := fs.String("healthz", "", "serve /healthz (the CSI endpoint's Probe) on this HOST:PORT; empty: none")
	mounter := fs.String("mounter", "",
		"node: forward the node service to the pdpm-csi serving it at unix:///PATH (and be ready while it is); empty: mount here")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "pdpm-csi")
	fail := func(format string, args ...any) int {
		log.Error(fmt.Sprintf(format, args...))
		return 1
	}
	if fs.NArg() != 0 {
		return fail("unexpected arguments %q", fs.Args())
	}
	controller, node := *mode == "controller" || *mode == "all", *mode == "node" || *mode == "all"
	if !controller && !node {
		return fail("--mode %q: want controller, node or all", *mode)
	}
	clusters := &driver.Clusters{}
	if *clusterName != "" {
		if *monitors == "" || *secretFile == "" {
			return fail("--cluster-name needs --monitors and --secret-file")
		}
		secret, err := os.ReadFile(*secretFile)
		if err != nil {
			return fail("--secret-file: %v", err)
		}
		clusters.Default = driver.Cluster{Name: *clusterName, Monitors: *monitors,
			Secret: strings.TrimRight(string(secret), "\r\n"), Transport: *transport}
	}
	srv := &driver.Server{Log: log}
	if controller {
		if *volumeAPI == "" {
			return fail("the controller needs --volume-api")
		}
		conn, err := grpc.NewClient(*volumeAPI, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return fail("--volume-api: %v", err)
		}
		defer conn.Close()
		srv.Controller = &driver.Controller{API: pdpmv1.NewVolumesClient(conn), Clusters: clusters}
	}
	identity := &driver.Identity{Version: version, Controller: controller}
	switch {
	case node && *mounter != "":
		conn, err := grpc.NewClient(*mounter, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return fail("--mounter: %v", err)
		}
		defer conn.Close()
		srv.Node = driver.NewNodeForwarder(conn)
		identity.Ready = driver.ProbeThrough(conn)
	case node:
		if *nodeID == "" {
			host, err := os.Hostname()
			if err != nil {
				return fail("no --node-id and no host name: %v", err)
			}
			*nodeID = host
		}
		if err := os.MkdirAll(*stateDir, 0o700); err != nil {
			return fail("--state-dir: %v", err)
		}
		n := &driver.Node{NodeID: *nodeID, StateDir: *stateDir, FuseBinary: *fuseBinary,
			Clusters: clusters, Log: log, MountTimeout: *mountTimeout}
		if restored := n.Recover(); restored > 0 {
			log.Info("restored staged volumes whose mounts were gone or broken", "count", restored)
		}
		srv.Node = n
	}
	srv.Identity = identity
	l, err := driver.Listen(*endpoint)
	if err != nil {
		return fail("listen on %s: %v", *endpoint, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if node && *registrationSocket != "" {
		if *kubeletEndpoint == "" {
			_, *kubeletEndpoint, _ = driver.ParseEndpoint(*endpoint)
		}
		rl, err := driver.Listen("unix://" + *registrationSocket)
		if err != nil {
			return fail("--registration-socket: %v", err)
		}
		reg := (&driver.Registration{Endpoint: *kubeletEndpoint, Log: log}).Serve(rl)
		defer reg.Stop()
	}
	if *healthz != "" {
		hl, err := net.Listen("tcp", *healthz)
		if err != nil {
			return fail("--healthz: %v", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/healthz", driver.Healthz(*endpoint, log))
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(hl) }()
		defer hs.Close()
	}
	go func() {
		<-ctx.Done()
		srv.Stop()
	}()
	log.Info("serving", "endpoint", *endpoint, "mode", *mode, "version", version)
	if err := srv.Serve(l); err != nil {
		return fail("serve: %v", err)
	}
	log.Info("stopped")
	return 0
}
