// csi-sanity (kubernetes-csi/csi-test's sanity package) against the driver
// serving a live local PDPM cluster: `pdpm up` in a temporary directory
// (monitor, three PM servers, pdfs-volume-api), the driver in this process
// with its controller and node services on a unix socket, real pdfs-fuse
// mounts. Run by `make test-csi` (PDPM_BIN_DIR: the build's directory).
package sanity_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"pdpm.io/pdpm/csi-driver/internal/pdpmv1"
	"pdpm.io/pdpm/csi-driver/pkg/driver"
)

// freePorts finds n consecutive loopback ports nothing listens on.
func freePorts(t *testing.T, n int) int {
	for try := 0; try < 100; try++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		base := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if base+n > 65535 {
			continue
		}
		ok := true
		for p := base; p < base+n && ok; p++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				ok = false
				continue
			}
			l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free ports")
	return 0
}

// localCluster is a PDPM cluster `pdpm up` started for one test.
type localCluster struct {
	bin       string // the C++ build directory
	work      string // the test's temporary directory
	dir       string // the cluster directory
	monitor   string
	secret    string
	volumeAPI string
}

// startCluster runs `pdpm up` (monitor, three servers, pdfs-volume-api)
// in a temporary directory; `pdpm down` when the test ends.
func startCluster(t *testing.T) *localCluster {
	bin := os.Getenv("PDPM_BIN_DIR")
	if bin == "" {
		t.Fatal("PDPM_BIN_DIR (the C++ build directory, e.g. build/release) is required: run `make test-csi`")
	}
	c := &localCluster{bin: bin, work: t.TempDir()}
	c.dir = filepath.Join(c.work, "cluster")
	pdpm := filepath.Join(bin, "src/tools/pdpm")
	base := freePorts(t, 4)
	up := exec.Command(pdpm, "up", "--dir", c.dir, "--monitor-port", fmt.Sprint(base),
		"--server-port", fmt.Sprint(base+1), "--gateway-port", "0", "--replicas", "1",
		"--pm-size", "512MiB", "--timeout", "60s")
	if out, err := up.CombinedOutput(); err != nil {
		t.Fatalf("pdpm up: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(pdpm, "down", "--dir", c.dir).CombinedOutput(); err != nil {
			t.Errorf("pdpm down: %v\n%s", err, out)
		}
	})
	read := func(name string) string {
		data, err := os.ReadFile(filepath.Join(c.dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(data))
	}
	c.monitor, c.secret, c.volumeAPI = read("monitor.addr"), read("cluster.secret"), read("volume-api.addr")
	return c
}

func (c *localCluster) fuseBinary() string { return filepath.Join(c.bin, "src/pdfs/fuse/pdfs-fuse") }

func TestSanity(t *testing.T) {
	c := startCluster(t)
	work, monitor, secret, volumeAPI, fuse := c.work, c.monitor, c.secret, c.volumeAPI, c.fuseBinary()

	conn, err := grpc.NewClient(volumeAPI, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	clusters := &driver.Clusters{Default: driver.Cluster{Name: "local", Monitors: monitor, Secret: secret}}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	stateDir := filepath.Join(work, "state")
	srv := &driver.Server{
		Identity:   &driver.Identity{Version: "sanity", Controller: true},
		Controller: &driver.Controller{API: pdpmv1.NewVolumesClient(conn), Clusters: clusters},
		Node: &driver.Node{NodeID: "sanity-node", StateDir: stateDir, FuseBinary: fuse,
			Clusters: clusters, Log: log, MountTimeout: 30 * time.Second},
		Log: log,
	}
	endpoint := "unix://" + filepath.Join(work, "csi.sock")
	l, err := driver.Listen(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Stop()

	config := sanity.NewTestConfig()
	config.TargetPath = filepath.Join(work, "target")
	config.StagingPath = filepath.Join(work, "staging")
	config.TestVolumeSize = 16 << 20
	config.TestVolumeExpandSize = 32 << 20
	config.IdempotentCount = 2
	// csi-test v5.4.0's Connect reads the connection's state after dialing
	// and then waits for it to change: a connection that became Ready in
	// between never changes, and the wait fails after a minute (seen under
	// load). Its TestContext keeps a connection whose address equals
	// Config.Address, so the suite gets one connected here, with the
	// address left empty. (csi-test v5.6.0 fixes Connect but needs CSI
	// spec v1.13.0, which drops the volume condition kubelet reads.)
	sc := sanity.GinkgoTest(&config)
	sc.Conn = connectReady(t, endpoint)
	sc.ControllerConn = sc.Conn
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "CSI Driver Test Suite")
	sc.Finalize()
}

// connectReady connects to a gRPC endpoint and waits until the connection
// is Ready, reading the state before each wait so no transition is missed.
func connectReady(t *testing.T, endpoint string) *grpc.ClientConn {
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn.Connect()
	for state := conn.GetState(); state != connectivity.Ready; state = conn.GetState() {
		if !conn.WaitForStateChange(ctx, state) {
			t.Fatalf("connecting to %s: still %v after a minute", endpoint, state)
		}
	}
	return conn
}
