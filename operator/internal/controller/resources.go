package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	pdpmv1alpha1 "pdpm.io/pdpm/operator/api/v1alpha1"
)

// Ports of the PDPM daemons, the contract between the operator and the images.
const (
	MonitorPort     = 7400
	MonitorMetrics  = 9401
	ServerPort      = 7500
	ServerMetrics   = 9501
	GatewayPort     = 6379
	EtcdClientPort  = 2379
	EtcdPeerPort    = 2380
	configMountPath = "/etc/pdpm"
	configFile      = "pdpm.conf"
	keyMountPath    = "/etc/pdpm/key"
	// ClusterKeyField is the key of the cluster key in its Secret.
	ClusterKeyField = "cluster-key"
	// The keys of the CSI Secret (docs/csi.md "Credentials"): the monitors'
	// address and the cluster secret.
	CSIMonitorsField = "monitors"
	CSISecretField   = "clusterSecret"
	pmMountPath      = "/var/lib/pdpm/pm"
	serverRunPath    = "/run/pdpm"
	serverPortFile   = serverRunPath + "/server.addr"
	// The node-topology step writes the server's failure domains here
	// (internal/topology), which the server registers with the monitor.
	topologyPath      = "/run/pdpm-topology"
	topologyFile      = topologyPath + "/labels"
	serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	etcdDataPath      = "/var/lib/etcd"
	// ConfigHashAnnotation on a pod template makes a configuration change
	// roll the pods.
	ConfigHashAnnotation = "pdpm.io/config-hash"
	// TemplateHashAnnotation on the server StatefulSet records which pod
	// template the current rollout is for.
	TemplateHashAnnotation = "pdpm.io/template-hash"
	// ManagedBy is the value of app.kubernetes.io/managed-by on every child.
	ManagedBy = "pdpm-operator"
	// Labels a server registers with the monitor; the operator finds a
	// server's state by its pod name.
	ServerPodLabel = "pod"

	// DeviceLabel on a server pod names the host device-DAX device it maps.
	DeviceLabel = "pdpm.io/devdax"
	// NamespaceLabel on a cluster-scoped child names its cluster's namespace.
	NamespaceLabel = "pdpm.io/namespace"
	// NodeReaderClusterRole allows get on nodes, nothing else: what a server
	// pod's node-topology step needs. The chart and config/rbac install it;
	// the operator binds it to each cluster's server service account.
	NodeReaderClusterRole = "pdpm-node-reader"

	componentMonitor = "monitor"
	componentServer  = "server"
	componentGateway = "gateway"
	componentWipe    = "wipe"
	// imageUser is the unprivileged user of the core image (images/).
	imageUser       = 65532
	defaultEtcdSize = "1Gi"
)

// Names of a cluster's children.
func monitorName(c *pdpmv1alpha1.PDPMCluster) string { return c.Name + "-monitor" }
func serverName(c *pdpmv1alpha1.PDPMCluster) string  { return c.Name + "-server" }
func configName(c *pdpmv1alpha1.PDPMCluster) string  { return c.Name + "-config" }
func keyName(c *pdpmv1alpha1.PDPMCluster) string     { return c.Name + "-key" }
func clientName(c *pdpmv1alpha1.PDPMCluster) string  { return c.Name }
func csiName(c *pdpmv1alpha1.PDPMCluster) string     { return c.Name + "-csi" }
func gatewayName(c *pdpmv1alpha1.PDPMCluster) string { return c.Name + "-gateway" }

// serverNodeReaderName names the cluster-scoped binding of cluster c; ':'
// cannot occur in a namespace or cluster name, so names never collide.
func serverNodeReaderName(c *pdpmv1alpha1.PDPMCluster) string {
	return NodeReaderClusterRole + ":" + c.Namespace + ":" + c.Name
}

// Labels returns the labels of a child of cluster c with the given role.
func Labels(c *pdpmv1alpha1.PDPMCluster, component string) map[string]string {
	l := map[string]string{
		"app.kubernetes.io/name":       "pdpm",
		"app.kubernetes.io/instance":   c.Name,
		"app.kubernetes.io/managed-by": ManagedBy,
	}
	if component != "" {
		l["app.kubernetes.io/component"] = component
	}
	return l
}

func selectorLabels(c *pdpmv1alpha1.PDPMCluster, component string) map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":      "pdpm",
		"app.kubernetes.io/instance":  c.Name,
		"app.kubernetes.io/component": component,
	}
}

func image(repo, tag string) string { return repo + ":" + tag }

func monitorHost(c *pdpmv1alpha1.PDPMCluster, ordinal int32) string {
	return fmt.Sprintf("%s-%d.%s.%s.svc", monitorName(c), ordinal, monitorName(c), c.Namespace)
}

// MonitorAddress is where the operator reaches the monitor's gRPC API: the
// client Service.
func MonitorAddress(c *pdpmv1alpha1.PDPMCluster) string {
	return fmt.Sprintf("%s.%s.svc:%d", clientName(c), c.Namespace, MonitorPort)
}

func etcdEndpoints(c *pdpmv1alpha1.PDPMCluster) []string {
	if c.Spec.Monitor.Etcd.Mode == pdpmv1alpha1.EtcdExternal {
		return c.Spec.Monitor.Etcd.Endpoints
	}
	var eps []string
	for i := int32(0); i < c.Spec.Monitor.Replicas; i++ {
		eps = append(eps, fmt.Sprintf("http://%s:%d", monitorHost(c, i), EtcdClientPort))
	}
	return eps
}

// pmPath is where a server finds its PM inside its container.
func pmPath(pm *pdpmv1alpha1.PMSource) string {
	switch pm.Mode {
	case pdpmv1alpha1.PMDevDax:
		return pm.DevDax.Path
	case pdpmv1alpha1.PMEmulated:
		return pmMountPath + "/pm.img"
	default:
		return pmMountPath
	}
}

// monitorEndpoints is every monitor's gRPC address; clients follow the
// leader among them.
func monitorEndpoints(c *pdpmv1alpha1.PDPMCluster) string {
	var monitors []string
	for i := int32(0); i < c.Spec.Monitor.Replicas; i++ {
		monitors = append(monitors, fmt.Sprintf("%s:%d", monitorHost(c, i), MonitorPort))
	}
	return strings.Join(monitors, ",")
}

// clusterConfig renders the cluster configuration file every daemon reads:
// one "key = value" per line, keys sorted.
func clusterConfig(c *pdpmv1alpha1.PDPMCluster) string {
	pm := &c.Spec.Servers.PM
	fd := &c.Spec.Monitor.FailureDetection
	kv := map[string]string{
		"config_version":     "1",
		"cluster_name":       c.Name,
		"cluster_namespace":  c.Namespace,
		"monitor_endpoints":  monitorEndpoints(c),
		"monitor_port":       fmt.Sprint(MonitorPort),
		"etcd_mode":          strings.ToLower(string(c.Spec.Monitor.Etcd.Mode)),
		"etcd_endpoints":     strings.Join(etcdEndpoints(c), ","),
		"etcd_prefix":        fmt.Sprintf("/pdpm/%s/%s/", c.Namespace, c.Name),
		"server_port":        fmt.Sprint(ServerPort),
		"segment_size":       fmt.Sprint(c.Spec.Storage.SegmentSize.Value()),
		"replica_count":      fmt.Sprint(c.Spec.Storage.ReplicaCount),
		"tables":             fmt.Sprint(c.Spec.Storage.Tables),
		"transport":          string(c.Spec.Servers.RDMA.Transport),
		"pm_mode":            strings.ToLower(string(pm.Mode)),
		"pm_path":            pmPath(pm),
		"cluster_key_file":   keyMountPath + "/" + ClusterKeyField,
		"heartbeat_interval": fmt.Sprintf("%dms", fd.HeartbeatIntervalMilliseconds),
		"suspect_timeout":    fmt.Sprintf("%dms", fd.SuspectAfterMilliseconds),
		"down_timeout":       fmt.Sprintf("%dms", fd.DownAfterMilliseconds),
	}
	if pm.Mode == pdpmv1alpha1.PMEmulated {
		kv["pm_size"] = fmt.Sprint(pm.Emulated.Size.Value())
	}
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# PDPM cluster configuration, written by the PDPM operator.\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = %s\n", k, kv[k])
	}
	return b.String()
}

func hashOf(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("hashing %T: %v", v, err)) // only plain API structs are hashed
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// csiSecret is the Secret a StorageClass of the CSI driver names to reach
// the cluster: its monitors' Service and the cluster secret. It is derived
// from the key Secret (made again when deleted or edited) and goes with
// the cluster, whatever the cleanup policy: a cluster created again makes
// it again.
func csiSecret(c *pdpmv1alpha1.PDPMCluster, clusterSecret string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: csiName(c), Namespace: c.Namespace, Labels: Labels(c, "")},
		Type:       corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			CSIMonitorsField: []byte(fmt.Sprintf("%s.%s.svc:%d", clientName(c), c.Namespace, MonitorPort)),
			CSISecretField:   []byte(clusterSecret),
		},
	}
}

func configMap(c *pdpmv1alpha1.PDPMCluster) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: configName(c), Namespace: c.Namespace, Labels: Labels(c, "")},
		Data:       map[string]string{configFile: clusterConfig(c)},
	}
}

func headlessService(c *pdpmv1alpha1.PDPMCluster, name, component string, ports []corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: Labels(c, component)},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  selectorLabels(c, component),
			Ports:     ports,
			// Members must find each other before they are ready (etcd
			// bootstrap, servers registering).
			PublishNotReadyAddresses: true,
		},
	}
}

func tcpPort(name string, port int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: port, TargetPort: intstr.FromInt32(port), Protocol: corev1.ProtocolTCP}
}

func monitorService(c *pdpmv1alpha1.PDPMCluster) *corev1.Service {
	ports := []corev1.ServicePort{tcpPort("grpc", MonitorPort), tcpPort("metrics", MonitorMetrics)}
	if c.Spec.Monitor.Etcd.Mode == pdpmv1alpha1.EtcdEmbedded {
		ports = append(ports, tcpPort("etcd-client", EtcdClientPort), tcpPort("etcd-peer", EtcdPeerPort))
	}
	return headlessService(c, monitorName(c), componentMonitor, ports)
}

func serverService(c *pdpmv1alpha1.PDPMCluster) *corev1.Service {
	return headlessService(c, serverName(c), componentServer,
		[]corev1.ServicePort{tcpPort("data", ServerPort), tcpPort("metrics", ServerMetrics)})
}

// clientService is how clients, the CLI and the operator reach the monitors.
func clientService(c *pdpmv1alpha1.PDPMCluster) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: clientName(c), Namespace: c.Namespace, Labels: Labels(c, componentMonitor)},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: selectorLabels(c, componentMonitor),
			Ports:    []corev1.ServicePort{tcpPort("grpc", MonitorPort)},
		},
	}
}

func pdb(c *pdpmv1alpha1.PDPMCluster, name, component string, maxUnavailable int32) *policyv1.PodDisruptionBudget {
	mu := intstr.FromInt32(maxUnavailable)
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: Labels(c, component)},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: &mu,
			Selector:       &metav1.LabelSelector{MatchLabels: selectorLabels(c, component)},
		},
	}
}

// monitorPDB keeps an etcd quorum through voluntary disruptions: at most
// (replicas-1)/2 monitors down, and one for a single monitor (which has no
// redundancy to protect, and must not block node drains forever).
func monitorPDB(c *pdpmv1alpha1.PDPMCluster) *policyv1.PodDisruptionBudget {
	return pdb(c, monitorName(c), componentMonitor, max(1, (c.Spec.Monitor.Replicas-1)/2))
}

// serverPDB lets one server be down at a time: its segments still have
// every other replica.
func serverPDB(c *pdpmv1alpha1.PDPMCluster) *policyv1.PodDisruptionBudget {
	return pdb(c, serverName(c), componentServer, 1)
}

// serverServiceAccount is the identity of the server pods: only their
// node-topology step uses it (serverNodeReaderBinding), so no container
// gets its token unless it asks for it.
func serverServiceAccount(c *pdpmv1alpha1.PDPMCluster) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		ObjectMeta:                   metav1.ObjectMeta{Name: serverName(c), Namespace: c.Namespace, Labels: Labels(c, componentServer)},
		AutomountServiceAccountToken: ptr.To(false),
	}
}

// serverNodeReaderBinding lets the server pods of cluster c read nodes (get
// only: NodeReaderClusterRole), to learn their node's failure domains.
func serverNodeReaderBinding(c *pdpmv1alpha1.PDPMCluster) *rbacv1.ClusterRoleBinding {
	labels := Labels(c, componentServer)
	labels[NamespaceLabel] = c.Namespace
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: serverNodeReaderName(c), Labels: labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: NodeReaderClusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: serverName(c), Namespace: c.Namespace}},
	}
}

// nodeTopologyStep is the first container of a server pod: the operator's
// image (operatorImage) reads the node the pod runs on and writes its
// failure domains to topologyFile (internal/topology), with the server
// service account's token, which only this container mounts.
func nodeTopologyStep(c *pdpmv1alpha1.PDPMCluster, operatorImage string) (corev1.Container, []corev1.Volume) {
	args := []string{"node-topology", "--node=$(NODE_NAME)", "--out=" + topologyFile}
	if rack := c.Spec.Servers.Topology.RackLabel; rack != "" {
		args = append(args, "--rack-label="+rack)
	}
	sc := restricted()
	sc.RunAsUser = ptr.To[int64](imageUser)
	sc.RunAsGroup = ptr.To[int64](imageUser)
	sc.RunAsNonRoot = ptr.To(true)
	step := corev1.Container{
		Name:            "node-topology",
		Image:           operatorImage,
		ImagePullPolicy: c.Spec.Images.PullPolicy,
		Command:         []string{"pdpm-operator"},
		Args:            args,
		Env: []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "topology", MountPath: topologyPath},
			{Name: "node-reader-token", MountPath: serviceAccountDir, ReadOnly: true},
		},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
		SecurityContext: sc,
	}
	// What automounting would give every container, given to this one only.
	token := corev1.Volume{Name: "node-reader-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3600)}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
		},
		DefaultMode: ptr.To[int32](0o444),
	}}}
	topology := corev1.Volume{Name: "topology", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	return step, []corev1.Volume{topology, token}
}

func podEnv() []corev1.EnvVar {
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	return []corev1.EnvVar{
		field("POD_NAME", "metadata.name"),
		field("POD_NAMESPACE", "metadata.namespace"),
		field("POD_IP", "status.podIP"),
		field("NODE_NAME", "spec.nodeName"),
	}
}

func configVolumes(c *pdpmv1alpha1.PDPMCluster) ([]corev1.Volume, []corev1.VolumeMount) {
	vols := []corev1.Volume{
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: configName(c)}}}},
		{Name: "cluster-key", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: keyName(c), DefaultMode: ptr.To[int32](0o400)}}},
	}
	mounts := []corev1.VolumeMount{
		{Name: "config", MountPath: configMountPath, ReadOnly: true},
		{Name: "cluster-key", MountPath: keyMountPath, ReadOnly: true},
	}
	return vols, mounts
}

// restricted is the security context of a container that needs no
// privilege beyond the capabilities named.
func restricted(caps ...corev1.Capability) *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: caps},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// nonRoot runs every container of a pod as the image's unprivileged user;
// volumes that support ownership (claims) are given to its group.
func nonRoot() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsUser:    ptr.To[int64](imageUser),
		RunAsGroup:   ptr.To[int64](imageUser),
		RunAsNonRoot: ptr.To(true),
		FSGroup:      ptr.To[int64](imageUser),
	}
}

// asRoot makes a container run as root, still without capabilities: what
// host PM needs, whose files and devices belong to root on the node.
func asRoot(sc *corev1.SecurityContext) *corev1.SecurityContext {
	sc.RunAsUser = ptr.To[int64](0)
	sc.RunAsNonRoot = ptr.To(false)
	return sc
}

func tcpProbe(port int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(port)}},
		PeriodSeconds:    5,
		FailureThreshold: 3,
	}
}

func antiAffinity(c *pdpmv1alpha1.PDPMCluster, component string, required bool) *corev1.PodAntiAffinity {
	term := corev1.PodAffinityTerm{
		LabelSelector: &metav1.LabelSelector{MatchLabels: selectorLabels(c, component)},
		TopologyKey:   corev1.LabelHostname,
	}
	if required {
		return &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term}}
	}
	return &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{
		{Weight: 100, PodAffinityTerm: term}}}
}

func pvcTemplate(c *pdpmv1alpha1.PDPMCluster, name, component string, v *pdpmv1alpha1.VolumeSpec) corev1.PersistentVolumeClaim {
	return corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: Labels(c, component)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: v.StorageClassName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: v.Size}},
		},
	}
}

func statefulSet(c *pdpmv1alpha1.PDPMCluster, name, component string, replicas int32, tmpl corev1.PodTemplateSpec) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: Labels(c, component)},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To(replicas),
			ServiceName: name,
			Selector:    &metav1.LabelSelector{MatchLabels: selectorLabels(c, component)},
			Template:    tmpl,
			// Members start together: an etcd quorum needs its peers before
			// any is ready, and servers are independent of each other.
			PodManagementPolicy: appsv1.ParallelPodManagement,
			// Volumes hold PM and the cluster view: only a WipeData
			// deletion removes them.
			PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
				WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
			},
		},
	}
}

// daemonContainer runs the PDPM daemon `name` (the command of that name in
// the core image) from repo: it reads the cluster configuration, serves on
// port (named portName), exports metrics on metricsPort and is ready once
// it accepts connections on port.
func daemonContainer(c *pdpmv1alpha1.PDPMCluster, name, repo, portName string, port, metricsPort int32,
	mounts []corev1.VolumeMount, res corev1.ResourceRequirements, sc *corev1.SecurityContext) corev1.Container {
	return corev1.Container{
		Name:            name,
		Image:           image(repo, c.Spec.Images.Tag),
		ImagePullPolicy: c.Spec.Images.PullPolicy,
		Command:         []string{name},
		Args:            []string{"--config=" + configMountPath + "/" + configFile},
		Env:             podEnv(),
		Ports: []corev1.ContainerPort{
			{Name: portName, ContainerPort: port, Protocol: corev1.ProtocolTCP},
			{Name: "metrics", ContainerPort: metricsPort, Protocol: corev1.ProtocolTCP},
		},
		VolumeMounts:    mounts,
		Resources:       res,
		ReadinessProbe:  tcpProbe(port),
		SecurityContext: sc,
	}
}

func monitorStatefulSet(c *pdpmv1alpha1.PDPMCluster, configHash string) *appsv1.StatefulSet {
	vols, mounts := configVolumes(c)
	spec := &c.Spec
	containers := []corev1.Container{daemonContainer(c, "pdpm-monitor", spec.Images.Monitor, "grpc", MonitorPort, MonitorMetrics,
		mounts, spec.Monitor.Resources, restricted())}
	var claims []corev1.PersistentVolumeClaim
	if spec.Monitor.Etcd.Mode == pdpmv1alpha1.EtcdEmbedded {
		storage := spec.Monitor.Etcd.Storage
		if storage == nil {
			storage = &pdpmv1alpha1.VolumeSpec{Size: resource.MustParse(defaultEtcdSize)}
		}
		claims = append(claims, pvcTemplate(c, "etcd-data", componentMonitor, storage))
		var peers []string
		for i := int32(0); i < spec.Monitor.Replicas; i++ {
			peers = append(peers, fmt.Sprintf("%s-%d=http://%s:%d", monitorName(c), i, monitorHost(c, i), EtcdPeerPort))
		}
		self := fmt.Sprintf("$(POD_NAME).%s.%s.svc", monitorName(c), c.Namespace)
		containers = append(containers, corev1.Container{
			Name:            "etcd",
			Image:           image(spec.Images.Etcd, spec.Images.Tag),
			ImagePullPolicy: spec.Images.PullPolicy,
			Command:         []string{"etcd"},
			Args: []string{
				"--name=$(POD_NAME)",
				"--data-dir=" + etcdDataPath,
				fmt.Sprintf("--listen-client-urls=http://0.0.0.0:%d", EtcdClientPort),
				fmt.Sprintf("--advertise-client-urls=http://%s:%d", self, EtcdClientPort),
				fmt.Sprintf("--listen-peer-urls=http://0.0.0.0:%d", EtcdPeerPort),
				fmt.Sprintf("--initial-advertise-peer-urls=http://%s:%d", self, EtcdPeerPort),
				"--initial-cluster=" + strings.Join(peers, ","),
				"--initial-cluster-state=new",
				"--initial-cluster-token=" + string(c.UID),
			},
			Env: podEnv(),
			Ports: []corev1.ContainerPort{
				{Name: "etcd-client", ContainerPort: EtcdClientPort, Protocol: corev1.ProtocolTCP},
				{Name: "etcd-peer", ContainerPort: EtcdPeerPort, Protocol: corev1.ProtocolTCP},
			},
			VolumeMounts: []corev1.VolumeMount{{Name: "etcd-data", MountPath: etcdDataPath}},
			Resources:    spec.Monitor.Etcd.Resources,
			ReadinessProbe: &corev1.Probe{
				ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
					Path: "/health", Port: intstr.FromInt32(EtcdClientPort)}},
				PeriodSeconds: 5,
			},
			SecurityContext: restricted(),
		})
	}
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{
			Labels:      Labels(c, componentMonitor),
			Annotations: map[string]string{ConfigHashAnnotation: configHash},
		},
		Spec: corev1.PodSpec{
			Containers:      containers,
			Volumes:         vols,
			Affinity:        &corev1.Affinity{PodAntiAffinity: antiAffinity(c, componentMonitor, false)},
			SecurityContext: nonRoot(),
		},
	}
	sts := statefulSet(c, monitorName(c), componentMonitor, spec.Monitor.Replicas, tmpl)
	sts.Spec.VolumeClaimTemplates = claims
	return sts
}

// hostClusterDir is the node directory holding this cluster's PM files in
// the host-directory modes; each server uses a subdirectory named after
// its pod.
func hostClusterDir(c *pdpmv1alpha1.PDPMCluster) string {
	pm := &c.Spec.Servers.PM
	base := ""
	switch pm.Mode {
	case pdpmv1alpha1.PMFSDax:
		base = pm.FSDax.Path
	case pdpmv1alpha1.PMEmulated:
		base = pm.Emulated.HostPath
	default:
		return ""
	}
	return fmt.Sprintf("%s/%s-%s", base, c.Namespace, c.Name)
}

// deviceLabelValue is a device path as a label value: /dev/dax0.0 → dax0.0.
func deviceLabelValue(path string) string { return strings.TrimPrefix(path, "/dev/") }

// pmOnHost reports whether the PM data of cluster c lives on the nodes
// (rather than in volumes Kubernetes can delete).
func pmOnHost(c *pdpmv1alpha1.PDPMCluster) bool {
	return c.Spec.Servers.PM.Mode != pdpmv1alpha1.PMPVC
}

// requestOne adds one unit of a device-plugin resource to res (requests
// and limits must be equal for extended resources).
func requestOne(res *corev1.ResourceRequirements, name corev1.ResourceName) {
	one := resource.MustParse("1")
	if res.Limits == nil {
		res.Limits = corev1.ResourceList{}
	}
	if res.Requests == nil {
		res.Requests = corev1.ResourceList{}
	}
	res.Limits[name] = one
	res.Requests[name] = one
}

// rdmaAccess gives a container of cluster c what the verbs transport needs:
// one unit of the RDMA device-plugin resource added to res, and the
// capabilities returned (none with tcp).
func rdmaAccess(c *pdpmv1alpha1.PDPMCluster, res *corev1.ResourceRequirements) []corev1.Capability {
	if c.Spec.Servers.RDMA.Transport != pdpmv1alpha1.TransportVerbs {
		return nil
	}
	requestOne(res, corev1.ResourceName(c.Spec.Servers.RDMA.ResourceName))
	// Registering memory with the NIC pins its pages.
	return []corev1.Capability{"IPC_LOCK"}
}

// serverPodTemplate is the pod of every server: the PM source mounted, the
// RDMA resource with verbs, and only the privileges those need; first the
// node-topology step from operatorImage, whose labels file the server
// registers.
func serverPodTemplate(c *pdpmv1alpha1.PDPMCluster, configHash, operatorImage string) (corev1.PodTemplateSpec, []corev1.PersistentVolumeClaim) {
	spec := &c.Spec
	pm := &spec.Servers.PM
	vols, mounts := configVolumes(c)
	res := *spec.Servers.Resources.DeepCopy()
	privileged := false
	var claims []corev1.PersistentVolumeClaim

	switch pm.Mode {
	case pdpmv1alpha1.PMDevDax:
		if pm.DevDax.ResourceName != "" {
			// The device plugin puts the device into the container and
			// grants the cgroup access: no privilege needed.
			requestOne(&res, corev1.ResourceName(pm.DevDax.ResourceName))
		} else {
			// A host device reaches an unprivileged container only through
			// a device plugin; without one, privileged is the one way.
			vols = append(vols, corev1.Volume{Name: "pm", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: pm.DevDax.Path, Type: ptr.To(corev1.HostPathCharDev)}}})
			mounts = append(mounts, corev1.VolumeMount{Name: "pm", MountPath: pm.DevDax.Path})
			privileged = true
		}
	case pdpmv1alpha1.PMFSDax, pdpmv1alpha1.PMEmulated:
		vols = append(vols, corev1.Volume{Name: "pm", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: hostClusterDir(c), Type: ptr.To(corev1.HostPathDirectoryOrCreate)}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "pm", MountPath: pmMountPath, SubPathExpr: "$(POD_NAME)"})
	case pdpmv1alpha1.PMPVC:
		claims = append(claims, pvcTemplate(c, "pm", componentServer, pm.PVC))
		mounts = append(mounts, corev1.VolumeMount{Name: "pm", MountPath: pmMountPath})
	}
	sc := restricted(rdmaAccess(c, &res)...)
	var podSC *corev1.PodSecurityContext
	switch {
	case privileged:
		sc = &corev1.SecurityContext{Privileged: ptr.To(true)}
	case pm.Mode == pdpmv1alpha1.PMPVC:
		podSC = nonRoot()
	default:
		// The host's PM directory or device belongs to root.
		sc = asRoot(sc)
	}

	affinity := &corev1.Affinity{}
	if spec.Servers.Affinity != nil {
		affinity = spec.Servers.Affinity.DeepCopy()
	}
	own := antiAffinity(c, componentServer, !spec.Servers.AllowMultiplePerNode)
	labels := Labels(c, componentServer)
	if privileged {
		// No two pods of any cluster may map the same host device.
		labels[DeviceLabel] = deviceLabelValue(pm.DevDax.Path)
		own.RequiredDuringSchedulingIgnoredDuringExecution = append(own.RequiredDuringSchedulingIgnoredDuringExecution,
			corev1.PodAffinityTerm{
				LabelSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{DeviceLabel: labels[DeviceLabel]}},
				NamespaceSelector: &metav1.LabelSelector{},
				TopologyKey:       corev1.LabelHostname,
			})
	}
	if affinity.PodAntiAffinity == nil {
		affinity.PodAntiAffinity = own
	} else {
		pa := affinity.PodAntiAffinity
		pa.RequiredDuringSchedulingIgnoredDuringExecution = append(pa.RequiredDuringSchedulingIgnoredDuringExecution,
			own.RequiredDuringSchedulingIgnoredDuringExecution...)
		pa.PreferredDuringSchedulingIgnoredDuringExecution = append(pa.PreferredDuringSchedulingIgnoredDuringExecution,
			own.PreferredDuringSchedulingIgnoredDuringExecution...)
	}

	// Ready means serving: the server writes its port file only once it
	// has recovered its PM and registered with the monitor (it removes an
	// old one first, so a restarted container is not ready early).
	vols = append(vols, corev1.Volume{Name: "run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	mounts = append(mounts, corev1.VolumeMount{Name: "run", MountPath: serverRunPath})
	step, stepVols := nodeTopologyStep(c, operatorImage)
	vols = append(vols, stepVols...)
	mounts = append(mounts, corev1.VolumeMount{Name: "topology", MountPath: topologyPath, ReadOnly: true})
	server := daemonContainer(c, "pdpm-server", spec.Images.Server, "data", ServerPort, ServerMetrics, mounts, res, sc)
	server.Args = append(server.Args, "--port-file="+serverPortFile, "--labels-file="+topologyFile)
	server.ReadinessProbe.ProbeHandler = corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-s", serverPortFile}}}

	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{
			Labels:      labels,
			Annotations: map[string]string{ConfigHashAnnotation: configHash},
		},
		Spec: corev1.PodSpec{
			ServiceAccountName:           serverName(c),
			AutomountServiceAccountToken: ptr.To(false),
			InitContainers:               []corev1.Container{step},
			Containers:                   []corev1.Container{server},
			Volumes:                      vols,
			NodeSelector:                 spec.Servers.NodeSelector,
			Affinity:                     affinity,
			Tolerations:                  spec.Servers.Tolerations,
			SecurityContext:              podSC,
			// A server flushes and leaves the view before it exits.
			TerminationGracePeriodSeconds: ptr.To[int64](60),
		},
	}, claims
}

// serverStatefulSet builds the server StatefulSet with the given replicas
// and rolling-update partition (pods with ordinal >= partition run the new
// template).
func serverStatefulSet(c *pdpmv1alpha1.PDPMCluster, tmpl corev1.PodTemplateSpec, claims []corev1.PersistentVolumeClaim,
	replicas, partition int32) *appsv1.StatefulSet {
	sts := statefulSet(c, serverName(c), componentServer, replicas, tmpl)
	sts.Annotations = map[string]string{TemplateHashAnnotation: hashOf(tmpl)}
	sts.Spec.VolumeClaimTemplates = claims
	sts.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{
		Type:          appsv1.RollingUpdateStatefulSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To(partition)},
	}
	return sts
}

// gatewayReplicas is the number of pDKVS gateways to run.
func gatewayReplicas(c *pdpmv1alpha1.PDPMCluster) int32 {
	if r := c.Spec.Gateway.Replicas; r != nil {
		return *r
	}
	return 1
}

// gatewayDeployment runs the pDKVS gateways: stateless clients of the
// cluster serving the Redis protocol on GatewayPort, ready once they accept
// connections. With verbs they need the RDMA resource, as servers do.
func gatewayDeployment(c *pdpmv1alpha1.PDPMCluster, configHash string) *appsv1.Deployment {
	spec := &c.Spec
	vols, mounts := configVolumes(c)
	res := *spec.Gateway.Resources.DeepCopy()
	caps := rdmaAccess(c, &res)
	env := podEnv()
	if ps := spec.Gateway.PasswordSecret; ps != nil {
		env = append(env, corev1.EnvVar{Name: "PDKVS_PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: ps.DeepCopy()}})
	}
	container := corev1.Container{
		Name:            "pdkvs-gateway",
		Image:           image(spec.Images.Gateway, spec.Images.Tag),
		ImagePullPolicy: spec.Images.PullPolicy,
		Command:         []string{"pdkvs-gateway"},
		Args: []string{
			fmt.Sprintf("--listen=0.0.0.0:%d", GatewayPort),
			"--monitor=" + monitorEndpoints(c),
			"--secret-file=" + keyMountPath + "/" + ClusterKeyField,
			"--transport=" + string(spec.Servers.RDMA.Transport),
		},
		Env:             env,
		Ports:           []corev1.ContainerPort{{Name: "redis", ContainerPort: GatewayPort, Protocol: corev1.ProtocolTCP}},
		VolumeMounts:    mounts,
		Resources:       res,
		ReadinessProbe:  tcpProbe(GatewayPort),
		SecurityContext: restricted(caps...),
	}
	labels := Labels(c, componentGateway)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: gatewayName(c), Namespace: c.Namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(gatewayReplicas(c)),
			Selector: &metav1.LabelSelector{MatchLabels: selectorLabels(c, componentGateway)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      labels,
					Annotations: map[string]string{ConfigHashAnnotation: configHash},
				},
				Spec: corev1.PodSpec{
					Containers:      []corev1.Container{container},
					Volumes:         vols,
					Affinity:        &corev1.Affinity{PodAntiAffinity: antiAffinity(c, componentGateway, false)},
					SecurityContext: nonRoot(),
				},
			},
		},
	}
}

// gatewayService is how Redis clients reach the gateways.
func gatewayService(c *pdpmv1alpha1.PDPMCluster) *corev1.Service {
	t := c.Spec.Gateway.ServiceType
	if t == "" {
		t = corev1.ServiceTypeClusterIP
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: gatewayName(c), Namespace: c.Namespace, Labels: Labels(c, componentGateway)},
		Spec: corev1.ServiceSpec{
			Type:     t,
			Selector: selectorLabels(c, componentGateway),
			Ports:    []corev1.ServicePort{tcpPort("redis", GatewayPort)},
		},
	}
}
