package controller

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"pdpm.io/pdpm/operator/internal/pdpmv1"
)

// MonitorStatusFunc asks the monitor at address for the cluster status.
type MonitorStatusFunc func(ctx context.Context, address string) (*pdpmv1.ClusterStatus, error)

// MonitorDrainFunc asks the monitor at address to drain server id (the
// monitor's DrainServer: the server's data moves away and it becomes
// DRAINED once it holds nothing). Idempotent.
type MonitorDrainFunc func(ctx context.Context, address, secret string, id uint32) (*pdpmv1.DrainServerResponse, error)

// How a monitor that is not the leader refuses a call (codes.Unavailable;
// core/src/monitor/monitor_client.h): "not the leader; leader is
// HOST:PORT", or "...; no leader is elected yet".
const (
	notLeaderMessage = "not the leader"
	leaderIsMessage  = "; leader is "
)

// callLeader calls f on the monitor at address and, when that monitor is a
// standby naming the leader, once more on the leader. The address is
// usually a Service spread over every monitor. The caller's context bounds
// everything, connections included.
func callLeader(ctx context.Context, address string, f func(pdpmv1.MonitorClient) error) error {
	call := func(addr string) error {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return fmt.Errorf("monitor %s: %w", addr, err)
		}
		defer conn.Close()
		if err := f(pdpmv1.NewMonitorClient(conn)); err != nil {
			return fmt.Errorf("monitor %s: %w", addr, err)
		}
		return nil
	}
	err := call(address)
	if leader := namedLeader(err); leader != "" && leader != address {
		return call(leader)
	}
	return err
}

// namedLeader is the leader a standby's refusal names, or "".
func namedLeader(err error) string {
	s, ok := status.FromError(err) // finds a wrapped status too

	if !ok || s.Code() != codes.Unavailable || !strings.Contains(s.Message(), notLeaderMessage) {
		return ""
	}
	_, rest, found := strings.Cut(s.Message(), leaderIsMessage)
	if !found {
		return ""
	}
	if i := strings.IndexAny(rest, " ;,)"); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// GetClusterStatus calls Monitor.GetClusterStatus over gRPC, on the leader.
func GetClusterStatus(ctx context.Context, address string) (*pdpmv1.ClusterStatus, error) {
	var st *pdpmv1.ClusterStatus
	err := callLeader(ctx, address, func(m pdpmv1.MonitorClient) error {
		var err error
		st, err = m.GetClusterStatus(ctx, &pdpmv1.GetClusterStatusRequest{})
		return err
	})
	return st, err
}

// DrainServer calls Monitor.DrainServer over gRPC, on the leader.
func DrainServer(ctx context.Context, address, secret string, id uint32) (*pdpmv1.DrainServerResponse, error) {
	var resp *pdpmv1.DrainServerResponse
	err := callLeader(ctx, address, func(m pdpmv1.MonitorClient) error {
		var err error
		resp, err = m.DrainServer(ctx, &pdpmv1.DrainServerRequest{ClusterSecret: secret, ServerId: id})
		return err
	})
	return resp, err
}
