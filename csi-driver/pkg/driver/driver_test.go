package driver

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The argument checks of every service, before any call of the volume API
// or any mount: the services are built without a volume API client, so a
// check that let a bad request through would crash the test.

var local = &Clusters{Default: Cluster{Name: "local", Monitors: "127.0.0.1:1", Secret: "s"}}

func mountCap(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

var rwx = mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)

func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Errorf("%s: code %v (%v), want %v", what, got, err, want)
	}
}

func TestCreateVolumeArguments(t *testing.T) {
	c := &Controller{Clusters: local}
	block := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: rwx.AccessMode,
	}
	xfs := mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	xfs.GetMount().FsType = "xfs"
	cases := []struct {
		what string
		req  *csi.CreateVolumeRequest
		want codes.Code
	}{
		{"no name", &csi.CreateVolumeRequest{VolumeCapabilities: []*csi.VolumeCapability{rwx}}, codes.InvalidArgument},
		{"no capabilities", &csi.CreateVolumeRequest{Name: "v"}, codes.InvalidArgument},
		{"block", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{block}}, codes.InvalidArgument},
		{"fs type", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{xfs}}, codes.InvalidArgument},
		{"no access mode", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: rwx.AccessType}}}, codes.InvalidArgument},
		{"required above limit", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rwx},
			CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20, LimitBytes: 1 << 20}}, codes.OutOfRange},
		{"negative", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rwx},
			CapacityRange: &csi.CapacityRange{RequiredBytes: -1}}, codes.InvalidArgument},
		{"inode quota", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rwx},
			Parameters: map[string]string{ParamInodeQuota: "many"}}, codes.InvalidArgument},
		{"uid beyond 32 bits", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rwx},
			Parameters: map[string]string{ParamUID: "4294967296"}}, codes.InvalidArgument},
		{"unknown parameter", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rwx},
			Parameters: map[string]string{"replicas": "3"}}, codes.InvalidArgument},
		{"cluster without credentials", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rwx},
			Parameters: map[string]string{ParamCluster: "other"}}, codes.InvalidArgument},
		{"bad cluster name", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rwx},
			Parameters: map[string]string{ParamCluster: "Not/A/Name"}}, codes.InvalidArgument},
		{"half the secret", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rwx},
			Secrets: map[string]string{SecretMonitors: "m:1"}}, codes.InvalidArgument},
		{"snapshot source", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rwx},
			VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
				Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: "s"}}}}, codes.InvalidArgument},
		{"clone from another cluster", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rwx},
			VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
				Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: "other/src"}}}}, codes.InvalidArgument},
		{"clone of no volume of ours", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rwx},
			VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
				Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: "no-slash"}}}}, codes.NotFound},
	}
	for _, tc := range cases {
		_, err := c.CreateVolume(context.Background(), tc.req)
		wantCode(t, tc.what, err, tc.want)
	}
}

func TestOtherControllerArguments(t *testing.T) {
	c := &Controller{Clusters: local}
	ctx := context.Background()
	_, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{})
	wantCode(t, "delete without id", err, codes.InvalidArgument)
	_, err = c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "not-ours"})
	wantCode(t, "delete of an id of no volume (already gone)", err, codes.OK)
	_, err = c.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{CapacityRange: &csi.CapacityRange{RequiredBytes: 1}})
	wantCode(t, "expand without id", err, codes.InvalidArgument)
	_, err = c.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: "local/v"})
	wantCode(t, "expand without capacity", err, codes.InvalidArgument)
	_, err = c.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: "local/v",
		CapacityRange: &csi.CapacityRange{RequiredBytes: 5, LimitBytes: 4}})
	wantCode(t, "expand required above limit", err, codes.OutOfRange)
	_, err = c.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: "bad",
		CapacityRange: &csi.CapacityRange{RequiredBytes: 5}})
	wantCode(t, "expand of no volume of ours", err, codes.NotFound)
	_, err = c.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeCapabilities: []*csi.VolumeCapability{rwx}})
	wantCode(t, "validate without id", err, codes.InvalidArgument)
	_, err = c.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "local/v"})
	wantCode(t, "validate without capabilities", err, codes.InvalidArgument)
	_, err = c.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "x",
		VolumeCapabilities: []*csi.VolumeCapability{rwx}})
	wantCode(t, "validate of no volume of ours", err, codes.NotFound)
	_, err = c.ListVolumes(ctx, &csi.ListVolumesRequest{MaxEntries: -1})
	wantCode(t, "list with negative max", err, codes.InvalidArgument)
	_, err = (&Controller{Clusters: &Clusters{}}).ListVolumes(ctx, &csi.ListVolumesRequest{})
	wantCode(t, "list without a configured cluster", err, codes.InvalidArgument)
	_, err = (&Controller{Clusters: &Clusters{}}).GetCapacity(ctx, &csi.GetCapacityRequest{})
	wantCode(t, "capacity without a cluster", err, codes.InvalidArgument)

	caps, err := c.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[csi.ControllerServiceCapability_RPC_Type]bool{}
	for _, cap := range caps.GetCapabilities() {
		got[cap.GetRpc().GetType()] = true
	}
	for _, want := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY, csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
		csi.ControllerServiceCapability_RPC_CLONE_VOLUME} {
		if !got[want] {
			t.Errorf("controller capability %v not claimed", want)
		}
	}
	if got[csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME] {
		t.Error("PUBLISH_UNPUBLISH claimed: pDFS volumes need no attach (attachRequired false)")
	}
}

func TestByteQuota(t *testing.T) {
	for _, tc := range []struct {
		r    *csi.CapacityRange
		want uint64
	}{
		{nil, DefaultCapacity},
		{&csi.CapacityRange{RequiredBytes: 5 << 20}, 5 << 20},
		{&csi.CapacityRange{LimitBytes: 3 << 20}, 3 << 20},
		{&csi.CapacityRange{LimitBytes: 8 << 30}, DefaultCapacity},
		{&csi.CapacityRange{RequiredBytes: 4, LimitBytes: 4}, 4},
	} {
		got, err := byteQuota(tc.r)
		if err != nil || got != tc.want {
			t.Errorf("byteQuota(%v) = %d, %v; want %d", tc.r, got, err, tc.want)
		}
	}
}

func TestNodeArguments(t *testing.T) {
	checkNodeArguments(t, &Node{NodeID: "n1", StateDir: t.TempDir(), Clusters: local})
}

// checkNodeArguments: every node call's argument checks, through n.
func checkNodeArguments(t *testing.T, n csi.NodeServer) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	_, err := n.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{StagingTargetPath: dir, VolumeCapability: rwx})
	wantCode(t, "stage without id", err, codes.InvalidArgument)
	_, err = n.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "local/v", VolumeCapability: rwx})
	wantCode(t, "stage without path", err, codes.InvalidArgument)
	_, err = n.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "local/v", StagingTargetPath: dir})
	wantCode(t, "stage without capability", err, codes.InvalidArgument)
	_, err = n.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "nope", StagingTargetPath: dir, VolumeCapability: rwx})
	wantCode(t, "stage of no volume of ours", err, codes.NotFound)
	_, err = n.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "other/v", StagingTargetPath: dir, VolumeCapability: rwx})
	wantCode(t, "stage in a cluster without credentials", err, codes.InvalidArgument)

	_, err = n.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{StagingTargetPath: dir})
	wantCode(t, "unstage without id", err, codes.InvalidArgument)
	_, err = n.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "local/v"})
	wantCode(t, "unstage without path", err, codes.InvalidArgument)
	_, err = n.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "local/v", StagingTargetPath: filepath.Join(dir, "never")})
	wantCode(t, "unstage of what was never staged", err, codes.OK)

	target := filepath.Join(dir, "target")
	_, err = n.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{TargetPath: target, StagingTargetPath: dir, VolumeCapability: rwx})
	wantCode(t, "publish without id", err, codes.InvalidArgument)
	_, err = n.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "local/v", StagingTargetPath: dir, VolumeCapability: rwx})
	wantCode(t, "publish without target", err, codes.InvalidArgument)
	_, err = n.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "local/v", TargetPath: target, VolumeCapability: rwx})
	wantCode(t, "publish without staging path", err, codes.InvalidArgument)
	_, err = n.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "local/v", TargetPath: target, StagingTargetPath: dir})
	wantCode(t, "publish without capability", err, codes.InvalidArgument)
	_, err = n.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "local/v", TargetPath: target,
		StagingTargetPath: dir, VolumeCapability: rwx})
	wantCode(t, "publish of a volume not staged (no record)", err, codes.FailedPrecondition)

	_, err = n.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{TargetPath: target})
	wantCode(t, "unpublish without id", err, codes.InvalidArgument)
	_, err = n.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "local/v"})
	wantCode(t, "unpublish without target", err, codes.InvalidArgument)
	_, err = n.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "local/v", TargetPath: target})
	wantCode(t, "unpublish of what was never published", err, codes.OK)

	_, err = n.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumePath: dir})
	wantCode(t, "stats without id", err, codes.InvalidArgument)
	_, err = n.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "local/v"})
	wantCode(t, "stats without path", err, codes.InvalidArgument)
	_, err = n.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "local/v", VolumePath: filepath.Join(dir, "none")})
	wantCode(t, "stats of a missing path", err, codes.NotFound)
	_, err = n.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumePath: dir})
	wantCode(t, "expand without id", err, codes.InvalidArgument)
	_, err = n.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: "local/v", VolumePath: filepath.Join(dir, "none")})
	wantCode(t, "expand of a missing path", err, codes.NotFound)

	info, err := n.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil || info.GetNodeId() != "n1" || info.GetAccessibleTopology().GetSegments()[TopologyKey] != "n1" {
		t.Errorf("NodeGetInfo = %v, %v", info, err)
	}
}

func TestStagingRecordIsVersioned(t *testing.T) {
	n := &Node{StateDir: t.TempDir()}
	if r, err := n.loadRecord("local/v"); r != nil || err != nil {
		t.Fatalf("no record: got %v, %v", r, err)
	}
	base := n.recordPath("local/v")
	if err := os.MkdirAll(filepath.Dir(base), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{`{"version":2,"volumeId":"local/v"}`, `{"version":1,"volumeId":"local/w"}`, `{`} {
		if err := os.WriteFile(base+".json", []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := n.loadRecord("local/v")
		wantCode(t, "record "+bad, err, codes.Internal)
	}
}

func TestVolumeIDsAndMountPaths(t *testing.T) {
	c, v, err := parseVolumeID(volumeID("pdpm-a", "pvc-1"))
	if err != nil || c != "pdpm-a" || v != "pvc-1" {
		t.Errorf("round trip: %q %q %v", c, v, err)
	}
	for _, bad := range []string{"x", "/v", "a/", "a/b/c", "UP/v"} {
		_, _, err := parseVolumeID(bad)
		wantCode(t, "id "+bad, err, codes.NotFound)
	}
	if got := unescapeMountPath(`/a\040b\134c`); got != `/a b\c` {
		t.Errorf("unescape: %q", got)
	}
}

func TestIdentity(t *testing.T) {
	i := &Identity{Version: "v", Controller: true}
	info, err := i.GetPluginInfo(context.Background(), &csi.GetPluginInfoRequest{})
	if err != nil || info.GetName() != Name || info.GetVendorVersion() != "v" {
		t.Errorf("GetPluginInfo = %v, %v", info, err)
	}
	caps, err := i.GetPluginCapabilities(context.Background(), &csi.GetPluginCapabilitiesRequest{})
	if err != nil || len(caps.GetCapabilities()) != 2 {
		t.Errorf("GetPluginCapabilities = %v, %v", caps, err)
	}
}
