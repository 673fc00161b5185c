package controller

import (
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CacheOptions limits the operator's cache of the kinds it owns to objects
// it manages, so it never holds every Pod, Secret or ConfigMap of the
// Kubernetes cluster in memory.
func CacheOptions() cache.Options {
	managed := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{"app.kubernetes.io/managed-by": ManagedBy})}
	by := map[client.Object]cache.ByObject{}
	for _, obj := range []client.Object{
		&corev1.Pod{}, &corev1.Secret{}, &corev1.ConfigMap{}, &corev1.Service{}, &corev1.PersistentVolumeClaim{},
		&appsv1.StatefulSet{}, &policyv1.PodDisruptionBudget{}, &batchv1.Job{},
	} {
		by[obj] = managed
	}
	return cache.Options{ByObject: by}
}
