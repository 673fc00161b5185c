package driver

import (
	"context"
	"errors"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
)

// The node plugin kubelet talks to need not be the process that mounts
// (docs/csi.md "Mounts and the node plugin's lifetime"): in Kubernetes the
// mounts are made and served by the mount DaemonSet's pdpm-csi, whose pod
// nothing restarts, and the registered plugin forwards every node call to
// it over a unix socket in the state directory. Deleting or upgrading the
// plugin's pod then stops no pdfs-fuse.

// NodeForwarder is a node service that forwards every call to the node
// service at the other end of conn, unchanged (its status codes too).
type NodeForwarder struct {
	csi.UnimplementedNodeServer
	Mounter csi.NodeClient
}

// NewNodeForwarder forwards to the node service conn reaches.
func NewNodeForwarder(conn grpc.ClientConnInterface) *NodeForwarder {
	return &NodeForwarder{Mounter: csi.NewNodeClient(conn)}
}

func (f *NodeForwarder) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	return f.Mounter.NodeStageVolume(ctx, req)
}

func (f *NodeForwarder) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	return f.Mounter.NodeUnstageVolume(ctx, req)
}

func (f *NodeForwarder) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	return f.Mounter.NodePublishVolume(ctx, req)
}

func (f *NodeForwarder) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	return f.Mounter.NodeUnpublishVolume(ctx, req)
}

func (f *NodeForwarder) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	return f.Mounter.NodeGetVolumeStats(ctx, req)
}

func (f *NodeForwarder) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	return f.Mounter.NodeExpandVolume(ctx, req)
}

func (f *NodeForwarder) NodeGetCapabilities(ctx context.Context, req *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return f.Mounter.NodeGetCapabilities(ctx, req)
}

func (f *NodeForwarder) NodeGetInfo(ctx context.Context, req *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return f.Mounter.NodeGetInfo(ctx, req)
}

// ProbeThrough is an Identity.Ready check: ready when the identity
// service conn reaches answers Probe ready (a forwarding plugin is ready
// only while its mounter is).
func ProbeThrough(conn grpc.ClientConnInterface) func(context.Context) error {
	identity := csi.NewIdentityClient(conn)
	return func(ctx context.Context) error {
		resp, err := identity.Probe(ctx, &csi.ProbeRequest{})
		if err != nil {
			return err
		}
		// No ready field means ready (the CSI spec).
		if r := resp.GetReady(); r != nil && !r.GetValue() {
			return errors.New("the mounter is not ready")
		}
		return nil
	}
}
