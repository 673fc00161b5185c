// Package driver is the PDPM CSI driver (docs/csi.md): pDFS volumes for
// pods. The controller service creates, deletes, expands, lists and clones
// volumes through the pDFS volume API (pdpm.v1.Volumes, served by
// pdfs-volume-api); the identity service names the driver.
package driver

import (
	"fmt"
	"regexp"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"pdpm.io/pdpm/csi-driver/internal/pdpmv1"
)

// Name is the driver's name: the CSIDriver object's and the provisioner's.
const Name = "pdfs.csi.pdpm.io"

// Keys of the CSI secrets (a Kubernetes Secret the StorageClass names) and
// of the StorageClass parameters.
const (
	SecretMonitors      = "monitors"      // host:port of the cluster's monitors, comma-separated
	SecretClusterSecret = "clusterSecret" // the cluster secret
	ParamCluster        = "cluster"       // the cluster's name: part of every volume id
	ParamInodeQuota     = "inodeQuota"    // the volume's inode quota (default: none)
	ParamTransport      = "transport"     // tcp (default) or verbs
	ParamUID            = "uid"           // owner of the volume's root directory (default 0)
	ParamGID            = "gid"           // its group (default 0)
	// Volume context (what NodeStage is given): where the volume lives.
	contextCluster   = "cluster"
	contextMonitors  = "monitors"
	contextTransport = "transport"
)

// Cluster names a PDPM cluster and how to reach it.
type Cluster struct {
	Name      string // as in volume ids
	Monitors  string
	Secret    string
	Transport string
}

func (c Cluster) ref() *pdpmv1.ClusterRef {
	return &pdpmv1.ClusterRef{Monitors: c.Monitors, ClusterSecret: c.Secret, Transport: c.Transport}
}

var clusterName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$`)

// volumeID is "<cluster>/<volume name>": a volume id says which cluster
// holds it, so a request that carries no parameters (DeleteVolume,
// NodeStageVolume) finds it.
func volumeID(cluster, name string) string { return cluster + "/" + name }

// parseVolumeID splits a volume id: InvalidArgument when it is empty,
// NotFound when it is not of this driver's form (the CSI spec's answer
// for an id that names no volume).
func parseVolumeID(id string) (cluster, name string, err error) {
	if id == "" {
		return "", "", status.Error(codes.InvalidArgument, "volume id is required")
	}
	cluster, name, ok := strings.Cut(id, "/")
	if !ok || !clusterName.MatchString(cluster) || name == "" || strings.Contains(name, "/") {
		return "", "", status.Errorf(codes.NotFound, "volume %q: not a volume id of this driver (want CLUSTER/NAME)", id)
	}
	return cluster, name, nil
}

// Clusters resolves the cluster of a request: from the request's CSI
// secrets when they carry the monitors and the cluster secret, else the
// cluster the driver was started for.
type Clusters struct {
	Default Cluster // Name "" when none was configured
}

// Resolve returns the cluster `name` ("" for the default) with the
// credentials `secrets` give (may be nil).
func (c *Clusters) Resolve(name string, secrets map[string]string) (Cluster, error) {
	if name == "" {
		name = c.Default.Name
	}
	if name == "" {
		return Cluster{}, status.Errorf(codes.InvalidArgument,
			"no cluster: give the StorageClass parameter %q and its secret, or start the driver with --cluster-name", ParamCluster)
	}
	if !clusterName.MatchString(name) {
		return Cluster{}, status.Errorf(codes.InvalidArgument, "cluster name %q: want a DNS label (lower case, digits, '-', '.')", name)
	}
	if secrets[SecretMonitors] != "" || secrets[SecretClusterSecret] != "" {
		if secrets[SecretMonitors] == "" || secrets[SecretClusterSecret] == "" {
			return Cluster{}, status.Errorf(codes.InvalidArgument,
				"the secrets give only one of %q and %q: both are needed", SecretMonitors, SecretClusterSecret)
		}
		return Cluster{Name: name, Monitors: secrets[SecretMonitors], Secret: secrets[SecretClusterSecret]}, nil
	}
	if name == c.Default.Name {
		return c.Default, nil
	}
	return Cluster{}, status.Errorf(codes.InvalidArgument,
		"no credentials for cluster %q: the StorageClass must name a secret with %q and %q", name, SecretMonitors, SecretClusterSecret)
}

// apiError passes on a volume API error with its code (the codes the API
// answers are the ones the CSI spec names), saying what was being done.
func apiError(what string, err error) error {
	s, ok := status.FromError(err)
	if !ok {
		return status.Errorf(codes.Internal, "%s: %v", what, err)
	}
	return status.Error(s.Code(), fmt.Sprintf("%s: %s", what, s.Message()))
}
