package reports

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	configpb "github.com/fnrunner/fnrunner/protos/configstream"
	"github.com/fnrunner/fnrunner/services/config-reconciler/store"
)

func TestName(t *testing.T) {
	long := strings.Repeat("r", 300)
	for _, tc := range []struct {
		runner string
		want   string // "" when only checked for validity
	}{
		{runner: "fnrunner-binary-runner-7d9c-x2x4z", want: "fnrunner-runner-report-fnrunner-binary-runner-7d9c-x2x4z"},
		{runner: "My_Laptop.local"},
		{runner: "..."},
		{runner: "-lead"},
		{runner: long},
		{runner: long + "x"},
	} {
		t.Run(tc.runner[:min(len(tc.runner), 20)], func(t *testing.T) {
			got := Name(tc.runner)
			assert.Empty(t, validation.IsDNS1123Subdomain(got), "%q is no valid name", got)
			if tc.want != "" {
				assert.Equal(t, tc.want, got)
			}
		})
	}
	assert.NotEqual(t, Name(long), Name(long+"x"), "truncated names differ by their hash")
	assert.NotEqual(t, Name("a_b"), Name("a.b"), "names made valid differ by their hash")
}

func TestProblems(t *testing.T) {
	fc := types.NamespacedName{Namespace: "ns", Name: "fn"}
	missing := func(runner, path string) Report {
		return Report{Runner: runner, Unrunnable: []Binary{{Namespace: "ns", Name: "fn", Path: path, Reason: "no such file"}}}
	}
	reports := []Report{
		missing("r-2", "/fn"),
		missing("r-1", "/fn"),
		{Runner: "r-3", Unrunnable: []Binary{{Namespace: "ns", Name: "fn", Path: "/fn", Reason: "not executable"}}},
		{Runner: "r-4"},        // fine
		missing("r-5", "/old"), // on an older table with another path
		{Runner: "r-6", Unrunnable: []Binary{{Namespace: "ns", Name: "other", Path: "/fn", Reason: "no such file"}}},
	}
	assert.Equal(t, []string{
		"binaryExecutor /fn: not runnable on binary-runner r-1, r-2: no such file",
		"binaryExecutor /fn: not runnable on binary-runner r-3: not executable",
	}, Problems(reports, fc, "/fn"))
	assert.Empty(t, Problems(reports[3:4], fc, "/fn"), "a report without the object")

	many := []Report{missing("e", "/fn"), missing("d", "/fn"), missing("c", "/fn"), missing("b", "/fn"), missing("a", "/fn")}
	assert.Equal(t, []string{"binaryExecutor /fn: not runnable on binary-runner a, b, c and 2 more: no such file"}, Problems(many, fc, "/fn"))
}

func TestDecode(t *testing.T) {
	want := FromProto(&configpb.RunnerReport{Runner: "r", RunnerUid: "u", Epoch: "e", Version: 3,
		Unrunnable: []*configpb.UnrunnableBinary{{Namespace: "ns", Name: "fn", Path: "fn", Reason: "no such file"}}})
	data, err := json.Marshal(want)
	require.NoError(t, err)
	got, err := Decode(&corev1.ConfigMap{Data: map[string]string{DataKey: string(data)}})
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.Equal(t, []types.NamespacedName{{Namespace: "ns", Name: "fn"}}, got.Names())

	_, err = Decode(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}})
	assert.Error(t, err, "no data")
	_, err = Decode(&corev1.ConfigMap{Data: map[string]string{DataKey: "{"}})
	assert.Error(t, err, "bad JSON")
}

// tokens is a TokenReviewer over a fixed set of tokens.
type tokens map[string]Sender

func (ts tokens) Review(_ context.Context, token string) (Sender, error) {
	if p, ok := ts[token]; ok {
		return p, nil
	}
	return Sender{}, fmt.Errorf("%w: unknown", ErrTokenInvalid)
}

func TestConfigMapsTakeReportsFromRunnerPodsOnly(t *testing.T) {
	const namespace = "fn"
	runnerLabels := map[string]string{RunnerLabel: RunnerLabelValue}
	pod := func(name, uid string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID(uid), Labels: labels}}
	}
	reader := fake.NewClientBuilder().WithObjects(
		pod("runner-0", "uid-0", runnerLabels),
		pod("other-app", "uid-1", map[string]string{RunnerLabel: "something-else"}),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "elsewhere", Name: "runner-9", UID: "uid-9", Labels: runnerLabels}},
	).Build()
	reviewer := tokens{
		"runner-0":     {Namespace: namespace, ServiceAccount: "runner", Name: "runner-0", UID: "uid-0"},
		"other-app":    {Namespace: namespace, ServiceAccount: "runner", Name: "other-app", UID: "uid-1"},
		"runner-9":     {Namespace: "elsewhere", ServiceAccount: "runner", Name: "runner-9", UID: "uid-9"},
		"laptop":       {Namespace: namespace, ServiceAccount: "runner", Name: "laptop", UID: "uid-l"},
		"runner-0-old": {Namespace: namespace, ServiceAccount: "runner", Name: "runner-0", UID: "uid-before"},
		"runner-0-sa":  {Namespace: namespace, ServiceAccount: "default", Name: "runner-0", UID: "uid-0"},
	}
	for _, tc := range []struct {
		name, token, runner, uid string
		refused                  error
	}{
		{name: "the pod, with its UID", token: "runner-0", runner: "runner-0", uid: "uid-0"},
		{name: "the pod, no UID given", token: "runner-0", runner: "runner-0"},
		{name: "another UID", token: "runner-0", runner: "runner-0", uid: "uid-x", refused: store.ErrUnknownRunner},
		{name: "no such pod", token: "laptop", runner: "laptop", refused: store.ErrUnknownRunner},
		{name: "a pod of another namespace", token: "runner-9", runner: "runner-9", uid: "uid-9", refused: store.ErrUnknownRunner},
		{name: "a pod that is no binary-runner", token: "other-app", runner: "other-app", uid: "uid-1", refused: store.ErrUnknownRunner},
		{name: "not a pod name", token: "runner-0", runner: "../secrets/x", refused: store.ErrUnknownRunner},
		{name: "another pod's token, naming the runner", token: "other-app", runner: "runner-0", uid: "uid-0", refused: store.ErrUnknownRunner},
		{name: "a token of the pod's name before it was replaced", token: "runner-0-old", runner: "runner-0", refused: store.ErrUnknownRunner},
		{name: "a pod of another namespace, naming the runner", token: "runner-9", runner: "runner-0", refused: store.ErrUnknownRunner},
		{name: "the pod under another service account", token: "runner-0-sa", runner: "runner-0", refused: store.ErrUnknownRunner},
		{name: "no token", runner: "runner-0", uid: "uid-0", refused: store.ErrUnauthenticated},
		{name: "a token the apiserver does not know", token: "forged", runner: "runner-0", uid: "uid-0", refused: store.ErrUnauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			writer := fake.NewClientBuilder().Build()
			c := NewConfigMaps(slog.New(slog.DiscardHandler), writer, reader, Options{Namespace: namespace, Tokens: reviewer, ServiceAccount: "runner"})
			err := c.Record(ctx, tc.token, &configpb.RunnerReport{Runner: tc.runner, RunnerUid: tc.uid, Epoch: "e", Version: 1})
			var cms corev1.ConfigMapList
			require.NoError(t, writer.List(ctx, &cms))
			if tc.refused != nil {
				require.ErrorIs(t, err, tc.refused)
				assert.Empty(t, cms.Items, "a refused report is not stored")
				return
			}
			require.NoError(t, err)
			require.Len(t, cms.Items, 1)
			cm := cms.Items[0]
			assert.Equal(t, Name(tc.runner), cm.Name)
			assert.Equal(t, []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: tc.runner, UID: "uid-0"}}, cm.OwnerReferences,
				"owned by the pod, with the UID the apiserver has")
			got, err := Decode(&cm)
			require.NoError(t, err)
			assert.Equal(t, tc.runner, got.Runner)
		})
	}
}

// A failed lookup is no verdict on the runner: the report may pass on a
// retry (Unavailable, not PermissionDenied), and so may a failed review.
func TestConfigMapsLookupFailureIsNotUnknownRunner(t *testing.T) {
	reader := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return errors.New("apiserver unreachable")
		},
	}).Build()
	ctx := context.Background()
	reviewer := tokens{"runner-0": {Namespace: "fn", ServiceAccount: "runner", Name: "runner-0", UID: "uid-0"}}
	c := NewConfigMaps(slog.New(slog.DiscardHandler), fake.NewClientBuilder().Build(), reader, Options{Namespace: "fn", Tokens: reviewer, ServiceAccount: "runner"})
	err := c.Record(ctx, "runner-0", &configpb.RunnerReport{Runner: "runner-0"})
	require.Error(t, err)
	assert.NotErrorIs(t, err, store.ErrUnknownRunner)
	assert.NotErrorIs(t, err, store.ErrUnauthenticated)

	unreachable := TokenReview{Audience: "a", Client: fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
			return errors.New("apiserver unreachable")
		},
	}).Build()}
	c = NewConfigMaps(slog.New(slog.DiscardHandler), fake.NewClientBuilder().Build(), reader, Options{Namespace: "fn", Tokens: unreachable, ServiceAccount: "runner"})
	err = c.Record(ctx, "runner-0", &configpb.RunnerReport{Runner: "runner-0"})
	require.Error(t, err)
	assert.NotErrorIs(t, err, store.ErrUnknownRunner)
	assert.NotErrorIs(t, err, store.ErrUnauthenticated)
}

func TestMemoryKeepsTheLastReportOfEachRunner(t *testing.T) {
	m := NewMemory(slog.New(slog.DiscardHandler))
	ctx := context.Background()
	require.NoError(t, m.Record(ctx, "", &configpb.RunnerReport{Runner: "b", Unrunnable: []*configpb.UnrunnableBinary{{Namespace: "ns", Name: "fn", Path: "fn", Reason: "no such file"}}}))
	require.NoError(t, m.Record(ctx, "", &configpb.RunnerReport{Runner: "a"}))
	require.NoError(t, m.Record(ctx, "", &configpb.RunnerReport{Runner: "b", Version: 2}))
	got := m.Reports()
	require.Len(t, got, 2)
	assert.Equal(t, "a", got[0].Runner)
	assert.Equal(t, "b", got[1].Runner)
	assert.Empty(t, got[1].Unrunnable, "b's newer report replaced its first")
	assert.Equal(t, uint64(2), got[1].Version)
}

func TestMemoryForgetsTheOldestRunnerBeyondItsBound(t *testing.T) {
	m := NewMemory(slog.New(slog.DiscardHandler))
	m.max = 3
	ctx := context.Background()
	for _, runner := range []string{"a", "b", "c", "a", "d", "e"} {
		require.NoError(t, m.Record(ctx, "", &configpb.RunnerReport{Runner: runner}))
	}
	var runners []string
	for _, r := range m.Reports() {
		runners = append(runners, r.Runner)
	}
	// b went for d, then c (a reported again after them) for e.
	assert.Equal(t, []string{"a", "d", "e"}, runners)
	assert.Equal(t, MaxMemoryRunners, NewMemory(slog.New(slog.DiscardHandler)).max)
}

// blocking is a TokenReviewer whose reviews wait for release, counting
// the reviews asked for.
type blocking struct {
	release chan struct{}
	asked   chan struct{}
}

func (b blocking) Review(context.Context, string) (Sender, error) {
	b.asked <- struct{}{}
	<-b.release
	return Sender{}, fmt.Errorf("%w: released", ErrTokenInvalid)
}

// Checking a token asks the apiserver, for whoever reaches the port: at
// most MaxReviews at once, and none for a runner that is no pod name.
func TestConfigMapsBoundTheReviews(t *testing.T) {
	b := blocking{release: make(chan struct{}), asked: make(chan struct{}, 100)}
	c := NewConfigMaps(slog.New(slog.DiscardHandler), fake.NewClientBuilder().Build(), fake.NewClientBuilder().Build(), Options{Namespace: "fn", Tokens: b, ServiceAccount: "runner"})
	ctx := context.Background()

	err := c.Record(ctx, "t", &configpb.RunnerReport{Runner: "../not/a/pod"})
	require.ErrorIs(t, err, store.ErrUnknownRunner)
	assert.Empty(t, b.asked, "a review for a runner that is no pod name")

	done := make(chan error, MaxReviews)
	for range MaxReviews {
		go func() { done <- c.Record(ctx, "t", &configpb.RunnerReport{Runner: "runner-0"}) }()
	}
	for range MaxReviews {
		<-b.asked
	}
	err = c.Record(ctx, "t", &configpb.RunnerReport{Runner: "runner-0"})
	require.ErrorIs(t, err, store.ErrBusy, "one review more than MaxReviews")
	close(b.release)
	for range MaxReviews {
		require.ErrorIs(t, <-done, store.ErrUnauthenticated)
	}
	err = c.Record(ctx, "t", &configpb.RunnerReport{Runner: "runner-0"})
	require.ErrorIs(t, err, store.ErrUnauthenticated, "reviewed again once there is room")
}
