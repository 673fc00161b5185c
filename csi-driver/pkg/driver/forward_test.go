package driver

import (
	"context"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// serveMounter serves a node service as the mount DaemonSet's pdpm-csi
// does, on a unix socket; returns a connection to it and its stop.
func serveMounter(t *testing.T) (*grpc.ClientConn, func()) {
	t.Helper()
	endpoint := "unix://" + filepath.Join(t.TempDir(), "mounter.sock")
	srv := &Server{Identity: &Identity{}, Node: &Node{NodeID: "n1", StateDir: t.TempDir(), Clusters: local}, Log: quiet}
	l, err := Listen(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = srv.Serve(l); close(done) }()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, func() { srv.Stop(); <-done }
}

// A forwarding plugin answers every node call as the mounter does: the
// same results and the same status codes.
func TestNodeForwarderForwardsEveryCall(t *testing.T) {
	conn, stop := serveMounter(t)
	defer stop()
	checkNodeArguments(t, NewNodeForwarder(conn))
	caps, err := NewNodeForwarder(conn).NodeGetCapabilities(context.Background(), nil)
	if err != nil || len(caps.GetCapabilities()) != len(nodeCaps) {
		t.Errorf("NodeGetCapabilities through the forwarder = %v, %v", caps, err)
	}
}

// A forwarding plugin is ready while its mounter answers, and not once the
// mounter is gone.
func TestProbeThroughFollowsTheMounter(t *testing.T) {
	conn, stop := serveMounter(t)
	identity := &Identity{Ready: ProbeThrough(conn)}
	ctx := context.Background()
	if resp, err := identity.Probe(ctx, nil); err != nil || !resp.GetReady().GetValue() {
		t.Errorf("mounter serving: Probe = %v, %v", resp, err)
	}
	stop()
	if resp, err := identity.Probe(ctx, nil); err != nil || resp.GetReady().GetValue() {
		t.Errorf("mounter stopped: Probe = %v, %v", resp, err)
	}
}
