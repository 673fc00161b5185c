package driver

import (
	"context"
	"strconv"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"pdpm.io/pdpm/csi-driver/internal/pdpmv1"
)

// DefaultCapacity is a new volume's byte quota when the request gives no
// capacity range.
const DefaultCapacity = 1 << 30

// Controller is the CSI controller service: every operation is a call of
// the pDFS volume API.
type Controller struct {
	csi.UnimplementedControllerServer
	API      pdpmv1.VolumesClient
	Clusters *Clusters
}

var controllerCaps = []csi.ControllerServiceCapability_RPC_Type{
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
	csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
	csi.ControllerServiceCapability_RPC_GET_CAPACITY,
	csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
	csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
}

func (c *Controller) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	resp := &csi.ControllerGetCapabilitiesResponse{}
	for _, t := range controllerCaps {
		resp.Capabilities = append(resp.Capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return resp, nil
}

// checkCapabilities: InvalidArgument unless every capability is a mount
// of a pDFS file system (any access mode: a pDFS volume is shared by any
// number of nodes, read-write).
func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "volume capabilities are required")
	}
	for _, c := range caps {
		if c == nil || c.GetAccessMode() == nil || c.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_UNKNOWN {
			return status.Error(codes.InvalidArgument, "a volume capability has no access mode")
		}
		switch {
		case c.GetBlock() != nil:
			return status.Error(codes.InvalidArgument, "block access is not supported: pDFS volumes are file systems")
		case c.GetMount() == nil:
			return status.Error(codes.InvalidArgument, "a volume capability has no access type (want mount)")
		case c.GetMount().GetFsType() != "" && c.GetMount().GetFsType() != "pdfs":
			return status.Errorf(codes.InvalidArgument, "fs type %q is not supported: pDFS volumes are pdfs", c.GetMount().GetFsType())
		}
	}
	return nil
}

// byteQuota picks the quota a capacity range asks for: the required bytes,
// else the limit, else DefaultCapacity (capped by the limit).
func byteQuota(r *csi.CapacityRange) (uint64, error) {
	req, limit := r.GetRequiredBytes(), r.GetLimitBytes()
	if req < 0 || limit < 0 {
		return 0, status.Error(codes.InvalidArgument, "capacity range: negative bytes")
	}
	if limit != 0 && req > limit {
		return 0, status.Errorf(codes.OutOfRange, "capacity range: required %d bytes is above the limit %d", req, limit)
	}
	switch {
	case req != 0:
		return uint64(req), nil
	case limit != 0 && limit < DefaultCapacity:
		return uint64(limit), nil
	default:
		return DefaultCapacity, nil
	}
}

// numberParam reads an optional unsigned StorageClass parameter of `bits`
// bits (0 when absent); InvalidArgument says what was wanted.
func numberParam(params map[string]string, key string, bits int, what string) (uint64, error) {
	v, ok := params[key]
	if !ok {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, bits)
	if err != nil {
		return 0, status.Errorf(codes.InvalidArgument, "parameter %s=%q: want %s", key, v, what)
	}
	return n, nil
}

func (c *Controller) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	bytes, err := byteQuota(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	params := req.GetParameters()
	inodes, err := numberParam(params, ParamInodeQuota, 64, "a number of inodes")
	if err != nil {
		return nil, err
	}
	uid, err := numberParam(params, ParamUID, 32, "a user id")
	if err != nil {
		return nil, err
	}
	gid, err := numberParam(params, ParamGID, 32, "a group id")
	if err != nil {
		return nil, err
	}
	for k := range params {
		if k != ParamCluster && k != ParamInodeQuota && k != ParamTransport && k != ParamUID && k != ParamGID {
			return nil, status.Errorf(codes.InvalidArgument, "unknown parameter %q (want %s, %s, %s, %s, %s)",
				k, ParamCluster, ParamInodeQuota, ParamTransport, ParamUID, ParamGID)
		}
	}
	cluster, err := c.Clusters.Resolve(params[ParamCluster], req.GetSecrets())
	if err != nil {
		return nil, err
	}
	if t := params[ParamTransport]; t != "" {
		cluster.Transport = t
	}
	var source string
	if src := req.GetVolumeContentSource(); src != nil {
		if src.GetSnapshot() != nil {
			return nil, status.Error(codes.InvalidArgument, "snapshots are not supported: a volume content source must be a volume")
		}
		srcCluster, srcName, err := parseVolumeID(src.GetVolume().GetVolumeId())
		if err != nil {
			return nil, err
		}
		if srcCluster != cluster.Name {
			return nil, status.Errorf(codes.InvalidArgument, "clone source %q is in cluster %q, not %q", src.GetVolume().GetVolumeId(), srcCluster, cluster.Name)
		}
		source = srcName
	}
	resp, err := c.API.CreateVolume(ctx, &pdpmv1.CreateVolumeRequest{
		Cluster: cluster.ref(), Name: req.GetName(), ByteLimit: bytes, InodeLimit: inodes,
		Uid: uint32(uid), Gid: uint32(gid), SourceVolume: source})
	if err != nil {
		return nil, apiError("create volume "+req.GetName(), err)
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:      volumeID(cluster.Name, req.GetName()),
		CapacityBytes: int64(resp.GetVolume().GetByteLimit()),
		VolumeContext: map[string]string{
			contextCluster: cluster.Name, contextMonitors: cluster.Monitors, contextTransport: cluster.Transport},
		ContentSource: req.GetVolumeContentSource(),
	}}, nil
}

func (c *Controller) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	clusterName, name, err := parseVolumeID(req.GetVolumeId())
	if status.Code(err) == codes.NotFound {
		return &csi.DeleteVolumeResponse{}, nil // no such volume: already deleted
	}
	if err != nil {
		return nil, err
	}
	cluster, err := c.Clusters.Resolve(clusterName, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	if _, err := c.API.DeleteVolume(ctx, &pdpmv1.DeleteVolumeRequest{Cluster: cluster.ref(), Name: name}); err != nil {
		return nil, apiError("delete volume "+req.GetVolumeId(), err)
	}
	return &csi.DeleteVolumeResponse{}, nil
}

// volume looks a volume up by its id.
func (c *Controller) volume(ctx context.Context, id string, secrets map[string]string) (Cluster, *pdpmv1.Volume, error) {
	clusterName, name, err := parseVolumeID(id)
	if err != nil {
		return Cluster{}, nil, err
	}
	cluster, err := c.Clusters.Resolve(clusterName, secrets)
	if err != nil {
		return Cluster{}, nil, err
	}
	resp, err := c.API.GetVolume(ctx, &pdpmv1.GetVolumeRequest{Cluster: cluster.ref(), Name: name})
	if err != nil {
		return Cluster{}, nil, apiError("volume "+id, err)
	}
	return cluster, resp.GetVolume(), nil
}

func (c *Controller) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume capabilities are required")
	}
	if _, _, err := c.volume(ctx, req.GetVolumeId(), req.GetSecrets()); err != nil {
		return nil, err
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: status.Convert(err).Message()}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

func (c *Controller) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	}
	if req.GetCapacityRange() == nil {
		return nil, status.Error(codes.InvalidArgument, "capacity range is required")
	}
	if req.GetVolumeCapability() != nil {
		if err := checkCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()}); err != nil {
			return nil, err
		}
	}
	bytes, err := byteQuota(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	cluster, v, err := c.volume(ctx, req.GetVolumeId(), req.GetSecrets())
	if err != nil {
		return nil, err
	}
	// The quota never shrinks here: an expansion to less than the volume
	// already has is done.
	if bytes > v.GetByteLimit() {
		resp, err := c.API.ResizeVolume(ctx, &pdpmv1.ResizeVolumeRequest{
			Cluster: cluster.ref(), Name: v.GetName(), ByteLimit: bytes, InodeLimit: v.GetInodeLimit()})
		if err != nil {
			return nil, apiError("expand volume "+req.GetVolumeId(), err)
		}
		v = resp.GetVolume()
	}
	// The mounts read the quota at every statfs: nothing to do on the nodes.
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: int64(v.GetByteLimit()), NodeExpansionRequired: false}, nil
}

func (c *Controller) GetCapacity(ctx context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	for _, cap := range req.GetVolumeCapabilities() {
		if checkCapabilities([]*csi.VolumeCapability{cap}) != nil {
			return &csi.GetCapacityResponse{}, nil // none for what cannot be made
		}
	}
	cluster, err := c.Clusters.Resolve(req.GetParameters()[ParamCluster], nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.API.GetCapacity(ctx, &pdpmv1.GetCapacityRequest{Cluster: cluster.ref()})
	if err != nil {
		return nil, apiError("capacity of cluster "+cluster.Name, err)
	}
	return &csi.GetCapacityResponse{AvailableCapacity: int64(resp.GetAvailableBytes())}, nil
}

func (c *Controller) ListVolumes(ctx context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, status.Error(codes.InvalidArgument, "max_entries must not be negative")
	}
	cluster, err := c.Clusters.Resolve("", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.API.ListVolumes(ctx, &pdpmv1.ListVolumesRequest{
		Cluster: cluster.ref(), MaxEntries: uint32(req.GetMaxEntries()), PageToken: req.GetStartingToken()})
	if status.Code(err) == codes.InvalidArgument && req.GetStartingToken() != "" {
		// The CSI spec's code for a token the plugin did not make.
		return nil, status.Errorf(codes.Aborted, "starting token %q: %s", req.GetStartingToken(), status.Convert(err).Message())
	}
	if err != nil {
		return nil, apiError("list volumes", err)
	}
	out := &csi.ListVolumesResponse{NextToken: resp.GetNextPageToken()}
	for _, v := range resp.GetVolumes() {
		out.Entries = append(out.Entries, &csi.ListVolumesResponse_Entry{Volume: &csi.Volume{
			VolumeId:      volumeID(cluster.Name, v.GetName()),
			CapacityBytes: int64(v.GetByteLimit()),
		}})
	}
	return out, nil
}
