package controller

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	pdpmv1alpha1 "pdpm.io/pdpm/operator/api/v1alpha1"
	"pdpm.io/pdpm/operator/internal/pdpmv1"
)

func ownedBy(t *testing.T, obj client.Object, c *pdpmv1alpha1.PDPMCluster) {
	t.Helper()
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.Kind != "PDPMCluster" || ref.Name != c.Name || ref.UID != c.UID {
		t.Errorf("%T %s: controller reference %+v, want the PDPMCluster %s", obj, obj.GetName(), ref, c.Name)
	}
}

func container(t *testing.T, spec *corev1.PodSpec, name string) *corev1.Container {
	t.Helper()
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i]
		}
	}
	t.Fatalf("no container %s in %v", name, spec.Containers)
	return nil
}

func TestCreateMakesAllChildren(t *testing.T) {
	ns := newNamespace(t)
	c := testCluster(ns)
	createCluster(t, c)
	c = getCluster(t, c)

	cm := &corev1.ConfigMap{}
	mustGet(t, ns, "pdpm-config", cm)
	ownedBy(t, cm, c)
	conf := cm.Data["pdpm.conf"]
	for _, line := range []string{
		"segment_size = 8388608", "replica_count = 2", "transport = tcp", "pm_mode = emulated",
		"pm_path = /var/lib/pdpm/pm/pm.img", "pm_size = 67108864", "etcd_mode = embedded",
		// The API's failure-detection defaults reach the monitor.
		"heartbeat_interval = 200ms", "suspect_timeout = 2000ms", "down_timeout = 5000ms",
		fmt.Sprintf("monitor_endpoints = pdpm-monitor-0.pdpm-monitor.%[1]s.svc:7400,pdpm-monitor-1.pdpm-monitor.%[1]s.svc:7400,pdpm-monitor-2.pdpm-monitor.%[1]s.svc:7400", ns),
	} {
		if !strings.Contains(conf, line+"\n") {
			t.Errorf("configuration lacks %q:\n%s", line, conf)
		}
	}

	sec := &corev1.Secret{}
	mustGet(t, ns, "pdpm-key", sec)
	ownedBy(t, sec, c)
	key := sec.Data[ClusterKeyField]
	if _, err := hex.DecodeString(string(key)); err != nil || len(key) != 64 {
		t.Errorf("cluster key %q is not 32 random bytes in hex", key)
	}
	// The CSI driver's Secret: what a StorageClass names to reach the cluster.
	csi := &corev1.Secret{}
	mustGet(t, ns, "pdpm-csi", csi)
	ownedBy(t, csi, c)
	if got, want := string(csi.Data[CSIMonitorsField]), "pdpm."+ns+".svc:7400"; got != want {
		t.Errorf("CSI Secret's monitors %q, want %q", got, want)
	}
	if got := string(csi.Data[CSISecretField]); got != string(key) {
		t.Errorf("CSI Secret's clusterSecret %q, want the cluster key %q", got, key)
	}

	for _, name := range []string{"pdpm-monitor", "pdpm-server"} {
		svc := &corev1.Service{}
		mustGet(t, ns, name, svc)
		ownedBy(t, svc, c)
		if svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
			t.Errorf("service %s is not headless with unready addresses published: %+v", name, svc.Spec)
		}
	}
	clientSvc := &corev1.Service{}
	mustGet(t, ns, "pdpm", clientSvc)
	ownedBy(t, clientSvc, c)
	if clientSvc.Spec.ClusterIP == corev1.ClusterIPNone || clientSvc.Spec.Ports[0].Port != MonitorPort ||
		clientSvc.Spec.Selector["app.kubernetes.io/component"] != "monitor" {
		t.Errorf("client service: %+v", clientSvc.Spec)
	}

	for name, want := range map[string]int32{"pdpm-monitor": 1, "pdpm-server": 1} {
		pdb := &policyv1.PodDisruptionBudget{}
		mustGet(t, ns, name, pdb)
		ownedBy(t, pdb, c)
		if pdb.Spec.MaxUnavailable.IntValue() != int(want) {
			t.Errorf("PDB %s maxUnavailable %v, want %d", name, pdb.Spec.MaxUnavailable, want)
		}
	}

	mon := &appsv1.StatefulSet{}
	mustGet(t, ns, "pdpm-monitor", mon)
	ownedBy(t, mon, c)
	if *mon.Spec.Replicas != 3 || mon.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("monitor replicas %d policy %s", *mon.Spec.Replicas, mon.Spec.PodManagementPolicy)
	}
	pod := &mon.Spec.Template.Spec
	if m := container(t, pod, "pdpm-monitor"); m.Image != "pdpm/core:0.1.0" {
		t.Errorf("monitor image %s", m.Image)
	}
	etcd := container(t, pod, "etcd")
	wantPeers := fmt.Sprintf("--initial-cluster=pdpm-monitor-0=http://pdpm-monitor-0.pdpm-monitor.%s.svc:2380,", ns)
	if etcd.Image != "pdpm/core:0.1.0" || !slices.ContainsFunc(etcd.Args, func(a string) bool { return strings.HasPrefix(a, wantPeers) }) {
		t.Errorf("etcd container: %s %v", etcd.Image, etcd.Args)
	}
	if len(mon.Spec.VolumeClaimTemplates) != 1 || mon.Spec.VolumeClaimTemplates[0].Name != "etcd-data" ||
		!mon.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().Equal(resource.MustParse("1Gi")) {
		t.Errorf("monitor claims: %+v", mon.Spec.VolumeClaimTemplates)
	}
	if mon.Spec.Template.Annotations[ConfigHashAnnotation] != hashOf(cm.Data) {
		t.Errorf("monitor pods do not carry the configuration hash")
	}

	srv := &appsv1.StatefulSet{}
	mustGet(t, ns, "pdpm-server", srv)
	ownedBy(t, srv, c)
	if *srv.Spec.Replicas != 3 || *srv.Spec.UpdateStrategy.RollingUpdate.Partition != 0 {
		t.Errorf("server replicas %d partition %d", *srv.Spec.Replicas, *srv.Spec.UpdateStrategy.RollingUpdate.Partition)
	}
	if p := srv.Spec.PersistentVolumeClaimRetentionPolicy; p.WhenDeleted != appsv1.RetainPersistentVolumeClaimRetentionPolicyType ||
		p.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
		t.Errorf("server claims are not retained: %+v", p)
	}
	anti := srv.Spec.Template.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if len(anti) != 1 || anti[0].TopologyKey != corev1.LabelHostname {
		t.Errorf("servers are not spread across nodes: %+v", anti)
	}
	if s := container(t, &srv.Spec.Template.Spec, "pdpm-server"); s.Image != "pdpm/core:0.1.0" {
		t.Errorf("server image %s", s.Image)
	}

	// The status is written after the children: wait for it.
	var cur *pdpmv1alpha1.PDPMCluster
	eventually(t, func() error {
		cur = getCluster(t, c)
		if cur.Status.ClusterKeyFingerprint != fingerprint(key) {
			return fmt.Errorf("status fingerprint %q, key %s", cur.Status.ClusterKeyFingerprint, fingerprint(key))
		}
		return nil
	})
	if !slices.Contains(cur.Finalizers, Finalizer) {
		t.Errorf("no finalizer: %v", cur.Finalizers)
	}
	waitEvents(t, ns, "ClusterKeyGenerated", 1)
	waitEvents(t, ns, "Created", 8)
	// Nothing runs yet and the monitor is unreachable: the status says so.
	cur = waitCondition(t, c, pdpmv1alpha1.ConditionAvailable, metav1.ConditionFalse, "MonitorQuorumLost")
	waitCondition(t, c, pdpmv1alpha1.ConditionDegraded, metav1.ConditionTrue, "MonitorsNotReady")
	if cur.Status.Epoch != 0 || cur.Status.Capacity != nil || cur.Status.MonitorLeader != "" {
		t.Errorf("monitor fields set without a monitor: %+v", cur.Status)
	}
}

func TestUpdatePropagatesToChildren(t *testing.T) {
	ns := newNamespace(t)
	c := testCluster(ns)
	createCluster(t, c)
	srv := &appsv1.StatefulSet{}
	mustGet(t, ns, "pdpm-server", srv)
	readyCluster(t, c, 3)
	oldHash := srv.Spec.Template.Annotations[ConfigHashAnnotation]

	err := updateCluster(t, c, func(c *pdpmv1alpha1.PDPMCluster) {
		c.Spec.Images.Tag = "0.2.0"
		c.Spec.Servers.RDMA.Transport = pdpmv1alpha1.TransportVerbs
		c.Spec.Servers.NodeSelector = map[string]string{"pdpm.io/pm": "true"}
		c.Spec.Monitor.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, func() error {
		cm := &corev1.ConfigMap{}
		if err := get(t, ns, "pdpm-config", cm); err != nil {
			return err
		}
		if !strings.Contains(cm.Data["pdpm.conf"], "transport = verbs\n") {
			return fmt.Errorf("configuration not updated")
		}
		mon := &appsv1.StatefulSet{}
		if err := get(t, ns, "pdpm-monitor", mon); err != nil {
			return err
		}
		m := container(t, &mon.Spec.Template.Spec, "pdpm-monitor")
		if m.Image != "pdpm/core:0.2.0" || !m.Resources.Requests.Memory().Equal(resource.MustParse("256Mi")) {
			return fmt.Errorf("monitor not updated: %s %v", m.Image, m.Resources)
		}
		if err := get(t, ns, "pdpm-server", srv); err != nil {
			return err
		}
		s := container(t, &srv.Spec.Template.Spec, "pdpm-server")
		if s.Image != "pdpm/core:0.2.0" || srv.Spec.Template.Spec.NodeSelector["pdpm.io/pm"] != "true" ||
			srv.Spec.Template.Annotations[ConfigHashAnnotation] == oldHash {
			return fmt.Errorf("server template not updated: %s %v", s.Image, srv.Spec.Template.Spec.NodeSelector)
		}
		return nil
	})
	// The monitor is unreachable, so the new server template waits: no
	// serving server is updated while the cluster's health is unknown.
	if p := *srv.Spec.UpdateStrategy.RollingUpdate.Partition; p != 3 {
		t.Errorf("partition %d, want 3 (rollout held)", p)
	}
	waitCondition(t, c, pdpmv1alpha1.ConditionProgressing, metav1.ConditionTrue, "RolloutPaused")
	waitEvents(t, ns, "Updated", 3)
	waitEvents(t, ns, "RolloutStarted", 1)
}

func TestDriftIsRepaired(t *testing.T) {
	ns := newNamespace(t)
	// The monitor confirms that the servers added behind the operator's back
	// never registered, so undoing that scale-up is safe.
	startMonitor(t, ns, 3)
	c := testCluster(ns)
	createCluster(t, c)
	ctx := context.Background()
	cm := &corev1.ConfigMap{}
	mustGet(t, ns, "pdpm-config", cm)
	want := cm.Data["pdpm.conf"]

	// Deleted children come back.
	for _, obj := range []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "pdpm-config", Namespace: ns}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "pdpm", Namespace: ns}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "pdpm-monitor", Namespace: ns}},
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "pdpm-server", Namespace: ns}},
	} {
		mustGet(t, ns, obj.GetName(), obj)
		uid := obj.GetUID()
		if err := k8s.Delete(ctx, obj); err != nil {
			t.Fatal(err)
		}
		eventually(t, func() error {
			if err := get(t, ns, obj.GetName(), obj); err != nil {
				return err
			}
			if obj.GetUID() == uid {
				return fmt.Errorf("%T %s not yet recreated", obj, obj.GetName())
			}
			return nil
		})
	}

	// Edited children are set back.
	mustGet(t, ns, "pdpm-config", cm)
	cm.Data["pdpm.conf"] = "segment_size = 1\n"
	if err := k8s.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	srv := &appsv1.StatefulSet{}
	mustGet(t, ns, "pdpm-server", srv)
	srv.Spec.Template.Spec.Containers[0].Image = "someone/else:latest"
	srv.Spec.Replicas = ptr.To[int32](7)
	if err := k8s.Update(ctx, srv); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() error {
		if err := get(t, ns, "pdpm-config", cm); err != nil {
			return err
		}
		if cm.Data["pdpm.conf"] != want {
			return fmt.Errorf("configuration still edited")
		}
		if err := get(t, ns, "pdpm-server", srv); err != nil {
			return err
		}
		if img := srv.Spec.Template.Spec.Containers[0].Image; img != "pdpm/core:0.1.0" || *srv.Spec.Replicas != 3 {
			return fmt.Errorf("server StatefulSet still edited: %s x%d", img, *srv.Spec.Replicas)
		}
		return nil
	})

	// The cluster key is never regenerated: a deleted key Secret is reported
	// until the original is restored.
	sec := &corev1.Secret{}
	mustGet(t, ns, "pdpm-key", sec)
	key := sec.Data[ClusterKeyField]
	if err := k8s.Delete(ctx, sec); err != nil {
		t.Fatal(err)
	}
	cur := waitCondition(t, c, pdpmv1alpha1.ConditionDegraded, metav1.ConditionTrue, "ClusterKeyMissing")
	if err := get(t, ns, "pdpm-key", &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a new cluster key was generated (%v)", err)
	}
	if cur.Status.ClusterKeyFingerprint != fingerprint(key) {
		t.Errorf("fingerprint changed to %s", cur.Status.ClusterKeyFingerprint)
	}
	wrong := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pdpm-key", Namespace: ns},
		Data: map[string][]byte{ClusterKeyField: []byte("00")}}
	if err := k8s.Create(ctx, wrong); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, c, pdpmv1alpha1.ConditionDegraded, metav1.ConditionTrue, "ClusterKeyChanged")
	wrong.Data[ClusterKeyField] = key
	if err := k8s.Update(ctx, wrong); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() error {
		cur := getCluster(t, c)
		for _, cond := range cur.Status.Conditions {
			if strings.Contains(cond.Message, "cluster key") || strings.HasPrefix(cond.Reason, "ClusterKey") {
				return fmt.Errorf("key problem still reported: %s", cond.Message)
			}
		}
		return nil
	})
}

func TestValidationRejects(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	create := []struct {
		name, want string
		mutate     func(*pdpmv1alpha1.PDPMCluster)
	}{
		{"even monitors", "spec.monitor.replicas", func(c *pdpmv1alpha1.PDPMCluster) { c.Spec.Monitor.Replicas = 2 }},
		{"no servers", "spec.servers.replicas", func(c *pdpmv1alpha1.PDPMCluster) { c.Spec.Servers.Replicas = -1 }},
		{"too many servers", "spec.servers.replicas", func(c *pdpmv1alpha1.PDPMCluster) { c.Spec.Servers.Replicas = 2000 }},
		{"replicas over servers", "must not exceed servers.replicas", func(c *pdpmv1alpha1.PDPMCluster) {
			c.Spec.Storage.ReplicaCount = 4
		}},
		{"replica count over 5", "spec.storage.replicaCount", func(c *pdpmv1alpha1.PDPMCluster) { c.Spec.Storage.ReplicaCount = 6 }},
		{"mode without member", "exactly the member named by mode", func(c *pdpmv1alpha1.PDPMCluster) {
			c.Spec.Servers.PM.Mode = pdpmv1alpha1.PMDevDax
		}},
		{"two members", "exactly the member named by mode", func(c *pdpmv1alpha1.PDPMCluster) {
			c.Spec.Servers.PM.FSDax = &pdpmv1alpha1.FSDaxSource{Path: "/mnt/pmem0"}
		}},
		{"devdax servers sharing a node", "cannot share a node", func(c *pdpmv1alpha1.PDPMCluster) {
			c.Spec.Servers.AllowMultiplePerNode = true
			c.Spec.Servers.PM = pdpmv1alpha1.PMSource{Mode: pdpmv1alpha1.PMDevDax, DevDax: &pdpmv1alpha1.DevDaxSource{Path: "/dev/dax0.0"}}
		}},
		{"unknown mode", "spec.servers.pm.mode", func(c *pdpmv1alpha1.PDPMCluster) { c.Spec.Servers.PM.Mode = "Optane" }},
		{"devdax path", "spec.servers.pm.devDax.path", func(c *pdpmv1alpha1.PDPMCluster) {
			c.Spec.Servers.PM = pdpmv1alpha1.PMSource{Mode: pdpmv1alpha1.PMDevDax, DevDax: &pdpmv1alpha1.DevDaxSource{Path: "/dev/sda"}}
		}},
		{"fsdax relative path", "spec.servers.pm.fsDax.path", func(c *pdpmv1alpha1.PDPMCluster) {
			c.Spec.Servers.PM = pdpmv1alpha1.PMSource{Mode: pdpmv1alpha1.PMFSDax, FSDax: &pdpmv1alpha1.FSDaxSource{Path: "pmem"}}
		}},
		{"emulated too small", "at least 16Mi", func(c *pdpmv1alpha1.PDPMCluster) { c.Spec.Servers.PM.Emulated.Size = resource.MustParse("1Mi") }},
		{"transport", "spec.servers.rdma.transport", func(c *pdpmv1alpha1.PDPMCluster) { c.Spec.Servers.RDMA.Transport = "roce" }},
		{"rdma resource name", "spec.servers.rdma.resourceName", func(c *pdpmv1alpha1.PDPMCluster) {
			c.Spec.Servers.RDMA.ResourceName = "no slash"
		}},
		{"external etcd without endpoints", "endpoints must be set with mode External", func(c *pdpmv1alpha1.PDPMCluster) {
			c.Spec.Monitor.Etcd.Mode = pdpmv1alpha1.EtcdExternal
		}},
		{"embedded etcd with endpoints", "endpoints must be set with mode External", func(c *pdpmv1alpha1.PDPMCluster) {
			c.Spec.Monitor.Etcd.Endpoints = []string{"http://etcd:2379"}
		}},
		{"external etcd with storage", "storage applies only to mode Embedded", func(c *pdpmv1alpha1.PDPMCluster) {
			c.Spec.Monitor.Etcd = pdpmv1alpha1.EtcdSpec{Mode: pdpmv1alpha1.EtcdExternal, Endpoints: []string{"http://etcd:2379"},
				Storage: &pdpmv1alpha1.VolumeSpec{Size: resource.MustParse("1Gi")}}
		}},
		{"etcd endpoint", "spec.monitor.etcd.endpoints", func(c *pdpmv1alpha1.PDPMCluster) {
			c.Spec.Monitor.Etcd = pdpmv1alpha1.EtcdSpec{Mode: pdpmv1alpha1.EtcdExternal, Endpoints: []string{"etcd:2379"}}
		}},
		{"https etcd endpoint", "should match '^http://", func(c *pdpmv1alpha1.PDPMCluster) {
			c.Spec.Monitor.Etcd = pdpmv1alpha1.EtcdSpec{Mode: pdpmv1alpha1.EtcdExternal, Endpoints: []string{"https://etcd:2379"}}
		}},
		{"fsdax with verbs", "FSDax PM cannot be used with the verbs transport", func(c *pdpmv1alpha1.PDPMCluster) {
			c.Spec.Servers.PM = pdpmv1alpha1.PMSource{Mode: pdpmv1alpha1.PMFSDax, FSDax: &pdpmv1alpha1.FSDaxSource{Path: "/mnt/pmem0"}}
			c.Spec.Servers.RDMA.Transport = pdpmv1alpha1.TransportVerbs
		}},
		{"segment not 2Mi multiple", "multiple of 2Mi", func(c *pdpmv1alpha1.PDPMCluster) { c.Spec.Storage.SegmentSize = resource.MustParse("3Mi") }},
		{"segment too small", "multiple of 2Mi", func(c *pdpmv1alpha1.PDPMCluster) { c.Spec.Storage.SegmentSize = resource.MustParse("1Mi") }},
		{"segment too large", "multiple of 2Mi", func(c *pdpmv1alpha1.PDPMCluster) { c.Spec.Storage.SegmentSize = resource.MustParse("128Gi") }},
		{"cleanup policy", "spec.cleanupPolicy", func(c *pdpmv1alpha1.PDPMCluster) { c.Spec.CleanupPolicy = "Delete" }},
		{"no tag", "spec.images.tag", func(c *pdpmv1alpha1.PDPMCluster) { c.Spec.Images.Tag = "" }},
		{"pull policy", "spec.images.pullPolicy", func(c *pdpmv1alpha1.PDPMCluster) { c.Spec.Images.PullPolicy = "Sometimes" }},
		{"heartbeat too often", "spec.monitor.failureDetection.heartbeatIntervalMilliseconds", func(c *pdpmv1alpha1.PDPMCluster) {
			c.Spec.Monitor.FailureDetection.HeartbeatIntervalMilliseconds = 5
		}},
		{"suspect before a heartbeat is due", "suspectAfterMilliseconds must be longer than heartbeatIntervalMilliseconds", func(c *pdpmv1alpha1.PDPMCluster) {
			c.Spec.Monitor.FailureDetection = pdpmv1alpha1.FailureDetectionSpec{HeartbeatIntervalMilliseconds: 500,
				SuspectAfterMilliseconds: 500, DownAfterMilliseconds: 2000}
		}},
		{"down before suspect", "downAfterMilliseconds must be longer than suspectAfterMilliseconds", func(c *pdpmv1alpha1.PDPMCluster) {
			c.Spec.Monitor.FailureDetection = pdpmv1alpha1.FailureDetectionSpec{HeartbeatIntervalMilliseconds: 100,
				SuspectAfterMilliseconds: 1000, DownAfterMilliseconds: 800}
		}},
		{"long name", "at most 40 characters", func(c *pdpmv1alpha1.PDPMCluster) { c.Name = strings.Repeat("p", 41) }},
		{"rack label not a label key", "spec.servers.topology.rackLabel", func(c *pdpmv1alpha1.PDPMCluster) {
			c.Spec.Servers.Topology.RackLabel = "rack name"
		}},
	}
	for _, tc := range create {
		t.Run(tc.name, func(t *testing.T) {
			c := testCluster(ns, tc.mutate)
			err := k8s.Create(ctx, c)
			if err == nil {
				_ = k8s.Delete(ctx, c)
				t.Fatalf("accepted; want rejection mentioning %q", tc.want)
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("rejected with %v; want an Invalid error mentioning %q", err, tc.want)
			}
		})
	}

	c := testCluster(ns)
	createCluster(t, c)
	update := []struct {
		name, want string
		mutate     func(*pdpmv1alpha1.PDPMCluster)
	}{
		{"segment size", "storage.segmentSize is immutable", func(c *pdpmv1alpha1.PDPMCluster) {
			c.Spec.Storage.SegmentSize = resource.MustParse("16Mi")
		}},
		{"PM mode", "servers.pm.mode is immutable", func(c *pdpmv1alpha1.PDPMCluster) {
			c.Spec.Servers.PM = pdpmv1alpha1.PMSource{Mode: pdpmv1alpha1.PMFSDax, FSDax: &pdpmv1alpha1.FSDaxSource{Path: "/mnt/pmem0"}}
		}},
		{"PM size", "servers.pm is immutable", func(c *pdpmv1alpha1.PDPMCluster) {
			c.Spec.Servers.PM.Emulated.Size = resource.MustParse("128Mi")
		}},
		{"monitors with embedded etcd", "monitor.replicas is immutable with embedded etcd", func(c *pdpmv1alpha1.PDPMCluster) {
			c.Spec.Monitor.Replicas = 5
		}},
		{"etcd mode", "monitor.etcd.mode and the presence", func(c *pdpmv1alpha1.PDPMCluster) {
			c.Spec.Monitor.Etcd = pdpmv1alpha1.EtcdSpec{Mode: pdpmv1alpha1.EtcdExternal, Endpoints: []string{"http://etcd:2379"}}
		}},
		{"replicas over servers", "must not exceed servers.replicas", func(c *pdpmv1alpha1.PDPMCluster) {
			c.Spec.Servers.Replicas = 1
		}},
		{"replica count", "storage.replicaCount is immutable", func(c *pdpmv1alpha1.PDPMCluster) {
			c.Spec.Storage.ReplicaCount = 3
		}},
	}
	for _, tc := range update {
		t.Run("update "+tc.name, func(t *testing.T) {
			err := updateCluster(t, c, tc.mutate)
			if err == nil || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("update gave %v; want an Invalid error mentioning %q", err, tc.want)
			}
		})
	}
	// Defaults fill in what a minimal spec leaves out.
	cur := getCluster(t, c)
	s := cur.Spec
	if s.Monitor.Replicas != 3 || s.Monitor.Etcd.Mode != pdpmv1alpha1.EtcdEmbedded || s.Servers.RDMA.Transport != pdpmv1alpha1.TransportTCP ||
		s.Servers.RDMA.ResourceName != "rdma/hca_shared_devices_a" || s.Storage.ReplicaCount != 2 ||
		s.CleanupPolicy != pdpmv1alpha1.CleanupRetain || s.Images.Server != "pdpm/core" || s.Servers.PM.Emulated.HostPath != "/var/lib/pdpm" {
		t.Errorf("defaults not applied: %+v", s)
	}
}

func TestStatusFollowsStatefulSetsAndMonitor(t *testing.T) {
	ns := newNamespace(t)
	mon := startMonitor(t, ns, 3)
	c := testCluster(ns)
	createCluster(t, c)
	mustGet(t, ns, "pdpm-server", &appsv1.StatefulSet{})

	cur := waitCondition(t, c, pdpmv1alpha1.ConditionAvailable, metav1.ConditionFalse, "MonitorQuorumLost")
	if cur.Status.Phase != pdpmv1alpha1.PhaseProgressing {
		t.Errorf("phase %s while nothing is ready, want Progressing", cur.Status.Phase)
	}
	setStatefulSetStatus(t, ns, "pdpm-monitor", 3, 3)
	waitCondition(t, c, pdpmv1alpha1.ConditionAvailable, metav1.ConditionFalse, "ServersNotReady")
	setStatefulSetStatus(t, ns, "pdpm-server", 3, 3)
	// Not Ready while the gateways are not.
	waitCondition(t, c, pdpmv1alpha1.ConditionProgressing, metav1.ConditionTrue, "Applying")
	setDeploymentReady(t, ns, "pdpm-gateway")
	cur = waitCondition(t, c, pdpmv1alpha1.ConditionReady, metav1.ConditionTrue, "Ready")
	waitCondition(t, c, pdpmv1alpha1.ConditionAvailable, metav1.ConditionTrue, "Available")
	waitCondition(t, c, pdpmv1alpha1.ConditionDegraded, metav1.ConditionFalse, "AsExpected")
	waitCondition(t, c, pdpmv1alpha1.ConditionProgressing, metav1.ConditionFalse, "Complete")
	st := cur.Status
	if st.Phase != pdpmv1alpha1.PhaseReady || st.Epoch != 7 || st.ServersReady != 3 || st.ServersTotal != 3 ||
		st.Capacity.String() != "3Gi" || st.Used.String() != "256Mi" || st.MonitorLeader != "pdpm-monitor-0:7400" ||
		st.Health != "OK" || st.ObservedGeneration != cur.Generation || st.ServerImage != "pdpm/core:0.1.0" {
		t.Errorf("status %+v", st)
	}

	// One server down: still available (2 >= replica count), degraded.
	setStatefulSetStatus(t, ns, "pdpm-server", 2, 3)
	waitCondition(t, c, pdpmv1alpha1.ConditionDegraded, metav1.ConditionTrue, "ServersNotReady")
	waitCondition(t, c, pdpmv1alpha1.ConditionAvailable, metav1.ConditionTrue, "Available")
	cur = waitCondition(t, c, pdpmv1alpha1.ConditionReady, metav1.ConditionFalse, "WaitingForPods")
	setStatefulSetStatus(t, ns, "pdpm-server", 3, 3)
	waitCondition(t, c, pdpmv1alpha1.ConditionReady, metav1.ConditionTrue, "Ready")

	// The monitor reports trouble the pods do not show.
	mon.set(func(s *pdpmv1.ClusterStatus) {
		s.Health = pdpmv1.Health_HEALTH_DEGRADED
		s.Message = "12 segments lack a backup"
		s.Epoch = 8
	})
	cur = waitCondition(t, c, pdpmv1alpha1.ConditionDegraded, metav1.ConditionTrue, "ClusterUnhealthy")
	if cur.Status.Epoch != 8 || cur.Status.Phase != pdpmv1alpha1.PhaseDegraded {
		t.Errorf("epoch %d phase %s", cur.Status.Epoch, cur.Status.Phase)
	}
	mon.set(func(s *pdpmv1.ClusterStatus) { s.Health = pdpmv1.Health_HEALTH_DOWN })
	waitCondition(t, c, pdpmv1alpha1.ConditionAvailable, metav1.ConditionFalse, "ClusterDown")

	// An unreachable monitor is reported as such, and what only it knows is
	// no longer claimed.
	mon.stop()
	cur = waitCondition(t, c, pdpmv1alpha1.ConditionAvailable, metav1.ConditionUnknown, "MonitorUnreachable")
	waitCondition(t, c, pdpmv1alpha1.ConditionDegraded, metav1.ConditionTrue, "MonitorUnreachable")
	if cur.Status.Epoch != 0 || cur.Status.Capacity != nil || cur.Status.MonitorLeader != "" || cur.Status.Health != "" {
		t.Errorf("stale monitor fields kept: %+v", cur.Status)
	}
	waitEvents(t, ns, "MonitorUnreachable", 1)
}

func TestScaleUp(t *testing.T) {
	ns := newNamespace(t)
	c := testCluster(ns)
	createCluster(t, c)
	mustGet(t, ns, "pdpm-server", &appsv1.StatefulSet{})
	if err := updateCluster(t, c, func(c *pdpmv1alpha1.PDPMCluster) { c.Spec.Servers.Replicas = 5 }); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() error {
		srv := &appsv1.StatefulSet{}
		if err := get(t, ns, "pdpm-server", srv); err != nil {
			return err
		}
		if *srv.Spec.Replicas != 5 {
			return fmt.Errorf("server replicas %d", *srv.Spec.Replicas)
		}
		return nil
	})
	cur := waitCondition(t, c, pdpmv1alpha1.ConditionProgressing, metav1.ConditionTrue, "Applying")
	if cur.Status.ServersTotal != 5 {
		t.Errorf("serversTotal %d", cur.Status.ServersTotal)
	}
	waitEvents(t, ns, "ScalingUp", 1)
}

// healthyCluster is a running cluster of 3 servers whose monitor reports
// health OK.
func healthyCluster(t *testing.T) (string, *testMonitor, *pdpmv1alpha1.PDPMCluster) {
	t.Helper()
	ns := newNamespace(t)
	mon := startMonitor(t, ns, 3)
	c := testCluster(ns)
	createCluster(t, c)
	readyCluster(t, c, 3)
	waitCondition(t, c, pdpmv1alpha1.ConditionReady, metav1.ConditionTrue, "Ready")
	return ns, mon, c
}

// Scaling down asks the monitor to drain the servers to remove (with the
// cluster key) and removes their pods only once they are DRAINED.
func TestScaleDownDrainsThroughTheMonitor(t *testing.T) {
	ns, mon, c := healthyCluster(t)
	key := &corev1.Secret{}
	mustGet(t, ns, "pdpm-key", key)
	mon.mu.Lock()
	mon.secret = string(key.Data[ClusterKeyField])
	mon.mu.Unlock()

	if err := updateCluster(t, c, func(c *pdpmv1alpha1.PDPMCluster) { c.Spec.Servers.Replicas = 2 }); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() error {
		cur := getCluster(t, c)
		m := condition(cur, pdpmv1alpha1.ConditionReady).Message
		if !strings.Contains(m, "pdpm-server-2 (DRAINING: 2 primaries, 1 backups and 3 tables still to move)") ||
			cur.Status.Phase != pdpmv1alpha1.PhaseBlocked {
			return fmt.Errorf("phase %s, message %q", cur.Status.Phase, m)
		}
		return nil
	})
	for _, id := range mon.drainRequests() {
		if id != 3 {
			t.Errorf("the operator asked to drain server %d; only server 3 (pdpm-server-2) goes", id)
		}
	}
	srv := &appsv1.StatefulSet{}
	mustGet(t, ns, "pdpm-server", srv)
	if *srv.Spec.Replicas != 3 {
		t.Fatalf("servers scaled down to %d while server 2 is draining", *srv.Spec.Replicas)
	}
	waitEvents(t, ns, "Draining", 1)
	waitEvents(t, ns, "ScaleDownRefused", 1)

	// Without the monitor nothing can be confirmed.
	addr, _ := monitors.Load(ns)
	monitors.Store(ns, unreachableMonitor)
	eventually(t, func() error {
		m := condition(getCluster(t, c), pdpmv1alpha1.ConditionReady).Message
		if !strings.Contains(m, "pdpm-server-2 (state unknown)") || !strings.Contains(m, "monitor is unreachable") {
			return fmt.Errorf("message %q", m)
		}
		return nil
	})
	mustGet(t, ns, "pdpm-server", srv)
	if *srv.Spec.Replicas != 3 {
		t.Fatalf("servers scaled down to %d with the monitor unreachable", *srv.Spec.Replicas)
	}
	monitors.Store(ns, addr)

	mon.set(func(s *pdpmv1.ClusterStatus) { s.Servers[2].State = pdpmv1.ServerState_SERVER_STATE_DRAINED })
	eventually(t, func() error {
		if err := get(t, ns, "pdpm-server", srv); err != nil {
			return err
		}
		if *srv.Spec.Replicas != 2 {
			return fmt.Errorf("server replicas %d after drain", *srv.Spec.Replicas)
		}
		return nil
	})
	waitEvents(t, ns, "ScalingDown", 1)
	// Not Ready while the removed pod still terminates (and is counted
	// ready), then Ready.
	eventually(t, func() error {
		if err := get(t, ns, "pdpm-server", srv); err != nil {
			return err
		}
		srv.Status.ObservedGeneration = srv.Generation
		srv.Status.Replicas, srv.Status.ReadyReplicas, srv.Status.AvailableReplicas = 3, 3, 3
		return k8s.Status().Update(context.Background(), srv)
	})
	waitCondition(t, c, pdpmv1alpha1.ConditionReady, metav1.ConditionFalse, "Scaling")
	setStatefulSetStatus(t, ns, "pdpm-server", 2, 2)
	waitCondition(t, c, pdpmv1alpha1.ConditionReady, metav1.ConditionTrue, "Ready")
}

// A drain the monitor refuses (here: a wrong cluster key) keeps the server
// and says why.
func TestScaleDownRefusedWhenTheDrainFails(t *testing.T) {
	ns, mon, c := healthyCluster(t)
	mon.mu.Lock()
	mon.secret = "not the cluster key"
	mon.mu.Unlock()
	if err := updateCluster(t, c, func(c *pdpmv1alpha1.PDPMCluster) { c.Spec.Servers.Replicas = 2 }); err != nil {
		t.Fatal(err)
	}
	cur := waitCondition(t, c, pdpmv1alpha1.ConditionReady, metav1.ConditionFalse, "ScaleDownRefused")
	msg := condition(cur, pdpmv1alpha1.ConditionReady).Message
	if !strings.Contains(msg, "pdpm-server-2 (UP, drain request failed:") || !strings.Contains(msg, "wrong cluster secret") {
		t.Errorf("refusal does not explain itself: %q", msg)
	}
	srv := &appsv1.StatefulSet{}
	mustGet(t, ns, "pdpm-server", srv)
	if *srv.Spec.Replicas != 3 {
		t.Fatalf("servers scaled down to %d although the drain failed", *srv.Spec.Replicas)
	}
}

// A standby monitor names the leader; the operator's calls go there.
func TestMonitorCallsFollowTheLeader(t *testing.T) {
	ns := newNamespace(t)
	leader := startMonitor(t, ns, 3)
	leaderAddr, _ := monitors.Load(ns)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	standby := grpc.NewServer()
	pdpmv1.RegisterMonitorServer(standby, standbyMonitor{leader: leaderAddr.(string)})
	go func() { _ = standby.Serve(lis) }()
	t.Cleanup(standby.Stop)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := GetClusterStatus(ctx, lis.Addr().String())
	if err != nil || st.GetEpoch() != 7 {
		t.Fatalf("status through the standby: %v, %v", st, err)
	}
	leader.mu.Lock()
	leader.secret = "k"
	leader.mu.Unlock()
	resp, err := DrainServer(ctx, lis.Addr().String(), "k", 2)
	if err != nil || resp.GetState() != pdpmv1.ServerState_SERVER_STATE_DRAINING {
		t.Fatalf("drain through the standby: %v, %v", resp, err)
	}
	if got := leader.drainRequests(); len(got) != 1 || got[0] != 2 {
		t.Errorf("the leader saw drain requests %v, want [2]", got)
	}
}

// standbyMonitor refuses every call the way a monitor that does not lead
// does.
type standbyMonitor struct {
	pdpmv1.UnimplementedMonitorServer
	leader string
}

func (s standbyMonitor) refuse() error {
	return status.Error(codes.Unavailable, notLeaderMessage+leaderIsMessage+s.leader)
}

func (s standbyMonitor) GetClusterStatus(context.Context, *pdpmv1.GetClusterStatusRequest) (*pdpmv1.ClusterStatus, error) {
	return nil, s.refuse()
}

func (s standbyMonitor) DrainServer(context.Context, *pdpmv1.DrainServerRequest) (*pdpmv1.DrainServerResponse, error) {
	return nil, s.refuse()
}

func condition(c *pdpmv1alpha1.PDPMCluster, typ string) metav1.Condition {
	for _, cond := range c.Status.Conditions {
		if cond.Type == typ {
			return cond
		}
	}
	return metav1.Condition{}
}

func partition(t *testing.T, ns string) int32 {
	t.Helper()
	srv := &appsv1.StatefulSet{}
	mustGet(t, ns, "pdpm-server", srv)
	return *srv.Spec.UpdateStrategy.RollingUpdate.Partition
}

func waitPartition(t *testing.T, ns string, want int32) {
	t.Helper()
	eventually(t, func() error {
		if p := partition(t, ns); p != want {
			return fmt.Errorf("partition %d, want %d", p, want)
		}
		return nil
	})
}

func TestImageChangeRollsServersOneAtATimeWhileHealthy(t *testing.T) {
	ns, mon, c := healthyCluster(t)

	if err := updateCluster(t, c, func(c *pdpmv1alpha1.PDPMCluster) { c.Spec.Images.Tag = "0.2.0" }); err != nil {
		t.Fatal(err)
	}
	// Healthy: the highest server is updated at once, and only it.
	waitPartition(t, ns, 2)
	srv := &appsv1.StatefulSet{}
	mustGet(t, ns, "pdpm-server", srv)
	if img := srv.Spec.Template.Spec.Containers[0].Image; img != "pdpm/core:0.2.0" {
		t.Fatalf("server template image %s", img)
	}
	waitCondition(t, c, pdpmv1alpha1.ConditionProgressing, metav1.ConditionTrue, "RollingUpdate")
	// The next step waits for the updated server to be ready.
	setStatefulSetStatus(t, ns, "pdpm-server", 2, 0)
	setStatefulSetStatus(t, ns, "pdpm-server", 2, 1)
	waitPartition(t, ns, 2)
	setStatefulSetStatus(t, ns, "pdpm-server", 3, 1)
	waitPartition(t, ns, 1)

	// Never while the cluster is degraded.
	mon.set(func(s *pdpmv1.ClusterStatus) { s.Health = pdpmv1.Health_HEALTH_DEGRADED; s.Message = "re-replicating" })
	setStatefulSetStatus(t, ns, "pdpm-server", 3, 2)
	cur := waitCondition(t, c, pdpmv1alpha1.ConditionProgressing, metav1.ConditionTrue, "RolloutPaused")
	if m := condition(cur, pdpmv1alpha1.ConditionProgressing).Message; !strings.Contains(m, "pdpm-server-0") || !strings.Contains(m, "DEGRADED") {
		t.Errorf("paused rollout message %q", m)
	}
	if p := partition(t, ns); p != 1 {
		t.Fatalf("partition moved to %d while degraded", p)
	}
	if cur.Status.ServerImage != "pdpm/core:0.1.0" {
		t.Errorf("serverImage %s during the rollout", cur.Status.ServerImage)
	}
	mon.set(func(s *pdpmv1.ClusterStatus) { s.Health = pdpmv1.Health_HEALTH_OK })
	waitPartition(t, ns, 0)
	setStatefulSetStatus(t, ns, "pdpm-server", 3, 3)
	// The monitors rolled to the new image through their StatefulSet, the
	// gateways through their Deployment.
	setStatefulSetStatus(t, ns, "pdpm-monitor", 3, 3)
	setDeploymentReady(t, ns, "pdpm-gateway")
	cur = waitCondition(t, c, pdpmv1alpha1.ConditionReady, metav1.ConditionTrue, "Ready")
	if cur.Status.ServerImage != "pdpm/core:0.2.0" {
		t.Errorf("serverImage %s after the rollout", cur.Status.ServerImage)
	}
	waitEvents(t, ns, "RolloutStep", 1)
}

func forceDelete(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Delete(context.Background(), obj, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

func waitPMNodes(t *testing.T, c *pdpmv1alpha1.PDPMCluster, want ...string) {
	t.Helper()
	eventually(t, func() error {
		if got := getCluster(t, c).Status.PMNodes; !slices.Equal(got, want) {
			return fmt.Errorf("pmNodes %v, want %v", got, want)
		}
		return nil
	})
}

func TestDeletionRetainsDataByDefault(t *testing.T) {
	ns := newNamespace(t)
	c := testCluster(ns)
	createCluster(t, c)
	mustGet(t, ns, "pdpm-server", &appsv1.StatefulSet{})
	pod := serverPod(t, c, 0, "node-a")
	waitPMNodes(t, c, "node-a")
	forceDelete(t, pod)

	deleteCluster(t, c)
	for _, name := range []string{"pdpm-server", "pdpm-monitor"} {
		if err := get(t, ns, name, &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
			t.Errorf("StatefulSet %s not deleted (%v)", name, err)
		}
	}
	sec := &corev1.Secret{}
	if err := get(t, ns, "pdpm-key", sec); err != nil {
		t.Fatalf("cluster key deleted under Retain: %v", err)
	}
	if len(sec.OwnerReferences) != 0 {
		t.Errorf("kept key still owned, garbage collection would delete it: %v", sec.OwnerReferences)
	}
	jobs := &batchv1.JobList{}
	if err := k8s.List(context.Background(), jobs, client.InNamespace(ns)); err != nil || len(jobs.Items) != 0 {
		t.Errorf("wipe jobs under Retain: %v %v", jobs.Items, err)
	}
	waitEvents(t, ns, "DataRetained", 1)
}

// wipedCluster is a cluster with cleanup policy WipeData and emulated PM.
func wipedCluster(t *testing.T) (string, *pdpmv1alpha1.PDPMCluster) {
	t.Helper()
	ns := newNamespace(t)
	c := testCluster(ns, func(c *pdpmv1alpha1.PDPMCluster) { c.Spec.CleanupPolicy = pdpmv1alpha1.CleanupWipeData })
	createCluster(t, c)
	mustGet(t, ns, "pdpm-server", &appsv1.StatefulSet{})
	return ns, c
}

// createClaim plays the StatefulSet controller making the claim of a pod.
func createClaim(t *testing.T, c *pdpmv1alpha1.PDPMCluster, name, component string) *corev1.PersistentVolumeClaim {
	t.Helper()
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: Labels(c, component)},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}
	if err := k8s.Create(context.Background(), claim); err != nil {
		t.Fatal(err)
	}
	return claim
}

func TestDeletionWipesDataWhenAsked(t *testing.T) {
	ns, c := wipedCluster(t)
	ctx := context.Background()
	podA := serverPod(t, c, 0, "node-a")
	podB := serverPod(t, c, 1, "node-b")
	waitPMNodes(t, c, "node-a", "node-b")
	claim := createClaim(t, c, "etcd-data-pdpm-monitor-0", componentMonitor)

	if err := k8s.Delete(ctx, c); err != nil {
		t.Fatal(err)
	}
	// Nothing is wiped while servers still run.
	cur := waitCondition(t, c, pdpmv1alpha1.ConditionProgressing, metav1.ConditionTrue, "Deleting")
	if m := condition(cur, pdpmv1alpha1.ConditionProgressing).Message; !strings.Contains(m, "waiting for 2 server pods") {
		t.Errorf("deletion message %q", m)
	}
	jobs := &batchv1.JobList{}
	if err := k8s.List(ctx, jobs, client.InNamespace(ns)); err != nil || len(jobs.Items) != 0 {
		t.Fatalf("wiping while servers run: %v %v", jobs.Items, err)
	}
	forceDelete(t, podA)
	forceDelete(t, podB)

	eventually(t, func() error {
		if err := k8s.List(ctx, jobs, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(jobs.Items) != 2 {
			return fmt.Errorf("%d wipe jobs", len(jobs.Items))
		}
		return nil
	})
	nodes := map[string]bool{}
	for i := range jobs.Items {
		job := &jobs.Items[i]
		spec := job.Spec.Template.Spec
		nodes[spec.NodeName] = true
		want := []string{"rm", "-rf", "--", "/host-pm/" + ns + "-pdpm"}
		if !slices.Equal(spec.Containers[0].Command, want) || spec.Volumes[0].HostPath.Path != "/var/lib/pdpm" {
			t.Errorf("wipe job %s: %v on %s", job.Name, spec.Containers[0].Command, spec.Volumes[0].HostPath.Path)
		}
	}
	if !nodes["node-a"] || !nodes["node-b"] {
		t.Errorf("wipe jobs on %v", nodes)
	}
	if err := get(t, ns, c.Name, &pdpmv1alpha1.PDPMCluster{}); err != nil {
		t.Fatalf("cluster gone before its PM was wiped: %v", err)
	}
	// The Job controller reports the wipes done.
	for i := range jobs.Items {
		completeJob(t, &jobs.Items[i])
	}
	eventually(t, func() error {
		if err := get(t, ns, c.Name, &pdpmv1alpha1.PDPMCluster{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("cluster still present (%v)", err)
		}
		return nil
	})
	if err := get(t, ns, "pdpm-key", &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("cluster key kept under WipeData (%v)", err)
	}
	if err := get(t, ns, claim.Name, claim); err == nil && claim.DeletionTimestamp.IsZero() {
		t.Errorf("etcd claim not deleted under WipeData")
	}
}

func completeJob(t *testing.T, job *batchv1.Job) {
	t.Helper()
	now := metav1.Now()
	job.Status.StartTime = &now
	job.Status.CompletionTime = &now
	job.Status.Succeeded = 1
	job.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
	if err := k8s.Status().Update(context.Background(), job); err != nil {
		t.Fatal(err)
	}
}

// The operator's own metrics beside controller-runtime's: reconcile outcomes
// and per-cluster gauges.
func TestMetricsReportOutcomesAndClusters(t *testing.T) {
	ns := newNamespace(t)
	c := testCluster(ns)
	createCluster(t, c)
	waitCondition(t, c, pdpmv1alpha1.ConditionAvailable, metav1.ConditionFalse, "MonitorQuorumLost")
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch f.GetName() {
			case "pdpm_operator_reconcile_outcomes_total":
				if labels["outcome"] == "reconciled" && m.GetCounter().GetValue() > 0 {
					found[f.GetName()] = true
				}
			case "pdpm_cluster_monitor_reachable":
				if labels["namespace"] == ns && m.GetGauge().GetValue() == 0 {
					found[f.GetName()] = true
				}
			case "controller_runtime_reconcile_total":
				if labels["controller"] == "pdpmcluster" {
					found[f.GetName()] = true
				}
			}
		}
	}
	for _, name := range []string{"pdpm_operator_reconcile_outcomes_total", "pdpm_cluster_monitor_reachable", "controller_runtime_reconcile_total"} {
		if !found[name] {
			t.Errorf("metric %s missing or wrong", name)
		}
	}
}

// A server stuck on a broken template serves nothing: a fixed template
// replaces it at once, even while the cluster is degraded, and stops at the
// next server that serves.
func TestRolloutReplacesServerStuckOnBrokenTemplate(t *testing.T) {
	ns, mon, c := healthyCluster(t)
	if err := updateCluster(t, c, func(c *pdpmv1alpha1.PDPMCluster) { c.Spec.Images.Tag = "broken" }); err != nil {
		t.Fatal(err)
	}
	waitPartition(t, ns, 2)
	// Server 2 never comes up on the broken image; the cluster degrades.
	setPodReady(t, ns, "pdpm-server-2", false)
	mon.set(func(s *pdpmv1.ClusterStatus) { s.Health = pdpmv1.Health_HEALTH_DEGRADED; s.Message = "server 2 down" })
	setStatefulSetStatus(t, ns, "pdpm-server", 2, 1)
	waitCondition(t, c, pdpmv1alpha1.ConditionProgressing, metav1.ConditionTrue, "RolloutPaused")
	if p := partition(t, ns); p != 2 {
		t.Fatalf("partition %d while degraded", p)
	}

	if err := updateCluster(t, c, func(c *pdpmv1alpha1.PDPMCluster) { c.Spec.Images.Tag = "0.2.1" }); err != nil {
		t.Fatal(err)
	}
	// The fixed template and the partition are applied together: the new
	// rollout starts above server 2 and passes it at once.
	srv := &appsv1.StatefulSet{}
	eventually(t, func() error {
		if err := get(t, ns, "pdpm-server", srv); err != nil {
			return err
		}
		if img := srv.Spec.Template.Spec.Containers[0].Image; img != "pdpm/core:0.2.1" {
			return fmt.Errorf("server template image %s", img)
		}
		return nil
	})
	if p := *srv.Spec.UpdateStrategy.RollingUpdate.Partition; p != 2 {
		t.Fatalf("partition %d, want 2: the stuck server is replaced, no serving one", p)
	}
	cur := waitCondition(t, c, pdpmv1alpha1.ConditionProgressing, metav1.ConditionTrue, "RolloutPaused")
	if m := condition(cur, pdpmv1alpha1.ConditionProgressing).Message; !strings.Contains(m, "pdpm-server-1") {
		t.Errorf("rollout should wait before server 1: %q", m)
	}
}

// A failed wipe keeps the PDPMCluster and says so; deleting the failed Job
// retries it.
func TestFailedWipeKeepsClusterUntilRetried(t *testing.T) {
	ns, c := wipedCluster(t)
	ctx := context.Background()
	pod := serverPod(t, c, 0, "node-a")
	waitPMNodes(t, c, "node-a")
	forceDelete(t, pod)
	if err := k8s.Delete(ctx, c); err != nil {
		t.Fatal(err)
	}
	job := &batchv1.Job{}
	name := wipeJob(c, "node-a").Name
	mustGet(t, ns, name, job)
	now := metav1.Now()
	job.Status.StartTime = &now
	job.Status.Failed = 4
	job.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: "BackoffLimitExceeded"},
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: "BackoffLimitExceeded"},
	}
	if err := k8s.Status().Update(ctx, job); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() error {
		m := condition(getCluster(t, c), pdpmv1alpha1.ConditionReady).Message
		if !strings.Contains(m, "wiping PM failed on nodes node-a") {
			return fmt.Errorf("message %q", m)
		}
		return nil
	})
	waitEvents(t, ns, "WipeFailed", 1)

	uid := job.UID
	if err := k8s.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() error {
		if err := get(t, ns, name, job); err != nil {
			return err
		}
		if job.UID == uid {
			return fmt.Errorf("wipe job not yet recreated")
		}
		return nil
	})
	completeJob(t, job)
	eventually(t, func() error {
		if err := get(t, ns, c.Name, &pdpmv1alpha1.PDPMCluster{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("cluster still present (%v)", err)
		}
		return nil
	})
}

// With PM in claims, wiping deletes the claims; no Job runs on any node.
func TestWipeDataDeletesPMClaims(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	c := testCluster(ns, func(c *pdpmv1alpha1.PDPMCluster) {
		c.Spec.CleanupPolicy = pdpmv1alpha1.CleanupWipeData
		c.Spec.Servers.PM = pdpmv1alpha1.PMSource{Mode: pdpmv1alpha1.PMPVC, PVC: &pdpmv1alpha1.VolumeSpec{Size: resource.MustParse("1Gi")}}
	})
	createCluster(t, c)
	mustGet(t, ns, "pdpm-server", &appsv1.StatefulSet{})
	claim := createClaim(t, c, "pm-pdpm-server-0", componentServer)
	deleteCluster(t, c)
	if err := get(t, ns, claim.Name, claim); err == nil && claim.DeletionTimestamp.IsZero() {
		t.Errorf("PM claim not deleted under WipeData")
	}
	jobs := &batchv1.JobList{}
	if err := k8s.List(ctx, jobs, client.InNamespace(ns)); err != nil || len(jobs.Items) != 0 {
		t.Errorf("wipe jobs for PM in claims: %v %v", jobs.Items, err)
	}
}

// A child the API server refuses is reported, not hidden, and created once
// the obstacle is gone.
func TestApplyFailureIsReportedAndRetried(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	// An admission policy of the API server refuses StatefulSets in ns.
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: ns},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
					Rule:       admissionv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"statefulsets"}},
				}}}},
			Validations: []admissionv1.Validation{{Expression: "false", Message: "StatefulSets are frozen here"}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        ns,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			MatchResources: &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}},
		},
	}
	for _, obj := range []client.Object{policy, binding} {
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, policy) })
	probe := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"a": "b"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}},
		},
	}
	eventually(t, func() error {
		if err := k8s.Create(ctx, probe.DeepCopy(), client.DryRunAll); err == nil {
			return fmt.Errorf("the admission policy is not in force yet")
		}
		return nil
	})

	c := testCluster(ns)
	createCluster(t, c)
	cur := waitCondition(t, c, pdpmv1alpha1.ConditionDegraded, metav1.ConditionTrue, "ReconcileFailed")
	if m := condition(cur, pdpmv1alpha1.ConditionDegraded).Message; !strings.Contains(m, "StatefulSet pdpm-monitor") ||
		!strings.Contains(m, "frozen") {
		t.Errorf("failure message %q", m)
	}
	mustGet(t, ns, "pdpm-config", &corev1.ConfigMap{})
	if err := k8s.Delete(ctx, binding); err != nil {
		t.Fatal(err)
	}
	mustGet(t, ns, "pdpm-server", &appsv1.StatefulSet{})
	waitCondition(t, c, pdpmv1alpha1.ConditionDegraded, metav1.ConditionTrue, "MonitorsNotReady")
}

// Reconciling an unchanged cluster again changes nothing: no child is
// written, so no resourceVersion moves.
func TestReconcileIsIdempotent(t *testing.T) {
	ns := newNamespace(t)
	c := testCluster(ns)
	createCluster(t, c)
	readyCluster(t, c, 3)
	waitCondition(t, c, pdpmv1alpha1.ConditionAvailable, metav1.ConditionUnknown, "MonitorUnreachable")
	children := []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "pdpm-config"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pdpm-key"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "pdpm"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "pdpm-monitor"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "pdpm-server"}},
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "pdpm-monitor"}},
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "pdpm-server"}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "pdpm-monitor"}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "pdpm-server"}},
		&pdpmv1alpha1.PDPMCluster{ObjectMeta: metav1.ObjectMeta{Name: "pdpm"}},
	}
	versions := func() []string {
		var v []string
		for _, obj := range children {
			if err := get(t, ns, obj.GetName(), obj); err != nil {
				t.Fatal(err)
			}
			v = append(v, fmt.Sprintf("%T/%s@%s", obj, obj.GetName(), obj.GetResourceVersion()))
		}
		return v
	}
	before := versions()
	reconciled := promtestutil.ToFloat64(reconcileOutcomes.WithLabelValues("reconciled"))
	eventually(t, func() error {
		if n := promtestutil.ToFloat64(reconcileOutcomes.WithLabelValues("reconciled")) - reconciled; n < 5 {
			return fmt.Errorf("%v more reconciles, waiting for 5", n)
		}
		return nil
	})
	if after := versions(); !slices.Equal(before, after) {
		t.Errorf("reconciling an unchanged cluster wrote objects:\nbefore %v\nafter  %v", before, after)
	}
}

// setPodStatus plays the scheduler or the kubelet: the pod's status.
func setPodStatus(t *testing.T, ns, name string, st corev1.PodStatus) {
	t.Helper()
	eventually(t, func() error {
		p := &corev1.Pod{}
		if err := get(t, ns, name, p); err != nil {
			return err
		}
		p.Status = st
		return k8s.Status().Update(context.Background(), p)
	})
}

// A cluster the API accepts but the nodes cannot run says why, in Ready
// and Degraded, with phase Blocked: a server pod the scheduler cannot place
// (its message quoted), and one on a node without its DevDax device (the
// kubelet's FailedMount event quoted). It is Ready again once they run.
func TestUnsatisfiableClusterSaysWhy(t *testing.T) {
	ns, _, c := healthyCluster(t)
	const noNode = "0/3 nodes are available: 3 Insufficient pdpm.io/dax."
	setPodStatus(t, ns, "pdpm-server-2", corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: noNode, LastTransitionTime: metav1.Now()}}})
	cur := waitCondition(t, c, pdpmv1alpha1.ConditionReady, metav1.ConditionFalse, ReasonPodsUnschedulable)
	if m := condition(cur, pdpmv1alpha1.ConditionReady).Message; m != "pod pdpm-server-2 cannot be scheduled: "+noNode {
		t.Errorf("Ready message %q", m)
	}
	if d := condition(cur, pdpmv1alpha1.ConditionDegraded); d.Reason != ReasonPodsUnschedulable || !strings.Contains(d.Message, noNode) {
		t.Errorf("Degraded %s: %q", d.Reason, d.Message)
	}
	if cur.Status.Phase != pdpmv1alpha1.PhaseBlocked {
		t.Errorf("phase %s, want Blocked", cur.Status.Phase)
	}

	// Scheduled on node-2, which lacks the device: the kubelet cannot set
	// up the volume and says so in an event of the pod.
	pod := &corev1.Pod{}
	mustGet(t, ns, "pdpm-server-1", pod)
	setPodStatus(t, ns, "pdpm-server-1", corev1.PodStatus{Phase: corev1.PodPending,
		ContainerStatuses: []corev1.ContainerStatus{{Name: "pdpm-server", Image: "pdpm/core:0.1.0",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}})
	const noDevice = `MountVolume.SetUp failed for volume "pm" : hostPath type check failed: /dev/dax0.0 is not a character device`
	failedMount := func(name, msg string, at time.Time, count int32) {
		ev := &corev1.Event{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod.Name, UID: pod.UID,
				APIVersion: "v1"},
			Reason: "FailedMount", Message: msg, Type: corev1.EventTypeWarning,
			Source:        corev1.EventSource{Component: "kubelet", Host: "node-1"},
			LastTimestamp: metav1.NewTime(at), FirstTimestamp: metav1.NewTime(at), Count: count,
		}
		if err := k8s.Create(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	// The newest event is a one-off (a cache not yet synced, as busy
	// kubelets report at pod start): no cause. The repeated one is.
	failedMount("pdpm-server-1.once", `MountVolume.SetUp failed for volume "cluster-key" : failed to sync secret cache`, time.Now(), 1)
	failedMount("pdpm-server-1.mount", noDevice, time.Now().Add(-10*time.Second), 3)
	cur = waitCondition(t, c, pdpmv1alpha1.ConditionReady, metav1.ConditionFalse, ReasonPMUnavailable)
	want := "pod pdpm-server-1 on node node-1 cannot mount its volumes: " + noDevice
	if m := condition(cur, pdpmv1alpha1.ConditionReady).Message; !strings.HasPrefix(m, want+"; pod pdpm-server-2 cannot be scheduled") {
		t.Errorf("Ready message %q, want both pods, the mount first", m)
	}

	// Fixed (the device appeared, the resource was advertised): Ready.
	setPodReady(t, ns, "pdpm-server-1", true)
	setPodReady(t, ns, "pdpm-server-2", true)
	waitCondition(t, c, pdpmv1alpha1.ConditionReady, metav1.ConditionTrue, "Ready")
}
