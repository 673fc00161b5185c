// Package k8s is PDPM's end-to-end suite on a real Kubernetes cluster
// (docs/e2e.md): it installs the Helm chart, creates PDPMClusters and checks
// what users see — status, Redis clients through the gateway Service, data
// surviving pod failures. It drives the cluster with kubectl and helm, so
// the same tests run against any cluster a kubeconfig names.
package k8s

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// cluster runs kubectl and helm against one cluster.
type cluster struct {
	kubeconfig, kubectlBin, helmBin string
}

func (c *cluster) args(extra []string) []string {
	if c.kubeconfig == "" {
		return extra
	}
	return append([]string{"--kubeconfig", c.kubeconfig}, extra...)
}

// run runs a command with stdin and returns its stdout; the error carries
// its stderr.
func run(ctx context.Context, stdin io.Reader, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

func (c *cluster) kubectl(ctx context.Context, args ...string) (string, error) {
	return run(ctx, nil, c.kubectlBin, c.args(args)...)
}

func (c *cluster) kubectlIn(ctx context.Context, stdin string, args ...string) (string, error) {
	return run(ctx, strings.NewReader(stdin), c.kubectlBin, c.args(args)...)
}

func (c *cluster) helm(ctx context.Context, args ...string) (string, error) {
	return run(ctx, nil, c.helmBin, c.args(args)...)
}

// must(t)(out, err) fails the test on err and returns out.
func must(t *testing.T) func(string, error) string {
	t.Helper()
	return func(out string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
}

// getJSON reads one object as JSON into v.
func (c *cluster) getJSON(ctx context.Context, v any, args ...string) error {
	out, err := c.kubectl(ctx, append([]string{"get", "-o", "json"}, args...)...)
	if err != nil {
		return err
	}
	return json.Unmarshal([]byte(out), v)
}

// eventually polls check every interval until it returns nil or timeout
// passes; the test fails with the last error.
func eventually(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if last = check(); last == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached after %v: %v", what, timeout, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// condition is a metav1.Condition as JSON.
type condition struct {
	Type, Status, Reason, Message string
}

// pdpmCluster is the part of a PDPMCluster the tests read.
type pdpmCluster struct {
	Metadata struct {
		Generation int64 `json:"generation"`
	} `json:"metadata"`
	Status struct {
		ObservedGeneration int64       `json:"observedGeneration"`
		Phase              string      `json:"phase"`
		Conditions         []condition `json:"conditions"`
		ServersReady       int32       `json:"serversReady"`
		ServersTotal       int32       `json:"serversTotal"`
		MonitorsReady      int32       `json:"monitorsReady"`
		ClusterUUID        string      `json:"clusterUUID"`
		Epoch              int64       `json:"epoch"`
		Health             string      `json:"health"`
		Capacity           string      `json:"capacity"`
		Used               string      `json:"used"`
		MonitorLeader      string      `json:"monitorLeader"`
		ServerImage        string      `json:"serverImage"`
		PMNodes            []string    `json:"pmNodes"`
	} `json:"status"`
}

func (p *pdpmCluster) condition(t string) condition {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c
		}
	}
	return condition{Type: t, Status: "Missing"}
}

func (p *pdpmCluster) String() string {
	var conds []string
	for _, c := range p.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return fmt.Sprintf("phase %s, servers %d/%d ready, monitors %d ready, health %q, epoch %d; %s",
		p.Status.Phase, p.Status.ServersReady, p.Status.ServersTotal, p.Status.MonitorsReady,
		p.Status.Health, p.Status.Epoch, strings.Join(conds, "; "))
}

// lines calls f for each line a command prints, as it prints it, and
// returns once the command has exited.
func lines(cmd *exec.Cmd, f func(string)) error {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		return err
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		f(sc.Text())
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(errb.String()))
	}
	return nil
}
