package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pdpmv1alpha1 "pdpm.io/pdpm/operator/api/v1alpha1"
)

// Reasons of a cluster the API accepted but the nodes cannot run.
const (
	// ReasonPodsUnschedulable: the scheduler finds no node for a pod (no
	// node matches the selector or affinity, none has the device-plugin
	// resource, an etcd claim cannot be bound...).
	ReasonPodsUnschedulable = "PodsUnschedulable"
	// ReasonPMUnavailable: a server pod is on a node but cannot mount its PM
	// (the DevDax device is not on that node, the FSDax directory cannot
	// be created...).
	ReasonPMUnavailable = "PMUnavailable"
)

// unsatisfiable says why pods of the cluster cannot run at all, as the
// scheduler (the pods' PodScheduled condition) and the kubelet (FailedMount
// events of pods stuck before their containers start) report it now:
// mostly problems no waiting fixes, which need the nodes or the spec
// changed. One problem per reason, naming each pod and its cause.
func (r *PDPMClusterReconciler) unsatisfiable(ctx context.Context, c *pdpmv1alpha1.PDPMCluster, servers []corev1.Pod) ([]problem, error) {
	monitors := &corev1.PodList{}
	if err := r.List(ctx, monitors, client.InNamespace(c.Namespace), client.MatchingLabels(selectorLabels(c, componentMonitor))); err != nil {
		return nil, err
	}
	pods := append(append([]corev1.Pod{}, monitors.Items...), servers...)
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	causes := map[string][]string{}
	for i := range pods {
		p := &pods[i]
		if !p.DeletionTimestamp.IsZero() || p.Status.Phase != corev1.PodPending {
			continue
		}
		if cond := podCondition(p, corev1.PodScheduled); cond != nil && cond.Status == corev1.ConditionFalse &&
			cond.Reason == corev1.PodReasonUnschedulable {
			causes[ReasonPodsUnschedulable] = append(causes[ReasonPodsUnschedulable],
				fmt.Sprintf("pod %s cannot be scheduled: %s", p.Name, cond.Message))
			continue
		}
		if p.Spec.NodeName == "" || !waitingToStart(p) {
			continue
		}
		msg, err := r.lastFailedMount(ctx, p)
		if err != nil {
			return nil, err
		}
		if msg != "" {
			causes[ReasonPMUnavailable] = append(causes[ReasonPMUnavailable],
				fmt.Sprintf("pod %s on node %s cannot mount its volumes: %s", p.Name, p.Spec.NodeName, msg))
		}
	}
	var problems []problem
	for _, reason := range []string{ReasonPMUnavailable, ReasonPodsUnschedulable} {
		if len(causes[reason]) > 0 {
			problems = append(problems, problem{reason, strings.Join(causes[reason], "; ")})
		}
	}
	return problems, nil
}

func podCondition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// waitingToStart: no container of the pod has started yet (the kubelet is
// still setting the pod up: volumes, sandbox, images).
func waitingToStart(p *corev1.Pod) bool {
	statuses := append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
	for _, s := range statuses {
		if s.State.Running != nil || s.State.Terminated != nil || s.LastTerminationState.Terminated != nil {
			return false
		}
	}
	return true
}

// lastFailedMount is the message of the newest FailedMount event of pod p
// (the kubelet's reason when a volume cannot be set up, e.g. "hostPath
// type check failed: /dev/dax0.0 is not a character device"), or "". Read
// from the API server, not a cache: the operator watches no events.
func (r *PDPMClusterReconciler) lastFailedMount(ctx context.Context, p *corev1.Pod) (string, error) {
	events := &corev1.EventList{}
	sel := fields.SelectorFromSet(fields.Set{
		"involvedObject.kind": "Pod",
		"involvedObject.name": p.Name,
		"involvedObject.uid":  string(p.UID),
		"reason":              "FailedMount",
	})
	if err := r.APIReader.List(ctx, events, client.InNamespace(p.Namespace), client.MatchingFieldsSelector{Selector: sel}); err != nil {
		return "", fmt.Errorf("events of pod %s: %w", p.Name, err)
	}
	var newest *corev1.Event
	for i := range events.Items {
		e := &events.Items[i]
		// The kubelet retries a failed mount at most about two minutes
		// apart and updates the event each time: an older one is over. A
		// mount that failed once is no cause either: on a busy node the
		// kubelet's first try often times out waiting for its Secret and
		// ConfigMap caches, and the next one works.
		if time.Since(eventTime(e)) > failedMountRecent || eventCount(e) < 2 {
			continue
		}
		if newest == nil || eventTime(e).After(eventTime(newest)) {
			newest = e
		}
	}
	if newest == nil {
		return "", nil
	}
	return newest.Message, nil
}

// failedMountRecent is how old a FailedMount event may be to describe
// the present.
const failedMountRecent = 5 * time.Minute

// eventCount is how often the event happened, in either form the API
// records repeats (a count, or an event series).
func eventCount(e *corev1.Event) int32 {
	if e.Series != nil && e.Series.Count > e.Count {
		return e.Series.Count
	}
	return e.Count
}

func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}
