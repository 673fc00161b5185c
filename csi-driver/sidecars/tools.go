//go:build tools

// Package sidecars only pins the commands images/csi.list builds from this
// module: csi-provisioner and csi-resizer.
package sidecars

import (
	_ "github.com/kubernetes-csi/external-provisioner/v5/cmd/csi-provisioner"
	_ "github.com/kubernetes-csi/external-resizer/cmd/csi-resizer"
)
