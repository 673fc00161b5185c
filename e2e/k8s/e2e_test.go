package k8s

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
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
	pullPolicy = flag.String("pull-policy", "IfNotPresent", "imagePullPolicy of every pod the tests create")
	opNS       = flag.String("operator-namespace", "pdpm-system", "namespace of the chart's release")
	ns         = flag.String("namespace", "pdpm-e2e", "namespace of the test clusters and client pods (created and deleted)")
	keys       = flag.Int("keys", 3000, "keys written through the gateway and read back")
	keep       = flag.Bool("keep", false, "leave the release and namespace behind (to look at a failure)")
)

const (
	sampleName  = "pdpm-emulated" // config/samples/pdpm_v1alpha1_pdpmcluster_emulated.yaml
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

// TestPDPMOnKubernetes is the user story, scenario by scenario,
// against the cluster the kubeconfig names.
func TestPDPMOnKubernetes(t *testing.T) {
	c := &cluster{kubeconfig: *kubeconfig, kubectlBin: *kubectlBin, helmBin: *helmBin}
	ctx := context.Background()
	root := repo(t)
	tg := imageTag(t)

	if !*keep {
		t.Cleanup(func() {
			cctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			// Best effort: the clusters first (their finalizer needs the
			// operator), then the release.
			_, _ = c.kubectl(cctx, "-n", *ns, "delete", "pdpmclusters", "--all", "--timeout=2m")
			_, _ = c.kubectl(cctx, "delete", "namespace", *ns, "--ignore-not-found", "--timeout=2m")
			_, _ = c.helm(cctx, "-n", *opNS, "uninstall", releaseName, "--wait", "--timeout=1m")
		})
	}

	phase(t, "chart-versions", func(t *testing.T) { testChartVersions(t, root, tg) })
	phase(t, "1-helm-install", func(t *testing.T) { testHelmInstall(ctx, t, c, root, tg) })
	phase(t, "chart-server-validation", func(t *testing.T) { testChartServerValidation(ctx, t, c, root) })
	phase(t, "bad-input-rejected", func(t *testing.T) { testBadInput(ctx, t, c, root) })
	phase(t, "2-cluster-ready", func(t *testing.T) { testClusterReady(ctx, t, c, root, tg) })
	values := map[string]string{}
	phase(t, "3-redis-through-gateway", func(t *testing.T) { testRedisThroughGateway(ctx, t, c, tg, values) })
	phase(t, "4-server-force-deleted", func(t *testing.T) { testServerForceDeleted(ctx, t, c, values) })
	phase(t, "8-delete-wipedata", func(t *testing.T) { testDeleteWipeData(ctx, t, c) })
	phase(t, "helm-test-cluster-chart", func(t *testing.T) { testClusterChart(ctx, t, c, root, tg) })
	phase(t, "9-helm-uninstall", func(t *testing.T) { testHelmUninstall(ctx, t, c) })
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

// Scenario 1: helm install; the operator becomes Available.
func testHelmInstall(ctx context.Context, t *testing.T, c *cluster, root, tg string) {
	must(t)(c.helm(ctx, "install", releaseName, filepath.Join(root, "charts", "pdpm"),
		"--namespace", *opNS, "--create-namespace", "--wait", "--timeout", "3m",
		"--set", "operator.image.tag="+tg, "--set", "operator.image.pullPolicy="+*pullPolicy))
	must(t)(c.kubectl(ctx, "-n", *opNS, "wait", "--for=condition=Available", "deployment/pdpm-operator", "--timeout=2m"))
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

// Scenario 2: the Emulated sample becomes Ready, and its status is true to
// the cluster.
func testClusterReady(ctx context.Context, t *testing.T, c *cluster, root, tg string) {
	sample := filepath.Join(root, "config", "samples", "pdpm_v1alpha1_pdpmcluster_emulated.yaml")
	// The sample as it is but for the image tag and pull policy under test,
	// set before it is created (a later change would roll the servers).
	manifest := must(t)(c.kubectl(ctx, "patch", "--local", "-f", sample, "--type=merge", "-o", "json", "-p",
		fmt.Sprintf(`{"spec":{"images":{"tag":%q,"pullPolicy":%q}}}`, tg, *pullPolicy)))
	must(t)(c.kubectlIn(ctx, manifest, "-n", *ns, "apply", "-f", "-"))
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
	ip := must(t)(c.kubectl(ctx, "-n", *ns, "get", "pod", sampleName+"-monitor-0", "-o", "jsonpath={.status.podIP}"))
	if !strings.HasPrefix(st.MonitorLeader, ip+":") && !strings.HasPrefix(st.MonitorLeader, sampleName+"-monitor-0.") {
		t.Errorf("monitorLeader %q is not monitor pod %s-monitor-0 (%s)", st.MonitorLeader, sampleName, ip)
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

// redis runs redis-cli in the client pod against the sample's gateway
// Service, with stdin.
func redis(ctx context.Context, c *cluster, stdin string, args ...string) (string, error) {
	full := append([]string{"-n", *ns, "exec", "-i", clientPod, "--", "redis-cli", "-h", sampleName + "-gateway", "-p", "6379"}, args...)
	return c.kubectlIn(ctx, stdin, full...)
}

// Scenario 3: a pod in the cluster runs redis-cli against the gateway
// Service: PING, SET/GET, and a few thousand keys with their values
// recorded (in values) and read back.
func testRedisThroughGateway(ctx context.Context, t *testing.T, c *cluster, tg string, values map[string]string) {
	must(t)(c.kubectl(ctx, "-n", *ns, "run", clientPod, "--image=pdpm-e2e/client:"+tg,
		"--image-pull-policy="+*pullPolicy, "--restart=Never", "--command", "--", "sleep", "infinity"))
	must(t)(c.kubectl(ctx, "-n", *ns, "wait", "--for=condition=Ready", "pod/"+clientPod, "--timeout=2m"))

	if out := must(t)(redis(ctx, c, "", "PING")); strings.TrimSpace(out) != "PONG" {
		t.Fatalf("PING: %q", out)
	}
	if out := must(t)(redis(ctx, c, "", "SET", "e2e:hello", "world")); strings.TrimSpace(out) != "OK" {
		t.Fatalf("SET: %q", out)
	}
	if out := must(t)(redis(ctx, c, "", "GET", "e2e:hello")); strings.TrimSpace(out) != "world" {
		t.Fatalf("GET: %q", out)
	}
	values["e2e:hello"] = "world"

	// Thousands of keys in one pipelined stream: redis-cli --pipe sends the
	// protocol and counts the replies and errors.
	var stream strings.Builder
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < *keys; i++ {
		k := fmt.Sprintf("e2e:key:%05d", i)
		v := fmt.Sprintf("v%d-%x", i, rng.Uint64())
		values[k] = v
		fmt.Fprintf(&stream, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(k), k, len(v), v)
	}
	// The first write to each table allocates its segments on two servers
	// and syncs the backup: on a loaded machine a gateway may answer a SET
	// with an error (not acknowledged). SETs are idempotent, so the stream
	// is sent again until every reply is OK; each attempt's errors are
	// logged.
	want := fmt.Sprintf("errors: 0, replies: %d", *keys)
	for attempt := 1; ; attempt++ {
		out, err := redis(ctx, c, stream.String(), "--pipe", "--pipe-timeout", "300")
		if err == nil && strings.Contains(out, want) {
			break
		}
		t.Logf("redis-cli --pipe, attempt %d: %v %s", attempt, err, lastLine(out))
		if attempt == 3 {
			t.Fatalf("%d keys not all written in %d attempts", *keys, attempt)
		}
	}
	checkValues(ctx, t, c, values)
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndex(s, "\n")+1:]
}

// checkValues reads every key back through the gateway and compares.
func checkValues(ctx context.Context, t *testing.T, c *cluster, values map[string]string) {
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
		out, err := redis(ctx, c, "", append([]string{"MGET"}, part...)...)
		if err != nil {
			t.Fatal(err)
		}
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

// Scenario 4: a server pod is force-deleted while a client writes; the
// cluster reports Degraded, then Ready once the StatefulSet brought the pod
// back, and every acknowledged write reads back.
func testServerForceDeleted(ctx context.Context, t *testing.T, c *cluster, values map[string]string) {
	// The writer: one SET per redis-cli call, printing the index of each
	// write the gateway acknowledged with OK, until the stop file appears.
	writer := fmt.Sprintf(`i=0; while [ ! -e /tmp/stop ]; do i=$((i+1));
  out=$(timeout 10 redis-cli -h %s-gateway -p 6379 SET e2e:w:$i w$i 2>&1) || true
  [ "$out" = OK ] && echo "$i"; done`, sampleName)
	// The client pod's root file system is writable (no security context).
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(wctx, c.kubectlBin, c.args([]string{"-n", *ns, "exec", clientPod, "--", "sh", "-c", writer})...)
	var mu sync.Mutex
	var acked []string
	done := make(chan error, 1)
	go func() {
		done <- lines(cmd, func(l string) {
			mu.Lock()
			acked = append(acked, l)
			mu.Unlock()
		})
	}()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	eventually(t, time.Minute, "the writer's first acknowledged writes", func() error {
		if n := count(); n < 20 {
			return fmt.Errorf("%d writes acknowledged", n)
		}
		return nil
	})

	victim := sampleName + "-server-1"
	before := count()
	must(t)(c.kubectl(ctx, "-n", *ns, "delete", "pod", victim, "--grace-period=0", "--force"))
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
	// Writes go on after the failover.
	after := count()
	eventually(t, time.Minute, "writes acknowledged after recovery", func() error {
		if n := count(); n < after+20 {
			return fmt.Errorf("%d writes acknowledged since Ready", n-after)
		}
		return nil
	})
	must(t)(c.kubectl(ctx, "-n", *ns, "exec", clientPod, "--", "touch", "/tmp/stop"))
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("writer: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the writer did not stop")
	}
	mu.Lock()
	for _, i := range acked {
		values["e2e:w:"+i] = "w" + i
	}
	n := len(acked)
	mu.Unlock()
	t.Logf("%d writes acknowledged, %d before the pod was deleted", n, before)
	checkValues(ctx, t, c, values)
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

// The cluster chart: a PDPMCluster from values becomes Ready and `helm
// test` passes PING and SET/GET through its gateway Service.
func testClusterChart(ctx context.Context, t *testing.T, c *cluster, root, tg string) {
	must(t)(c.helm(ctx, "install", "chart-cluster", filepath.Join(root, "charts", "pdpm-cluster"), "--namespace", *ns,
		"--set", "name=charted", "--set", "spec.monitor.replicas=1", "--set", "spec.servers.allowMultiplePerNode=true",
		"--set", "spec.cleanupPolicy=WipeData",
		"--set", "spec.images.tag="+tg, "--set", "spec.images.pullPolicy="+*pullPolicy,
		"--set", "test.image.tag="+tg, "--set", "test.image.pullPolicy="+*pullPolicy))
	waitReady(ctx, t, c, "charted", 6*time.Minute)
	// The test pod exits 0 only when PING, SET, GET and DEL all answered as
	// expected; it is deleted on success (so `helm test --logs` has nothing
	// to read) and kept on failure.
	if _, err := c.helm(ctx, "test", "chart-cluster", "--namespace", *ns, "--timeout", "2m"); err != nil {
		logs, _ := c.kubectl(ctx, "-n", *ns, "logs", "charted-test-gateway")
		t.Fatalf("%v\ntest pod log:\n%s", err, logs)
	}
	must(t)(c.helm(ctx, "uninstall", "chart-cluster", "--namespace", *ns, "--wait", "--timeout", "4m"))
	eventually(t, 4*time.Minute, "the charted cluster gone", func() error {
		out, err := c.kubectl(ctx, "-n", *ns, "get", "pods,pdpmclusters", "-l", "app.kubernetes.io/instance=charted", "-o", "name")
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
// policy keeps (the CRD).
func testHelmUninstall(ctx context.Context, t *testing.T, c *cluster) {
	must(t)(c.kubectl(ctx, "delete", "namespace", *ns, "--timeout=3m"))
	must(t)(c.helm(ctx, "uninstall", releaseName, "--namespace", *opNS, "--wait", "--timeout", "2m"))
	for _, q := range [][]string{
		{"-n", *opNS, "get", "deployments,services,serviceaccounts,roles,rolebindings", "-l", "app.kubernetes.io/instance=" + releaseName, "-o", "name"},
		{"get", "clusterroles,clusterrolebindings", "-l", "app.kubernetes.io/instance=" + releaseName, "-o", "name"},
	} {
		if out := strings.TrimSpace(must(t)(c.kubectl(ctx, q...))); out != "" {
			t.Errorf("left after helm uninstall: %s", out)
		}
	}
	must(t)(c.kubectl(ctx, "get", "crd", "pdpmclusters.pdpm.io"))
}
