package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	pdpmv1alpha1 "pdpm.io/pdpm/operator/api/v1alpha1"
)

// finalize runs while a PDPMCluster is being deleted: it stops the
// workloads, then keeps or wipes the PM data as the cleanup policy says,
// and only then lets the object go.
func (r *PDPMClusterReconciler) finalize(ctx context.Context, c *pdpmv1alpha1.PDPMCluster) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(c, Finalizer) {
		return ctrl.Result{}, nil
	}
	orig := c.DeepCopy()
	c.Status.Phase = pdpmv1alpha1.PhaseDeleting
	// The servers' node-reader binding is cluster-scoped, so no owner
	// reference takes it away with the cluster.
	crb := serverNodeReaderBinding(c)
	if err := r.Delete(ctx, crb); err == nil {
		r.Recorder.Eventf(c, corev1.EventTypeNormal, "Deleting", "Deleted ClusterRoleBinding %s", crb.Name)
	} else if !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	for _, name := range []string{serverName(c), monitorName(c)} {
		sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace}}
		err := r.Delete(ctx, sts, client.PropagationPolicy(metav1.DeletePropagationBackground))
		if err == nil {
			r.Recorder.Eventf(c, corev1.EventTypeNormal, "Deleting", "Deleted StatefulSet %s", name)
		} else if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
	}

	var wait string
	if c.Spec.CleanupPolicy == pdpmv1alpha1.CleanupWipeData {
		var err error
		wait, err = r.wipe(ctx, c)
		if err != nil {
			return ctrl.Result{}, err
		}
	} else if err := r.retain(ctx, c); err != nil {
		return ctrl.Result{}, err
	}

	if wait != "" {
		meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: pdpmv1alpha1.ConditionProgressing,
			Status: metav1.ConditionTrue, Reason: "Deleting", Message: wait, ObservedGeneration: c.Generation})
		meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: pdpmv1alpha1.ConditionReady,
			Status: metav1.ConditionFalse, Reason: "Deleting", Message: wait, ObservedGeneration: c.Generation})
		if err := r.Status().Patch(ctx, c, client.MergeFrom(orig)); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
	}
	controllerutil.RemoveFinalizer(c, Finalizer)
	// Not found: an earlier reconcile (this one read a stale copy) already
	// let the object go.
	return ctrl.Result{}, client.IgnoreNotFound(r.Update(ctx, c))
}

// retain keeps everything the data needs: PM on the nodes, the server and
// etcd volumes (StatefulSets retain their claims) and the cluster key,
// which is released from the PDPMCluster so garbage collection keeps it.
func (r *PDPMClusterReconciler) retain(ctx context.Context, c *pdpmv1alpha1.PDPMCluster) error {
	sec := &corev1.Secret{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: keyName(c)}, sec)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err == nil {
		if owned, _ := controllerutil.HasOwnerReference(sec.OwnerReferences, c, r.Scheme); owned {
			if err := controllerutil.RemoveOwnerReference(c, sec, r.Scheme); err != nil {
				return err
			}
			if err := r.Update(ctx, sec); err != nil {
				return err
			}
		}
	}
	where := "volumes of the server StatefulSet"
	if pmOnHost(c) {
		where = fmt.Sprintf("nodes %s", strings.Join(c.Status.PMNodes, ", "))
		if len(c.Status.PMNodes) == 0 {
			where = "no node (no server ever ran)"
		}
	}
	r.Recorder.Eventf(c, corev1.EventTypeNormal, "DataRetained",
		"Cleanup policy Retain: PM data kept on %s; etcd volumes and cluster key Secret %s kept", where, keyName(c))
	return nil
}

// wipe erases the cluster's data once no server runs: a Job per node for PM
// on the host, the claims of the server and etcd volumes, and the key. It
// returns what it still waits for, "" once done.
func (r *PDPMClusterReconciler) wipe(ctx context.Context, c *pdpmv1alpha1.PDPMCluster) (string, error) {
	pods, err := r.serverPods(ctx, c)
	if err != nil {
		return "", err
	}
	if pmOnHost(c) {
		recordPMNodes(c, pods)
	}
	if len(pods) > 0 {
		return fmt.Sprintf("waiting for %d server pods to exit before wiping PM", len(pods)), nil
	}
	if pmOnHost(c) {
		var pending, failed []string
		for _, node := range c.Status.PMNodes {
			job := wipeJob(c, node)
			if err := controllerutil.SetControllerReference(c, job, r.Scheme); err != nil {
				return "", err
			}
			err := r.Create(ctx, job)
			switch {
			case err == nil:
				r.Recorder.Eventf(c, corev1.EventTypeNormal, "WipeStarted", "Wiping PM on node %s (Job %s)", node, job.Name)
				pending = append(pending, node)
				continue
			case !apierrors.IsAlreadyExists(err):
				return "", err
			}
			if err := r.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
				return "", err
			}
			switch {
			case jobCondition(job, batchv1.JobComplete):
			case jobCondition(job, batchv1.JobFailed):
				failed = append(failed, node)
			default:
				pending = append(pending, node)
			}
		}
		if len(failed) > 0 {
			msg := fmt.Sprintf("wiping PM failed on nodes %s (see the Jobs' pods); the PDPMCluster stays until it succeeds "+
				"(delete the failed Jobs to retry)", strings.Join(failed, ", "))
			r.Recorder.Event(c, corev1.EventTypeWarning, "WipeFailed", msg)
			return msg, nil
		}
		if len(pending) > 0 {
			return fmt.Sprintf("wiping PM on nodes %s", strings.Join(pending, ", ")), nil
		}
	}
	claims := &corev1.PersistentVolumeClaimList{}
	if err := r.List(ctx, claims, client.InNamespace(c.Namespace), client.MatchingLabels{
		"app.kubernetes.io/name": "pdpm", "app.kubernetes.io/instance": c.Name}); err != nil {
		return "", err
	}
	for i := range claims.Items {
		if err := r.Delete(ctx, &claims.Items[i]); err != nil && !apierrors.IsNotFound(err) {
			return "", err
		}
		r.Recorder.Eventf(c, corev1.EventTypeNormal, "WipeData", "Deleted PersistentVolumeClaim %s", claims.Items[i].Name)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: keyName(c), Namespace: c.Namespace}}
	if err := r.Delete(ctx, sec); err != nil && !apierrors.IsNotFound(err) {
		return "", err
	}
	r.Recorder.Eventf(c, corev1.EventTypeNormal, "WipeData", "Cleanup policy WipeData: PM, volumes and cluster key deleted")
	return "", nil
}

func jobCondition(job *batchv1.Job, t batchv1.JobConditionType) bool {
	for _, cond := range job.Status.Conditions {
		if cond.Type == t && cond.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// wipeJob erases this cluster's PM on one node. Host directories (FSDax,
// Emulated) are removed; a device-DAX device cannot be written with write(2),
// so the server image zeroes it (`pdpm-server --wipe-pm=<device>`).
func wipeJob(c *pdpmv1alpha1.PDPMCluster, node string) *batchv1.Job {
	pm := &c.Spec.Servers.PM
	var vol corev1.Volume
	var mount corev1.VolumeMount
	var command []string
	// The host's PM directory or device belongs to root.
	sc := asRoot(restricted())
	switch pm.Mode {
	case pdpmv1alpha1.PMDevDax:
		vol = corev1.Volume{Name: "pm", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: pm.DevDax.Path, Type: ptr.To(corev1.HostPathCharDev)}}}
		mount = corev1.VolumeMount{Name: "pm", MountPath: pm.DevDax.Path}
		command = []string{"pdpm-server", "--wipe-pm=" + pm.DevDax.Path}
		sc = &corev1.SecurityContext{Privileged: ptr.To(true)}
	default:
		dir := hostClusterDir(c)
		parent := dir[:strings.LastIndex(dir, "/")]
		vol = corev1.Volume{Name: "pm", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: parent, Type: ptr.To(corev1.HostPathDirectory)}}}
		mount = corev1.VolumeMount{Name: "pm", MountPath: "/host-pm"}
		command = []string{"rm", "-rf", "--", "/host-pm" + dir[len(parent):]}
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s-wipe-%s", c.Name, hashOf(node)[:10]),
			Namespace: c.Namespace,
			Labels:    Labels(c, componentWipe),
			Annotations: map[string]string{
				"pdpm.io/node": node,
			},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](3),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: Labels(c, componentWipe)},
				Spec: corev1.PodSpec{
					NodeName:      node,
					RestartPolicy: corev1.RestartPolicyOnFailure,
					Tolerations:   c.Spec.Servers.Tolerations,
					Containers: []corev1.Container{{
						Name:            "wipe",
						Image:           image(c.Spec.Images.Server, c.Spec.Images.Tag),
						ImagePullPolicy: c.Spec.Images.PullPolicy,
						Command:         command,
						VolumeMounts:    []corev1.VolumeMount{mount},
						SecurityContext: sc,
					}},
					Volumes: []corev1.Volume{vol},
				},
			},
		},
	}
}
