package controller

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	pdpmv1alpha1 "pdpm.io/pdpm/operator/api/v1alpha1"
)

// Each PM mode and transport, through the real API server (which validates
// the pod template), produces the server pod it needs and no more privilege.
func TestServerPodSpecPerPMModeAndTransport(t *testing.T) {
	rdma := corev1.ResourceName("rdma/hca_shared_devices_a")
	cases := []struct {
		name       string
		pm         pdpmv1alpha1.PMSource
		transport  pdpmv1alpha1.Transport
		check      func(t *testing.T, sts *appsv1.StatefulSet, pod *corev1.PodSpec, srv *corev1.Container)
		privileged bool
	}{
		{
			name:       "devdax host device",
			pm:         pdpmv1alpha1.PMSource{Mode: pdpmv1alpha1.PMDevDax, DevDax: &pdpmv1alpha1.DevDaxSource{Path: "/dev/dax0.0"}},
			transport:  pdpmv1alpha1.TransportTCP,
			privileged: true,
			check: func(t *testing.T, sts *appsv1.StatefulSet, pod *corev1.PodSpec, srv *corev1.Container) {
				v := volume(t, pod, "pm")
				if v.HostPath == nil || v.HostPath.Path != "/dev/dax0.0" || *v.HostPath.Type != corev1.HostPathCharDev {
					t.Errorf("pm volume %+v", v.VolumeSource)
				}
				if m := mount(t, srv, "pm"); m.MountPath != "/dev/dax0.0" {
					t.Errorf("device mounted at %s", m.MountPath)
				}
				// No pod of any cluster maps the same device on a node.
				terms := pod.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
				if !slices.ContainsFunc(terms, func(term corev1.PodAffinityTerm) bool {
					return term.NamespaceSelector != nil && len(term.NamespaceSelector.MatchLabels) == 0 &&
						term.LabelSelector.MatchLabels[DeviceLabel] == "dax0.0" && term.TopologyKey == corev1.LabelHostname
				}) || sts.Spec.Template.Labels[DeviceLabel] != "dax0.0" {
					t.Errorf("device not protected from a second pod: %+v", terms)
				}
			},
		},
		{
			name: "devdax from a device plugin",
			pm: pdpmv1alpha1.PMSource{Mode: pdpmv1alpha1.PMDevDax, DevDax: &pdpmv1alpha1.DevDaxSource{
				Path: "/dev/dax1.0", ResourceName: "pmem.io/devdax"}},
			transport: pdpmv1alpha1.TransportTCP,
			check: func(t *testing.T, _ *appsv1.StatefulSet, pod *corev1.PodSpec, srv *corev1.Container) {
				if q := srv.Resources.Limits["pmem.io/devdax"]; q.Value() != 1 {
					t.Errorf("device plugin resource not requested: %v", srv.Resources.Limits)
				}
				if slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.HostPath != nil }) {
					t.Errorf("host path mounted although the device plugin provides the device")
				}
			},
		},
		{
			name:      "fsdax directory",
			pm:        pdpmv1alpha1.PMSource{Mode: pdpmv1alpha1.PMFSDax, FSDax: &pdpmv1alpha1.FSDaxSource{Path: "/mnt/pmem0"}},
			transport: pdpmv1alpha1.TransportTCP,
			check: func(t *testing.T, sts *appsv1.StatefulSet, pod *corev1.PodSpec, srv *corev1.Container) {
				v := volume(t, pod, "pm")
				if v.HostPath == nil || v.HostPath.Path != "/mnt/pmem0/"+sts.Namespace+"-pdpm" ||
					*v.HostPath.Type != corev1.HostPathDirectoryOrCreate {
					t.Errorf("pm volume %+v", v.VolumeSource)
				}
				if m := mount(t, srv, "pm"); m.MountPath != "/var/lib/pdpm/pm" || m.SubPathExpr != "$(POD_NAME)" {
					t.Errorf("pm mount %+v", m)
				}
			},
		},
		{
			name: "pvc template",
			pm: pdpmv1alpha1.PMSource{Mode: pdpmv1alpha1.PMPVC, PVC: &pdpmv1alpha1.VolumeSpec{
				Size: resource.MustParse("4Gi"), StorageClassName: ptr.To("pmem-csi")}},
			transport: pdpmv1alpha1.TransportVerbs,
			check: func(t *testing.T, sts *appsv1.StatefulSet, pod *corev1.PodSpec, srv *corev1.Container) {
				if len(sts.Spec.VolumeClaimTemplates) != 1 {
					t.Fatalf("claims %+v", sts.Spec.VolumeClaimTemplates)
				}
				claim := sts.Spec.VolumeClaimTemplates[0]
				if claim.Name != "pm" || *claim.Spec.StorageClassName != "pmem-csi" ||
					!claim.Spec.Resources.Requests.Storage().Equal(resource.MustParse("4Gi")) {
					t.Errorf("pm claim %+v", claim)
				}
				if m := mount(t, srv, "pm"); m.MountPath != "/var/lib/pdpm/pm" {
					t.Errorf("pm mount %+v", m)
				}
			},
		},
		{
			name: "emulated file",
			pm: pdpmv1alpha1.PMSource{Mode: pdpmv1alpha1.PMEmulated, Emulated: &pdpmv1alpha1.EmulatedSource{
				Size: resource.MustParse("1Gi"), HostPath: "/srv/pdpm"}},
			transport: pdpmv1alpha1.TransportTCP,
			check: func(t *testing.T, sts *appsv1.StatefulSet, pod *corev1.PodSpec, srv *corev1.Container) {
				v := volume(t, pod, "pm")
				if v.HostPath == nil || v.HostPath.Path != "/srv/pdpm/"+sts.Namespace+"-pdpm" {
					t.Errorf("pm volume %+v", v.VolumeSource)
				}
				if m := mount(t, srv, "pm"); m.SubPathExpr != "$(POD_NAME)" {
					t.Errorf("emulated PM shared between pods: %+v", m)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			c := testCluster(ns, func(c *pdpmv1alpha1.PDPMCluster) {
				c.Spec.Servers.PM = tc.pm
				c.Spec.Servers.RDMA.Transport = tc.transport
			})
			createCluster(t, c)
			sts := &appsv1.StatefulSet{}
			mustGet(t, ns, "pdpm-server", sts)
			pod := &sts.Spec.Template.Spec
			srv := container(t, pod, "pdpm-server")
			tc.check(t, sts, pod, srv)

			sc := srv.SecurityContext
			if tc.privileged {
				if sc == nil || sc.Privileged == nil || !*sc.Privileged {
					t.Errorf("host device without privilege: %+v", sc)
				}
			} else {
				if sc.Privileged != nil && *sc.Privileged {
					t.Errorf("privileged without need")
				}
				if *sc.AllowPrivilegeEscalation || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
					t.Errorf("security context %+v", sc)
				}
				// Host PM belongs to root on the node; a claim is given to
				// the image's unprivileged user.
				if tc.pm.Mode == pdpmv1alpha1.PMPVC {
					if psc := pod.SecurityContext; sc.RunAsUser != nil || psc == nil || !*psc.RunAsNonRoot || *psc.FSGroup != imageUser {
						t.Errorf("PVC server not unprivileged: %+v %+v", sc, psc)
					}
				} else if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
					t.Errorf("host-PM server not root: %+v", sc)
				}
			}
			if !slices.Equal(srv.Command, []string{"pdpm-server"}) || !slices.Contains(srv.Args, "--port-file=/run/pdpm/server.addr") {
				t.Errorf("server command %v %v", srv.Command, srv.Args)
			}
			checkNodeTopologyStep(t, pod, srv, "")
			// Ready once the server wrote its port file: it serves.
			if p := srv.ReadinessProbe; p.Exec == nil || !slices.Equal(p.Exec.Command, []string{"test", "-s", "/run/pdpm/server.addr"}) ||
				mount(t, srv, "run").MountPath != "/run/pdpm" || volume(t, pod, "run").EmptyDir == nil {
				t.Errorf("server readiness %+v", p)
			}
			_, hasRDMA := srv.Resources.Limits[rdma]
			hasLock := sc.Capabilities != nil && slices.Contains(sc.Capabilities.Add, "IPC_LOCK")
			switch tc.transport {
			case pdpmv1alpha1.TransportVerbs:
				if q := srv.Resources.Limits[rdma]; !hasRDMA || q.Value() != 1 || !srv.Resources.Requests[rdma].Equal(q) {
					t.Errorf("verbs without the RDMA resource: %v", srv.Resources)
				}
				if !hasLock {
					t.Errorf("verbs without IPC_LOCK: %+v", sc.Capabilities)
				}
			case pdpmv1alpha1.TransportTCP:
				if hasRDMA || (hasLock && !tc.privileged) {
					t.Errorf("tcp asks for RDMA resources or IPC_LOCK: %v %+v", srv.Resources, sc.Capabilities)
				}
			}
			cm := &corev1.ConfigMap{}
			mustGet(t, ns, "pdpm-config", cm)
			wantLines := []string{"transport = " + string(tc.transport), "pm_path = " + pmPath(&tc.pm)}
			for _, l := range wantLines {
				if !slices.Contains(strings.Split(cm.Data["pdpm.conf"], "\n"), l) {
					t.Errorf("configuration lacks %q", l)
				}
			}
		})
	}
}

// The wipe Job of a device-DAX cluster zeroes the device through the server
// image: device DAX has no write(2).
func TestWipeJobForDevDax(t *testing.T) {
	c := testCluster("ns", func(c *pdpmv1alpha1.PDPMCluster) {
		c.Spec.Servers.PM = pdpmv1alpha1.PMSource{Mode: pdpmv1alpha1.PMDevDax, DevDax: &pdpmv1alpha1.DevDaxSource{Path: "/dev/dax0.0"}}
	})
	job := wipeJob(c, "node-a")
	pod := job.Spec.Template.Spec
	if pod.NodeName != "node-a" || !slices.Equal(pod.Containers[0].Command, []string{"pdpm-server", "--wipe-pm=/dev/dax0.0"}) ||
		pod.Volumes[0].HostPath.Path != "/dev/dax0.0" || !*pod.Containers[0].SecurityContext.Privileged {
		t.Errorf("devdax wipe job %+v", pod)
	}
	if wipeJob(c, "node-b").Name == job.Name {
		t.Errorf("two nodes share a wipe job name")
	}
}

// The pDKVS gateway: a Deployment of unprivileged clients of the cluster,
// reached through its Service, with the password from the Secret named.
func TestGateway(t *testing.T) {
	ns := newNamespace(t)
	c := testCluster(ns, func(c *pdpmv1alpha1.PDPMCluster) {
		c.Spec.Gateway = pdpmv1alpha1.GatewaySpec{Replicas: ptr.To[int32](2), ServiceType: corev1.ServiceTypeNodePort,
			PasswordSecret: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "kv"}, Key: "password"}}
	})
	createCluster(t, c)
	dep := &appsv1.Deployment{}
	mustGet(t, ns, "pdpm-gateway", dep)
	pod := &dep.Spec.Template.Spec
	gw := container(t, pod, "pdkvs-gateway")
	wantArgs := []string{"--listen=0.0.0.0:6379", "--monitor=" + monitorEndpoints(c),
		"--secret-file=/etc/pdpm/key/cluster-key", "--transport=tcp"}
	if *dep.Spec.Replicas != 2 || !slices.Equal(gw.Command, []string{"pdkvs-gateway"}) || !slices.Equal(gw.Args, wantArgs) ||
		gw.Image != "pdpm/core:0.1.0" {
		t.Errorf("gateway: replicas %d, %v %v, image %s", *dep.Spec.Replicas, gw.Command, gw.Args, gw.Image)
	}
	if !slices.ContainsFunc(gw.Env, func(e corev1.EnvVar) bool {
		return e.Name == "PDKVS_PASSWORD" && e.ValueFrom.SecretKeyRef.Name == "kv" && e.ValueFrom.SecretKeyRef.Key == "password"
	}) {
		t.Errorf("password not taken from the Secret: %+v", gw.Env)
	}
	if psc := pod.SecurityContext; psc == nil || !*psc.RunAsNonRoot || gw.ReadinessProbe.TCPSocket.Port.IntVal != GatewayPort {
		t.Errorf("gateway pod security %+v, probe %+v", psc, gw.ReadinessProbe)
	}
	svc := &corev1.Service{}
	mustGet(t, ns, "pdpm-gateway", svc)
	if svc.Spec.Type != corev1.ServiceTypeNodePort || svc.Spec.Ports[0].Port != GatewayPort ||
		svc.Spec.Selector["app.kubernetes.io/component"] != "gateway" {
		t.Errorf("gateway Service %+v", svc.Spec)
	}
}

// checkNodeTopologyStep: the server pod's first step runs the operator's
// image with the server service account's token, which no other container
// gets, and writes the labels file the server reads.
func checkNodeTopologyStep(t *testing.T, pod *corev1.PodSpec, srv *corev1.Container, rackLabel string) {
	t.Helper()
	if len(pod.InitContainers) != 1 {
		t.Fatalf("init containers %+v, want the node-topology step", pod.InitContainers)
	}
	step := &pod.InitContainers[0]
	wantArgs := []string{"node-topology", "--node=$(NODE_NAME)", "--out=/run/pdpm-topology/labels"}
	if rackLabel != "" {
		wantArgs = append(wantArgs, "--rack-label="+rackLabel)
	}
	if step.Name != "node-topology" || step.Image != testOperatorImage || !slices.Equal(step.Command, []string{"pdpm-operator"}) ||
		!slices.Equal(step.Args, wantArgs) || step.Env[0].Name != "NODE_NAME" || step.Env[0].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("node-topology step %s %s %v %v %+v, want args %v", step.Name, step.Image, step.Command, step.Args, step.Env, wantArgs)
	}
	if sc := step.SecurityContext; sc == nil || !*sc.RunAsNonRoot || *sc.RunAsUser != imageUser || *sc.AllowPrivilegeEscalation ||
		!*sc.ReadOnlyRootFilesystem || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("node-topology step security %+v", sc)
	}
	if pod.ServiceAccountName != "pdpm-server" || pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("service account %q, automount %v: want pdpm-server without automounting", pod.ServiceAccountName, pod.AutomountServiceAccountToken)
	}
	token := volume(t, pod, "node-reader-token").Projected
	if token == nil || token.Sources[0].ServiceAccountToken == nil || token.Sources[0].ServiceAccountToken.Path != "token" {
		t.Errorf("node-reader-token volume %+v", token)
	}
	if m := mount(t, step, "node-reader-token"); m.MountPath != "/var/run/secrets/kubernetes.io/serviceaccount" || !m.ReadOnly {
		t.Errorf("token mounted at %+v", m)
	}
	if slices.ContainsFunc(srv.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "node-reader-token" }) {
		t.Errorf("the server container mounts the token")
	}
	if volume(t, pod, "topology").EmptyDir == nil || mount(t, step, "topology").MountPath != "/run/pdpm-topology" ||
		mount(t, step, "topology").ReadOnly {
		t.Errorf("the step cannot write the labels file: %+v", step.VolumeMounts)
	}
	if m := mount(t, srv, "topology"); m.MountPath != "/run/pdpm-topology" || !m.ReadOnly ||
		!slices.Contains(srv.Args, "--labels-file=/run/pdpm-topology/labels") {
		t.Errorf("server reads no labels file: %+v %v", m, srv.Args)
	}
}

// A rack label in the spec reaches the node-topology step.
func TestNodeTopologyRackLabel(t *testing.T) {
	ns := newNamespace(t)
	c := testCluster(ns, func(c *pdpmv1alpha1.PDPMCluster) {
		c.Spec.Servers.Topology.RackLabel = "example.com/rack"
	})
	createCluster(t, c)
	sts := &appsv1.StatefulSet{}
	mustGet(t, ns, "pdpm-server", sts)
	checkNodeTopologyStep(t, &sts.Spec.Template.Spec, container(t, &sts.Spec.Template.Spec, "pdpm-server"), "example.com/rack")
}

func volume(t *testing.T, pod *corev1.PodSpec, name string) *corev1.Volume {
	t.Helper()
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == name {
			return &pod.Volumes[i]
		}
	}
	t.Fatalf("no volume %s", name)
	return nil
}

func mount(t *testing.T, c *corev1.Container, name string) *corev1.VolumeMount {
	t.Helper()
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].Name == name {
			return &c.VolumeMounts[i]
		}
	}
	t.Fatalf("no mount %s", name)
	return nil
}

// With an external etcd the monitor pod has no etcd member and no volume,
// and the configuration points at the external endpoints.
func TestExternalEtcdMonitors(t *testing.T) {
	ns := newNamespace(t)
	c := testCluster(ns, func(c *pdpmv1alpha1.PDPMCluster) {
		c.Spec.Monitor = pdpmv1alpha1.MonitorSpec{Replicas: 1, Etcd: pdpmv1alpha1.EtcdSpec{
			Mode: pdpmv1alpha1.EtcdExternal, Endpoints: []string{"http://etcd-0.example:2379", "http://etcd-1.example:2379"}}}
	})
	createCluster(t, c)
	mon := &appsv1.StatefulSet{}
	mustGet(t, ns, "pdpm-monitor", mon)
	if n := len(mon.Spec.Template.Spec.Containers); n != 1 || len(mon.Spec.VolumeClaimTemplates) != 0 || *mon.Spec.Replicas != 1 {
		t.Errorf("monitor with external etcd: %d containers, claims %v, replicas %d", n, mon.Spec.VolumeClaimTemplates, *mon.Spec.Replicas)
	}
	cm := &corev1.ConfigMap{}
	mustGet(t, ns, "pdpm-config", cm)
	if !strings.Contains(cm.Data["pdpm.conf"], "etcd_endpoints = http://etcd-0.example:2379,http://etcd-1.example:2379\n") {
		t.Errorf("configuration: %s", cm.Data["pdpm.conf"])
	}
}
