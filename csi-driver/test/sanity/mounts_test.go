package sanity_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"pdpm.io/pdpm/csi-driver/internal/pdpmv1"
)

// nodePlugin is a pdpm-csi --mode node process.
type nodePlugin struct {
	cmd  *exec.Cmd
	conn *grpc.ClientConn
	node csi.NodeClient
}

func startNodePlugin(t *testing.T, c *localCluster, binary, socket, stateDir string) *nodePlugin {
	t.Helper()
	cmd := exec.Command(binary, "--mode", "node", "--endpoint", "unix://"+socket, "--node-id", "n1",
		"--state-dir", stateDir, "--pdfs-fuse", c.fuseBinary(), "--cluster-name", "local",
		"--monitors", c.monitor, "--secret-file", filepath.Join(c.dir, "cluster.secret"))
	log, err := os.OpenFile(filepath.Join(c.work, "node-plugin.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	p := &nodePlugin{cmd: cmd, conn: conn, node: csi.NewNodeClient(conn)}
	// Serving once it answers (it restores broken stagings before).
	for i := 0; ; i++ {
		if _, err := p.node.NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{}); err == nil {
			return p
		}
		if i == 1000 {
			t.Fatalf("the node plugin did not start serving; its log: %s", readFile(filepath.Join(c.work, "node-plugin.log")))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill ends the plugin with SIGKILL, as a crash or a deleted pod would.
func (p *nodePlugin) kill() {
	p.conn.Close()
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

func readFile(path string) string {
	data, _ := os.ReadFile(path)
	return string(data)
}

func mustWrite(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
}

// TestMountsOutliveThePlugin: the node plugin killed while a volume is
// staged and published leaves the mount serving; a pdfs-fuse that died is
// noticed (an abnormal volume condition) and restored by the restarted
// plugin, and publishing again gives the pod a working mount with the data.
func TestMountsOutliveThePlugin(t *testing.T) {
	c := startCluster(t)
	binary := filepath.Join(c.work, "pdpm-csi")
	if out, err := exec.Command("go", "build", "-o", binary, "pdpm.io/pdpm/csi-driver/cmd/pdpm-csi").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	conn, err := grpc.NewClient(c.volumeAPI, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	ref := &pdpmv1.ClusterRef{Monitors: c.monitor, ClusterSecret: c.secret}
	if _, err := pdpmv1.NewVolumesClient(conn).CreateVolume(ctx, &pdpmv1.CreateVolumeRequest{
		Cluster: ref, Name: "survivor", ByteLimit: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	socket, stateDir := filepath.Join(c.work, "node.sock"), filepath.Join(c.work, "state")
	staging, target := filepath.Join(c.work, "staging"), filepath.Join(c.work, "pod", "volume")
	capability := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
	}
	const id = "local/survivor"
	p := startNodePlugin(t, c, binary, socket, stateDir)
	if _, err := p.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id,
		StagingTargetPath: staging, VolumeCapability: capability}); err != nil {
		t.Fatal(err)
	}
	publish := func(p *nodePlugin) {
		t.Helper()
		if _, err := p.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id,
			StagingTargetPath: staging, TargetPath: target, VolumeCapability: capability}); err != nil {
			t.Fatal(err)
		}
	}
	publish(p)
	defer func() { // whatever happened, nothing stays mounted
		_ = syscall.Unmount(target, syscall.MNT_DETACH)
		_ = syscall.Unmount(staging, syscall.MNT_DETACH)
	}()
	mustWrite(t, filepath.Join(target, "before"), "written before the plugin died")

	// The plugin dies: the pod's mount goes on serving.
	p.kill()
	mustWrite(t, filepath.Join(target, "during"), "written while no plugin ran")
	if got := readFile(filepath.Join(target, "before")); got != "written before the plugin died" {
		t.Fatalf("read back %q", got)
	}

	// pdfs-fuse itself dies: the plugin reports the volume abnormal...
	p = startNodePlugin(t, c, binary, socket, stateDir)
	records, _ := filepath.Glob(filepath.Join(stateDir, "stage", "*.json"))
	if len(records) != 1 {
		t.Fatalf("staging records: %v", records)
	}
	var record struct{ PID int }
	if err := json.Unmarshal([]byte(readFile(records[0])), &record); err != nil || record.PID <= 0 {
		t.Fatalf("record %s: %v", readFile(records[0]), err)
	}
	if err := syscall.Kill(record.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		stats, err := p.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
		if err != nil {
			t.Fatal(err)
		}
		if stats.GetVolumeCondition().GetAbnormal() {
			break
		}
		if i == 500 {
			t.Fatal("a mount whose pdfs-fuse was killed is not reported abnormal")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// ...a restarted plugin mounts the staging path again...
	p.kill()
	p = startNodePlugin(t, c, binary, socket, stateDir)
	defer p.kill()
	if got := readFile(filepath.Join(staging, "during")); got != "written while no plugin ran" {
		t.Fatalf("after the restore the staging path reads %q", got)
	}
	// ...and publishing again replaces the pod's broken bind mount.
	publish(p)
	if got := readFile(filepath.Join(target, "before")); got != "written before the plugin died" {
		t.Fatalf("after publishing again the pod reads %q", got)
	}
	stats, err := p.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
	if err != nil || stats.GetVolumeCondition().GetAbnormal() {
		t.Fatalf("stats after the restore: %v, %v", stats, err)
	}
	if total := stats.GetUsage()[0].GetTotal(); total != 64<<20 {
		t.Errorf("the volume's size is %d, want its quota %d", total, 64<<20)
	}

	// Unpublish and unstage: nothing mounted, no pdfs-fuse left, no record.
	if _, err := p.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	mounts := readFile("/proc/self/mountinfo")
	if strings.Contains(mounts, " "+staging+" ") || strings.Contains(mounts, " "+target+" ") {
		t.Errorf("still mounted after unstage:\n%s", mounts)
	}
	if records, _ := filepath.Glob(filepath.Join(stateDir, "stage", "*")); len(records) != 0 {
		t.Errorf("staging files left: %v", records)
	}
}
