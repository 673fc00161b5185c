package driver

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TopologyKey is the topology segment NodeGetInfo reports: the node.
const TopologyKey = Name + "/node"

// Node is the CSI node service. NodeStageVolume runs one pdfs-fuse per
// volume per node, in its own session (not a child the plugin's exit
// takes along); NodePublishVolume bind-mounts the staged mount into the
// pod. What was staged is recorded in StateDir (stage/<id digest>.json and
// its secret), so a restarted plugin, or kubelet after a reboot calling
// NodePublishVolume without NodeStageVolume, finds it (docs/csi.md).
type Node struct {
	csi.UnimplementedNodeServer
	NodeID     string
	StateDir   string
	FuseBinary string // pdfs-fuse
	Clusters   *Clusters
	Log        *slog.Logger
	// How long NodeStageVolume waits for pdfs-fuse to mount.
	MountTimeout time.Duration

	held connections // the staged volumes' FUSE connections (held.go)
}

// stageRecord is what NodeStageVolume leaves on disk (version 1).
type stageRecord struct {
	Version     int    `json:"version"`
	VolumeID    string `json:"volumeId"`
	StagingPath string `json:"stagingPath"`
	Monitors    string `json:"monitors"`
	Transport   string `json:"transport"`
	PID         int    `json:"pid"`
}

var nodeCaps = []csi.NodeServiceCapability_RPC_Type{
	csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
	csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
	csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
	csi.NodeServiceCapability_RPC_VOLUME_CONDITION,
}

func (n *Node) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	resp := &csi.NodeGetCapabilitiesResponse{}
	for _, t := range nodeCaps {
		resp.Capabilities = append(resp.Capabilities, &csi.NodeServiceCapability{
			Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}})
	}
	return resp, nil
}

func (n *Node) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{
		NodeId:             n.NodeID,
		AccessibleTopology: &csi.Topology{Segments: map[string]string{TopologyKey: n.NodeID}},
	}, nil
}

func (n *Node) recordPath(volumeID string) string {
	sum := sha256.Sum256([]byte(volumeID))
	return filepath.Join(n.StateDir, "stage", hex.EncodeToString(sum[:16]))
}

func (n *Node) loadRecord(volumeID string) (*stageRecord, error) {
	data, err := os.ReadFile(n.recordPath(volumeID) + ".json")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "read the staging record: %v", err)
	}
	var r stageRecord
	if err := json.Unmarshal(data, &r); err != nil || r.Version != 1 || r.VolumeID != volumeID {
		return nil, status.Errorf(codes.Internal, "staging record of %s is damaged or of another version", volumeID)
	}
	return &r, nil
}

// writeFileDurably replaces `path` with `data`: temp file, fsync, rename.
func writeFileDurably(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	return err
}

// isMounted: whether something is mounted on `path` (per mountinfo).
func isMounted(path string) (bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	mounted := false
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && unescapeMountPath(fields[4]) == path {
			mounted = true
		}
	}
	return mounted, sc.Err()
}

// mountState tells what is mounted on `path`: mounted (per mountinfo),
// and whether it answers (a FUSE mount whose process died answers
// ENOTCONN, a broken one EIO).
func mountState(path string) (mounted bool, healthy bool, err error) {
	if mounted, err = isMounted(path); err != nil || !mounted {
		return false, false, err
	}
	var st unix.Statfs_t
	err = unix.Statfs(path, &st)
	return true, err == nil, nil
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// detach lazily unmounts `path` (a broken FUSE mount or a bind mount).
func detach(path string) error {
	err := unix.Unmount(path, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}

// checkMountArgs: the arguments NodeStageVolume and NodePublishVolume
// both need (InvalidArgument when one is missing); paths are given as
// name, value pairs.
func checkMountArgs(volumeID string, capability *csi.VolumeCapability, paths ...string) error {
	if volumeID == "" {
		return status.Error(codes.InvalidArgument, "volume id is required")
	}
	for i := 0; i+1 < len(paths); i += 2 {
		if paths[i+1] == "" {
			return status.Errorf(codes.InvalidArgument, "%s is required", paths[i])
		}
	}
	if capability == nil {
		return status.Error(codes.InvalidArgument, "volume capability is required")
	}
	return checkCapabilities([]*csi.VolumeCapability{capability})
}

func (n *Node) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	if err := checkMountArgs(req.GetVolumeId(), req.GetVolumeCapability(),
		"staging target path", req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	clusterName, _, err := parseVolumeID(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	cluster, err := n.Clusters.Resolve(clusterName, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	if m := req.GetVolumeContext()[contextMonitors]; m != "" && req.GetSecrets()[SecretMonitors] == "" {
		cluster.Monitors = m
	}
	cluster.Transport = req.GetVolumeContext()[contextTransport]
	return &csi.NodeStageVolumeResponse{}, n.stage(req.GetVolumeId(), req.GetStagingTargetPath(), cluster)
}

// stage mounts the volume on `path` unless a healthy mount is there or
// the plugin holds its connection (a pdfs-fuse being restarted on it); a
// broken one (its connection gone) is detached and mounted again in place.
func (n *Node) stage(volumeID, path string, cluster Cluster) error {
	if h := n.held.get(volumeID); h != nil {
		if mounted, err := isMounted(path); err == nil && mounted {
			return nil
		}
		if err := n.release(volumeID, path); err != nil {
			return status.Errorf(codes.Internal, "release the connection of %s: %v", volumeID, err)
		}
	}
	mounted, healthy, err := mountState(path)
	if err != nil {
		return status.Errorf(codes.Internal, "read the mounts: %v", err)
	}
	if mounted && healthy {
		return nil
	}
	if mounted {
		n.Log.Warn("staged mount is broken: mounting again", "volume", volumeID, "path", path)
		if err := detach(path); err != nil {
			return status.Errorf(codes.Internal, "detach the broken mount on %s: %v", path, err)
		}
	}
	if err := os.MkdirAll(path, 0o750); err != nil {
		return status.Errorf(codes.Internal, "create %s: %v", path, err)
	}
	base := n.recordPath(volumeID)
	if err := os.MkdirAll(filepath.Dir(base), 0o700); err != nil {
		return status.Errorf(codes.Internal, "create the state directory: %v", err)
	}
	if err := writeFileDurably(base+".secret", []byte(cluster.Secret+"\n"), 0o600); err != nil {
		return status.Errorf(codes.Internal, "write the secret file: %v", err)
	}
	// A new connection: an INIT recorded for an earlier one must not be
	// replayed on it.
	if err := os.Remove(base + ".init"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return status.Errorf(codes.Internal, "remove the old init record: %v", err)
	}
	record := stageRecord{Version: 1, VolumeID: volumeID, StagingPath: path, Monitors: cluster.Monitors,
		Transport: cluster.Transport}
	dev, err := mountHeld(path)
	if err != nil {
		return status.Errorf(codes.Internal, "mount the FUSE connection: %v", err)
	}
	h := &heldConnection{dev: dev, base: base, gone: make(chan struct{}), args: n.fuseArgs(&record)}
	abort := func() {
		_ = detach(path)
		dev.Close()
	}
	cmd, err := n.startFuse(h)
	if err != nil {
		abort()
		return status.Errorf(codes.Internal, "%v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	record.PID = cmd.Process.Pid
	if err := n.writeRecord(&record); err != nil {
		_ = cmd.Process.Kill()
		abort()
		return status.Errorf(codes.Internal, "write the staging record: %v", err)
	}
	// pdfs-fuse records the kernel's INIT once it has opened the volume and
	// serves; until then a statfs of the mount would wait for it.
	deadline := time.Now().Add(n.MountTimeout)
	for {
		select {
		case err := <-exited:
			abort()
			tail := logTail(base + ".log")
			_ = os.Remove(base + ".json")
			if strings.Contains(tail, "no such volume") {
				return status.Errorf(codes.NotFound, "volume %s: %s", volumeID, tail)
			}
			return status.Errorf(codes.Internal, "pdfs-fuse for %s exited (%v): %s", volumeID, err, tail)
		case <-time.After(20 * time.Millisecond):
		}
		if _, err := os.Stat(base + ".init"); err == nil {
			if _, healthy, _ := mountState(path); healthy {
				break
			}
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			abort()
			return status.Errorf(codes.DeadlineExceeded, "pdfs-fuse did not mount %s within %s: %s", volumeID, n.MountTimeout, logTail(base+".log"))
		}
	}
	h.pid = cmd.Process.Pid
	n.held.put(volumeID, h)
	go n.supervise(volumeID, h, func() error { return <-exited })
	n.Log.Info("staged", "volume", volumeID, "path", path, "pid", cmd.Process.Pid)
	return nil
}

// writeRecord writes a staging record durably.
func (n *Node) writeRecord(r *stageRecord) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return writeFileDurably(n.recordPath(r.VolumeID)+".json", data, 0o600)
}

// fuseArgs are the pdfs-fuse arguments of a staged volume (without the
// descriptor flags), from its record.
func (n *Node) fuseArgs(r *stageRecord) []string {
	_, name, _ := parseVolumeID(r.VolumeID)
	transport := r.Transport
	if transport == "" {
		transport = "tcp"
	}
	return []string{"--monitor", r.Monitors, "--secret-file", n.recordPath(r.VolumeID) + ".secret",
		"--transport", transport, "--mountpoint", r.StagingPath, "--volume", name}
}

// restage mounts a staged volume again from its record and secret.
func (n *Node) restage(r *stageRecord) error {
	clusterName, _, err := parseVolumeID(r.VolumeID)
	if err != nil {
		return err
	}
	secret, err := os.ReadFile(n.recordPath(r.VolumeID) + ".secret")
	if err != nil {
		return status.Errorf(codes.Internal, "read the staged volume's secret: %v", err)
	}
	return n.stage(r.VolumeID, r.StagingPath, Cluster{Name: clusterName, Monitors: r.Monitors,
		Transport: r.Transport, Secret: strings.TrimSpace(string(secret))})
}

// Recover runs at start: every staged volume whose mount is missing or
// broken (its pdfs-fuse died with the node or on its own) is mounted again
// in place from its record. Returns how many were restored; a volume that
// cannot be restored is logged and left for kubelet's next call.
func (n *Node) Recover() int {
	records, _ := filepath.Glob(filepath.Join(n.StateDir, "stage", "*.json"))
	restored := 0
	for _, path := range records {
		data, err := os.ReadFile(path)
		var r stageRecord
		if err == nil {
			err = json.Unmarshal(data, &r)
		}
		if err != nil || r.Version != 1 {
			n.Log.Warn("skipping an unreadable staging record", "path", path, "error", err)
			continue
		}
		if r.PID > 0 && isFuseProcess(r.PID, n.FuseBinary) {
			// Its pdfs-fuse still serves: hold its connection again.
			if mounted, _ := isMounted(r.StagingPath); mounted && n.adopt(&r, n.fuseArgs(&r)) {
				continue
			}
		}
		if mounted, healthy, _ := mountState(r.StagingPath); mounted && healthy {
			continue
		}
		if err := n.restage(&r); err != nil {
			n.Log.Warn("cannot restore a staged volume", "volume", r.VolumeID, "error", err)
			continue
		}
		restored++
	}
	return restored
}

// logTail is the last line of a log, for error messages.
func logTail(path string) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return lines[len(lines)-1]
}

func (n *Node) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	}
	path := req.GetStagingTargetPath()
	if path == "" {
		return nil, status.Error(codes.InvalidArgument, "staging target path is required")
	}
	record, err := n.loadRecord(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	// The unmount ends pdfs-fuse's session; one the plugin does not hold
	// (started before a plugin that could not take it back) is signalled.
	if err := n.release(req.GetVolumeId(), path); err != nil {
		return nil, status.Errorf(codes.Internal, "%v", err)
	}
	if record != nil && record.PID > 0 && isFuseProcess(record.PID, n.FuseBinary) {
		_ = unix.Kill(record.PID, unix.SIGTERM)
	}
	base := n.recordPath(req.GetVolumeId())
	for _, suffix := range []string{".json", ".secret", ".log", ".init"} {
		if err := os.Remove(base + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, status.Errorf(codes.Internal, "remove the staging record: %v", err)
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) {
		n.Log.Warn("cannot remove the staging directory", "path", path, "error", err)
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// isFuseProcess: whether `pid` still runs `binary` (a pid the kernel gave
// to another program since is left alone).
func isFuseProcess(pid int, binary string) bool {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return false
	}
	want, err := filepath.EvalSymlinks(binary)
	return err == nil && exe == want
}

func (n *Node) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	target, staging := req.GetTargetPath(), req.GetStagingTargetPath()
	if err := checkMountArgs(req.GetVolumeId(), req.GetVolumeCapability(),
		"target path", target, "staging target path", staging); err != nil {
		return nil, err
	}
	if _, _, err := parseVolumeID(req.GetVolumeId()); err != nil {
		return nil, err
	}
	if mounted, healthy, _ := mountState(staging); !mounted || !healthy {
		// After a reboot kubelet publishes without staging again: stage from
		// the record left on disk.
		record, err := n.loadRecord(req.GetVolumeId())
		if err != nil {
			return nil, err
		}
		if record == nil || record.StagingPath != staging {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not staged on %s", req.GetVolumeId(), staging)
		}
		if err := n.restage(record); err != nil {
			return nil, err
		}
	}
	if mounted, healthy, _ := mountState(target); mounted && healthy {
		return &csi.NodePublishVolumeResponse{}, nil
	} else if mounted {
		if err := detach(target); err != nil {
			return nil, status.Errorf(codes.Internal, "detach the broken bind mount on %s: %v", target, err)
		}
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "create %s: %v", target, err)
	}
	if err := unix.Mount(staging, target, "", unix.MS_BIND, ""); err != nil {
		return nil, status.Errorf(codes.Internal, "bind %s on %s: %v", staging, target, err)
	}
	if req.GetReadonly() || req.GetVolumeCapability().GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY ||
		req.GetVolumeCapability().GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY {
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			_ = detach(target)
			return nil, status.Errorf(codes.Internal, "make %s read-only: %v", target, err)
		}
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (n *Node) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	}
	target := req.GetTargetPath()
	if target == "" {
		return nil, status.Error(codes.InvalidArgument, "target path is required")
	}
	if mounted, _, _ := mountState(target); mounted {
		if err := unix.Unmount(target, 0); err != nil {
			if err := detach(target); err != nil {
				return nil, status.Errorf(codes.Internal, "unmount %s: %v", target, err)
			}
		}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "remove %s: %v", target, err)
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// volumePathCheck: the common arguments of the calls about a mounted volume.
func volumePathCheck(id, path string) error {
	if id == "" {
		return status.Error(codes.InvalidArgument, "volume id is required")
	}
	if path == "" {
		return status.Error(codes.InvalidArgument, "volume path is required")
	}
	if _, _, err := parseVolumeID(id); err != nil {
		return err
	}
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		return status.Errorf(codes.NotFound, "volume path %s does not exist", path)
	}
	return nil
}

func (n *Node) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	if err := volumePathCheck(req.GetVolumeId(), req.GetVolumePath()); err != nil {
		return nil, err
	}
	if h := n.held.get(req.GetVolumeId()); h != nil && !h.running() {
		// The requests wait for the pdfs-fuse being started: a statfs would too.
		return &csi.NodeGetVolumeStatsResponse{VolumeCondition: &csi.VolumeCondition{
			Abnormal: true, Message: "pdfs-fuse is being restarted on the held connection"}}, nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(req.GetVolumePath(), &st); err != nil {
		if errors.Is(err, unix.ENOTCONN) || errors.Is(err, unix.EIO) {
			return &csi.NodeGetVolumeStatsResponse{VolumeCondition: &csi.VolumeCondition{
				Abnormal: true, Message: fmt.Sprintf("the pDFS mount does not answer: %v", err)}}, nil
		}
		return nil, status.Errorf(codes.Internal, "statfs %s: %v", req.GetVolumePath(), err)
	}
	// A volume mount's statfs is its quota and use (docs/pdfs.md).
	bsize := int64(st.Bsize)
	return &csi.NodeGetVolumeStatsResponse{
		Usage: []*csi.VolumeUsage{{
			Unit:      csi.VolumeUsage_BYTES,
			Total:     int64(st.Blocks) * bsize,
			Available: int64(st.Bavail) * bsize,
			Used:      int64(st.Blocks-st.Bfree) * bsize,
		}, {
			Unit:      csi.VolumeUsage_INODES,
			Total:     int64(st.Files),
			Available: int64(st.Ffree),
			Used:      int64(st.Files - st.Ffree),
		}},
		VolumeCondition: &csi.VolumeCondition{Abnormal: false, Message: "mounted and answering"},
	}, nil
}

func (n *Node) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	if err := volumePathCheck(req.GetVolumeId(), req.GetVolumePath()); err != nil {
		return nil, err
	}
	if req.GetVolumeCapability() != nil {
		if err := checkCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()}); err != nil {
			return nil, err
		}
	}
	// The quota is the size: the controller raised it, the mount already
	// reports it. The capacity now is what statfs says.
	var st unix.Statfs_t
	if err := unix.Statfs(req.GetVolumePath(), &st); err != nil {
		return nil, status.Errorf(codes.Internal, "statfs %s: %v", req.GetVolumePath(), err)
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: int64(st.Blocks) * int64(st.Bsize)}, nil
}
