// Package controller watches FunctionConfigs with controller-runtime. Two
// controllers share the informer cache:
//
//   - TableSync runs on every replica and rebuilds the executor table from
//     all FunctionConfigs in the namespace on every change, so each replica
//     streams a complete table and a deleted object leaves no entry behind;
//   - StatusWriter runs only on the elected leader and writes each object's
//     status: functionRunnerObservedGeneration, error, and the Ready and
//     Conflict conditions (porch's own CRD has no conditions: the apiserver
//     keeps only its fields); and, as porch's function-runner component,
//     adds its finalizer and removes it when the object is being deleted. A change to one object can change another's
//     conflicts, so every change requeues all objects of the namespace.
//     It also watches the binary-runners' reports (package reports, stored
//     by whichever replica received them): a binaryExecutor a runner cannot
//     run gets its error in status, while the table keeps it and calls go
//     on to the next executor; a changed report requeues the objects it
//     names, before and after the change.
package controller

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
	configpb "github.com/fnrunner/fnrunner/protos/configstream"
	"github.com/fnrunner/fnrunner/services/config-reconciler/configs"
	"github.com/fnrunner/fnrunner/services/config-reconciler/reports"
)

// Table receives the executor table; *store.Store implements it.
type Table interface {
	Replace(functions []*configpb.FunctionConfig) bool
}

// Reasons of the conditions written.
const (
	ReasonApplied    = "Applied"
	ReasonInvalid    = "Invalid"
	ReasonConflict   = "Conflict"
	ReasonNoConflict = "NoConflict"
	// ReasonNotRunnable: in the table, but a binary-runner reports that it
	// cannot run the binary executor's binary.
	ReasonNotRunnable = "BinaryNotRunnable"
)

// Setup registers both controllers with the manager.
func Setup(mgr ctrl.Manager, log *slog.Logger, namespace string, opts configs.Options, table Table) error {
	lister := &lister{client: mgr.GetClient(), namespace: namespace, opts: opts}
	all := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		objs, err := lister.list(ctx)
		if err != nil {
			log.Error("listing FunctionConfigs", "error", err)
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(objs))
		for _, o := range objs {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.Namespace, Name: o.Name}})
		}
		return reqs
	})

	tableSync := &TableSync{lister: lister, table: table, log: log}
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("functionconfig-table").
		For(&v1alpha1.FunctionConfig{}).
		WithOptions(ctrlOptions(false)).
		Complete(tableSync); err != nil {
		return fmt.Errorf("table controller: %w", err)
	}
	if err := mgr.Add(&firstTable{cache: mgr.GetCache(), sync: tableSync, log: log}); err != nil {
		return fmt.Errorf("first table: %w", err)
	}
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("functionconfig-status").
		Watches(&v1alpha1.FunctionConfig{}, all).
		Watches(&corev1.ConfigMap{}, reportedOn(log, namespace), builder.WithPredicates(isReport(namespace))).
		WithOptions(ctrlOptions(true)).
		Complete(&StatusWriter{lister: lister, client: mgr.GetClient(), log: log}); err != nil {
		return fmt.Errorf("status controller: %w", err)
	}
	return nil
}

// CacheOptions are the manager's cache for Setup's controllers: namespace
// only, and there of ConfigMaps only the runner reports.
func CacheOptions(namespace string) cache.Options {
	return cache.Options{
		DefaultNamespaces: map[string]cache.Config{namespace: {}},
		ByObject:          map[client.Object]cache.ByObject{&corev1.ConfigMap{}: {Label: reports.Selector()}},
	}
}

// reportedOn maps a runner report (old and new, on an update) to the
// FunctionConfigs it names.
func reportedOn(log *slog.Logger, namespace string) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		cm, ok := o.(*corev1.ConfigMap)
		if !ok {
			return nil
		}
		rep, err := reports.Decode(cm)
		if err != nil {
			log.Warn("ignoring a runner report", "error", err)
			return nil
		}
		var reqs []reconcile.Request
		for _, name := range rep.Names() {
			if name.Namespace == namespace {
				reqs = append(reqs, reconcile.Request{NamespacedName: name})
			}
		}
		return reqs
	})
}

// isReport passes the runner report ConfigMaps of namespace.
func isReport(namespace string) predicate.Predicate {
	return predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetNamespace() == namespace && reports.Selector().Matches(labels.Set(o.GetLabels()))
	})
}

type lister struct {
	client    client.Client
	namespace string
	opts      configs.Options
}

func (l *lister) list(ctx context.Context) ([]v1alpha1.FunctionConfig, error) {
	var list v1alpha1.FunctionConfigList
	if err := l.client.List(ctx, &list, client.InNamespace(l.namespace)); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// TableSync rebuilds the executor table.
type TableSync struct {
	lister *lister
	table  Table
	log    *slog.Logger
	// mu makes list-then-Replace one step: the controller and firstTable
	// both rebuild, and a list read earlier must never replace a newer one.
	mu sync.Mutex
}

// Reconcile implements reconcile.Reconciler.
func (r *TableSync) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	objs, err := r.lister.list(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	entries, _ := configs.Evaluate(objs, r.lister.opts)
	if r.table.Replace(entries) {
		r.log.Info("executor table rebuilt", "functionConfigs", len(objs), "entries", len(entries))
	}
	return reconcile.Result{}, nil
}

// firstTable publishes the table once the caches have synced, on every
// replica: a namespace without FunctionConfigs sends no object event, and
// the others would wait for a table forever.
type firstTable struct {
	cache interface {
		WaitForCacheSync(ctx context.Context) bool
	}
	sync *TableSync
	log  *slog.Logger
}

var _ manager.LeaderElectionRunnable = (*firstTable)(nil)

// Start implements manager.Runnable: it retries until the table is built or
// ctx ends, never failing the manager.
func (f *firstTable) Start(ctx context.Context) error {
	if !f.cache.WaitForCacheSync(ctx) {
		return nil
	}
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 10*time.Second) {
		_, err := f.sync.Reconcile(ctx, reconcile.Request{})
		if err == nil {
			return nil
		}
		f.log.Warn("building the first executor table", "error", err, "retryIn", delay.String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica serves the stream, so every replica needs its table.
func (f *firstTable) NeedLeaderElection() bool { return false }

// StatusWriter writes FunctionConfig status.
type StatusWriter struct {
	lister *lister
	client client.Client
	log    *slog.Logger
	// noConditions: the CRD served has no status.conditions (porch's).
	noConditions atomic.Bool
}

// Reconcile implements reconcile.Reconciler.
func (r *StatusWriter) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	objs, err := r.lister.list(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	entries, verdicts := configs.Evaluate(objs, r.lister.opts)
	var obj *v1alpha1.FunctionConfig
	for i := range objs {
		if objs[i].Name == req.Name && objs[i].Namespace == req.Namespace {
			obj = &objs[i]
		}
	}
	if obj == nil {
		return reconcile.Result{}, nil
	}
	if obj.DeletionTimestamp != nil {
		// Every replica's table leaves out an object being deleted
		// (configs.Evaluate), so the function runner is done with it.
		return reconcile.Result{}, r.setFinalizer(ctx, obj, false)
	}
	if err := r.setFinalizer(ctx, obj, true); err != nil {
		return reconcile.Result{}, err
	}
	v := verdicts[req.NamespacedName]
	if v, err = r.withReports(ctx, v, req.NamespacedName, entries); err != nil {
		return reconcile.Result{}, err
	}
	want := obj.Status.DeepCopy()
	SetStatus(want, obj.Generation, v)
	if r.noConditions.Load() {
		// Porch's CRD has no conditions: compare what it keeps.
		want.Conditions = obj.Status.Conditions
	}
	if equality.Semantic.DeepEqual(*want, obj.Status) {
		return reconcile.Result{}, nil
	}
	patch := client.MergeFrom(obj.DeepCopy())
	obj.Status = *want
	if err := r.client.Status().Patch(ctx, obj, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("patching status of %s: %w", req.NamespacedName, err)
	}
	if len(want.Conditions) > 0 && len(obj.Status.Conditions) == 0 {
		// The apiserver dropped them (porch's own CRD): from now on they
		// are not compared, or every reconcile would write again.
		r.noConditions.Store(true)
	}
	r.log.Info("status written", "functionConfig", req.NamespacedName.String(), "generation", obj.Generation, "ready", v.Ready(), "problems", v.Problems)
	return reconcile.Result{}, nil
}

// withReports adds to v what the binary-runners report about the object's
// binary executor as the table holds it (reports naming another path are
// about an older table).
func (r *StatusWriter) withReports(ctx context.Context, v configs.Verdict, key types.NamespacedName, entries []*configpb.FunctionConfig) (configs.Verdict, error) {
	var path string
	for _, e := range entries {
		if e.GetNamespace() == key.Namespace && e.GetName() == key.Name {
			path = e.GetBinary().GetPath()
		}
	}
	if path == "" {
		return v, nil
	}
	reps, err := reports.List(ctx, r.log, r.client, r.lister.namespace)
	if err != nil {
		return v, err
	}
	if problems := reports.Problems(reps, key, path); len(problems) > 0 {
		v.Unrunnable = problems
		v.Problems = append(slices.Clone(v.Problems), problems...)
	}
	return v, nil
}

// Finalizer is the finalizer of porch's function-runner component, which the
// config-reconciler is: porch's reconciler sets one per component and each
// removes its own, so a FunctionConfig is deleted once every component has
// let it go.
const Finalizer = "config.porch.kpt.dev/functionconfig-function-runner"

// setFinalizer adds (want) or removes Finalizer, and only it: the patch is
// optimistic (on the resourceVersion read), so a finalizer another
// component adds or removes meanwhile is never lost; a conflict is retried.
func (r *StatusWriter) setFinalizer(ctx context.Context, obj *v1alpha1.FunctionConfig, want bool) error {
	if controllerutil.ContainsFinalizer(obj, Finalizer) == want {
		return nil
	}
	patch := client.MergeFromWithOptions(obj.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if want {
		controllerutil.AddFinalizer(obj, Finalizer)
	} else {
		controllerutil.RemoveFinalizer(obj, Finalizer)
	}
	if err := r.client.Patch(ctx, obj, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("finalizer of %s/%s: %w", obj.Namespace, obj.Name, err)
	}
	r.log.Info("finalizer", "functionConfig", obj.Namespace+"/"+obj.Name, "finalizer", Finalizer, "present", want)
	return nil
}

// SetStatus records a verdict in status.
func SetStatus(s *v1alpha1.FunctionConfigStatus, generation int64, v configs.Verdict) {
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, ObservedGeneration: generation}
	conflict := metav1.Condition{Type: v1alpha1.ConditionConflict, ObservedGeneration: generation,
		Status: metav1.ConditionFalse, Reason: ReasonNoConflict, Message: "no other FunctionConfig claims the same image, prefix, tag and executor"}
	switch {
	case v.Ready():
		s.FunctionRunnerObservedGeneration = generation
		s.Error = ""
		ready.Status, ready.Reason, ready.Message = metav1.ConditionTrue, ReasonApplied, "the executor table holds this FunctionConfig"
	default:
		s.Error = strings.Join(v.Problems, "; ")
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, ReasonInvalid, s.Error
		if v.OnlyUnrunnable() {
			// The table holds this generation as given (its calls go on
			// to the next executor): applied, with the runners' error.
			s.FunctionRunnerObservedGeneration = generation
			ready.Reason = ReasonNotRunnable
		}
		if len(v.Conflicts) > 0 {
			ready.Reason = ReasonConflict
			conflict.Status, conflict.Reason, conflict.Message = metav1.ConditionTrue, ReasonConflict, strings.Join(v.Conflicts, "; ")
		}
	}
	meta.SetStatusCondition(&s.Conditions, ready)
	meta.SetStatusCondition(&s.Conditions, conflict)
}

func ctrlOptions(needLeader bool) controller.Options {
	return controller.Options{NeedLeaderElection: ptr.To(needLeader)}
}

// ReleaseFinalizers removes Finalizer, and only it, from every
// FunctionConfig in namespace, for an uninstall after which no function
// runner manages it (neither fnrunner nor porch's own): without it, deleting
// a FunctionConfig would wait for good. Run it once the config-reconciler
// is gone, or it adds the finalizer back. It returns how many objects it
// changed.
func ReleaseFinalizers(ctx context.Context, log *slog.Logger, c client.Client, namespace string) (int, error) {
	var list v1alpha1.FunctionConfigList
	if err := c.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return 0, fmt.Errorf("listing FunctionConfigs in %s: %w", namespace, err)
	}
	w := &StatusWriter{client: c, log: log}
	released := 0
	for i := range list.Items {
		obj := &list.Items[i]
		for attempt := 0; controllerutil.ContainsFinalizer(obj, Finalizer); attempt++ {
			err := w.setFinalizer(ctx, obj, false)
			if err == nil {
				released++
				break
			}
			if !apierrors.IsConflict(err) || attempt == 4 {
				return released, err
			}
			// Changed meanwhile (another component's finalizer, say):
			// read it again and patch that.
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				if apierrors.IsNotFound(err) {
					break
				}
				return released, fmt.Errorf("reading %s/%s: %w", obj.Namespace, obj.Name, err)
			}
		}
	}
	return released, nil
}
