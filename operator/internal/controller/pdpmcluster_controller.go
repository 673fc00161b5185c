// Package controller reconciles PDPMClusters: it owns the monitor and server
// StatefulSets, their Services and PodDisruptionBudgets, the cluster
// ConfigMap and the cluster key Secret, and reports the cluster's state from
// those and from the monitor's status API.
package controller

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	pdpmv1alpha1 "pdpm.io/pdpm/operator/api/v1alpha1"
	"pdpm.io/pdpm/operator/internal/pdpmv1"
)

const (
	// Finalizer holds a PDPMCluster until its workloads are gone and its PM
	// data is kept or wiped as its cleanup policy says.
	Finalizer  = "pdpm.io/cleanup"
	fieldOwner = "pdpm-operator"
)

// PDPMClusterReconciler reconciles PDPMCluster objects.
type PDPMClusterReconciler struct {
	client.Client
	// APIReader reads around the cache where a stale read would be wrong:
	// the cluster key, and the server StatefulSet a rollout steps.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  record.EventRecorder
	// MonitorStatus queries a monitor, MonitorDrain asks it to drain a
	// server; MonitorAddress says where a cluster's monitor is reached.
	MonitorStatus  MonitorStatusFunc
	MonitorDrain   MonitorDrainFunc
	MonitorAddress func(*pdpmv1alpha1.PDPMCluster) string
	// MonitorTimeout bounds one call to a monitor.
	MonitorTimeout time.Duration
	// ResyncPeriod is how often the status is refreshed without any change.
	ResyncPeriod time.Duration
	// OperatorImage is the operator's own image: server pods run their
	// node-topology step from it.
	OperatorImage string
}

// observation is what one reconcile saw; the status is computed from it.
type observation struct {
	monitorSts, serverSts *appsv1.StatefulSet
	gateway               *appsv1.Deployment
	monitor               *pdpmv1.ClusterStatus
	monitorErr            error
	keyProblem            problem
	clusterKey            string    // the servers' cluster secret; "" with a keyProblem
	unsatisfiable         []problem // pods the nodes cannot run (unsatisfiable.go)
	scaleDownRefused      string
	rolloutPaused         string
	partition             int32
	reconcileErr          error
}

type problem struct{ reason, message string }

// +kubebuilder:rbac:groups=pdpm.io,resources=pdpmclusters,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=pdpm.io,resources=pdpmclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=pdpm.io,resources=pdpmclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=statefulsets;deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=services;configmaps,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch;list
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;create;patch
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterrolebindings,verbs=get;create;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=pdpm-node-reader

// Reconcile brings the children of one PDPMCluster to its spec and reports
// what it sees in the status.
func (r *PDPMClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	c := &pdpmv1alpha1.PDPMCluster{}
	if err := r.Get(ctx, req.NamespacedName, c); err != nil {
		if apierrors.IsNotFound(err) {
			forgetClusterMetrics(req.Namespace, req.Name)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !c.DeletionTimestamp.IsZero() {
		res, err := r.finalize(ctx, c)
		countOutcome(outcomeOf(err, "finalizing"))
		return res, err
	}
	if controllerutil.AddFinalizer(c, Finalizer) {
		if err := r.Update(ctx, c); err != nil {
			countOutcome("error")
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
	}

	orig := c.DeepCopy()
	obs := &observation{}
	obs.reconcileErr = r.reconcileChildren(ctx, c, obs)
	if obs.reconcileErr != nil {
		r.observeAfterFailure(ctx, c, obs)
	}
	r.computeStatus(c, obs)
	r.recordTransitions(c, orig)
	setClusterMetrics(c, obs)
	if !equality.Semantic.DeepEqual(orig.Status, c.Status) {
		if err := r.Status().Patch(ctx, c, client.MergeFrom(orig)); err != nil {
			countOutcome("error")
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
	}
	switch {
	case obs.reconcileErr != nil:
		countOutcome("error")
		return ctrl.Result{}, obs.reconcileErr
	case obs.scaleDownRefused != "":
		countOutcome("scale_down_refused")
	case obs.rolloutPaused != "":
		countOutcome("rollout_paused")
	default:
		countOutcome("reconciled")
	}
	return ctrl.Result{RequeueAfter: r.ResyncPeriod}, nil
}

func outcomeOf(err error, ok string) string {
	if err != nil {
		return "error"
	}
	return ok
}

func (r *PDPMClusterReconciler) reconcileChildren(ctx context.Context, c *pdpmv1alpha1.PDPMCluster, obs *observation) error {
	if err := r.ensureClusterKey(ctx, c, obs); err != nil {
		return fmt.Errorf("cluster key: %w", err)
	}
	if obs.clusterKey != "" {
		if err := r.apply(ctx, c, csiSecret(c, obs.clusterKey)); err != nil {
			return err
		}
	}
	cm := configMap(c)
	if err := r.apply(ctx, c, cm); err != nil {
		return err
	}
	configHash := hashOf(cm.Data)
	for _, obj := range []client.Object{
		monitorService(c), serverService(c), clientService(c), monitorPDB(c), serverPDB(c), serverServiceAccount(c),
	} {
		if err := r.apply(ctx, c, obj); err != nil {
			return err
		}
	}
	// Cluster-scoped: no owner reference can hold it, the finalizer deletes it.
	if err := r.applyObject(ctx, c, serverNodeReaderBinding(c)); err != nil {
		return err
	}
	mon := monitorStatefulSet(c, configHash)
	if err := r.apply(ctx, c, mon); err != nil {
		return err
	}
	obs.monitorSts = mon

	qctx, cancel := context.WithTimeout(ctx, r.MonitorTimeout)
	obs.monitor, obs.monitorErr = r.MonitorStatus(qctx, r.MonitorAddress(c))
	cancel()

	existing := &appsv1.StatefulSet{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: serverName(c)}, existing); err != nil {
		if !apierrors.IsNotFound(err) {
			return err
		}
		existing = nil
	}
	pods, err := r.serverPods(ctx, c)
	if err != nil {
		return err
	}
	tmpl, claims := serverPodTemplate(c, configHash, r.OperatorImage)
	replicas := r.serverReplicas(ctx, c, existing, pods, obs)
	obs.partition = r.serverPartition(c, existing, pods, hashOf(tmpl), replicas, obs)
	srv := serverStatefulSet(c, tmpl, claims, replicas, obs.partition)
	if err := r.apply(ctx, c, srv); err != nil {
		return err
	}
	obs.serverSts = srv
	gw := gatewayDeployment(c, configHash)
	for _, obj := range []client.Object{gw, gatewayService(c)} {
		if err := r.apply(ctx, c, obj); err != nil {
			return err
		}
	}
	obs.gateway = gw
	if obs.unsatisfiable, err = r.unsatisfiable(ctx, c, pods); err != nil {
		return err
	}
	if pmOnHost(c) {
		recordPMNodes(c, pods)
	}
	return nil
}

// observeAfterFailure completes the observation of a reconcile that failed
// part way, so the status still describes what exists rather than guesses.
func (r *PDPMClusterReconciler) observeAfterFailure(ctx context.Context, c *pdpmv1alpha1.PDPMCluster, obs *observation) {
	for _, s := range []struct {
		name string
		sts  **appsv1.StatefulSet
	}{{monitorName(c), &obs.monitorSts}, {serverName(c), &obs.serverSts}} {
		if *s.sts != nil {
			continue
		}
		sts := &appsv1.StatefulSet{}
		if err := r.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: s.name}, sts); err == nil {
			*s.sts = sts
		}
	}
	if obs.monitor == nil && obs.monitorErr == nil {
		obs.monitorErr = errors.New("not queried: the reconcile failed before")
	}
}

// apply makes obj (built from the spec) true on the API server with
// server-side apply, owned by c: fields the operator owns are set to its
// values — which also undoes any edit made to them — and nothing else is
// touched. obj is updated to what the server returned.
func (r *PDPMClusterReconciler) apply(ctx context.Context, c *pdpmv1alpha1.PDPMCluster, obj client.Object) error {
	if err := controllerutil.SetControllerReference(c, obj, r.Scheme); err != nil {
		return err
	}
	return r.applyObject(ctx, c, obj)
}

// applyObject is apply without the owner reference, for what c cannot own
// (cluster-scoped objects); events still go to c.
func (r *PDPMClusterReconciler) applyObject(ctx context.Context, c *pdpmv1alpha1.PDPMCluster, obj client.Object) error {
	gvk, err := apiutil.GVKForObject(obj, r.Scheme)
	if err != nil {
		return err
	}
	u, err := applyConfiguration(obj)
	if err != nil {
		return err
	}
	u.SetGroupVersionKind(gvk)
	before := &unstructured.Unstructured{}
	before.SetGroupVersionKind(gvk)
	existed := true
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(obj), before); err != nil {
		if !apierrors.IsNotFound(err) {
			return err
		}
		existed = false
	}
	if err := r.Patch(ctx, u, client.Apply, client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	switch {
	case !existed:
		r.Recorder.Eventf(c, corev1.EventTypeNormal, "Created", "Created %s %s", gvk.Kind, obj.GetName())
	case before.GetResourceVersion() != u.GetResourceVersion():
		r.Recorder.Eventf(c, corev1.EventTypeNormal, "Updated", "Updated %s %s to match the spec", gvk.Kind, obj.GetName())
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj)
}

// applyConfiguration turns a typed object into the apply request for it:
// no status, no server-set metadata, no nulls from unset struct fields.
func applyConfiguration(obj client.Object) (*unstructured.Unstructured, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	delete(m, "status")
	return &unstructured.Unstructured{Object: dropNulls(m).(map[string]any)}, nil
}

func dropNulls(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if e == nil {
				delete(t, k)
			} else {
				t[k] = dropNulls(e)
			}
		}
	case []any:
		for i, e := range t {
			t[i] = dropNulls(e)
		}
	}
	return v
}

// ensureClusterKey creates the cluster key Secret once. A key is never
// regenerated: servers and clients hold the old one, so a missing or
// replaced Secret is reported instead.
func (r *PDPMClusterReconciler) ensureClusterKey(ctx context.Context, c *pdpmv1alpha1.PDPMCluster, obs *observation) error {
	sec := &corev1.Secret{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: keyName(c)}, sec)
	if apierrors.IsNotFound(err) {
		if c.Status.ClusterKeyFingerprint != "" {
			obs.keyProblem = problem{"ClusterKeyMissing", fmt.Sprintf(
				"Secret %s holding the cluster key (fingerprint %s) is gone; the operator will not generate a new key "+
					"because the cluster still uses the old one: restore the Secret", keyName(c), c.Status.ClusterKeyFingerprint)}
			return nil
		}
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return err
		}
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: keyName(c), Namespace: c.Namespace, Labels: Labels(c, "")},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{ClusterKeyField: []byte(hex.EncodeToString(key))},
		}
		if err := controllerutil.SetControllerReference(c, sec, r.Scheme); err != nil {
			return err
		}
		if err := r.Create(ctx, sec); err != nil {
			return err
		}
		c.Status.ClusterKeyFingerprint = fingerprint(sec.Data[ClusterKeyField])
		obs.clusterKey = clusterSecret(sec.Data[ClusterKeyField])
		r.Recorder.Eventf(c, corev1.EventTypeNormal, "ClusterKeyGenerated",
			"Generated the cluster key in Secret %s (fingerprint %s)", keyName(c), c.Status.ClusterKeyFingerprint)
		return nil
	}
	if err != nil {
		return err
	}
	key := sec.Data[ClusterKeyField]
	if len(key) == 0 {
		obs.keyProblem = problem{"ClusterKeyInvalid", fmt.Sprintf("Secret %s has no %q entry", keyName(c), ClusterKeyField)}
		return nil
	}
	fp := fingerprint(key)
	switch c.Status.ClusterKeyFingerprint {
	case "":
		// A Secret created before the cluster: the user's own key.
		c.Status.ClusterKeyFingerprint = fp
		r.Recorder.Eventf(c, corev1.EventTypeNormal, "ClusterKeyAdopted", "Using the cluster key in Secret %s (fingerprint %s)", keyName(c), fp)
	case fp:
	default:
		obs.keyProblem = problem{"ClusterKeyChanged", fmt.Sprintf(
			"Secret %s holds a key with fingerprint %s, but the cluster was created with %s: restore the original key",
			keyName(c), fp, c.Status.ClusterKeyFingerprint)}
		return nil
	}
	obs.clusterKey = clusterSecret(key)
	return nil
}

// clusterSecret is the secret the daemons read from the mounted key file
// (common/file_util.h ReadSecretFile: the content without trailing line
// ends).
func clusterSecret(key []byte) string { return strings.TrimRight(string(key), "\r\n") }

func fingerprint(key []byte) string {
	sum := sha256.Sum256(key)
	return "sha256:" + hex.EncodeToString(sum[:8])
}

func (r *PDPMClusterReconciler) serverPods(ctx context.Context, c *pdpmv1alpha1.PDPMCluster) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabels(selectorLabels(c, componentServer))); err != nil {
		return nil, err
	}
	return pods.Items, nil
}

func recordPMNodes(c *pdpmv1alpha1.PDPMCluster, pods []corev1.Pod) {
	nodes := map[string]bool{}
	for _, n := range c.Status.PMNodes {
		nodes[n] = true
	}
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			nodes[p.Spec.NodeName] = true
		}
	}
	list := make([]string, 0, len(nodes))
	for n := range nodes {
		list = append(list, n)
	}
	sort.Strings(list)
	c.Status.PMNodes = list
}

// serverReplicas is the server count to run: the spec's, except that a
// server that may hold data is removed only once the monitor reports it
// drained. The operator asks the monitor to drain each server to remove
// (every reconcile until it is DRAINED: the call is idempotent).
func (r *PDPMClusterReconciler) serverReplicas(ctx context.Context, c *pdpmv1alpha1.PDPMCluster, existing *appsv1.StatefulSet,
	pods []corev1.Pod, obs *observation) int32 {
	want := c.Spec.Servers.Replicas
	if existing == nil || existing.Spec.Replicas == nil {
		return want
	}
	have := *existing.Spec.Replicas
	if want > have {
		r.Recorder.Eventf(c, corev1.EventTypeNormal, "ScalingUp", "Scaling servers from %d to %d", have, want)
	}
	if want >= have {
		return want
	}
	scheduled := map[string]bool{}
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			scheduled[p.Name] = true
		}
	}
	var blocking []string
	for o := want; o < have; o++ {
		pod := fmt.Sprintf("%s-%d", serverName(c), o)
		if obs.monitorErr != nil {
			blocking = append(blocking, pod+" (state unknown)")
			continue
		}
		server, known := monitorServer(obs.monitor, pod)
		state := server.GetState()
		switch {
		case known && state == pdpmv1.ServerState_SERVER_STATE_DRAINED:
		case !known && !scheduled[pod]:
			// Never ran and unknown to the monitor: it holds nothing.
		case !known:
			blocking = append(blocking, pod+" (not registered with the monitor)")
		default:
			if drained, progress := r.drain(ctx, c, pod, server, obs); !drained {
				blocking = append(blocking, fmt.Sprintf("%s (%s)", pod, progress))
			}
		}
	}
	if len(blocking) == 0 {
		r.Recorder.Eventf(c, corev1.EventTypeNormal, "ScalingDown", "Scaling servers from %d to %d: the servers removed are drained", have, want)
		return want
	}
	msg := fmt.Sprintf("servers.replicas is %d but %d servers run: removing a server is allowed only once the monitor reports it DRAINED; not drained: %s",
		want, have, strings.Join(blocking, ", "))
	if obs.monitorErr != nil {
		msg += fmt.Sprintf("; the monitor is unreachable (%v)", obs.monitorErr)
	}
	obs.scaleDownRefused = msg
	return have
}

// monitorServer is the server the monitor knows as pod (servers register
// with their pod's name as a label).
func monitorServer(st *pdpmv1.ClusterStatus, pod string) (*pdpmv1.ServerInfo, bool) {
	for _, s := range st.GetServers() {
		if s.GetLabels()[ServerPodLabel] == pod {
			return s, true
		}
	}
	return nil, false
}

// drain asks the monitor to drain the server of pod: whether it is
// DRAINED, else where that stands (its state and what is still to move, or
// why the operator could not ask).
func (r *PDPMClusterReconciler) drain(ctx context.Context, c *pdpmv1alpha1.PDPMCluster, pod string,
	server *pdpmv1.ServerInfo, obs *observation) (bool, string) {
	state := strings.TrimPrefix(server.GetState().String(), "SERVER_STATE_")
	if obs.clusterKey == "" {
		return false, state + ", not drained: the cluster key is unusable"
	}
	dctx, cancel := context.WithTimeout(ctx, r.MonitorTimeout)
	resp, err := r.MonitorDrain(dctx, r.MonitorAddress(c), obs.clusterKey, server.GetId())
	cancel()
	if err != nil {
		return false, fmt.Sprintf("%s, drain request failed: %v", state, err)
	}
	if server.GetState() != pdpmv1.ServerState_SERVER_STATE_DRAINING &&
		server.GetState() != pdpmv1.ServerState_SERVER_STATE_DRAINED {
		r.Recorder.Eventf(c, corev1.EventTypeNormal, "Draining",
			"Asked the monitor to drain server %d (%s) before removing its pod", server.GetId(), pod)
	}
	state = strings.TrimPrefix(resp.GetState().String(), "SERVER_STATE_")
	if resp.GetMessage() != "" {
		state += ": " + resp.GetMessage()
	}
	return resp.GetState() == pdpmv1.ServerState_SERVER_STATE_DRAINED, state
}

// serverPartition steps a rollout of the server pod template: pods with
// ordinal >= partition run the new template, and the partition moves down
// by one only when every pod above it is updated and ready and the monitor
// reports the cluster healthy — one server at a time, never while degraded.
// A server that is not ready serves nothing, so it is updated at once: a
// fixed template reaches a server stuck on a broken one.
func (r *PDPMClusterReconciler) serverPartition(c *pdpmv1alpha1.PDPMCluster, existing *appsv1.StatefulSet,
	pods []corev1.Pod, templateHash string, replicas int32, obs *observation) int32 {
	if existing == nil {
		return 0
	}
	have := ptrValue(existing.Spec.Replicas)
	var p int32
	if ru := existing.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		p = *ru.Partition
	}
	if existing.Annotations[TemplateHashAnnotation] != templateHash {
		p = have
		r.Recorder.Eventf(c, corev1.EventTypeNormal, "RolloutStarted",
			"Server pod template changed (image %s:%s): updating servers one at a time while the cluster is healthy",
			c.Spec.Images.Server, c.Spec.Images.Tag)
	}
	p = min(p, replicas)
	if p == 0 {
		return 0
	}
	st := existing.Status
	next := fmt.Sprintf("%s-%d", serverName(c), p-1)
	switch {
	case !podReady(pods, next):
		r.Recorder.Eventf(c, corev1.EventTypeNormal, "RolloutStep", "Updating server %s (not ready, so not serving)", next)
		return p - 1
	case obs.monitorErr != nil:
		obs.rolloutPaused = fmt.Sprintf("waiting to update %s: the monitor is unreachable, so cluster health is unknown", next)
		return p
	case obs.monitor.GetHealth() != pdpmv1.Health_HEALTH_OK:
		obs.rolloutPaused = fmt.Sprintf("waiting to update %s: the monitor reports health %s (%s)", next,
			healthName(obs.monitor.GetHealth()), obs.monitor.GetMessage())
		return p
	case st.ObservedGeneration < existing.Generation || st.ReadyReplicas < have || st.UpdatedReplicas < have-p:
		// The previous step is still in progress.
		return p
	}
	r.Recorder.Eventf(c, corev1.EventTypeNormal, "RolloutStep", "Updating server %s", next)
	return p - 1
}

func podReady(pods []corev1.Pod, name string) bool {
	for _, p := range pods {
		if p.Name != name || !p.DeletionTimestamp.IsZero() {
			continue
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady {
				return cond.Status == corev1.ConditionTrue
			}
		}
	}
	return false
}

func ptrValue(v *int32) int32 {
	if v == nil {
		return 0
	}
	return *v
}

func healthName(h pdpmv1.Health) string { return strings.TrimPrefix(h.String(), "HEALTH_") }

// SetupWithManager registers the reconciler and the children it watches.
func (r *PDPMClusterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&pdpmv1alpha1.PDPMCluster{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Secret{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&batchv1.Job{}).
		Named("pdpmcluster").
		Complete(r)
}
