package templates

import (
	"context"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
)

// Watcher keeps Current up to date with the templates in Namespace and calls
// OnChange when their version changes (to roll pods). A deleted template is
// recreated from the defaults.
type Watcher struct {
	Client       client.Client
	Namespace    string
	WrapperImage string
	Current      *atomic.Pointer[Templates]
	OnChange     func(*Templates)
}

// SetupWithManager watches both templates.
func (w *Watcher) SetupWithManager(mgr ctrl.Manager) error {
	named := func(name string) predicate.Predicate {
		return predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == name && o.GetNamespace() == w.Namespace })
	}
	toPodTemplate := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: w.Namespace, Name: PodTemplateName}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("function-templates").
		For(&corev1.PodTemplate{}, builder.WithPredicates(named(PodTemplateName))).
		Watches(&v1alpha1.ServiceTemplate{}, toPodTemplate, builder.WithPredicates(named(ServiceTemplateName))).
		Complete(w)
}

// Reconcile implements reconcile.Reconciler.
func (w *Watcher) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	t, err := Ensure(ctx, w.Client, w.Namespace, w.WrapperImage)
	if err != nil {
		return reconcile.Result{}, err
	}
	if old := w.Current.Load(); old != nil && old.Version() == t.Version() {
		return reconcile.Result{}, nil
	}
	w.Current.Store(t)
	if w.OnChange != nil {
		w.OnChange(t)
	}
	return reconcile.Result{}, nil
}
