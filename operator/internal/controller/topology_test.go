package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"pdpm.io/pdpm/operator/internal/topology"
)

// installNodeReaderRole creates the ClusterRole config/rbac ships (the
// chart ships the same rules), as an installation would.
func installNodeReaderRole(t *testing.T) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	data, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "..", "config", "rbac", "node_reader_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(data, role); err != nil {
		t.Fatal(err)
	}
	if role.Name != NodeReaderClusterRole {
		t.Fatalf("config/rbac names the node reader %q, the operator binds %q", role.Name, NodeReaderClusterRole)
	}
	if err := k8s.Create(context.Background(), role); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// asServiceAccount is a client acting as the service account ns/name.
func asServiceAccount(t *testing.T, ns, name string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(testConfig)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + name,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func createNode(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if err := k8s.Create(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), node) })
}

// The server pods' identity: a ServiceAccount the cluster owns, bound
// cluster-wide to the node reader, with which the node-topology step reads
// its node's failure domains — and nothing else; the binding goes with the
// cluster although no owner reference can hold it.
func TestServerNodeReaderIdentity(t *testing.T) {
	ctx := context.Background()
	installNodeReaderRole(t)
	ns := newNamespace(t)
	c := testCluster(ns)
	createCluster(t, c)

	sa := &corev1.ServiceAccount{}
	mustGet(t, ns, "pdpm-server", sa)
	if len(sa.OwnerReferences) != 1 || sa.OwnerReferences[0].Name != "pdpm" || sa.AutomountServiceAccountToken == nil ||
		*sa.AutomountServiceAccountToken {
		t.Errorf("server ServiceAccount owners %+v, automount %v", sa.OwnerReferences, sa.AutomountServiceAccountToken)
	}
	bindingName := "pdpm-node-reader:" + ns + ":pdpm"
	crb := &rbacv1.ClusterRoleBinding{}
	mustGet(t, "", bindingName, crb)
	if crb.RoleRef.Name != NodeReaderClusterRole || crb.RoleRef.Kind != "ClusterRole" || len(crb.Subjects) != 1 ||
		crb.Subjects[0].Name != "pdpm-server" || crb.Subjects[0].Namespace != ns || crb.Labels[NamespaceLabel] != ns {
		t.Errorf("binding %+v %+v %v", crb.RoleRef, crb.Subjects, crb.Labels)
	}

	zoned, bare := ns+"-zoned", ns+"-bare"
	createNode(t, zoned, map[string]string{corev1.LabelTopologyZone: "z1", corev1.LabelTopologyRegion: "r1",
		"example.com/rack": "rk7", "other": "x"})
	createNode(t, bare, nil)
	server := asServiceAccount(t, ns, "pdpm-server")
	dir := t.TempDir()
	for _, tc := range []struct{ node, rackLabel, want string }{
		{zoned, "example.com/rack", "host = " + zoned + "\nrack = rk7\nregion = r1\nzone = z1\n"},
		{zoned, "", "host = " + zoned + "\nregion = r1\nzone = z1\n"},
		{bare, "example.com/rack", "host = " + bare + "\n"},
	} {
		out := filepath.Join(dir, "labels")
		if err := topology.Write(ctx, server, tc.node, tc.rackLabel, out); err != nil {
			t.Fatalf("node-topology as the server: %v", err)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		want := "# Failure domains of node " + tc.node + ", written by pdpm-operator node-topology.\nconfig_version = 1\n" + tc.want
		if string(data) != want {
			t.Errorf("node %s, rack label %q: labels file\n%s\nwant\n%s", tc.node, tc.rackLabel, data, want)
		}
	}
	if err := topology.Write(ctx, server, ns+"-absent", "", filepath.Join(dir, "absent")); !apierrors.IsNotFound(err) {
		t.Errorf("absent node: %v, want not found", err)
	}
	// Least privilege: get nodes, nothing more.
	if err := server.List(ctx, &corev1.NodeList{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing nodes as the server: %v, want forbidden", err)
	}
	if err := server.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pdpm-key"}, &corev1.Secret{}); !apierrors.IsForbidden(err) {
		t.Errorf("reading the key Secret as the server: %v, want forbidden", err)
	}

	deleteCluster(t, c)
	if err := k8s.Get(ctx, client.ObjectKey{Name: bindingName}, &rbacv1.ClusterRoleBinding{}); !apierrors.IsNotFound(err) {
		t.Errorf("binding after the cluster was deleted: %v, want not found", err)
	}
	eventually(t, func() error {
		err := topology.Write(ctx, server, zoned, "", filepath.Join(dir, "after"))
		if apierrors.IsForbidden(err) {
			return nil
		}
		return fmt.Errorf("node-topology after the cluster was deleted: %v, want forbidden", err)
	})
}
