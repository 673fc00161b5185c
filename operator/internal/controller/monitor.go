package controller

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"pdpm.io/pdpm/operator/internal/pdpmv1"
)

// MonitorStatusFunc asks the monitor at address for the cluster status.
type MonitorStatusFunc func(ctx context.Context, address string) (*pdpmv1.ClusterStatus, error)

// GetClusterStatus calls Monitor.GetClusterStatus over gRPC. The caller's
// context bounds the whole call, connection included.
func GetClusterStatus(ctx context.Context, address string) (*pdpmv1.ClusterStatus, error) {
	conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("monitor %s: %w", address, err)
	}
	defer conn.Close()
	st, err := pdpmv1.NewMonitorClient(conn).GetClusterStatus(ctx, &pdpmv1.GetClusterStatusRequest{})
	if err != nil {
		return nil, fmt.Errorf("monitor %s: %w", address, err)
	}
	return st, nil
}
