package reports

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	configpb "github.com/fnrunner/fnrunner/protos/configstream"
	"github.com/fnrunner/fnrunner/services/config-reconciler/store"
)

// FieldOwner is the server-side apply field manager of report ConfigMaps.
const FieldOwner = "fnrunner-config-reconciler"

// maxStored bounds the binaries one stored report lists, far below a
// ConfigMap's 1 MiB.
const maxStored = 2000

// Both keep a runner's report for the stream service.
var (
	_ store.Recorder = (*ConfigMaps)(nil)
	_ store.Recorder = (*Memory)(nil)
)

// RunnerLabel and RunnerLabelValue are the label a binary-runner's pod
// carries (deploy/services/binary-runner.yaml); ConfigMaps takes reports
// from pods with it only.
const (
	RunnerLabel      = "app.kubernetes.io/name"
	RunnerLabelValue = "fnrunner-binary-runner"
)

// ConfigMaps stores each runner's report in a ConfigMap of its own in one
// namespace, owned by the runner's Pod: it takes reports only from
// binary-runner pods of that namespace, each proving who it is with a
// service account token bound to it, so the reports are no more than those
// pods and go with them.
type ConfigMaps struct {
	writer client.Client
	reader client.Reader
	opts   Options
	log    *slog.Logger
	// reviews bounds the token reviews in flight: each is a request to
	// the apiserver, made for whoever reaches the port.
	reviews chan struct{}
}

// Options say whose reports ConfigMaps takes.
type Options struct {
	// Namespace of the runners' pods and of the ConfigMaps.
	Namespace string
	// Tokens says which pod a report's token is bound to.
	Tokens TokenReviewer
	// ServiceAccount the runners' pods run as: a token of another service
	// account is refused.
	ServiceAccount string
}

// TokenReviewer says which pod a service account token is bound to
// (TokenReview asks the apiserver); an error wrapping ErrTokenInvalid means
// no pod.
type TokenReviewer interface {
	Review(ctx context.Context, token string) (Sender, error)
}

// MaxReviews bounds the reports whose token is being checked at once; more
// are refused with store.ErrBusy (the runner tries again after a backoff).
const MaxReviews = 8

// NewConfigMaps stores reports with writer; reader looks up the runners'
// pods (uncached: a manager's APIReader).
func NewConfigMaps(log *slog.Logger, writer client.Client, reader client.Reader, opts Options) *ConfigMaps {
	return &ConfigMaps{writer: writer, reader: reader, opts: opts, log: log, reviews: make(chan struct{}, MaxReviews)}
}

// Record implements store.Recorder: it applies the runner's ConfigMap
// (server-side apply, so every replica writes it the same way and the
// runner's newest report wins), owned by the runner's pod. A report whose
// runner is no pod name is refused with store.ErrUnknownRunner before
// anything else; one sent without a token valid for the audience with
// store.ErrUnauthenticated; one whose token is not bound to the pod it
// names, a pod of the namespace under the runners' service account, or
// whose pod is no binary-runner's (or, when the report gives a UID, not
// that pod), with store.ErrUnknownRunner.
func (c *ConfigMaps) Record(ctx context.Context, token string, r *configpb.RunnerReport) error {
	rep := FromProto(r)
	// Not a pod name at all: not worth a request (and some, like "a/b",
	// would not make one).
	if msgs := validation.IsDNS1123Subdomain(rep.Runner); len(msgs) > 0 {
		return fmt.Errorf("runner %q is not a pod name: %w", rep.Runner, store.ErrUnknownRunner)
	}
	sender, err := c.sender(ctx, token)
	if err != nil {
		return err
	}
	owner, err := c.owner(ctx, rep, sender)
	if err != nil {
		return err
	}
	if len(rep.Unrunnable) > maxStored {
		c.log.Warn("runner report truncated", "runner", rep.Runner, "unrunnable", len(rep.Unrunnable), "kept", maxStored)
		rep.Unrunnable = rep.Unrunnable[:maxStored]
	}
	data, err := json.Marshal(rep)
	if err != nil {
		return fmt.Errorf("runner report of %s: %w", rep.Runner, err)
	}
	cm := corev1ac.ConfigMap(Name(rep.Runner), c.opts.Namespace).
		WithLabels(map[string]string{Label: "true"}).
		WithData(map[string]string{DataKey: string(data)}).
		WithOwnerReferences(owner)
	if err := c.writer.Apply(ctx, cm, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("storing the runner report of %s: %w", rep.Runner, err)
	}
	return nil
}

// sender is the pod token is bound to.
func (c *ConfigMaps) sender(ctx context.Context, token string) (Sender, error) {
	if token == "" {
		return Sender{}, fmt.Errorf("%w: no service account token sent", store.ErrUnauthenticated)
	}
	select {
	case c.reviews <- struct{}{}:
		defer func() { <-c.reviews }()
	default:
		return Sender{}, fmt.Errorf("%d token reviews in flight: %w", MaxReviews, store.ErrBusy)
	}
	pod, err := c.opts.Tokens.Review(ctx, token)
	switch {
	case errors.Is(err, ErrTokenInvalid):
		return Sender{}, fmt.Errorf("%w: %w", store.ErrUnauthenticated, err)
	case err != nil:
		return Sender{}, err
	}
	return pod, nil
}

// owner is the reference to the runner's pod, read from the apiserver (not
// a cache, which could be behind): the report's runner must be the pod the
// sender's token is bound to, a pod of the namespace under the runners'
// service account labelled as a binary-runner's, with the report's UID
// when it gives one; otherwise the error wraps store.ErrUnknownRunner. The
// reference always carries the UID read, so a report outlives no pod.
func (c *ConfigMaps) owner(ctx context.Context, rep Report, sender Sender) (*metav1ac.OwnerReferenceApplyConfiguration, error) {
	unknown := func(why string) error {
		return fmt.Errorf("runner %q is not a binary-runner pod of namespace %s (%s): %w", rep.Runner, c.opts.Namespace, why, store.ErrUnknownRunner)
	}
	switch {
	case sender.Namespace != c.opts.Namespace || sender.Name != rep.Runner:
		return nil, unknown(fmt.Sprintf("the report's token is bound to pod %s/%s", sender.Namespace, sender.Name))
	case sender.ServiceAccount != c.opts.ServiceAccount:
		return nil, unknown(fmt.Sprintf("the report's token is of service account %s, not %s", sender.ServiceAccount, c.opts.ServiceAccount))
	}
	pod := &metav1.PartialObjectMetadata{}
	pod.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	err := c.reader.Get(ctx, client.ObjectKey{Namespace: c.opts.Namespace, Name: rep.Runner}, pod)
	switch {
	case apierrors.IsNotFound(err):
		return nil, unknown("no such pod")
	case err != nil:
		return nil, fmt.Errorf("looking up the pod of runner %s: %w", rep.Runner, err)
	case rep.RunnerUID != "" && pod.UID != types.UID(rep.RunnerUID):
		return nil, unknown(fmt.Sprintf("its pod has UID %s, the report gave %s", pod.UID, rep.RunnerUID))
	case pod.UID != sender.UID:
		// The apiserver refuses a token whose pod is gone, but it may
		// answer a review from a cache for a few seconds.
		return nil, unknown(fmt.Sprintf("its pod has UID %s, the report's token is bound to UID %s (a pod of that name before)", pod.UID, sender.UID))
	case pod.Labels[RunnerLabel] != RunnerLabelValue:
		return nil, unknown(fmt.Sprintf("the pod is not labelled %s=%s", RunnerLabel, RunnerLabelValue))
	}
	return metav1ac.OwnerReference().
		WithAPIVersion("v1").
		WithKind("Pod").
		WithName(pod.Name).
		WithUID(pod.UID), nil
}

// MaxMemoryRunners bounds the runners a Memory keeps a report of.
const MaxMemoryRunners = 256

// Memory keeps the last report of each runner and logs changes: where no
// apiserver holds FunctionConfigs (--config-dir) there is no status to put
// them in, and no pods to check runners against. It keeps at most
// MaxMemoryRunners runners: a report from one more drops the runner whose
// last report is the oldest (refusing new runners instead would let whoever
// sent the first reports keep the real runners out for good; what is
// dropped was only kept to log changes).
type Memory struct {
	log *slog.Logger
	max int
	mu  sync.Mutex
	// last holds each runner's report and when it came (seq, a counter).
	last map[string]memoryEntry
	seq  uint64
	// full is set once the bound has been logged.
	full bool
}

type memoryEntry struct {
	report Report
	seq    uint64
}

// NewMemory returns an empty Memory.
func NewMemory(log *slog.Logger) *Memory {
	return &Memory{log: log, max: MaxMemoryRunners, last: map[string]memoryEntry{}}
}

// Record implements store.Recorder.
// With --config-dir there is no apiserver to check a token with: token is
// not used.
func (m *Memory) Record(_ context.Context, _ string, r *configpb.RunnerReport) error {
	rep := FromProto(r)
	if len(rep.Unrunnable) > maxStored {
		rep.Unrunnable = rep.Unrunnable[:maxStored]
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.last[rep.Runner]
	if !ok || !slices.Equal(old.report.Unrunnable, rep.Unrunnable) {
		if len(rep.Unrunnable) > 0 {
			m.log.Warn("binary executors a binary-runner cannot run (calls go on to the pod executor)", "runner", rep.Runner, "unrunnable", rep.Unrunnable)
		} else if ok {
			m.log.Info("a binary-runner can run every binary executor again", "runner", rep.Runner)
		}
	}
	if !ok && len(m.last) >= m.max {
		m.dropOldest()
	}
	m.seq++
	m.last[rep.Runner] = memoryEntry{report: rep, seq: m.seq}
	return nil
}

// dropOldest forgets the runner whose last report is the oldest.
func (m *Memory) dropOldest() {
	oldest, first := "", true
	for runner, e := range m.last {
		if first || e.seq < m.last[oldest].seq {
			oldest, first = runner, false
		}
	}
	if !m.full {
		m.log.Warn("runner reports from more runners than kept: forgetting the oldest", "max", m.max, "forgotten", oldest)
		m.full = true
	}
	delete(m.last, oldest)
}

// Reports returns the last report of every runner, by runner.
func (m *Memory) Reports() []Report {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Report, 0, len(m.last))
	for _, e := range m.last {
		out = append(out, e.report)
	}
	slices.SortFunc(out, func(a, b Report) int { return cmp.Compare(a.Runner, b.Runner) })
	return out
}
