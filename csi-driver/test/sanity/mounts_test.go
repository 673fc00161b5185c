package sanity_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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

// appender appends numbered lines to a file, one write(2) each, until
// stopped; the first failed write ends it.
type appender struct {
	stopc chan struct{}
	done  chan error
	mu    sync.Mutex
	n     int
}

func startAppender(t *testing.T, path string) *appender {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	a := &appender{stopc: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		defer f.Close()
		for i := 1; ; i++ {
			select {
			case <-a.stopc:
				a.done <- nil
				return
			default:
			}
			if _, err := fmt.Fprintf(f, "line %d\n", i); err != nil {
				a.done <- fmt.Errorf("write %d: %w", i, err)
				return
			}
			a.mu.Lock()
			a.n = i
			a.mu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return a
}

func (a *appender) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

// waitFor waits until n more lines are written; a failed write fails the test.
func (a *appender) waitFor(t *testing.T, n int, what string) {
	t.Helper()
	from := a.count()
	for i := 0; a.count()-from < n; i++ {
		select {
		case err := <-a.done:
			t.Fatalf("%s: the writer stopped: %v", what, err)
		default:
		}
		if i == 3000 {
			t.Fatalf("%s: %d of %d lines written in a minute", what, a.count()-from, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the writer and checks the file holds every line, in order.
func (a *appender) stop(t *testing.T, path string) {
	t.Helper()
	close(a.stopc)
	if err := <-a.done; err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(readFile(path), "\n"), "\n")
	if len(lines) != a.count() {
		t.Fatalf("%s holds %d lines, %d were written", path, len(lines), a.count())
	}
	for i, l := range lines {
		if want := fmt.Sprintf("line %d", i+1); l != want {
			t.Fatalf("%s: line %d is %q, want %q", path, i+1, l, want)
		}
	}
	t.Logf("%d lines written and read back", len(lines))
}

// stagedPID is the pdfs-fuse pid in the one staging record.
func stagedPID(t *testing.T, stateDir string) int {
	t.Helper()
	records, _ := filepath.Glob(filepath.Join(stateDir, "stage", "*.json"))
	if len(records) != 1 {
		t.Fatalf("staging records: %v", records)
	}
	var record struct{ PID int }
	if err := json.Unmarshal([]byte(readFile(records[0])), &record); err != nil || record.PID <= 0 {
		t.Fatalf("record %s: %v", readFile(records[0]), err)
	}
	return record.PID
}

// killFuse kills the volume's pdfs-fuse with SIGKILL and, when the plugin
// holds the connection (restart), waits until it started another.
func killFuse(t *testing.T, stateDir string, restart bool) {
	t.Helper()
	pid := stagedPID(t, stateDir)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for i := 0; restart && stagedPID(t, stateDir) == pid; i++ {
		if i == 1000 {
			t.Fatalf("pdfs-fuse %d was killed and not restarted", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMountsOutliveThePlugin: the node plugin holds every staged volume's
// FUSE connection, so a killed pdfs-fuse is replaced on the same
// connection while a writer goes on, untouched; a killed plugin leaves the
// mounts serving, and its successor holds them again; a connection lost
// with both (pdfs-fuse and plugin killed) is noticed (an abnormal volume
// condition) and restored in place, and publishing again gives the pod a
// working mount with the data.
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

	// pdfs-fuse killed twice under a writer: the plugin starts another on
	// the held connection each time; no write fails.
	logPath := filepath.Join(target, "log")
	w := startAppender(t, logPath)
	w.waitFor(t, 50, "first writes")
	for i := 0; i < 2; i++ {
		killFuse(t, stateDir, true)
		w.waitFor(t, 50, "writes after pdfs-fuse was killed")
	}

	// The plugin dies: the pod's mount goes on serving; the next plugin
	// takes the connection back and restarts a killed pdfs-fuse again.
	p.kill()
	w.waitFor(t, 50, "writes while no plugin runs")
	mustWrite(t, filepath.Join(target, "during"), "written while no plugin ran")
	p = startNodePlugin(t, c, binary, socket, stateDir)
	killFuse(t, stateDir, true)
	w.waitFor(t, 50, "writes after pdfs-fuse was killed under the restarted plugin")
	w.stop(t, logPath)
	if got := readFile(filepath.Join(target, "before")); got != "written before the plugin died" {
		t.Fatalf("read back %q", got)
	}

	// Both die: the connection is gone (ENOTCONN). The next plugin mounts
	// the staging path again; the pod's old bind mount is reported
	// abnormal until publishing again replaces it.
	p.kill()
	killFuse(t, stateDir, false)
	p = startNodePlugin(t, c, binary, socket, stateDir)
	defer p.kill()
	if got := readFile(filepath.Join(staging, "during")); got != "written while no plugin ran" {
		t.Fatalf("after the restore the staging path reads %q", got)
	}
	stats, err := p.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
	if err != nil || !stats.GetVolumeCondition().GetAbnormal() {
		t.Fatalf("a bind mount of a lost connection: stats %v, %v; want abnormal", stats, err)
	}
	publish(p)
	if got := readFile(filepath.Join(target, "before")); got != "written before the plugin died" {
		t.Fatalf("after publishing again the pod reads %q", got)
	}
	stats, err = p.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
	if err != nil || stats.GetVolumeCondition().GetAbnormal() {
		t.Fatalf("stats after the restore: %v, %v", stats, err)
	}
	if total := stats.GetUsage()[0].GetTotal(); total != 64<<20 {
		t.Errorf("the volume's size is %d, want its quota %d", total, 64<<20)
	}

	// Unpublish and unstage: nothing mounted, no pdfs-fuse left, no record.
	pid := stagedPID(t, stateDir)
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
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("pdfs-fuse %d still runs after unstage", pid)
	}
}
