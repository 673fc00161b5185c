package k8s

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	kubeconfig = flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster to test (default: $KUBECONFIG, else kubectl's default)")
	kubectlBin = flag.String("kubectl", "kubectl", "kubectl binary")
	helmBin    = flag.String("helm", "helm", "helm binary")
	tag        = flag.String("tag", "", "tag of the PDPM images (default: the repository's VERSION)")
	upgradeTag = flag.String("upgrade-tag", "", "tag of the core image that scenario 7 upgrades to (default: the tag with -upgrade appended)")
	pullPolicy = flag.String("pull-policy", "IfNotPresent", "imagePullPolicy of every pod the tests create")
	opNS       = flag.String("operator-namespace", "pdpm-system", "namespace of the chart's release")
	ns         = flag.String("namespace", "pdpm-e2e", "namespace of the test clusters and client pods (created and deleted)")
	keys       = flag.Int("keys", 3000, "keys written through the gateway and read back")
	keep       = flag.Bool("keep", false, "leave the release and namespace behind (to look at a failure)")
	logsDir    = flag.String("logs", "", "on failure, save every pod's log, the events and the PDPMClusters here before cleaning up")
)

const (
	sampleName  = "pdpm-emulated" // config/samples/pdpm_v1alpha1_pdpmcluster_emulated.yaml
	chartedName = "charted"       // the PDPMCluster of charts/pdpm-cluster's release
	chartedRel  = "chart-cluster"
	clientPod   = "redis-client"
	releaseName = "pdpm"
)

// repo is the repository's root, from this package's directory.
func repo(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func imageTag(t *testing.T) string {
	if *tag != "" {
		return *tag
	}
	v, err := os.ReadFile(filepath.Join(repo(t), "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(v))
}

// phase runs one scenario as a subtest and prints how long it took; a
// failed scenario stops the suite (the later ones build on it).
func phase(t *testing.T, name string, f func(t *testing.T)) {
	t.Helper()
	start := time.Now()
	ok := t.Run(name, f)
	fmt.Printf("e2e phase %-28s %6.1fs %s\n", name, time.Since(start).Seconds(), map[bool]string{true: "ok", false: "FAILED"}[ok])
	if !ok {
		t.FailNow()
	}
}

// startSuite returns the cluster the kubeconfig names, the repository's
// root and the image tag under test. Unless -keep is set it registers the
// suite's teardown: logs saved on failure, `first` (what must go before the
// clusters), the clusters (their finalizer needs the operator), the
// namespace, then the release — best effort, within `timeout`.
func startSuite(t *testing.T, timeout time.Duration, first func(context.Context, *cluster)) (*cluster, string, string) {
	c := &cluster{kubeconfig: *kubeconfig, kubectlBin: *kubectlBin, helmBin: *helmBin}
	root := repo(t)
	tg := imageTag(t)
	if !*keep {
		t.Cleanup(func() {
			if t.Failed() && *logsDir != "" {
				saveLogs(c, *logsDir)
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			first(ctx, c)
			// A failure after scenario 8 switched the sample to Retain must
			// not leave its PM on the node: the next run's sample would find
			// another cluster's PM there and refuse to start.
			_, _ = c.kubectl(ctx, "-n", *ns, "patch", "pdpmcluster", sampleName, "--type=merge", "-p", `{"spec":{"cleanupPolicy":"WipeData"}}`)
			_, _ = c.kubectl(ctx, "-n", *ns, "delete", "pdpmclusters", "--all", "--timeout=2m")
			_, _ = c.kubectl(ctx, "delete", "namespace", *ns, "--ignore-not-found", "--timeout=2m")
			_, _ = c.helm(ctx, "-n", *opNS, "uninstall", releaseName, "--wait", "--timeout=1m")
		})
	}
	return c, root, tg
}

// TestPDPMOnKubernetes is the user story, scenario by scenario,
// against the cluster the kubeconfig names: the operator and the CSI
// driver (docs/csi.md) installed by one helm install, the sample cluster
// serving Redis clients and pods' volumes at once, faults under both.
func TestPDPMOnKubernetes(t *testing.T) {
	ctx := context.Background()
	c, root, tg := startSuite(t, 4*time.Minute, deleteCSIObjects)

	phase(t, "chart-versions", func(t *testing.T) { testChartVersions(t, root, tg) })
	phase(t, "1-helm-install", func(t *testing.T) { testHelmInstall(ctx, t, c, root, tg) })
	phase(t, "chart-server-validation", func(t *testing.T) { testChartServerValidation(ctx, t, c, root) })
	phase(t, "bad-input-rejected", func(t *testing.T) { testBadInput(ctx, t, c, root) })
	phase(t, "unsatisfiable-cluster-blocked", func(t *testing.T) { testUnsatisfiable(ctx, t, c, tg) })
	nodeTopology := labelNodesForTopology(ctx, t, c)
	phase(t, "2-cluster-ready", func(t *testing.T) { testClusterReady(ctx, t, c, root, tg) })
	phase(t, "server-topology-labels", func(t *testing.T) { testServerTopology(ctx, t, c, sampleName, nodeTopology) })
	phase(t, "csi-secret", func(t *testing.T) { testCSISecret(ctx, t, c) })
	values := map[string]string{}
	phase(t, "3-redis-through-gateway", func(t *testing.T) { testRedisThroughGateway(ctx, t, c, tg, values) })
	phase(t, "no-false-failure-detection", func(t *testing.T) { testNoFalseFailures(ctx, t, c, sampleName, 1, 3) })
	phase(t, "csi-volumes", func(t *testing.T) { testCSIVolumes(ctx, t, c, tg) })
	phase(t, "4-server-force-deleted", func(t *testing.T) { testServerForceDeleted(ctx, t, c, tg, values) })
	phase(t, "csi-node-plugin-deleted", func(t *testing.T) { testCSINodePluginDeleted(ctx, t, c, tg) })
	phase(t, "csi-reclaim-policies", func(t *testing.T) { testCSIReclaim(ctx, t, c, tg) })
	phase(t, "6-scale-servers", func(t *testing.T) { testScaleServers(ctx, t, c, values) })
	phase(t, "8-delete-retain-recreate", func(t *testing.T) { testDeleteRetainRecreate(ctx, t, c, root, tg, values) })
	phase(t, "8-delete-wipedata", func(t *testing.T) { testDeleteWipeData(ctx, t, c) })
	phase(t, "helm-install-cluster-chart", func(t *testing.T) { testClusterChart(ctx, t, c, root, tg) })
	phase(t, "no-false-failure-detection-3-monitors", func(t *testing.T) { testNoFalseFailures(ctx, t, c, chartedName, 3, 3) })
	charted := map[string]string{}
	phase(t, "5-monitor-leader-killed", func(t *testing.T) { testMonitorLeaderKilled(ctx, t, c, chartedName, charted) })
	phase(t, "7-helm-upgrade", func(t *testing.T) { testHelmUpgrade(ctx, t, c, root, tg, charted) })
	phase(t, "helm-uninstall-cluster-chart", func(t *testing.T) { testClusterChartUninstall(ctx, t, c) })
	phase(t, "9-helm-uninstall", func(t *testing.T) { testHelmUninstall(ctx, t, c) })
}

// saveLogs writes, best effort, the log of every container in the test
// namespaces (the previous instance's too), the events and the
// PDPMClusters into dir: the cleanup deletes the pods and their logs.
func saveLogs(c *cluster, dir string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Println("saving logs:", err)
		return
	}
	save := func(name, content string, failure error) {
		if failure != nil {
			content += "\n" + failure.Error() + "\n"
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			fmt.Println("saving logs:", err)
		}
	}
	for _, n := range []string{*ns, *opNS} {
		pods, _ := c.kubectl(ctx, "-n", n, "get", "pods", "-o", "name")
		for _, pod := range strings.Fields(pods) {
			name := n + "_" + strings.TrimPrefix(pod, "pod/")
			cur, err := c.kubectl(ctx, "-n", n, "logs", pod, "--all-containers", "--prefix", "--timestamps")
			save(name+".log", cur, err)
			if prev, err := c.kubectl(ctx, "-n", n, "logs", pod, "--all-containers", "--prefix", "--timestamps", "--previous"); err == nil {
				save(name+".previous.log", prev, nil)
			}
		}
		events, err := c.kubectl(ctx, "-n", n, "get", "events", "--sort-by=.lastTimestamp")
		save(n+"_events.txt", events, err)
	}
	clusters, err := c.kubectl(ctx, "-n", *ns, "get", "pdpmclusters", "-o", "yaml")
	save("pdpmclusters.yaml", clusters, err)
	fmt.Println("e2e: the pods' logs, events and PDPMClusters are in", dir)
}

// The charts' versions follow the repository's VERSION.
func testChartVersions(t *testing.T, root, version string) {
	for _, chart := range []string{"pdpm", "pdpm-cluster"} {
		data, err := os.ReadFile(filepath.Join(root, "charts", chart, "Chart.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"version: " + version, `appVersion: "` + version + `"`} {
			if !strings.Contains(string(data), "\n"+want+"\n") {
				t.Errorf("charts/%s/Chart.yaml lacks %q (VERSION is %s)", chart, want, version)
			}
		}
	}
}

// Scenario 1: helm install; the operator becomes Available and the CSI
// driver runs.
func testHelmInstall(ctx context.Context, t *testing.T, c *cluster, root, tg string) {
	must(t)(c.helm(ctx, append([]string{"install", releaseName, filepath.Join(root, "charts", "pdpm"),
		"--namespace", *opNS, "--create-namespace", "--wait", "--timeout", "4m",
		"--set", "operator.image.tag=" + tg, "--set", "operator.image.pullPolicy=" + *pullPolicy}, csiHelmArgs(tg)...)...))
	must(t)(c.kubectl(ctx, "-n", *opNS, "wait", "--for=condition=Available", "deployment/pdpm-operator", "--timeout=2m"))
	checkCSIRunning(ctx, t, c)
	var crd struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := c.getJSON(ctx, &crd, "crd", "pdpmclusters.pdpm.io"); err != nil {
		t.Fatal(err)
	}
	if got := crd.Metadata.Annotations["helm.sh/resource-policy"]; got != "keep" {
		t.Errorf("the CRD's helm.sh/resource-policy is %q, want keep", got)
	}
	// One replica leads: the Lease names a pod of the release.
	eventually(t, time.Minute, "operator leader Lease", func() error {
		out, err := c.kubectl(ctx, "-n", *opNS, "get", "lease", "pdpm-operator.pdpm.io", "-o", "jsonpath={.spec.holderIdentity}")
		if err != nil {
			return err
		}
		if !strings.HasPrefix(out, "pdpm-operator-") {
			return fmt.Errorf("holder %q is not an operator pod", out)
		}
		return nil
	})
}

// The charts' rendered manifests pass the API server's own OpenAPI
// validation (of the Kubernetes version under test), strictly: no unknown
// or duplicate fields.
func testChartServerValidation(ctx context.Context, t *testing.T, c *cluster, root string) {
	for _, chart := range []string{"pdpm", "pdpm-cluster"} {
		manifest := must(t)(c.helm(ctx, "template", "validate", filepath.Join(root, "charts", chart), "--namespace", *opNS))
		must(t)(c.kubectlIn(ctx, manifest, "apply", "--dry-run=server", "--validate=strict", "-f", "-"))
	}
}

// Bad input: specs the API rejects, each with a message saying why.
func testBadInput(ctx context.Context, t *testing.T, c *cluster, root string) {
	must(t)(c.kubectl(ctx, "create", "namespace", *ns))
	base := func(servers, pm, extra string) string {
		return fmt.Sprintf(`apiVersion: pdpm.io/v1alpha1
kind: PDPMCluster
metadata: {name: bad, namespace: %s}
spec:
  servers:
    replicas: 3
%s
  images: {tag: "0.1.0"}
%s`, *ns, servers+"\n    pm:\n"+pm, extra)
	}
	cases := []struct{ name, manifest, want string }{
		{"replicaCount above servers", base("", "      mode: Emulated\n      emulated: {size: 1Gi}", "  storage: {replicaCount: 4}\n"),
			"storage.replicaCount must not exceed servers.replicas"},
		{"devdax without path", base("", "      mode: DevDax\n      devDax: {}", ""), "spec.servers.pm.devDax.path: Required value"},
		{"https etcd", base("", "      mode: Emulated\n      emulated: {size: 1Gi}",
			"  monitor: {etcd: {mode: External, endpoints: [\"https://etcd:2379\"]}}\n"), "should match '^http://"},
		{"fsdax with verbs", base("    rdma: {transport: verbs}", "      mode: FSDax\n      fsDax: {path: /mnt/pmem0}", ""),
			"FSDax PM cannot be used with the verbs transport"},
	}
	for _, tc := range cases {
		_, err := c.kubectlIn(ctx, tc.manifest, "apply", "--dry-run=server", "-f", "-")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: want an error containing %q, got %v", tc.name, tc.want, err)
		}
	}
}

// testUnsatisfiable: a PDPMCluster the API accepts but no node can run —
// DevDax PM at a path no node has — is Blocked with a Ready condition that
// names the server pod, its node and the kubelet's reason. Deleted with
// Retain (WipeData would try to zero a device that is not there), its key
// Secret stays in the namespace, which the suite deletes at the end.
func testUnsatisfiable(ctx context.Context, t *testing.T, c *cluster, tg string) {
	const name, path = "unsatisfiable", "/dev/dax9.9"
	manifest := fmt.Sprintf(`apiVersion: pdpm.io/v1alpha1
kind: PDPMCluster
metadata: {name: %s, namespace: %s}
spec:
  monitor: {replicas: 1, etcd: {mode: External, endpoints: ["http://etcd.invalid:2379"]}}
  servers:
    replicas: 1
    pm: {mode: DevDax, devDax: {path: %s}}
  storage: {replicaCount: 1, segmentSize: 64Mi, tables: 1}
  gateway: {replicas: 0}
  images: {tag: %q, pullPolicy: %s}
`, name, *ns, path, tg, *pullPolicy)
	must(t)(c.kubectlIn(ctx, manifest, "apply", "-f", "-"))
	eventually(t, 3*time.Minute, "PDPMCluster "+name+" Blocked saying why", func() error {
		p, err := getCluster(ctx, c, name)
		if err != nil {
			return err
		}
		ready := p.condition("Ready")
		if p.Status.Phase != "Blocked" || ready.Reason != "PMUnavailable" ||
			!strings.Contains(ready.Message, "pod "+name+"-server-0 on node ") || !strings.Contains(ready.Message, path) {
			return fmt.Errorf("phase %s, Ready %s/%s: %s", p.Status.Phase, ready.Status, ready.Reason, ready.Message)
		}
		fmt.Printf("e2e: %s is Blocked: %s\n", name, ready.Message)
		return nil
	})
	must(t)(c.kubectl(ctx, "-n", *ns, "delete", "pdpmcluster", name, "--timeout=2m"))
}

// sampleManifest is the Emulated sample as it is but for the image tag and
// pull policy under test and the cleanup policy, set before it is created
// (a later change of the images would roll the servers).
func sampleManifest(ctx context.Context, t *testing.T, c *cluster, root, tg, cleanup string) string {
	t.Helper()
	sample := filepath.Join(root, "config", "samples", "pdpm_v1alpha1_pdpmcluster_emulated.yaml")
	return must(t)(c.kubectl(ctx, "patch", "--local", "-f", sample, "--type=merge", "-o", "json", "-p",
		fmt.Sprintf(`{"spec":{"servers":{"topology":{"rackLabel":%q}},"images":{"tag":%q,"pullPolicy":%q},"cleanupPolicy":%q}}`,
			e2eRackLabel, tg, *pullPolicy, cleanup)))
}

// e2eRackLabel is the node label the sample cluster takes its servers'
// racks from.
const e2eRackLabel = "pdpm.io/e2e-rack"

// labelNodesForTopology gives every node a rack (e2eRackLabel) and, where
// it has none, a zone — both removed again when the suite ends, a node's
// own zone left as it is — and returns the failure domains a server on
// each node must register: host, zone, rack, and region where the node
// has one.
func labelNodesForTopology(ctx context.Context, t *testing.T, c *cluster) map[string]map[string]string {
	const zoneLabel, regionLabel = "topology.kubernetes.io/zone", "topology.kubernetes.io/region"
	var nodes struct {
		Items []struct {
			Metadata struct {
				Name   string            `json:"name"`
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err := c.getJSON(ctx, &nodes, "nodes"); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{}
	for i, n := range nodes.Items {
		name := n.Metadata.Name
		labels := map[string]string{"host": name, "rack": fmt.Sprintf("e2e-rack-%d", i)}
		set := []string{e2eRackLabel + "=" + labels["rack"]}
		undo := []string{e2eRackLabel + "-"}
		if zone := n.Metadata.Labels[zoneLabel]; zone != "" {
			labels["zone"] = zone
		} else {
			labels["zone"] = "e2e-zone-a"
			set = append(set, zoneLabel+"="+labels["zone"])
			undo = append(undo, zoneLabel+"-")
		}
		if region := n.Metadata.Labels[regionLabel]; region != "" {
			labels["region"] = region
		}
		must(t)(c.kubectl(ctx, append([]string{"label", "node", name, "--overwrite"}, set...)...))
		t.Cleanup(func() { _, _ = c.kubectl(context.Background(), append([]string{"label", "node", name}, undo...)...) })
		want[name] = labels
	}
	return want
}

// testServerTopology: every server of PDPMCluster name registered its
// node's failure domains (the node-topology step read them from the Node)
// — the monitor's own view, through `pdpm status` in the monitor pod.
func testServerTopology(ctx context.Context, t *testing.T, c *cluster, name string, nodes map[string]map[string]string) {
	out := must(t)(c.kubectl(ctx, "-n", *ns, "get", "pods", "-l", "app.kubernetes.io/instance="+name+",app.kubernetes.io/component=server",
		"-o", `jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName}{"\n"}{end}`))
	podNode := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if pod, node, ok := strings.Cut(l, " "); ok {
			podNode[pod] = node
		}
	}
	if len(podNode) == 0 {
		t.Fatalf("no server pods of %s", name)
	}
	eventually(t, time.Minute, "every server's labels in the monitor's view", func() error {
		status, err := c.kubectl(ctx, "-n", *ns, "exec", name+"-monitor-0", "-c", "pdpm-monitor", "--",
			"pdpm", "status", "--monitor", fmt.Sprintf("127.0.0.1:%d", 7400))
		if err != nil {
			return err
		}
		registered := map[string]map[string]string{}
		inServers := false
		for _, l := range strings.Split(status, "\n") {
			fields := strings.Fields(l)
			if len(fields) > 0 && fields[0] == "ID" {
				inServers = true
				continue
			}
			if !inServers || len(fields) == 0 {
				continue
			}
			labels := map[string]string{}
			for _, kv := range strings.Split(fields[len(fields)-1], ",") {
				if k, v, ok := strings.Cut(kv, "="); ok {
					labels[k] = v
				}
			}
			registered[labels["pod"]] = labels
		}
		for pod, node := range podNode {
			want := map[string]string{"pod": pod}
			for k, v := range nodes[node] {
				want[k] = v
			}
			if got := registered[pod]; !maps.Equal(got, want) {
				return fmt.Errorf("server %s on node %s registered %v, want %v; status:\n%s", pod, node, got, want, status)
			}
		}
		fmt.Printf("e2e: %s: every server registered its node's failure domains: %v\n", name, registered)
		return nil
	})
}

// Scenario 2: the Emulated sample becomes Ready, and its status is true to
// the cluster.
func testClusterReady(ctx context.Context, t *testing.T, c *cluster, root, tg string) {
	must(t)(c.kubectlIn(ctx, sampleManifest(ctx, t, c, root, tg, "WipeData"), "-n", *ns, "apply", "-f", "-"))
	p := waitReady(ctx, t, c, sampleName, 6*time.Minute)
	st := p.Status
	if st.ServersReady != 3 || st.ServersTotal != 3 || st.MonitorsReady != 1 {
		t.Errorf("servers %d/%d ready, monitors %d ready; want 3/3 and 1", st.ServersReady, st.ServersTotal, st.MonitorsReady)
	}
	if st.Health != "OK" || st.Epoch <= 0 || st.ClusterUUID == "" {
		t.Errorf("health %q, epoch %d, uuid %q: want OK, > 0, set", st.Health, st.Epoch, st.ClusterUUID)
	}
	// Three servers of 1Gi emulated PM each: the pooled capacity is at most
	// 3Gi and more than one server's worth.
	capBytes, err := parseQuantity(st.Capacity)
	if err != nil || capBytes <= 1<<30 || capBytes > 3<<30 {
		t.Errorf("capacity %q (%v): want more than 1Gi and at most 3Gi", st.Capacity, err)
	}
	// The leader is the monitor pod.
	if leader := leaderPod(ctx, t, c, sampleName); leader != sampleName+"-monitor-0" {
		t.Errorf("monitorLeader %q is not the monitor pod (%v)", st.MonitorLeader, podIPs(ctx, t, c, sampleName, "monitor"))
	}
	// Ready pods agree with the status.
	out := must(t)(c.kubectl(ctx, "-n", *ns, "get", "pods", "-l", "app.kubernetes.io/instance="+sampleName+",app.kubernetes.io/component=server",
		"-o", `jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`))
	if n := strings.Count(out, "True"); n != 3 {
		t.Errorf("%d server pods ready, want 3:\n%s", n, out)
	}
	if st.ServerImage != "pdpm/core:"+tg {
		t.Errorf("serverImage %q, want pdpm/core:%s", st.ServerImage, tg)
	}
}

func getCluster(ctx context.Context, c *cluster, name string) (*pdpmCluster, error) {
	p := &pdpmCluster{}
	return p, c.getJSON(ctx, p, "-n", *ns, "pdpmcluster", name)
}

// waitReady waits until the cluster's Ready condition is True for its
// latest generation.
func waitReady(ctx context.Context, t *testing.T, c *cluster, name string, timeout time.Duration) *pdpmCluster {
	t.Helper()
	var p *pdpmCluster
	eventually(t, timeout, "PDPMCluster "+name+" Ready", func() error {
		var err error
		if p, err = getCluster(ctx, c, name); err != nil {
			return err
		}
		if p.Status.ObservedGeneration == p.Metadata.Generation && p.condition("Ready").Status == "True" {
			return nil
		}
		return errors.New(p.String())
	})
	return p
}

// parseQuantity reads the binary quantities the operator writes (bytes,
// Ki, Mi, Gi, Ti).
func parseQuantity(q string) (int64, error) {
	for i, suffix := range []string{"Ki", "Mi", "Gi", "Ti"} {
		if n, ok := strings.CutSuffix(q, suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			return v << (10 * (i + 1)), err
		}
	}
	return strconv.ParseInt(q, 10, 64)
}

// redis runs redis-cli in the client pod against the gateway Service of
// PDPMCluster name, with stdin.
func redis(ctx context.Context, c *cluster, name, stdin string, args ...string) (string, error) {
	full := append([]string{"-n", *ns, "exec", "-i", clientPod, "--", "redis-cli", "-h", name + "-gateway", "-p", "6379"}, args...)
	return c.kubectlIn(ctx, stdin, full...)
}

// command runs one Redis command through a cluster's gateway as Redis
// Cluster clients do: a CLUSTERDOWN or TRYAGAIN reply (nothing was done:
// the cluster is reconfiguring, or a server's reply took too long) is
// retried for at most two minutes, each retry logged. Returns redis-cli's
// output.
func command(ctx context.Context, t *testing.T, c *cluster, name string, args ...string) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out := must(t)(redis(ctx, c, name, "", args...))
		first := strings.TrimSpace(out)
		if !strings.HasPrefix(first, "CLUSTERDOWN ") && !strings.HasPrefix(first, "TRYAGAIN ") {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %q after 2 minutes", args[0], first)
		}
		t.Logf("%s: %s (retried)", args[0], first)
		time.Sleep(time.Second)
	}
}

// Scenario 3: a pod in the cluster runs redis-cli against the gateway
// Service: PING, SET/GET, and a few thousand keys with their values
// recorded (in values) and read back.
func testRedisThroughGateway(ctx context.Context, t *testing.T, c *cluster, tg string, values map[string]string) {
	must(t)(c.kubectl(ctx, "-n", *ns, "run", clientPod, "--image=pdpm-e2e/client:"+tg,
		"--image-pull-policy="+*pullPolicy, "--restart=Never", "--command", "--", "sleep", "infinity"))
	must(t)(c.kubectl(ctx, "-n", *ns, "wait", "--for=condition=Ready", "pod/"+clientPod, "--timeout=2m"))

	if out := command(ctx, t, c, sampleName, "PING"); strings.TrimSpace(out) != "PONG" {
		t.Fatalf("PING: %q", out)
	}
	if out := command(ctx, t, c, sampleName, "SET", "e2e:hello", "world"); strings.TrimSpace(out) != "OK" {
		t.Fatalf("SET: %q", out)
	}
	if out := command(ctx, t, c, sampleName, "GET", "e2e:hello"); strings.TrimSpace(out) != "world" {
		t.Fatalf("GET: %q", out)
	}
	values["e2e:hello"] = "world"

	// Thousands of keys in pipelined batches: redis-cli --pipe sends the
	// protocol and counts the replies and errors. The first write to each
	// table allocates its segments on two servers and syncs the backup, and
	// a gateway's RPC to a busy server is bounded: on a loaded machine a
	// SET may be answered CLUSTERDOWN (not acknowledged), which tells Redis
	// clients to try again. SETs are idempotent, so a batch is sent again
	// while it meets only such replies; any other error fails the test.
	// Batches keep what a retry resends, and the requests queued in the
	// gateway at once, small. Each retry is logged.
	const batch = 250
	rng := rand.New(rand.NewPCG(1, 2))
	deadline := time.Now().Add(8 * time.Minute)
	retries := 0
	for first := 0; first < *keys; first += batch {
		var stream strings.Builder
		n := min(batch, *keys-first)
		for i := first; i < first+n; i++ {
			k := fmt.Sprintf("e2e:key:%05d", i)
			v := fmt.Sprintf("v%d-%x", i, rng.Uint64())
			values[k] = v
			fmt.Fprintf(&stream, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(k), k, len(v), v)
		}
		want := fmt.Sprintf("errors: 0, replies: %d", n)
		for {
			out, err := redis(ctx, c, sampleName, stream.String(), "--pipe", "--pipe-timeout", "120")
			if err == nil && strings.Contains(out, want) {
				break
			}
			retries++
			t.Logf("redis-cli --pipe of keys %d..%d: %s; %s", first, first+n-1, lastLine(out), firstErrorLine(err))
			if bad := nonRetryable(err); bad != "" {
				t.Fatalf("a SET failed with an error Redis clients do not retry: %s", bad)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d keys not all written after %d retries", *keys, retries)
			}
		}
	}
	t.Logf("%d keys written in batches of %d, %d batches sent again", *keys, batch, retries)
	checkValues(ctx, t, c, sampleName, values)
}

// nonRetryable is the first line redis-cli --pipe printed on stderr (one
// per error reply) that is not an error Redis Cluster clients retry
// (CLUSTERDOWN, TRYAGAIN), or "" when there is none. err is run's error:
// the command, its exit status, then its stderr.
func nonRetryable(err error) string {
	if err == nil {
		return ""
	}
	text := err.Error()
	if _, after, ok := strings.Cut(text, "exit status "); ok {
		_, text, _ = strings.Cut(after, ": ")
	}
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "command terminated with exit code") ||
			strings.HasPrefix(l, "CLUSTERDOWN ") || strings.HasPrefix(l, "TRYAGAIN ") {
			continue
		}
		return l
	}
	return ""
}

// firstErrorLine is the first line of run's error: the command, its exit
// status and the first line of its stderr.
func firstErrorLine(err error) string {
	if err == nil {
		return ""
	}
	l, _, _ := strings.Cut(err.Error(), "\n")
	return l
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndex(s, "\n")+1:]
}

// checkValues reads every key back through the gateway of PDPMCluster name
// and compares.
func checkValues(ctx context.Context, t *testing.T, c *cluster, name string, values map[string]string) {
	t.Helper()
	names := make([]string, 0, len(values))
	for k := range values {
		names = append(names, k)
	}
	const batch = 500
	bad := 0
	for i := 0; i < len(names); i += batch {
		part := names[i:min(i+batch, len(names))]
		// MGET prints one value per line, in order.
		out := command(ctx, t, c, name, append([]string{"MGET"}, part...)...)
		got := strings.Split(strings.TrimRight(out, "\n"), "\n")
		if len(got) != len(part) {
			t.Fatalf("MGET of %d keys returned %d lines", len(part), len(got))
		}
		for j, k := range part {
			if got[j] != values[k] {
				if bad++; bad <= 10 {
					t.Errorf("key %s: got %q, want %q", k, got[j], values[k])
				}
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d keys read back wrong", bad, len(names))
	}
	t.Logf("%d keys read back", len(names))
}

// writer SETs keys e2e:<prefix>:<i> = w<i> one by one from the client pod
// through the gateway of one PDPMCluster, recording each write the gateway acknowledged with
// OK, until stopped. Failed writes are not recorded (and not retried: an
// unacknowledged write may or may not be there).
type writer struct {
	prefix string
	cancel context.CancelFunc
	done   chan error
	mu     sync.Mutex
	acked  []string
}

func startWriter(ctx context.Context, t *testing.T, c *cluster, name, prefix string) *writer {
	t.Helper()
	script := fmt.Sprintf(`rm -f /tmp/stop-%[2]s; i=0; while [ ! -e /tmp/stop-%[2]s ]; do i=$((i+1));
  out=$(timeout 10 redis-cli -h %[1]s -p 6379 SET e2e:%[2]s:$i w$i 2>&1) || true
  [ "$out" = OK ] && echo "$i"; done`, name+"-gateway", prefix)
	wctx, cancel := context.WithCancel(ctx)
	// The client pod's root file system is writable (no security context).
	cmd := exec.CommandContext(wctx, c.kubectlBin, c.args([]string{"-n", *ns, "exec", clientPod, "--", "sh", "-c", script})...)
	w := &writer{prefix: prefix, cancel: cancel, done: make(chan error, 1)}
	go func() {
		w.done <- lines(cmd, func(l string) {
			w.mu.Lock()
			w.acked = append(w.acked, l)
			w.mu.Unlock()
		})
	}()
	t.Cleanup(cancel)
	w.waitFor(t, 20, time.Minute, "the writer's first acknowledged writes")
	return w
}

func (w *writer) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// waitFor waits until n more writes than now are acknowledged.
func (w *writer) waitFor(t *testing.T, n int, timeout time.Duration, what string) {
	t.Helper()
	from := w.count()
	eventually(t, timeout, what, func() error {
		if got := w.count() - from; got < n {
			return fmt.Errorf("%d of %d writes acknowledged", got, n)
		}
		return nil
	})
}

// stop stops the writer and adds every acknowledged write to values.
func (w *writer) stop(ctx context.Context, t *testing.T, c *cluster, values map[string]string) {
	t.Helper()
	must(t)(c.kubectl(ctx, "-n", *ns, "exec", clientPod, "--", "touch", "/tmp/stop-"+w.prefix))
	select {
	case err := <-w.done:
		if err != nil {
			t.Fatalf("writer %s: %v", w.prefix, err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("writer %s did not stop", w.prefix)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, i := range w.acked {
		values["e2e:"+w.prefix+":"+i] = "w" + i
	}
	t.Logf("writer %s: %d writes acknowledged", w.prefix, len(w.acked))
}

// Scenario 4: a server pod is force-deleted while a Redis client writes
// and a pod appends to a volume; the cluster reports Degraded, then Ready
// once the StatefulSet brought the pod back; every acknowledged write
// reads back, and the pod's writes went on (after the failover) with none
// failed and every line there.
func testServerForceDeleted(ctx context.Context, t *testing.T, c *cluster, tg string, values map[string]string) {
	claim(ctx, t, c, "survivor", scDelete, "", "64Mi")
	fw := startFileWriter(ctx, t, c, tg, "failover-writer", "survivor")
	w := startWriter(ctx, t, c, sampleName, "w")
	must(t)(c.kubectl(ctx, "-n", *ns, "delete", "pod", sampleName+"-server-1", "--grace-period=0", "--force"))
	eventually(t, 2*time.Minute, "Degraded after the server pod was deleted", func() error {
		p, err := getCluster(ctx, c, sampleName)
		if err != nil {
			return err
		}
		if d := p.condition("Degraded"); d.Status != "True" {
			return errors.New(p.String())
		}
		return nil
	})
	waitReady(ctx, t, c, sampleName, 5*time.Minute)
	w.waitFor(t, 20, time.Minute, "writes acknowledged after recovery")
	fw.waitFor(ctx, t, c, 50, time.Minute, "the volume's writes once the cluster is Ready again")
	w.stop(ctx, t, c, values)
	checkValues(ctx, t, c, sampleName, values)
	fw.stop(ctx, t, c)
	must(t)(c.kubectl(ctx, "-n", *ns, "delete", "pvc", "survivor", "--timeout=1m"))
}

// podIPs maps the IP of each pod of one component of PDPMCluster name to
// the pod's name.
func podIPs(ctx context.Context, t *testing.T, c *cluster, name, component string) map[string]string {
	t.Helper()
	out := must(t)(c.kubectl(ctx, "-n", *ns, "get", "pods", "-l",
		"app.kubernetes.io/instance="+name+",app.kubernetes.io/component="+component,
		"-o", `jsonpath={range .items[*]}{.status.podIP} {.metadata.name}{"\n"}{end}`))
	ips := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if ip, pod, ok := strings.Cut(l, " "); ok && ip != "" {
			ips[ip] = pod
		}
	}
	return ips
}

// leaderPod is the monitor pod the status of PDPMCluster name names as
// leader ("" if none).
func leaderPod(ctx context.Context, t *testing.T, c *cluster, name string) string {
	t.Helper()
	p, err := getCluster(ctx, c, name)
	if err != nil || p.Status.MonitorLeader == "" {
		return ""
	}
	ip, _, _ := strings.Cut(p.Status.MonitorLeader, ":")
	return podIPs(ctx, t, c, name, "monitor")[ip]
}

// Scenario 5: the monitor leader's pod is killed while a client writes: a
// standby leads, writes go on, and nothing acknowledged is lost.
func testMonitorLeaderKilled(ctx context.Context, t *testing.T, c *cluster, name string, values map[string]string) {
	old := leaderPod(ctx, t, c, name)
	if old == "" {
		t.Fatal("no monitor pod leads")
	}
	w := startWriter(ctx, t, c, name, "m")
	must(t)(c.kubectl(ctx, "-n", *ns, "delete", "pod", old, "--grace-period=0", "--force"))
	var leader string
	eventually(t, 2*time.Minute, "a standby monitor leading", func() error {
		if leader = leaderPod(ctx, t, c, name); leader == "" || leader == old {
			return fmt.Errorf("leader %q (the killed one: %s)", leader, old)
		}
		return nil
	})
	t.Logf("monitor leader %s killed; %s leads", old, leader)
	w.waitFor(t, 20, 2*time.Minute, "writes acknowledged under the new leader")
	waitReady(ctx, t, c, name, 5*time.Minute)
	w.stop(ctx, t, c, values)
	checkValues(ctx, t, c, name, values)
}

// Scenario 6: servers scale 3 → 4 (the new server joins and adds its PM)
// and 4 → 3: the operator asks the monitor to drain the server it removes
// and removes its pod only once it is DRAINED; nothing is lost.
func testScaleServers(ctx context.Context, t *testing.T, c *cluster, values map[string]string) {
	scale := func(n int) {
		must(t)(c.kubectl(ctx, "-n", *ns, "patch", "pdpmcluster", sampleName, "--type=merge",
			"-p", fmt.Sprintf(`{"spec":{"servers":{"replicas":%d}}}`, n)))
	}
	w := startWriter(ctx, t, c, sampleName, "s")
	scale(4)
	p := waitReady(ctx, t, c, sampleName, 5*time.Minute)
	capBytes, err := parseQuantity(p.Status.Capacity)
	if p.Status.ServersReady != 4 || p.Status.ServersTotal != 4 || err != nil || capBytes <= 3<<30 || capBytes > 4<<30 {
		t.Errorf("after scaling to 4: servers %d/%d ready, capacity %q (%v); want 4/4 and more than 3Gi",
			p.Status.ServersReady, p.Status.ServersTotal, p.Status.Capacity, err)
	}
	w.waitFor(t, 20, time.Minute, "writes acknowledged with 4 servers")

	scale(3)
	p = waitReady(ctx, t, c, sampleName, 5*time.Minute)
	capBytes, err = parseQuantity(p.Status.Capacity)
	if p.Status.ServersReady != 3 || p.Status.ServersTotal != 3 || err != nil || capBytes > 3<<30 {
		t.Errorf("after scaling to 3: servers %d/%d ready, capacity %q (%v); want 3/3 and at most 3Gi",
			p.Status.ServersReady, p.Status.ServersTotal, p.Status.Capacity, err)
	}
	// The operator had the monitor drain the server before removing it:
	// the monitor logs the drain's start and end. (The operator's events
	// say so too, but Kubernetes may drop events of a busy object.)
	monLog := must(t)(c.kubectl(ctx, "-n", *ns, "logs", sampleName+"-monitor-0", "-c", "pdpm-monitor"))
	started := regexp.MustCompile(`msg="server draining" server_id=(\d+)`).FindStringSubmatch(monLog)
	if started == nil || !strings.Contains(monLog, `change="server `+started[1]+` drained"`) {
		t.Errorf("the monitor's log shows no server drained (draining: %v)", started)
	}
	if out, err := c.kubectl(ctx, "-n", *ns, "get", "pod", sampleName+"-server-3", "--ignore-not-found", "-o", "name"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("server pod 3 still there after scaling to 3: %q %v", out, err)
	}
	w.waitFor(t, 20, time.Minute, "writes acknowledged after scaling down")
	w.stop(ctx, t, c, values)
	checkValues(ctx, t, c, sampleName, values)
}

// Scenario 8 (Retain half): deleting the cluster with cleanupPolicy Retain
// keeps its key and claims and the PM on the node; the cluster created
// again with the same name is Ready with all the data.
func testDeleteRetainRecreate(ctx context.Context, t *testing.T, c *cluster, root, tg string, values map[string]string) {
	must(t)(c.kubectl(ctx, "-n", *ns, "patch", "pdpmcluster", sampleName, "--type=merge", "-p", `{"spec":{"cleanupPolicy":"Retain"}}`))
	must(t)(c.kubectl(ctx, "-n", *ns, "delete", "pdpmcluster", sampleName, "--timeout=4m"))
	eventually(t, 2*time.Minute, "the pods of "+sampleName+" gone", func() error {
		out, err := c.kubectl(ctx, "-n", *ns, "get", "pods,statefulsets,deployments", "-l", "app.kubernetes.io/instance="+sampleName, "-o", "name")
		if err != nil {
			return err
		}
		if s := strings.TrimSpace(out); s != "" {
			return errors.New(s)
		}
		return nil
	})
	kept := must(t)(c.kubectl(ctx, "-n", *ns, "get", "secrets,pvc", "-l", "app.kubernetes.io/instance="+sampleName, "-o", "name"))
	if !strings.Contains(kept, "secret/"+sampleName+"-key") || !strings.Contains(kept, "persistentvolumeclaim/") {
		t.Fatalf("Retain kept only %q; want the key Secret and the etcd claims", kept)
	}
	must(t)(c.kubectlIn(ctx, sampleManifest(ctx, t, c, root, tg, "Retain"), "-n", *ns, "create", "-f", "-"))
	waitReady(ctx, t, c, sampleName, 6*time.Minute)
	checkValues(ctx, t, c, sampleName, values)
	// The WipeData half deletes it next.
	must(t)(c.kubectl(ctx, "-n", *ns, "patch", "pdpmcluster", sampleName, "--type=merge", "-p", `{"spec":{"cleanupPolicy":"WipeData"}}`))
}

// Scenario 8 (WipeData half): the sample says WipeData, so deleting it
// erases the PM (wipe Jobs on the node) and deletes its claims and key.
func testDeleteWipeData(ctx context.Context, t *testing.T, c *cluster) {
	must(t)(c.kubectl(ctx, "-n", *ns, "delete", "pdpmcluster", sampleName, "--timeout=4m"))
	// Pods and Jobs go through garbage collection, shortly after.
	eventually(t, 2*time.Minute, "nothing of "+sampleName+" left", func() error {
		out, err := c.kubectl(ctx, "-n", *ns, "get", "statefulsets,deployments,pvc,secrets,jobs,pods",
			"-l", "app.kubernetes.io/instance="+sampleName, "-o", "name")
		if err != nil {
			return err
		}
		if s := strings.TrimSpace(out); s != "" {
			return fmt.Errorf("left after deleting it with WipeData: %s", s)
		}
		return nil
	})
}

// The cluster chart: a PDPMCluster from values (three monitors, as the
// chart's default) becomes Ready and `helm test` passes PING and SET/GET
// through its gateway Service.
func testClusterChart(ctx context.Context, t *testing.T, c *cluster, root, tg string) {
	must(t)(c.helm(ctx, "install", chartedRel, filepath.Join(root, "charts", "pdpm-cluster"), "--namespace", *ns,
		"--set", "name="+chartedName, "--set", "spec.servers.allowMultiplePerNode=true",
		"--set", "spec.cleanupPolicy=WipeData",
		"--set", "spec.images.tag="+tg, "--set", "spec.images.pullPolicy="+*pullPolicy,
		"--set", "test.image.tag="+tg, "--set", "test.image.pullPolicy="+*pullPolicy))
	p := waitReady(ctx, t, c, chartedName, 8*time.Minute)
	if p.Status.MonitorsReady != 3 {
		t.Errorf("%d monitors ready, want 3", p.Status.MonitorsReady)
	}
	// The test pod exits 0 only when PING, SET, GET and DEL all answered as
	// expected; it is deleted on success (so `helm test --logs` has nothing
	// to read) and kept on failure.
	if _, err := c.helm(ctx, "test", chartedRel, "--namespace", *ns, "--timeout", "2m"); err != nil {
		logs, _ := c.kubectl(ctx, "-n", *ns, "logs", chartedName+"-test-gateway")
		t.Fatalf("%v\ntest pod log:\n%s", err, logs)
	}
}

// testNoFalseFailures checks that the monitors of cluster `name`, which no
// fault has touched yet, never declared a server SUSPECT or DOWN: the
// PDPMCluster's default failure-detection timing must hold on a loaded
// node. Late heartbeats and lapsed server leases (the margin being eaten)
// are counted and printed, not failed: with three etcd members starting on
// a loaded node a server's join can take most of a lease, and the
// heartbeats that renew it wait behind the other servers' joins in the
// monitor, so a lease may lapse for a moment while the cluster forms (the
// server stops serving until the next heartbeat, as fencing requires).
func testNoFalseFailures(ctx context.Context, t *testing.T, c *cluster, name string, monitors, servers int) {
	late, lapsed := 0, 0
	for i := 0; i < monitors; i++ {
		pod := fmt.Sprintf("%s-monitor-%d", name, i)
		log := must(t)(c.kubectl(ctx, "-n", *ns, "logs", pod, "-c", "pdpm-monitor"))
		for _, msg := range []string{"server missed its heartbeats", "server is down"} {
			if n := strings.Count(log, `msg="`+msg+`"`); n > 0 {
				t.Errorf("%s logged %q %d times with no fault injected", pod, msg, n)
			}
		}
		late += strings.Count(log, `msg="late heartbeat"`)
	}
	for i := 0; i < servers; i++ {
		pod := fmt.Sprintf("%s-server-%d", name, i)
		log := must(t)(c.kubectl(ctx, "-n", *ns, "logs", pod, "-c", "pdpm-server"))
		lapsed += strings.Count(log, `msg="lease had expired; serving again"`)
	}
	fmt.Printf("e2e: %s: the monitors logged %d late heartbeats, the servers %d lapsed leases\n", name, late, lapsed)
}

// serverPod is the part of a server pod scenario 7 watches.
type serverPod struct {
	Metadata struct {
		Name              string  `json:"name"`
		DeletionTimestamp *string `json:"deletionTimestamp"`
	} `json:"metadata"`
	Spec struct {
		Containers []struct {
			Image string `json:"image"`
		} `json:"containers"`
	} `json:"spec"`
	Status struct {
		Conditions []condition `json:"conditions"`
	} `json:"status"`
}

func (p *serverPod) ready() bool {
	if p.Metadata.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True"
		}
	}
	return false
}

// Scenario 7: `helm upgrade` of the cluster chart to a new image tag while
// a client writes: the servers roll one at a time, highest ordinal first,
// never two out of service at once; the status shows the new image; no
// acknowledged write is lost.
func testHelmUpgrade(ctx context.Context, t *testing.T, c *cluster, root, tg string, values map[string]string) {
	up := *upgradeTag
	if up == "" {
		up = tg + "-upgrade"
	}
	newImage := "pdpm/core:" + up
	w := startWriter(ctx, t, c, chartedName, "u")
	must(t)(c.helm(ctx, "upgrade", chartedRel, filepath.Join(root, "charts", "pdpm-cluster"), "--namespace", *ns,
		"--reuse-values", "--set", "spec.images.tag="+up, "--set", "test.image.tag="+up))
	var order []string // servers in the order they came up on the new image
	seen := map[string]bool{}
	eventually(t, 10*time.Minute, "servers rolled to "+newImage, func() error {
		var pods struct{ Items []serverPod }
		if err := c.getJSON(ctx, &pods, "-n", *ns, "pods", "-l",
			"app.kubernetes.io/instance="+chartedName+",app.kubernetes.io/component=server"); err != nil {
			return err
		}
		ready, updated := 0, 0
		for _, p := range pods.Items {
			if p.ready() {
				ready++
			}
			if p.ready() && strings.HasSuffix(p.Spec.Containers[0].Image, newImage) {
				updated++
				if !seen[p.Metadata.Name] {
					seen[p.Metadata.Name] = true
					order = append(order, p.Metadata.Name)
				}
			}
		}
		if ready < 2 {
			t.Errorf("%d of 3 servers in service during the rollout: it must take one at a time", ready)
		}
		p, err := getCluster(ctx, c, chartedName)
		if err != nil {
			return err
		}
		if updated < 3 || p.Status.ServerImage != newImage || p.condition("Ready").Status != "True" {
			return fmt.Errorf("%d of 3 servers updated and ready; serverImage %s; %s", updated, p.Status.ServerImage, p)
		}
		return nil
	})
	want := []string{chartedName + "-server-2", chartedName + "-server-1", chartedName + "-server-0"}
	if strings.Join(order, ",") != strings.Join(want, ",") {
		t.Errorf("servers updated in the order %v, want %v", order, want)
	}
	w.waitFor(t, 20, 2*time.Minute, "writes acknowledged after the upgrade")
	w.stop(ctx, t, c, values)
	checkValues(ctx, t, c, chartedName, values)
}

// `helm uninstall` of the cluster chart removes its cluster (WipeData).
func testClusterChartUninstall(ctx context.Context, t *testing.T, c *cluster) {
	must(t)(c.helm(ctx, "uninstall", chartedRel, "--namespace", *ns, "--wait", "--timeout", "4m"))
	eventually(t, 4*time.Minute, "the charted cluster gone", func() error {
		out, err := c.kubectl(ctx, "-n", *ns, "get", "pods,pdpmclusters", "-l", "app.kubernetes.io/instance="+chartedName, "-o", "name")
		if err != nil {
			return err
		}
		if s := strings.TrimSpace(out); s != "" {
			return errors.New(s)
		}
		return nil
	})
}

// Scenario 9: helm uninstall leaves nothing of the release but what its
// policy keeps (the CRD): no CSIDriver, StorageClass or DaemonSet either.
func testHelmUninstall(ctx context.Context, t *testing.T, c *cluster) {
	must(t)(c.kubectl(ctx, "delete", "namespace", *ns, "--timeout=3m"))
	must(t)(c.helm(ctx, "uninstall", releaseName, "--namespace", *opNS, "--wait", "--timeout", "2m"))
	for _, q := range [][]string{
		{"-n", *opNS, "get", "deployments,daemonsets,services,serviceaccounts,roles,rolebindings", "-l", "app.kubernetes.io/instance=" + releaseName, "-o", "name"},
		{"get", "clusterroles,clusterrolebindings,storageclasses", "-l", "app.kubernetes.io/instance=" + releaseName, "-o", "name"},
		{"get", "csidriver", "pdfs.csi.pdpm.io", "--ignore-not-found", "-o", "name"},
		// The clusters' node-reader bindings: cluster-scoped, deleted by
		// the operator's finalizer.
		{"get", "clusterrolebindings", "-l", "app.kubernetes.io/managed-by=pdpm-operator", "-o", "name"},
	} {
		if out := strings.TrimSpace(must(t)(c.kubectl(ctx, q...))); out != "" {
			t.Errorf("left after helm uninstall: %s", out)
		}
	}
	must(t)(c.kubectl(ctx, "get", "crd", "pdpmclusters.pdpm.io"))
}
