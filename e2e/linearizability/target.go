package linearizability

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Target is the system under test: the addresses clients send commands to,
// and the processes behind them that the test kills with SIGKILL and
// restarts on their own persistent state. Today that is one pdkvs-gateway
// on a local PM store (the process killed is the one clients talk to); the
// distributed pDKVS will add a target whose victims are PM servers behind
// gateways that stay up.
type Target interface {
	// Addrs are the host:port endpoints clients connect to.
	Addrs() []string
	// Victims names the processes Kill and Restart take by index.
	Victims() []string
	// Kill sends SIGKILL to victim i and waits until it is gone.
	Kill(i int) error
	// Restart starts victim i again on the same state and waits until it
	// serves.
	Restart(i int) error
	// Close stops every process and removes the state.
	Close()
}

// gatewayTarget is one pdkvs-gateway on a PM file, on a fixed loopback
// port so that clients reconnect to the same address after a restart.
type gatewayTarget struct {
	binary string
	dir    string
	addr   string
	cmd    *exec.Cmd
	logs   []string // one stderr log per incarnation
}

// startGateway creates a PM file under pmDir and starts the gateway on it.
func startGateway(binary, pmDir string) (*gatewayTarget, error) {
	dir, err := os.MkdirTemp(pmDir, "pdkvs-lin.")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	g := &gatewayTarget{binary: binary, dir: dir, addr: fmt.Sprintf("127.0.0.1:%d", port)}
	if err := g.start(); err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (g *gatewayTarget) start() error {
	logPath := filepath.Join(g.dir, fmt.Sprintf("gateway.%d.log", len(g.logs)))
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	g.logs = append(g.logs, logPath)
	cmd := exec.Command(g.binary, "--listen", g.addr, "--pm", filepath.Join(g.dir, "kv.pm"),
		"--pm-size", "256MiB", "--threads", "2")
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	// The gateway prints "port=<n>" once it serves.
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && !strings.HasPrefix(line, "port=") {
			err = fmt.Errorf("unexpected first line %q", line)
		}
		ready <- err
	}()
	select {
	case err = <-ready:
	case <-time.After(30 * time.Second):
		err = fmt.Errorf("not serving after 30 s")
	}
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("pdkvs-gateway on %s: %v (log %s)", g.addr, err, logPath)
	}
	g.cmd = cmd
	return nil
}

func (g *gatewayTarget) Addrs() []string   { return []string{g.addr} }
func (g *gatewayTarget) Victims() []string { return []string{"pdkvs-gateway"} }

func (g *gatewayTarget) Kill(i int) error {
	if i != 0 || g.cmd == nil {
		return fmt.Errorf("no running victim %d", i)
	}
	if err := g.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	g.cmd.Wait() // reports the kill as an error: expected
	g.cmd = nil
	return nil
}

func (g *gatewayTarget) Restart(i int) error {
	if i != 0 || g.cmd != nil {
		return fmt.Errorf("victim %d is not down", i)
	}
	return g.start()
}

func (g *gatewayTarget) Close() {
	if g.cmd != nil {
		g.cmd.Process.Signal(syscall.SIGTERM)
		g.cmd.Wait()
		g.cmd = nil
	}
	os.RemoveAll(g.dir)
}
