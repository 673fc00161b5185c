// Package topology is the node-topology step of a server pod: it reads the
// server's Node and writes the node's failure domains into a labels file
// that pdpm-server registers with the monitor (--labels-file), so the
// monitor keeps a segment's replicas in different zones, racks and hosts.
//
// The file has the syntax of the cluster configuration file: "key = value"
// lines, '#' comments, and `config_version = 1`.
package topology

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Labels are a server's failure domains on node: "host" is the node's
// name, "zone" and "region" the node's well-known topology labels, and
// "rack" the value of the node label rackLabel (none when rackLabel is
// empty). A label the node lacks is left out.
func Labels(node *corev1.Node, rackLabel string) map[string]string {
	labels := map[string]string{"host": node.Name}
	from := map[string]string{"zone": corev1.LabelTopologyZone, "region": corev1.LabelTopologyRegion}
	if rackLabel != "" {
		from["rack"] = rackLabel
	}
	for key, nodeLabel := range from {
		if v := node.Labels[nodeLabel]; v != "" {
			labels[key] = v
		}
	}
	return labels
}

// Render is the labels file of node with labels, keys sorted.
func Render(node string, labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "# Failure domains of node %s, written by pdpm-operator node-topology.\nconfig_version = 1\n", node)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = %s\n", k, labels[k])
	}
	return b.String()
}

// Write reads the Node named node and writes its labels file to out,
// atomically (a reader sees the old file or the whole new one).
func Write(ctx context.Context, c client.Reader, node, rackLabel, out string) error {
	n := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
		return fmt.Errorf("reading node %s: %w", node, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), ".labels-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	_, err = tmp.WriteString(Render(node, Labels(n, rackLabel)))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	return nil
}
