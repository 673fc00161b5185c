package k8s

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The CSI driver on the real cluster (docs/csi.md): the chart's CSI
// manifests installed, a PDPMCluster, and PersistentVolumeClaims of its
// StorageClasses used by pods.

var (
	kubeletDir  = flag.String("kubelet-dir", "/var/lib/kubelet", "kubelet's root directory on the nodes (where the CSI node plugin mounts)")
	csiStateDir = flag.String("csi-state-dir", "/var/lib/pdpm-csi", "where the CSI node plugin records the volumes it staged, on the nodes")
)

const (
	scDelete       = "pdfs-e2e"        // StorageClass of the sample's volumes, reclaim policy Delete
	scRetain       = "pdfs-e2e-retain" // the same, reclaim policy Retain
	csiControllerD = "pdpm-csi-controller"
	csiNodeDS      = "pdpm-csi-node"
	csiMounterDS   = "pdpm-csi-mounter"
)

// csiHelmArgs are the chart values that install the CSI driver beside the
// operator, with two StorageClasses for the sample's volumes (Delete,
// Retain) whose Secret is the one the operator makes beside the sample.
func csiHelmArgs(tg string) []string {
	args := []string{"--set", "csi.enabled=true", "--set", "csi.image.tag=" + tg, "--set", "csi.image.pullPolicy=" + *pullPolicy,
		"--set", "csi.node.kubeletDir=" + *kubeletDir, "--set", "csi.node.stateDir=" + *csiStateDir}
	for i, sc := range []struct{ name, policy string }{{scDelete, "Delete"}, {scRetain, "Retain"}} {
		p := fmt.Sprintf("csi.storageClasses[%d].", i)
		args = append(args, "--set", p+"name="+sc.name, "--set", p+"cluster="+sampleName,
			"--set", p+"namespace="+*ns, "--set", p+"reclaimPolicy="+sc.policy,
			// The client image's user owns the volumes (kubelet chowns nothing).
			"--set", p+"uid=65532", "--set", p+"gid=65532")
	}
	return args
}

// deleteCSIObjects deletes, best effort, what the CSI scenarios leave on
// failure: pods and claims first (their mounts need the node plugin, the
// volumes the controller), then the persistent volumes.
func deleteCSIObjects(ctx context.Context, c *cluster) {
	_, _ = c.kubectl(ctx, "-n", *ns, "delete", "pods,pvc", "--all", "--timeout=2m")
	_, _ = c.kubectl(ctx, "delete", "pv", "-l", "pdpm-e2e=csi", "--timeout=1m")
}

// The CSI driver is running: the controller Available, the node plugin and
// the mounter on every node, and kubelet registered the driver (every
// node's CSINode lists it).
func checkCSIRunning(ctx context.Context, t *testing.T, c *cluster) {
	must(t)(c.kubectl(ctx, "-n", *opNS, "wait", "--for=condition=Available", "deployment/"+csiControllerD, "--timeout=2m"))
	must(t)(c.kubectl(ctx, "-n", *opNS, "rollout", "status", "daemonset/"+csiNodeDS, "--timeout=2m"))
	// OnDelete: no rollout status; its pods are ready on every node.
	eventually(t, 2*time.Minute, "the mounter ready on every node", func() error {
		out, err := c.kubectl(ctx, "-n", *opNS, "get", "daemonset", csiMounterDS, "-o",
			"jsonpath={.status.desiredNumberScheduled} {.status.numberReady}")
		if err != nil {
			return err
		}
		var want, ready int
		if _, err := fmt.Sscan(out, &want, &ready); err != nil || want == 0 || ready != want {
			return fmt.Errorf("mounters ready/scheduled: %q", out)
		}
		return nil
	})
	eventually(t, time.Minute, "every node's CSINode lists pdfs.csi.pdpm.io", func() error {
		out, err := c.kubectl(ctx, "get", "csinodes", "-o",
			`jsonpath={range .items[*]}{.metadata.name}={.spec.drivers[*].name}{"\n"}{end}`)
		if err != nil {
			return err
		}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if !strings.Contains(l, "pdfs.csi.pdpm.io") {
				return fmt.Errorf("not registered: %q", l)
			}
		}
		return nil
	})
}

// The operator makes the CSI Secret beside the cluster: its monitors'
// Service and the key it generated (what the StorageClasses name).
func testCSISecret(ctx context.Context, t *testing.T, c *cluster) {
	var sec struct {
		Data map[string]string `json:"data"`
	}
	if err := c.getJSON(ctx, &sec, "-n", *ns, "secret", sampleName+"-csi"); err != nil {
		t.Fatal(err)
	}
	key := must(t)(c.kubectl(ctx, "-n", *ns, "get", "secret", sampleName+"-key", "-o", "jsonpath={.data.cluster-key}"))
	monitors, err := base64.StdEncoding.DecodeString(sec.Data["monitors"])
	if want := fmt.Sprintf("%s.%s.svc:7400", sampleName, *ns); err != nil || string(monitors) != want {
		t.Errorf("the CSI Secret's monitors: %q (%v), want %q", monitors, err, want)
	}
	if sec.Data["clusterSecret"] == "" || sec.Data["clusterSecret"] != key {
		t.Errorf("the CSI Secret's clusterSecret is not the cluster key")
	}
}

// The volume scenarios that need only the cluster, at once: RWX between
// two pods, expansion under writes, a full volume beside a busy one.
func testCSIVolumes(ctx context.Context, t *testing.T, c *cluster, tg string) {
	for _, s := range []struct {
		name string
		f    func(context.Context, *testing.T, *cluster, string)
	}{{"rwx-two-pods", testCSIReadWriteMany}, {"expand-under-writes", testCSIExpandUnderWrites}, {"full-volume", testCSIFullVolume}} {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			s.f(ctx, t, c, tg)
			fmt.Printf("e2e   %-26s %6.1fs\n", s.name, time.Since(start).Seconds())
		})
	}
}

// Both reclaim policies, at once.
func testCSIReclaim(ctx context.Context, t *testing.T, c *cluster, tg string) {
	t.Run("delete", func(t *testing.T) { t.Parallel(); testCSIDeletePolicy(ctx, t, c, tg) })
	t.Run("retain", func(t *testing.T) { t.Parallel(); testCSIRetainPolicy(ctx, t, c, tg) })
}

// The node plugin's pod deleted while a pod writes to a volume: the mounts
// live in the mounter's pod, so no write fails; the DaemonSet's next plugin
// registers with kubelet and serves the volume to a new pod (the writer's
// check); the mounter's pod is the same and never restarted.
func testCSINodePluginDeleted(ctx context.Context, t *testing.T, c *cluster, tg string) {
	mounterPods := func() string {
		return must(t)(c.kubectl(ctx, "-n", *opNS, "get", "pods", "-l", "app.kubernetes.io/component=mounter,app.kubernetes.io/name=pdpm-csi",
			"-o", `jsonpath={range .items[*]}{.metadata.uid}/{.status.containerStatuses[0].restartCount} {end}`))
	}
	mountersBefore := mounterPods()
	claim(ctx, t, c, "plugin-gone", scDelete, "", "64Mi")
	w := startFileWriter(ctx, t, c, tg, "plugin-writer", "plugin-gone")
	plugins := must(t)(c.kubectl(ctx, "-n", *opNS, "get", "pods", "-l", "app.kubernetes.io/component=node,app.kubernetes.io/name=pdpm-csi", "-o", "name"))
	must(t)(c.kubectl(ctx, append([]string{"-n", *opNS, "delete", "--timeout=2m"}, strings.Fields(plugins)...)...))
	w.waitFor(ctx, t, c, 50, time.Minute, "writes after the node plugin's pod was deleted")
	checkCSIRunning(ctx, t, c)
	w.waitFor(ctx, t, c, 50, time.Minute, "writes once the next node plugin runs")
	w.stop(ctx, t, c)
	if after := mounterPods(); after != mountersBefore {
		t.Errorf("the mounters' pods changed or restarted: %q, then %q", mountersBefore, after)
	}
	must(t)(c.kubectl(ctx, "-n", *ns, "delete", "pvc", "plugin-gone", "--timeout=1m"))
}

// claim creates a PersistentVolumeClaim and waits until it is Bound;
// volumeName "" lets the StorageClass provision one.
func claim(ctx context.Context, t *testing.T, c *cluster, name, storageClass, volumeName, size string) {
	t.Helper()
	spec := fmt.Sprintf(`apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: %s}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: %q
  volumeName: %q
  resources: {requests: {storage: %s}}
`, name, storageClass, volumeName, size)
	must(t)(c.kubectlIn(ctx, spec, "-n", *ns, "apply", "-f", "-"))
	must(t)(c.kubectl(ctx, "-n", *ns, "wait", "--for=jsonpath={.status.phase}=Bound", "pvc/"+name, "--timeout=2m"))
}

// startPod runs a pod of the client image with the claim mounted on /data,
// running script (sh), and with wait waits until it is Ready.
func startPod(ctx context.Context, t *testing.T, c *cluster, tg, name, claimName, script string, wait bool) {
	t.Helper()
	spec := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
    - name: main
      image: pdpm-e2e/client:%s
      imagePullPolicy: %s
      command: [sh, -c, %q]
      volumeMounts: [{name: data, mountPath: /data}]
  volumes:
    - name: data
      persistentVolumeClaim: {claimName: %s}
`, name, tg, *pullPolicy, script, claimName)
	must(t)(c.kubectlIn(ctx, spec, "-n", *ns, "apply", "-f", "-"))
	if wait {
		must(t)(c.kubectl(ctx, "-n", *ns, "wait", "--for=condition=Ready", "pod/"+name, "--timeout=3m"))
	}
}

// inPod runs a shell command in a pod and returns its output.
func inPod(ctx context.Context, c *cluster, pod, script string) (string, error) {
	return c.kubectl(ctx, "-n", *ns, "exec", pod, "--", "sh", "-c", script)
}

// volumeOf is the claim's PersistentVolume's name.
func volumeOf(ctx context.Context, t *testing.T, c *cluster, claimName string) string {
	t.Helper()
	return strings.TrimSpace(must(t)(c.kubectl(ctx, "-n", *ns, "get", "pvc", claimName, "-o", "jsonpath={.spec.volumeName}")))
}

// RWX: two pods mount one claim and each sees what the other wrote, files
// created by either and lines appended by both at once.
func testCSIReadWriteMany(ctx context.Context, t *testing.T, c *cluster, tg string) {
	claim(ctx, t, c, "shared", scDelete, "", "64Mi")
	startPod(ctx, t, c, tg, "pod-a", "shared", "sleep infinity", true)
	startPod(ctx, t, c, tg, "pod-b", "shared", "sleep infinity", true)
	must(t)(inPod(ctx, c, "pod-a", "echo from-a > /data/a.txt"))
	if out := must(t)(inPod(ctx, c, "pod-b", "cat /data/a.txt")); strings.TrimSpace(out) != "from-a" {
		t.Fatalf("pod-b reads %q in pod-a's file", out)
	}
	must(t)(inPod(ctx, c, "pod-b", "echo from-b > /data/b.txt"))
	if out := must(t)(inPod(ctx, c, "pod-a", "cat /data/b.txt")); strings.TrimSpace(out) != "from-b" {
		t.Fatalf("pod-a reads %q in pod-b's file", out)
	}
	// Both write 200 lines at once, each into its own file; each then reads
	// the other's whole file.
	const n = 200
	script := func(who string) string {
		return fmt.Sprintf(`i=1; while [ $i -le %d ]; do echo "%s $i" >> /data/%s.lines; i=$((i+1)); done`, n, who, who)
	}
	errs := make(chan error, 2)
	for _, who := range []string{"a", "b"} {
		go func() { _, err := inPod(ctx, c, "pod-"+who, script(who)); errs <- err }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for reader, writer := range map[string]string{"pod-a": "b", "pod-b": "a"} {
		out := must(t)(inPod(ctx, c, reader, "cat /data/"+writer+".lines"))
		got := strings.Split(strings.TrimSpace(out), "\n")
		if len(got) != n {
			t.Fatalf("%s reads %d of %s's %d lines", reader, len(got), writer, n)
		}
		for i, l := range got {
			if want := fmt.Sprintf("%s %d", writer, i+1); l != want {
				t.Fatalf("%s reads line %d of %s's file as %q, want %q", reader, i+1, writer, l, want)
			}
		}
	}
	// The volume's size is the claim's: its quota, as df shows it.
	out := must(t)(inPod(ctx, c, "pod-a", "df -k /data | tail -1"))
	if f := strings.Fields(out); len(f) < 2 || f[1] != fmt.Sprint(64<<10) {
		t.Errorf("df of the 64Mi volume: %q, want 65536 1K-blocks", out)
	}
}

// fileWriter is a pod that appends numbered lines to /data/<name>.log, one
// write per line, until /data/<name>.stop exists; a failed write ends it
// with the error (the pod Failed), a stop with success.
type fileWriter struct{ pod, file, claim, tag string }

func startFileWriter(ctx context.Context, t *testing.T, c *cluster, tg, name, claimName string) *fileWriter {
	t.Helper()
	w := &fileWriter{pod: name, file: "/data/" + name + ".log", claim: claimName, tag: tg}
	script := fmt.Sprintf(`rm -f /data/%[1]s.stop; i=0; while [ ! -e /data/%[1]s.stop ]; do i=$((i+1));
  echo "line $i" >> %[2]s || { echo "write $i failed" >&2; exit 1; }; sleep 0.02; done`, name, w.file)
	startPod(ctx, t, c, tg, name, claimName, script, true)
	w.waitFor(ctx, t, c, 50, time.Minute, "the writer's first lines")
	return w
}

// lines is how many lines the file holds now.
func (w *fileWriter) lines(ctx context.Context, c *cluster) (int, error) {
	out, err := inPod(ctx, c, w.pod, "wc -l < "+w.file)
	if err != nil {
		return 0, err
	}
	var n int
	_, err = fmt.Sscan(out, &n)
	return n, err
}

// waitFor waits until n more lines than now are written.
func (w *fileWriter) waitFor(ctx context.Context, t *testing.T, c *cluster, n int, timeout time.Duration, what string) {
	t.Helper()
	from, _ := w.lines(ctx, c)
	eventually(t, timeout, what, func() error {
		got, err := w.lines(ctx, c)
		if err != nil {
			return err
		}
		if got-from < n {
			return fmt.Errorf("%d of %d more lines written (writer pod %s)", got-from, n, w.pod)
		}
		return nil
	})
}

// stop ends the writer, checks that no write failed and that the file is
// every line, in order, and deletes the pod. Returns the line count.
func (w *fileWriter) stop(ctx context.Context, t *testing.T, c *cluster) int {
	t.Helper()
	// The writer may see the file and end while touch is still in its
	// system calls: the container's end then kills touch (exit 137). The
	// pod's phase and log below say whether the writer ended well.
	if _, err := inPod(ctx, c, w.pod, "touch /data/"+w.pod+".stop"); err != nil {
		t.Logf("stopping writer %s: %v", w.pod, err)
	}
	var podPhase string
	eventually(t, time.Minute, "the writer "+w.pod+" ends", func() error {
		var err error
		podPhase, err = c.kubectl(ctx, "-n", *ns, "get", "pod", w.pod, "-o", "jsonpath={.status.phase}")
		if err == nil && podPhase != "Succeeded" && podPhase != "Failed" {
			err = fmt.Errorf("phase %s", podPhase)
		}
		return err
	})
	if out := must(t)(c.kubectl(ctx, "-n", *ns, "logs", w.pod)); podPhase != "Succeeded" || strings.TrimSpace(out) != "" {
		t.Errorf("writer %s: %s: %s", w.pod, podPhase, out)
	}
	// The pod is done: read the file from a new one on the same claim.
	reader := w.pod + "-check"
	startPod(ctx, t, c, w.tag, reader, w.claim, "sleep infinity", true)
	content := must(t)(inPod(ctx, c, reader, "cat "+w.file))
	got := strings.Split(strings.TrimSpace(content), "\n")
	for i, l := range got {
		if want := fmt.Sprintf("line %d", i+1); l != want {
			t.Fatalf("%s: line %d is %q, want %q", w.file, i+1, l, want)
		}
	}
	must(t)(c.kubectl(ctx, "-n", *ns, "delete", "pod", w.pod, reader, "--timeout=2m"))
	t.Logf("writer %s: %d lines, all intact", w.pod, len(got))
	return len(got)
}

// df is a mount's size and use in 1K blocks, as a pod sees them.
func df(ctx context.Context, t *testing.T, c *cluster, pod string) (total, used int64) {
	t.Helper()
	out := must(t)(inPod(ctx, c, pod, "df -k /data | tail -1"))
	if _, err := fmt.Sscan(strings.Join(strings.Fields(out)[1:3], " "), &total, &used); err != nil {
		t.Fatalf("df: %q: %v", out, err)
	}
	return total, used
}

// Expansion: the claim grows from 64Mi to 128Mi while a pod writes; the
// writes go on, the claim and the pod's mount show the new size.
func testCSIExpandUnderWrites(ctx context.Context, t *testing.T, c *cluster, tg string) {
	claim(ctx, t, c, "growing", scDelete, "", "64Mi")
	w := startFileWriter(ctx, t, c, tg, "grow-writer", "growing")
	must(t)(c.kubectl(ctx, "-n", *ns, "patch", "pvc", "growing", "--type=merge", "-p",
		`{"spec":{"resources":{"requests":{"storage":"128Mi"}}}}`))
	must(t)(c.kubectl(ctx, "-n", *ns, "wait", "--for=jsonpath={.status.capacity.storage}=128Mi", "pvc/growing", "--timeout=2m"))
	eventually(t, time.Minute, "the pod's mount shows 128Mi", func() error {
		if total, _ := df(ctx, t, c, w.pod); total != 128<<10 {
			return fmt.Errorf("df: %d 1K-blocks", total)
		}
		return nil
	})
	w.waitFor(ctx, t, c, 50, time.Minute, "writes after the expansion")
	w.stop(ctx, t, c)
	must(t)(c.kubectl(ctx, "-n", *ns, "delete", "pvc", "growing", "--timeout=1m"))
}

// A full volume: writing past the quota fails in the pod with ENOSPC or
// EDQUOT; the volume still serves (space freed, written again), and a pod
// writing to another volume meanwhile never notices.
func testCSIFullVolume(ctx context.Context, t *testing.T, c *cluster, tg string) {
	claim(ctx, t, c, "small", scDelete, "", "16Mi")
	claim(ctx, t, c, "neighbour", scDelete, "", "64Mi")
	w := startFileWriter(ctx, t, c, tg, "neighbour-writer", "neighbour")
	startPod(ctx, t, c, tg, "pod-small", "small", "sleep infinity", true)
	out, err := inPod(ctx, c, "pod-small", "dd if=/dev/zero of=/data/big bs=1M count=32 conv=fsync 2>&1")
	if err == nil {
		t.Fatalf("32 MiB written into a 16Mi volume: %s", out)
	}
	if !strings.Contains(out, "No space left on device") && !strings.Contains(out, "Disk quota exceeded") {
		t.Fatalf("writing past the quota: %v: %s; want ENOSPC or EDQUOT", err, out)
	}
	t.Logf("writing past the quota: %s", lastLine(out))
	must(t)(inPod(ctx, c, "pod-small", "rm /data/big && echo after-full > /data/small.txt && cat /data/small.txt"))
	if _, used := df(ctx, t, c, "pod-small"); used > 1024 {
		t.Errorf("the emptied volume still uses %d KiB", used)
	}
	w.waitFor(ctx, t, c, 20, time.Minute, "the neighbour's writes")
	w.stop(ctx, t, c)
	must(t)(c.kubectl(ctx, "-n", *ns, "delete", "pod", "pod-small", "--timeout=2m"))
	must(t)(c.kubectl(ctx, "-n", *ns, "delete", "pvc", "small", "neighbour", "--timeout=1m"))
}

// pvCSI is a PersistentVolume's csi source, as the provisioner made it.
type pvCSI struct {
	Driver             string            `json:"driver"`
	VolumeHandle       string            `json:"volumeHandle"`
	VolumeAttributes   map[string]string `json:"volumeAttributes,omitempty"`
	NodeStageSecretRef map[string]string `json:"nodeStageSecretRef,omitempty"`
}

func volumeSource(ctx context.Context, t *testing.T, c *cluster, pv string) pvCSI {
	t.Helper()
	var v struct {
		Spec struct {
			CSI pvCSI `json:"csi"`
		} `json:"spec"`
	}
	if err := c.getJSON(ctx, &v, "pv", pv); err != nil {
		t.Fatal(err)
	}
	return v.Spec.CSI
}

// staticVolume creates a PersistentVolume for an existing pDFS volume (as
// an administrator would for a retained one), reserved for a claim.
func staticVolume(ctx context.Context, t *testing.T, c *cluster, name, claimName string, src pvCSI) {
	t.Helper()
	csiJSON, _ := json.Marshal(src)
	spec := fmt.Sprintf(`{"apiVersion": "v1", "kind": "PersistentVolume",
  "metadata": {"name": %q, "labels": {"pdpm-e2e": "csi"}},
  "spec": {"capacity": {"storage": "64Mi"}, "accessModes": ["ReadWriteMany"],
    "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
    "claimRef": {"namespace": %q, "name": %q}, "csi": %s}}`, name, *ns, claimName, csiJSON)
	must(t)(c.kubectlIn(ctx, spec, "apply", "-f", "-"))
}

// Delete policy: deleting the claim deletes the PersistentVolume and the
// pDFS volume — a PersistentVolume made again for its handle cannot be
// mounted: the node plugin answers NotFound.
func testCSIDeletePolicy(ctx context.Context, t *testing.T, c *cluster, tg string) {
	pv := volumeOf(ctx, t, c, "shared")
	src := volumeSource(ctx, t, c, pv)
	if src.Driver != "pdfs.csi.pdpm.io" || !strings.HasPrefix(src.VolumeHandle, sampleName+"/") {
		t.Fatalf("PV %s: driver %q, handle %q", pv, src.Driver, src.VolumeHandle)
	}
	must(t)(c.kubectl(ctx, "-n", *ns, "delete", "pod", "pod-a", "pod-b", "--timeout=2m"))
	must(t)(c.kubectl(ctx, "-n", *ns, "delete", "pvc", "shared", "--timeout=1m"))
	must(t)(c.kubectl(ctx, "wait", "--for=delete", "pv/"+pv, "--timeout=2m"))

	staticVolume(ctx, t, c, "deleted-again", "deleted-again", src)
	claim(ctx, t, c, "deleted-again", "", "deleted-again", "64Mi")
	startPod(ctx, t, c, tg, "pod-deleted", "deleted-again", "sleep infinity", false)
	eventually(t, 2*time.Minute, "the deleted volume's mount refused as NotFound", func() error {
		out, err := c.kubectl(ctx, "-n", *ns, "get", "events", "--field-selector",
			"involvedObject.name=pod-deleted,reason=FailedMount", "-o", "jsonpath={.items[*].message}")
		if err != nil {
			return err
		}
		if !strings.Contains(out, "NotFound") {
			return fmt.Errorf("FailedMount events: %q", out)
		}
		return nil
	})
	must(t)(c.kubectl(ctx, "-n", *ns, "delete", "pod", "pod-deleted", "--timeout=2m"))
	must(t)(c.kubectl(ctx, "-n", *ns, "delete", "pvc", "deleted-again", "--timeout=1m"))
	must(t)(c.kubectl(ctx, "delete", "pv", "deleted-again", "--timeout=1m"))
}

// Retain policy: deleting the claim keeps the PersistentVolume (Released)
// and the data; the volume bound again to a new claim serves the same
// files.
func testCSIRetainPolicy(ctx context.Context, t *testing.T, c *cluster, tg string) {
	claim(ctx, t, c, "kept", scRetain, "", "64Mi")
	pv := volumeOf(ctx, t, c, "kept")
	startPod(ctx, t, c, tg, "pod-kept", "kept", "echo kept-data > /data/kept.txt && sync && sleep infinity", true)
	must(t)(c.kubectl(ctx, "-n", *ns, "delete", "pod", "pod-kept", "--timeout=2m"))
	must(t)(c.kubectl(ctx, "-n", *ns, "delete", "pvc", "kept", "--timeout=1m"))
	must(t)(c.kubectl(ctx, "wait", "--for=jsonpath={.status.phase}=Released", "pv/"+pv, "--timeout=1m"))

	// An administrator makes the retained volume available to a new claim.
	must(t)(c.kubectl(ctx, "label", "pv", pv, "pdpm-e2e=csi"))
	must(t)(c.kubectl(ctx, "patch", "pv", pv, "--type=json", "-p",
		fmt.Sprintf(`[{"op":"replace","path":"/spec/claimRef","value":{"namespace":%q,"name":"kept-again"}}]`, *ns)))
	claim(ctx, t, c, "kept-again", scRetain, pv, "64Mi")
	startPod(ctx, t, c, tg, "pod-kept-again", "kept-again", "sleep infinity", true)
	if out := must(t)(inPod(ctx, c, "pod-kept-again", "cat /data/kept.txt")); strings.TrimSpace(out) != "kept-data" {
		t.Fatalf("the retained volume holds %q, want kept-data", out)
	}
	must(t)(c.kubectl(ctx, "-n", *ns, "delete", "pod", "pod-kept-again", "--timeout=2m"))
	must(t)(c.kubectl(ctx, "-n", *ns, "delete", "pvc", "kept-again", "--timeout=1m"))
	must(t)(c.kubectl(ctx, "delete", "pv", pv, "--timeout=1m"))
}
