package kube

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fnrunner/fnrunner/services/pod-manager/podcache"
)

// Adopter takes over pods found at start; *podcache.Cache implements it.
type Adopter interface {
	Adopt(key podcache.Key, pod, address string, ttl time.Duration)
	// Discarded counts a pod deleted instead of adopted.
	Discarded()
}

// Reconciled says what ReconcileExisting did.
type Reconciled struct {
	Adopted, DeletedPods, DeletedServices int
}

// ReconcileExisting runs at start, before any call: of the pods this replica
// (owner) created before it restarted, it adopts those of the current
// template version that are ready, and deletes the others (older template,
// not ready, being deleted), with their Services; it also deletes its
// Services whose pod is gone. Nothing of a previous run is left orphaned.
func (b *Backend) ReconcileExisting(ctx context.Context, version string, dialing Dialing, ttl time.Duration, into Adopter) (Reconciled, error) {
	var r Reconciled
	mine := client.MatchingLabels{LabelManagedBy: ManagedBy, LabelOwner: b.Owner}
	var pods corev1.PodList
	if err := b.Client.List(ctx, &pods, client.InNamespace(b.Namespace), mine); err != nil {
		return r, fmt.Errorf("listing pods: %w", err)
	}
	alive := map[string]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		current := p.Annotations[AnnotationTemplateVersion] == version && p.DeletionTimestamp == nil
		key, keyed := podcache.ParseKey(p.Annotations[AnnotationKey])
		if current && Ready(p) && p.Status.PodIP != "" && Failure(p) == "" && keyed {
			into.Adopt(key, p.Name, dialing.Address(p), ttl)
			alive[p.Name] = true
			r.Adopted++
			continue
		}
		if err := b.Delete(ctx, p.Name); err != nil {
			return r, fmt.Errorf("deleting stale pod %s: %w", p.Name, err)
		}
		into.Discarded()
		r.DeletedPods++
	}
	var svcs corev1.ServiceList
	if err := b.Client.List(ctx, &svcs, client.InNamespace(b.Namespace), mine); err != nil {
		return r, fmt.Errorf("listing services: %w", err)
	}
	for i := range svcs.Items {
		s := &svcs.Items[i]
		if alive[s.Name] {
			continue
		}
		if err := client.IgnoreNotFound(b.Client.Delete(ctx, s)); err != nil {
			return r, fmt.Errorf("deleting orphaned service %s: %w", s.Name, err)
		}
		r.DeletedServices++
	}
	return r, nil
}
