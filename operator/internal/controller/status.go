package controller

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pdpmv1alpha1 "pdpm.io/pdpm/operator/api/v1alpha1"
	"pdpm.io/pdpm/operator/internal/pdpmv1"
)

// computeStatus fills c.Status from one reconcile's observation. Every
// condition describes the present: nothing is carried over from earlier
// observations except the cluster key fingerprint and the PM nodes, which
// are records, not observations.
func (r *PDPMClusterReconciler) computeStatus(c *pdpmv1alpha1.PDPMCluster, obs *observation) {
	st := &c.Status
	st.ObservedGeneration = c.Generation

	mon, srv := obs.monitorSts, obs.serverSts
	if mon == nil {
		mon = &appsv1.StatefulSet{}
	}
	if srv == nil {
		srv = &appsv1.StatefulSet{}
	}
	monWant := c.Spec.Monitor.Replicas
	quorum := monWant/2 + 1
	monReady := mon.Status.ReadyReplicas
	srvTotal := ptrValue(srv.Spec.Replicas)
	srvReady := srv.Status.ReadyReplicas
	st.MonitorsReady = monReady
	st.ServersReady = srvReady
	st.ServersTotal = srvTotal

	ms := obs.monitor
	if obs.monitorErr == nil && ms != nil {
		st.ClusterUUID = ms.GetClusterUuid()
		st.Epoch = int64(ms.GetEpoch())
		st.Health = healthName(ms.GetHealth())
		st.Capacity = resource.NewQuantity(int64(ms.GetCapacityBytes()), resource.BinarySI)
		st.Used = resource.NewQuantity(int64(ms.GetUsedBytes()), resource.BinarySI)
		st.MonitorLeader = ms.GetLeader()
	} else {
		st.ClusterUUID, st.Epoch, st.Health, st.Capacity, st.Used, st.MonitorLeader = "", 0, "", nil, nil, ""
	}
	monitorAddr := r.MonitorAddress(c)

	set := func(t string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: c.Generation})
	}

	// Available: can clients use the cluster now?
	available := metav1.ConditionTrue
	switch {
	case monReady < quorum:
		available = metav1.ConditionFalse
		set(pdpmv1alpha1.ConditionAvailable, available, "MonitorQuorumLost",
			fmt.Sprintf("%d of %d monitors ready, %d needed for a quorum", monReady, monWant, quorum))
	case srvReady < c.Spec.Storage.ReplicaCount:
		available = metav1.ConditionFalse
		set(pdpmv1alpha1.ConditionAvailable, available, "ServersNotReady",
			fmt.Sprintf("%d of %d servers ready, at least %d (the replica count) needed", srvReady, srvTotal, c.Spec.Storage.ReplicaCount))
	case obs.monitorErr != nil:
		available = metav1.ConditionUnknown
		set(pdpmv1alpha1.ConditionAvailable, available, "MonitorUnreachable",
			fmt.Sprintf("monitors and servers are ready but the monitor status API at %s does not answer: %v", monitorAddr, obs.monitorErr))
	case ms.GetHealth() == pdpmv1.Health_HEALTH_DOWN || ms.GetHealth() == pdpmv1.Health_HEALTH_UNSPECIFIED:
		available = metav1.ConditionFalse
		set(pdpmv1alpha1.ConditionAvailable, available, "ClusterDown",
			fmt.Sprintf("the monitor reports health %s: %s", healthName(ms.GetHealth()), ms.GetMessage()))
	default:
		set(pdpmv1alpha1.ConditionAvailable, available, "Available",
			fmt.Sprintf("%d of %d monitors and %d of %d servers ready; the monitor reports health %s",
				monReady, monWant, srvReady, srvTotal, healthName(ms.GetHealth())))
	}

	// Degraded: what is known to be wrong now.
	// Pods the nodes cannot run come first: they explain the rest.
	problems := append([]problem{}, obs.unsatisfiable...)
	if obs.reconcileErr != nil {
		problems = append(problems, problem{"ReconcileFailed", obs.reconcileErr.Error()})
	}
	if obs.keyProblem.reason != "" {
		problems = append(problems, obs.keyProblem)
	}
	if monReady < monWant {
		problems = append(problems, problem{"MonitorsNotReady", fmt.Sprintf("%d of %d monitors ready", monReady, monWant)})
	}
	if srvReady < srvTotal {
		problems = append(problems, problem{"ServersNotReady", fmt.Sprintf("%d of %d servers ready", srvReady, srvTotal)})
	}
	if obs.monitorErr != nil {
		problems = append(problems, problem{"MonitorUnreachable", fmt.Sprintf("monitor status API at %s: %v", monitorAddr, obs.monitorErr)})
	} else if h := ms.GetHealth(); h != pdpmv1.Health_HEALTH_OK {
		problems = append(problems, problem{"ClusterUnhealthy", fmt.Sprintf("the monitor reports health %s: %s", healthName(h), ms.GetMessage())})
	}
	degraded := len(problems) > 0
	if degraded {
		set(pdpmv1alpha1.ConditionDegraded, metav1.ConditionTrue, problems[0].reason, joinProblems(problems))
	} else {
		set(pdpmv1alpha1.ConditionDegraded, metav1.ConditionFalse, "AsExpected", "nothing known to be wrong")
	}

	// Progressing: are the children still converging on the spec?
	progressing, reason, msg := rollout(c, mon, srv, obs)
	if progressing {
		set(pdpmv1alpha1.ConditionProgressing, metav1.ConditionTrue, reason, msg)
	} else {
		set(pdpmv1alpha1.ConditionProgressing, metav1.ConditionFalse, "Complete", "monitors and servers run the current spec")
		st.ServerImage = image(c.Spec.Images.Server, c.Spec.Images.Tag)
	}

	// Ready: everything as the spec says and healthy.
	readyCond := pdpmv1alpha1.ConditionReady
	switch {
	case len(obs.unsatisfiable) > 0:
		// Accepted by the API, but no waiting helps: the nodes or the spec
		// must change.
		set(readyCond, metav1.ConditionFalse, obs.unsatisfiable[0].reason, joinProblems(obs.unsatisfiable))
		st.Phase = pdpmv1alpha1.PhaseBlocked
	case obs.scaleDownRefused != "":
		set(readyCond, metav1.ConditionFalse, "ScaleDownRefused", obs.scaleDownRefused)
		st.Phase = pdpmv1alpha1.PhaseBlocked
	case available != metav1.ConditionTrue:
		cond := meta.FindStatusCondition(st.Conditions, pdpmv1alpha1.ConditionAvailable)
		set(readyCond, metav1.ConditionFalse, cond.Reason, cond.Message)
		st.Phase = pdpmv1alpha1.PhaseUnavailable
		if progressing {
			st.Phase = pdpmv1alpha1.PhaseProgressing
		}
	case progressing:
		set(readyCond, metav1.ConditionFalse, reason, msg)
		st.Phase = pdpmv1alpha1.PhaseProgressing
	case degraded:
		set(readyCond, metav1.ConditionFalse, problems[0].reason, joinProblems(problems))
		st.Phase = pdpmv1alpha1.PhaseDegraded
	default:
		set(readyCond, metav1.ConditionTrue, "Ready", "the cluster runs its spec and is healthy")
		st.Phase = pdpmv1alpha1.PhaseReady
	}
}

func joinProblems(ps []problem) string {
	msgs := make([]string, len(ps))
	for i, p := range ps {
		msgs[i] = p.message
	}
	return strings.Join(msgs, "; ")
}

// rollout says whether the StatefulSets still converge on their spec, why,
// and what is happening.
func rollout(c *pdpmv1alpha1.PDPMCluster, mon, srv *appsv1.StatefulSet, obs *observation) (bool, string, string) {
	switch {
	case obs.rolloutPaused != "":
		return true, "RolloutPaused", obs.rolloutPaused
	case obs.partition > 0:
		return true, "RollingUpdate", fmt.Sprintf("updating servers one at a time: %d of %d updated, next %s-%d",
			srv.Status.UpdatedReplicas, ptrValue(srv.Spec.Replicas), serverName(c), obs.partition-1)
	}
	// Redis clients reach the store through the gateways.
	if gw := obs.gateway; gw != nil {
		want := ptrValue(gw.Spec.Replicas)
		switch st := gw.Status; {
		case st.ObservedGeneration < gw.Generation:
			return true, "Applying", fmt.Sprintf("Deployment %s has not yet observed its latest spec", gw.Name)
		case st.UpdatedReplicas < want || st.ReadyReplicas < want || st.Replicas > want:
			return true, "WaitingForPods", fmt.Sprintf("Deployment %s: %d of %d gateways updated and ready", gw.Name,
				min(st.UpdatedReplicas, st.ReadyReplicas), want)
		}
	}
	for _, s := range []*appsv1.StatefulSet{mon, srv} {
		want := ptrValue(s.Spec.Replicas)
		st := s.Status
		switch {
		case st.ObservedGeneration < s.Generation:
			return true, "Applying", fmt.Sprintf("StatefulSet %s has not yet observed its latest spec", s.Name)
		case st.Replicas < want:
			return true, "Scaling", fmt.Sprintf("StatefulSet %s: %d of %d pods created", s.Name, st.Replicas, want)
		case st.Replicas > want:
			// Scaled down: the pods removed are still terminating.
			return true, "Scaling", fmt.Sprintf("StatefulSet %s: %d pods, scaling down to %d", s.Name, st.Replicas, want)
		case st.UpdatedReplicas < want || (st.UpdateRevision != "" && st.CurrentRevision != st.UpdateRevision):
			return true, "RollingUpdate", fmt.Sprintf("StatefulSet %s: %d of %d pods updated", s.Name, st.UpdatedReplicas, want)
		case st.ReadyReplicas < want:
			return true, "WaitingForPods", fmt.Sprintf("StatefulSet %s: %d of %d pods ready", s.Name, st.ReadyReplicas, want)
		}
	}
	return false, "", ""
}

// recordTransitions emits an event when the Ready or Degraded condition
// changes status or reason. Not more: Kubernetes rate-limits the events of
// one object, and condition chatter must not crowd out the events of
// actions (created, updated, scaled, rolled, wiped).
func (r *PDPMClusterReconciler) recordTransitions(c, before *pdpmv1alpha1.PDPMCluster) {
	for _, cond := range c.Status.Conditions {
		if cond.Type != pdpmv1alpha1.ConditionReady && cond.Type != pdpmv1alpha1.ConditionDegraded {
			continue
		}
		old := meta.FindStatusCondition(before.Status.Conditions, cond.Type)
		if old != nil && old.Status == cond.Status && old.Reason == cond.Reason {
			continue
		}
		good := cond.Status == metav1.ConditionTrue
		if cond.Type == pdpmv1alpha1.ConditionDegraded {
			good = cond.Status == metav1.ConditionFalse
		}
		eventType := corev1.EventTypeNormal
		if !good {
			eventType = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(c, eventType, cond.Reason, "%s=%s: %s", cond.Type, cond.Status, cond.Message)
	}
}
