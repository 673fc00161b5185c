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
// restarts on their own persistent state: one pdkvs-gateway on a local PM
// store (the process killed is the one clients talk to), or a PDPM
// cluster whose PM servers are killed behind gateways that stay up.
type Target interface {
	// Addrs are the host:port endpoints clients connect to.
	Addrs() []string
	// Victims names the processes Kill and Restart take by index.
	Victims() []string
	// DownTime is how long a killed victim stays down.
	DownTime() time.Duration
	// ClientsSeeFaults: a kill fails the operations in flight (clients talk
	// to the victim). Otherwise they wait for the service to recover.
	ClientsSeeFaults() bool
	// Kill sends SIGKILL to victim i and waits until it is gone.
	Kill(i int) error
	// Restart starts victim i again on the same state and waits until it
	// serves.
	Restart(i int) error
	// Logs are the log files of every process incarnation so far.
	Logs() []string
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

func (g *gatewayTarget) Addrs() []string         { return []string{g.addr} }
func (g *gatewayTarget) Victims() []string       { return []string{"pdkvs-gateway"} }
func (g *gatewayTarget) DownTime() time.Duration { return 200 * time.Millisecond }
func (g *gatewayTarget) ClientsSeeFaults() bool  { return true }
func (g *gatewayTarget) Logs() []string          { return g.logs }

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

// Binaries of a cluster target.
type clusterBinaries struct {
	monitor, server, gateway string
}

// clusterTarget is a PDPM cluster on loopback: a monitor (embedded view,
// millisecond-scale heartbeats), three PM servers on PM files with every
// segment on two of them, and two pdkvs-gateways on the cluster. The
// victims are the servers: a killed server's vnodes move to their backups
// while clients wait, and the restarted server recovers from its PM file.
type clusterTarget struct {
	bin      clusterBinaries
	dir      string
	monitor  *daemon
	servers  []*daemon
	gateways []*daemon
}

// daemon is one process of the cluster with the command line that starts
// it again, and a log per incarnation.
type daemon struct {
	name     string
	args     []string
	addrFile string // written by the daemon once it serves
	cmd      *exec.Cmd
	exited   chan error // the result of cmd.Wait
	address  string     // what it wrote to its address file
	logs     []string
}

const clusterServers = 3

func startCluster(bin clusterBinaries, pmDir string) (*clusterTarget, error) {
	dir, err := os.MkdirTemp(pmDir, "pdpm-lin.")
	if err != nil {
		return nil, err
	}
	c := &clusterTarget{bin: bin, dir: dir}
	if err := c.start(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *clusterTarget) start() error {
	secret := filepath.Join(c.dir, "cluster.secret")
	if err := os.WriteFile(secret, []byte(fmt.Sprintf("lin-%d\n", time.Now().UnixNano())), 0o600); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	monitorAddr := fmt.Sprintf("127.0.0.1:%d", port)
	c.monitor = &daemon{name: "pdpm-monitor", args: []string{c.bin.monitor, "--embedded",
		"--dir", filepath.Join(c.dir, "monitor"), "--listen", monitorAddr,
		"--port-file", filepath.Join(c.dir, "monitor.addr"), "--secret-file", secret,
		"--segment-size", "64MiB", "--tables", "8", "--replicas", "2", "--heartbeat-interval", "50ms",
		"--suspect-timeout", "300ms", "--down-timeout", "800ms"},
		addrFile: filepath.Join(c.dir, "monitor.addr")}
	if err := c.monitor.start(c.dir); err != nil {
		return err
	}
	for i := 1; i <= clusterServers; i++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		addrFile := filepath.Join(c.dir, fmt.Sprintf("server-%d.addr", i))
		d := &daemon{name: fmt.Sprintf("pdpm-server %d", i), args: []string{c.bin.server,
			"--pm", filepath.Join(c.dir, fmt.Sprintf("server-%d.pm", i)), "--pm-size", "512MiB",
			"--listen", fmt.Sprintf("127.0.0.1:%d", port), "--monitor", monitorAddr,
			"--secret-file", secret, "--port-file", addrFile}, addrFile: addrFile}
		// The first start formats the new PM file; restarts recover it.
		first := append(append([]string(nil), d.args...), "--format")
		if err := d.startWith(first, c.dir); err != nil {
			return err
		}
		c.servers = append(c.servers, d)
	}
	for i := 1; i <= 2; i++ {
		addrFile := filepath.Join(c.dir, fmt.Sprintf("gateway-%d.addr", i))
		d := &daemon{name: fmt.Sprintf("pdkvs-gateway %d", i), args: []string{c.bin.gateway,
			"--monitor", monitorAddr, "--secret-file", secret, "--listen", "127.0.0.1:0",
			"--port-file", addrFile, "--threads", "1"}, addrFile: addrFile}
		if err := d.start(c.dir); err != nil {
			return err
		}
		c.gateways = append(c.gateways, d)
	}
	return nil
}

func (d *daemon) start(dir string) error { return d.startWith(d.args, dir) }

// startWith runs args and waits until the daemon has written its address
// file.
func (d *daemon) startWith(args []string, dir string) error {
	addrFile := d.addrFile
	os.Remove(addrFile)
	logPath := filepath.Join(dir, fmt.Sprintf("%s.%d.log", strings.ReplaceAll(d.name, " ", "-"), len(d.logs)))
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	d.logs = append(d.logs, logPath)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(30 * time.Second)
	for {
		if b, err := os.ReadFile(addrFile); err == nil && strings.HasSuffix(string(b), "\n") {
			d.cmd = cmd
			d.address = strings.TrimSpace(string(b))
			d.exited = exited
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("%s exited while starting: %v (log %s)", d.name, err, logPath)
		case <-deadline:
			cmd.Process.Kill()
			<-exited
			return fmt.Errorf("%s not serving after 30 s (log %s)", d.name, logPath)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop sends sig and waits for the process to end.
func (d *daemon) stop(sig syscall.Signal) {
	if d.cmd == nil {
		return
	}
	d.cmd.Process.Signal(sig)
	<-d.exited
	d.cmd = nil
}

func (c *clusterTarget) Addrs() []string {
	var addrs []string
	for _, g := range c.gateways {
		addrs = append(addrs, g.address)
	}
	return addrs
}

func (c *clusterTarget) Victims() []string {
	var names []string
	for _, s := range c.servers {
		names = append(names, s.name)
	}
	return names
}

// DownTime outlasts the monitor's down timeout: the victim's segments are
// promoted on their backups before it comes back.
func (c *clusterTarget) DownTime() time.Duration { return 1500 * time.Millisecond }
func (c *clusterTarget) ClientsSeeFaults() bool  { return false }

func (c *clusterTarget) Logs() []string {
	var logs []string
	for _, d := range append(append([]*daemon{c.monitor}, c.servers...), c.gateways...) {
		if d != nil {
			logs = append(logs, d.logs...)
		}
	}
	return logs
}

func (c *clusterTarget) Kill(i int) error {
	if i < 0 || i >= len(c.servers) || c.servers[i].cmd == nil {
		return fmt.Errorf("no running victim %d", i)
	}
	c.servers[i].stop(syscall.SIGKILL)
	return nil
}

func (c *clusterTarget) Restart(i int) error {
	if i < 0 || i >= len(c.servers) || c.servers[i].cmd != nil {
		return fmt.Errorf("victim %d is not down", i)
	}
	return c.servers[i].start(c.dir)
}

func (c *clusterTarget) Close() {
	for _, g := range c.gateways {
		g.stop(syscall.SIGTERM)
	}
	for _, s := range c.servers {
		s.stop(syscall.SIGTERM)
	}
	if c.monitor != nil {
		c.monitor.stop(syscall.SIGTERM)
	}
	os.RemoveAll(c.dir)
}
