package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PDPMClusterSpec is the desired state of one PDPM cluster: its monitors, its
// PM servers, how data is laid out, which images run and what happens to the
// data when the resource is deleted.
// +kubebuilder:validation:XValidation:rule="self.storage.replicaCount <= self.servers.replicas",message="storage.replicaCount must not exceed servers.replicas: every replica of a segment lives on a different server"
type PDPMClusterSpec struct {
	// +kubebuilder:default={replicas: 3, etcd: {mode: Embedded}}
	Monitor MonitorSpec `json:"monitor,omitempty"`
	// +kubebuilder:validation:Required
	Servers ServersSpec `json:"servers"`
	// +kubebuilder:default={}
	Storage StorageSpec `json:"storage,omitempty"`
	// +kubebuilder:default={}
	Gateway GatewaySpec `json:"gateway,omitempty"`
	// +kubebuilder:validation:Required
	Images ImagesSpec `json:"images"`
	// CleanupPolicy says what deleting the PDPMCluster does to the PM data.
	// Retain (the default) removes the workloads and keeps the PM contents,
	// the server and etcd volumes and the cluster key Secret, so a cluster
	// recreated with the same name finds its data again. WipeData erases the
	// PM of every server and deletes those volumes and the key.
	// +kubebuilder:validation:Enum=Retain;WipeData
	// +kubebuilder:default=Retain
	CleanupPolicy CleanupPolicy `json:"cleanupPolicy,omitempty"`
}

// CleanupPolicy is what happens to PM data when a PDPMCluster is deleted.
type CleanupPolicy string

const (
	CleanupRetain   CleanupPolicy = "Retain"
	CleanupWipeData CleanupPolicy = "WipeData"
)

// MonitorSpec describes the monitors, which hold the cluster view.
// +kubebuilder:validation:XValidation:rule="self.etcd.mode == 'External' || self.replicas == oldSelf.replicas",message="monitor.replicas is immutable with embedded etcd: the etcd membership is fixed when the cluster is created"
type MonitorSpec struct {
	// Replicas is the number of monitors; with embedded etcd also the number
	// of etcd members, so an odd number.
	// +kubebuilder:validation:Enum=1;3;5
	// +kubebuilder:default=3
	Replicas int32 `json:"replicas,omitempty"`
	// +kubebuilder:default={mode: Embedded}
	Etcd EtcdSpec `json:"etcd,omitempty"`
	// +kubebuilder:default={heartbeatIntervalMilliseconds: 200, suspectAfterMilliseconds: 2000, downAfterMilliseconds: 5000}
	FailureDetection FailureDetectionSpec `json:"failureDetection,omitempty"`
	// Resources of the pdpm-monitor container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
}

// FailureDetectionSpec is how the monitor tells a dead server from a slow
// one. Servers heartbeat to the monitor; a server silent for
// suspectAfterMilliseconds is SUSPECT (no new data placed on it), for
// downAfterMilliseconds DOWN (its segments fail over to their backups). A
// server serves only under a lease of nine tenths of downAfterMilliseconds,
// renewed by each heartbeat, so a DOWN server has stopped serving before
// its backups take over. Short timeouts fail over fast; on busy nodes they
// declare live servers DOWN (the defaults leave room for a loaded node).
// They are part of the configuration file, so changing them rolls the
// monitors, then the servers one at a time, like any configuration change.
// +kubebuilder:validation:XValidation:rule="self.suspectAfterMilliseconds > self.heartbeatIntervalMilliseconds",message="monitor.failureDetection.suspectAfterMilliseconds must be longer than heartbeatIntervalMilliseconds"
// +kubebuilder:validation:XValidation:rule="self.downAfterMilliseconds > self.suspectAfterMilliseconds",message="monitor.failureDetection.downAfterMilliseconds must be longer than suspectAfterMilliseconds"
type FailureDetectionSpec struct {
	// HeartbeatIntervalMilliseconds is how often each server heartbeats.
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=10000
	// +kubebuilder:default=200
	HeartbeatIntervalMilliseconds int32 `json:"heartbeatIntervalMilliseconds,omitempty"`
	// SuspectAfterMilliseconds of silence make a server SUSPECT.
	// +kubebuilder:validation:Minimum=20
	// +kubebuilder:validation:Maximum=60000
	// +kubebuilder:default=2000
	SuspectAfterMilliseconds int32 `json:"suspectAfterMilliseconds,omitempty"`
	// DownAfterMilliseconds of silence make a server DOWN.
	// +kubebuilder:validation:Minimum=50
	// +kubebuilder:validation:Maximum=120000
	// +kubebuilder:default=5000
	DownAfterMilliseconds int32 `json:"downAfterMilliseconds,omitempty"`
}

// EtcdMode says where the monitors keep the cluster view.
type EtcdMode string

const (
	EtcdEmbedded EtcdMode = "Embedded"
	EtcdExternal EtcdMode = "External"
)

// EtcdSpec says which etcd holds the cluster view.
// +kubebuilder:validation:XValidation:rule="self.mode == oldSelf.mode && has(self.storage) == has(oldSelf.storage)",message="monitor.etcd.mode and the presence of monitor.etcd.storage are immutable"
// +kubebuilder:validation:XValidation:rule="self.mode == 'External' ? has(self.endpoints) && size(self.endpoints) > 0 : !has(self.endpoints) || size(self.endpoints) == 0",message="monitor.etcd.endpoints must be set with mode External and only then"
// +kubebuilder:validation:XValidation:rule="self.mode == 'Embedded' || !has(self.storage)",message="monitor.etcd.storage applies only to mode Embedded"
type EtcdSpec struct {
	// Embedded runs one etcd member beside each monitor (a second container
	// of the monitor pod); External uses an etcd cluster run elsewhere.
	// +kubebuilder:validation:Enum=Embedded;External
	// +kubebuilder:default=Embedded
	Mode EtcdMode `json:"mode,omitempty"`
	// Endpoints of the external etcd cluster, as http://host:port. The
	// monitor does not speak TLS to etcd, so https:// is refused here
	// rather than by a monitor that cannot start.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=9
	// +kubebuilder:validation:items:Pattern=`^http://[^\s/]+$`
	Endpoints []string `json:"endpoints,omitempty"`
	// Storage of each embedded etcd member (a PersistentVolumeClaim); 1Gi
	// of the default storage class when not set.
	// +optional
	Storage *VolumeSpec `json:"storage,omitempty"`
	// Resources of the etcd container (mode Embedded).
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
}

// VolumeSpec is a PersistentVolumeClaim the operator creates per pod.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a volume claim template is immutable"
type VolumeSpec struct {
	// Size of the claim.
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('1Mi')) >= 0",message="size must be at least 1Mi"
	Size resource.Quantity `json:"size"`
	// StorageClassName of the claim; empty means the default class.
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// ServersSpec describes the PM servers, one pod per node.
// +kubebuilder:validation:XValidation:rule="!(self.pm.mode == 'FSDax' && has(self.rdma) && has(self.rdma.transport) && self.rdma.transport == 'verbs')",message="FSDax PM cannot be used with the verbs transport: memory mapped from a DAX file system cannot be registered with an RDMA NIC; use DevDax, or transport tcp"
// +kubebuilder:validation:XValidation:rule="!(has(self.allowMultiplePerNode) && self.allowMultiplePerNode && has(self.pm.devDax) && !has(self.pm.devDax.resourceName))",message="servers with DevDax PM from a host path cannot share a node: they would map the same device"
type ServersSpec struct {
	// Replicas is the number of servers. Raising it adds servers; lowering it
	// is refused until the monitor reports the servers to remove as drained.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	// +kubebuilder:default=3
	Replicas int32 `json:"replicas,omitempty"`
	// AllowMultiplePerNode lets several servers of this cluster share a
	// node (the anti-affinity becomes a preference). Only for test clusters:
	// replicas on one node fail together.
	// +optional
	AllowMultiplePerNode bool `json:"allowMultiplePerNode,omitempty"`
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Affinity is added to the operator's own anti-affinity between servers.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`
	// +optional
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// Resources of the pdpm-server container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
	// +kubebuilder:validation:Required
	PM PMSource `json:"pm"`
	// +kubebuilder:default={}
	RDMA RDMASpec `json:"rdma,omitempty"`
	// Topology says which labels of a server's node name its failure
	// domains, which the monitor keeps a segment's replicas apart by.
	// +optional
	Topology TopologySpec `json:"topology,omitempty"`
}

// TopologySpec names the node labels a server's failure domains come from.
// The zone and region always come from the well-known labels
// topology.kubernetes.io/zone and topology.kubernetes.io/region, the host
// from the node's name.
type TopologySpec struct {
	// RackLabel is the node label whose value is the server's rack (a
	// label key, e.g. example.com/rack); empty: servers have no rack.
	// +optional
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^(([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`
	RackLabel string `json:"rackLabel,omitempty"`
}

// PMMode is where a server's persistent memory comes from.
type PMMode string

const (
	PMDevDax   PMMode = "DevDax"
	PMFSDax    PMMode = "FSDax"
	PMPVC      PMMode = "PVC"
	PMEmulated PMMode = "Emulated"
)

// PMSource is the persistent memory of each server: exactly the member
// named by mode is set. Fixed for the life of the cluster.
// +kubebuilder:validation:XValidation:rule="self.mode == oldSelf.mode",message="servers.pm.mode is immutable"
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="servers.pm is immutable: the PM source is fixed when the cluster is created"
// +kubebuilder:validation:XValidation:rule="has(self.devDax) == (self.mode == 'DevDax') && has(self.fsDax) == (self.mode == 'FSDax') && has(self.pvc) == (self.mode == 'PVC') && has(self.emulated) == (self.mode == 'Emulated')",message="servers.pm must set exactly the member named by mode (devDax, fsDax, pvc or emulated)"
type PMSource struct {
	// +kubebuilder:validation:Enum=DevDax;FSDax;PVC;Emulated
	Mode PMMode `json:"mode"`
	// +optional
	DevDax *DevDaxSource `json:"devDax,omitempty"`
	// +optional
	FSDax *FSDaxSource `json:"fsDax,omitempty"`
	// +optional
	PVC *VolumeSpec `json:"pvc,omitempty"`
	// +optional
	Emulated *EmulatedSource `json:"emulated,omitempty"`
}

// DevDaxSource is a device-DAX character device present on every server node.
type DevDaxSource struct {
	// Path of the device on the node, e.g. /dev/dax0.0.
	// +kubebuilder:validation:Pattern=`^/dev/dax[0-9]+\.[0-9]+$`
	Path string `json:"path"`
	// ResourceName of a device plugin that hands the device to the pod. When
	// empty, the device is mounted from the host and the server container
	// runs privileged, the only built-in way Kubernetes grants access to a
	// host device.
	// +optional
	// +kubebuilder:validation:Pattern=`^[a-z0-9.-]+/[a-zA-Z0-9_.-]+$`
	ResourceName string `json:"resourceName,omitempty"`
}

// FSDaxSource is a directory on a DAX-mounted file system on every server
// node; each server keeps its PM file in its own subdirectory.
type FSDaxSource struct {
	// +kubebuilder:validation:Pattern=`^/[^\s]*[^/\s]$`
	Path string `json:"path"`
}

// EmulatedSource is PM emulated by a file of the given size, for machines
// without PM. The file lives in a host directory, one subdirectory per
// server, so it survives pod restarts.
type EmulatedSource struct {
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('16Mi')) >= 0",message="emulated PM size must be at least 16Mi"
	Size resource.Quantity `json:"size"`
	// HostPath is the node directory holding the emulated PM files.
	// +kubebuilder:default="/var/lib/pdpm"
	// +kubebuilder:validation:Pattern=`^/[^\s]*[^/\s]$`
	HostPath string `json:"hostPath,omitempty"`
}

// Transport is the data-plane transport of the servers.
type Transport string

const (
	TransportVerbs Transport = "verbs"
	TransportTCP   Transport = "tcp"
)

// RDMASpec selects the data transport.
type RDMASpec struct {
	// verbs uses RDMA NICs (the server requests the device-plugin resource and
	// may lock memory); tcp emulates one-sided operations over TCP.
	// +kubebuilder:validation:Enum=verbs;tcp
	// +kubebuilder:default=tcp
	Transport Transport `json:"transport,omitempty"`
	// ResourceName of the RDMA device plugin resource requested with verbs.
	// +kubebuilder:default="rdma/hca_shared_devices_a"
	// +kubebuilder:validation:Pattern=`^[a-z0-9.-]+/[a-zA-Z0-9_.-]+$`
	ResourceName string `json:"resourceName,omitempty"`
}

// StorageSpec is how data is laid out in the pooled PM.
type StorageSpec struct {
	// SegmentSize is the unit of allocation and replication, a multiple of
	// 2Mi (the device-DAX alignment). Fixed for the life of the cluster.
	// +kubebuilder:default="2Gi"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="storage.segmentSize is immutable"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('2Mi')) >= 0 && quantity(string(self)).compareTo(quantity('64Gi')) <= 0 && quantity(string(self)).asInteger() % 2097152 == 0",message="storage.segmentSize must be a multiple of 2Mi between 2Mi and 64Gi"
	SegmentSize resource.Quantity `json:"segmentSize,omitempty"`
	// ReplicaCount is the number of copies of every segment, each on a
	// different server. Fixed for the life of the cluster: the monitors keep
	// the count the cluster was created with and refuse another.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="storage.replicaCount is immutable: the monitors of an existing cluster refuse another replica count"
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=5
	// +kubebuilder:default=2
	ReplicaCount int32 `json:"replicaCount,omitempty"`
	// Tables is the number of object-store tables, which are also the
	// pDKVS vnodes. A table takes a segment on a server (and one per copy)
	// once anything is stored in it, so tables x replicaCount x segmentSize
	// should fit in the pooled PM. Fixed for the life of the cluster.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	// +kubebuilder:default=64
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="storage.tables is immutable"
	Tables int32 `json:"tables,omitempty"`
}

// GatewaySpec runs the pDKVS gateway, which serves the cluster's key-value
// store over the Redis protocol: Redis clients reach it through the Service
// NAME-gateway, port 6379.
type GatewaySpec struct {
	// Replicas of the gateway (a Deployment); 0 runs none.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=64
	// +kubebuilder:default=1
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`
	// ServiceType of the gateway Service.
	// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
	// +kubebuilder:default=ClusterIP
	ServiceType corev1.ServiceType `json:"serviceType,omitempty"`
	// PasswordSecret is the key of a Secret holding the password clients
	// must AUTH with; without it the gateway accepts every client.
	// +optional
	PasswordSecret *corev1.SecretKeySelector `json:"passwordSecret,omitempty"`
	// Resources of the pdkvs-gateway container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
}

// ImagesSpec names the container images; the tag applies to all of them.
// One core image holds every daemon and etcd, so the defaults are equal.
type ImagesSpec struct {
	// +kubebuilder:default="pdpm/core"
	Monitor string `json:"monitor,omitempty"`
	// +kubebuilder:default="pdpm/core"
	Server string `json:"server,omitempty"`
	// Etcd is the image of the embedded etcd members.
	// +kubebuilder:default="pdpm/core"
	Etcd string `json:"etcd,omitempty"`
	// Gateway is the image of the pDKVS gateway.
	// +kubebuilder:default="pdpm/core"
	Gateway string `json:"gateway,omitempty"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`
	Tag string `json:"tag"`
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +kubebuilder:default=IfNotPresent
	PullPolicy corev1.PullPolicy `json:"pullPolicy,omitempty"`
}

// Condition types of a PDPMCluster. Each describes the present only.
const (
	// ConditionReady: the children match the spec and the cluster is healthy.
	ConditionReady = "Ready"
	// ConditionAvailable: monitors have quorum, enough servers serve and the
	// monitor does not report the data unavailable.
	ConditionAvailable = "Available"
	// ConditionProgressing: children are being created, scaled or rolled.
	ConditionProgressing = "Progressing"
	// ConditionDegraded: something is known to be wrong right now.
	ConditionDegraded = "Degraded"
)

// Phase is a one-word summary of the conditions.
type Phase string

const (
	PhaseReady       Phase = "Ready"
	PhaseProgressing Phase = "Progressing"
	PhaseDegraded    Phase = "Degraded"
	PhaseUnavailable Phase = "Unavailable"
	PhaseBlocked     Phase = "Blocked"
	PhaseDeleting    Phase = "Deleting"
)

// PDPMClusterStatus is what the operator observes now.
type PDPMClusterStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ServersReady is the number of server pods ready.
	// +optional
	ServersReady int32 `json:"serversReady"`
	// ServersTotal is the number of servers the cluster runs.
	// +optional
	ServersTotal int32 `json:"serversTotal"`
	// MonitorsReady is the number of monitor pods ready.
	// +optional
	MonitorsReady int32 `json:"monitorsReady"`
	// The fields below come from the monitor's status API and are empty
	// while the monitor is unreachable.
	// +optional
	ClusterUUID string `json:"clusterUUID,omitempty"`
	// +optional
	Epoch int64 `json:"epoch,omitempty"`
	// +optional
	Health string `json:"health,omitempty"`
	// +optional
	Capacity *resource.Quantity `json:"capacity,omitempty"`
	// +optional
	Used *resource.Quantity `json:"used,omitempty"`
	// MonitorLeader is the address of the monitor currently leading.
	// +optional
	MonitorLeader string `json:"monitorLeader,omitempty"`
	// ClusterKeyFingerprint identifies (without revealing) the cluster key
	// generated at creation, so a lost or replaced key Secret is detected and
	// never silently regenerated.
	// +optional
	ClusterKeyFingerprint string `json:"clusterKeyFingerprint,omitempty"`
	// PMNodes are the nodes on which servers of this cluster have run, so
	// hold PM data on the host (modes DevDax, FSDax, Emulated).
	// +optional
	// +listType=set
	PMNodes []string `json:"pmNodes,omitempty"`
	// ServerImage is the server image all servers run once a rollout is done.
	// +optional
	ServerImage string `json:"serverImage,omitempty"`
}

// PDPMCluster is one PDPM storage cluster.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 40",message="the name of a PDPMCluster is at most 40 characters: it prefixes the names of its StatefulSets and pods"
// +kubebuilder:resource:shortName=pdpm,categories=pdpm
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="PM",type=string,JSONPath=`.spec.servers.pm.mode`
// +kubebuilder:printcolumn:name="Transport",type=string,JSONPath=`.spec.servers.rdma.transport`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.serversReady`
// +kubebuilder:printcolumn:name="Servers",type=integer,JSONPath=`.status.serversTotal`
// +kubebuilder:printcolumn:name="Epoch",type=integer,JSONPath=`.status.epoch`
// +kubebuilder:printcolumn:name="Capacity",type=string,JSONPath=`.status.capacity`
// +kubebuilder:printcolumn:name="Used",type=string,JSONPath=`.status.used`
// +kubebuilder:printcolumn:name="Leader",type=string,JSONPath=`.status.monitorLeader`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PDPMCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PDPMClusterSpec   `json:"spec,omitempty"`
	Status PDPMClusterStatus `json:"status,omitempty"`
}

// PDPMClusterList is a list of PDPMClusters.
// +kubebuilder:object:root=true
type PDPMClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PDPMCluster `json:"items"`
}

func init() {
	SchemeBuilder.Register(&PDPMCluster{}, &PDPMClusterList{})
}
