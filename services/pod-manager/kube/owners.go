package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LeasePrefix starts the name of each replica's Lease: the rest is its
// owner label.
const LeasePrefix = "fnrunner-pod-manager-"

// Owners keeps this replica's Lease, renewed while it runs, and deletes the
// pods and Services of replicas whose Lease nobody renewed for Duration: a
// replica removed for good (the StatefulSet scaled down) leaves none
// behind. A replica that restarts keeps its name and, if it comes back
// within Duration, adopts its own pods (ReconcileExisting) before anyone
// deletes them.
//
// A Lease is judged by when this replica saw it change, never by the time
// written in it, so the replicas' clocks need not agree (as client-go's
// leader election does).
type Owners struct {
	Backend *Backend
	// Duration is how long a Lease may go unrenewed before its owner's
	// pods are deleted; it is renewed every Duration/4.
	Duration time.Duration
	Log      *slog.Logger

	// seen is, by owner, the Lease's resourceVersion as last seen ("" for
	// none) and when that was first seen.
	seen map[string]sighting
}

type sighting struct {
	version string
	since   time.Time
}

// Swept says what a Sweep deleted.
type Swept struct {
	Owners                       []string
	DeletedPods, DeletedServices int
}

// Run renews this replica's Lease and sweeps every Duration/4 until ctx
// ends. Errors are logged; the next round tries again.
func (o *Owners) Run(ctx context.Context) {
	every := o.Duration / 4
	for {
		if err := o.Renew(ctx); err != nil && ctx.Err() == nil {
			o.Log.Warn("renewing this replica's lease", "err", err)
		}
		if swept, err := o.Sweep(ctx); err != nil && ctx.Err() == nil {
			o.Log.Warn("deleting the pods of replicas that are gone", "err", err)
		} else if len(swept.Owners) > 0 {
			o.Log.Info("deleted the pods of replicas that are gone", "owners", swept.Owners, "deletedPods", swept.DeletedPods, "deletedServices", swept.DeletedServices)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

func (o *Owners) leaseName(owner string) string { return LeasePrefix + owner }

// Renew creates or renews this replica's Lease.
func (o *Owners) Renew(ctx context.Context) error {
	b := o.Backend
	now := metav1.NowMicro()
	var lease coordinationv1.Lease
	err := b.Client.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: o.leaseName(b.Owner)}, &lease)
	if apierrors.IsNotFound(err) {
		lease = coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: o.leaseName(b.Owner), Namespace: b.Namespace,
				Labels: map[string]string{LabelManagedBy: ManagedBy, LabelOwner: b.Owner}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(b.Owner), LeaseDurationSeconds: ptr.To(int32(o.Duration / time.Second)),
				AcquireTime: &now, RenewTime: &now},
		}
		return client.IgnoreAlreadyExists(b.Client.Create(ctx, &lease))
	}
	if err != nil {
		return fmt.Errorf("getting lease: %w", err)
	}
	lease.Spec.RenewTime = &now
	lease.Spec.HolderIdentity = ptr.To(b.Owner)
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(o.Duration / time.Second))
	if err := b.Client.Update(ctx, &lease); err != nil {
		return fmt.Errorf("renewing lease: %w", err)
	}
	return nil
}

// Sweep deletes the pods and Services of other owners whose Lease this
// replica has not seen change (or exist) for Duration.
func (o *Owners) Sweep(ctx context.Context) (Swept, error) {
	b := o.Backend
	var swept Swept
	managed := client.MatchingLabels{LabelManagedBy: ManagedBy}
	var pods corev1.PodList
	if err := b.Client.List(ctx, &pods, client.InNamespace(b.Namespace), managed); err != nil {
		return swept, fmt.Errorf("listing pods: %w", err)
	}
	var svcs corev1.ServiceList
	if err := b.Client.List(ctx, &svcs, client.InNamespace(b.Namespace), managed); err != nil {
		return swept, fmt.Errorf("listing services: %w", err)
	}
	owners := map[string]bool{}
	others := func(labels map[string]string) {
		if owner := labels[LabelOwner]; owner != "" && owner != b.Owner {
			owners[owner] = true
		}
	}
	for i := range pods.Items {
		others(pods.Items[i].Labels)
	}
	for i := range svcs.Items {
		others(svcs.Items[i].Labels)
	}
	if o.seen == nil {
		o.seen = map[string]sighting{}
	}
	now := time.Now()
	gone := map[string]bool{}
	var errs []error
	for owner := range owners {
		var lease coordinationv1.Lease
		version := ""
		err := b.Client.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: o.leaseName(owner)}, &lease)
		switch {
		case err == nil:
			version = lease.ResourceVersion
		case !apierrors.IsNotFound(err):
			errs = append(errs, fmt.Errorf("getting the lease of %s: %w", owner, err))
			continue
		}
		s, ok := o.seen[owner]
		if !ok || s.version != version {
			o.seen[owner] = sighting{version: version, since: now}
			continue
		}
		if now.Sub(s.since) >= o.Duration {
			gone[owner] = true
		}
	}
	for owner := range o.seen {
		if !owners[owner] {
			delete(o.seen, owner) // nothing of it is left
		}
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if !gone[p.Labels[LabelOwner]] {
			continue
		}
		// Its Service goes with it (Backend.Delete).
		if err := b.Delete(ctx, p.Name); err != nil {
			errs = append(errs, fmt.Errorf("deleting pod %s: %w", p.Name, err))
			continue
		}
		swept.DeletedPods++
	}
	for i := range svcs.Items {
		s := &svcs.Items[i]
		if !gone[s.Labels[LabelOwner]] {
			continue
		}
		err := b.Client.Delete(ctx, s)
		if apierrors.IsNotFound(err) {
			continue // went with its pod
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("deleting service %s: %w", s.Name, err))
			continue
		}
		swept.DeletedServices++
	}
	for owner := range gone {
		swept.Owners = append(swept.Owners, owner)
		err := b.Client.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: b.Namespace, Name: o.leaseName(owner)}})
		if err := client.IgnoreNotFound(err); err != nil {
			errs = append(errs, fmt.Errorf("deleting the lease of %s: %w", owner, err))
		}
	}
	return swept, errors.Join(errs...)
}
