package server

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/libs/executortable"
	"github.com/fnrunner/fnrunner/libs/imagematch"
	"github.com/fnrunner/fnrunner/libs/imagemeta"
	configpb "github.com/fnrunner/fnrunner/protos/configstream"
	"github.com/fnrunner/fnrunner/tests/testregistry"
)

// Warm-up asks for a FunctionConfig's first exact tag, or its digest as
// name@sha256:…; every image it builds parses.
func TestWarmUpImages(t *testing.T) {
	const prefix = "registry.example/fns"
	digest := "sha256:" + strings.Repeat("a", 64)
	for _, tc := range []struct {
		name string
		fc   *configpb.FunctionConfig
		want []string
	}{
		{name: "a tag", fc: &configpb.FunctionConfig{Image: "fn", Pod: &configpb.PodExecutor{Tags: []string{"v1"}}},
			want: []string{prefix + "/fn:v1"}},
		{name: "a digest", fc: &configpb.FunctionConfig{Image: "fn", Pod: &configpb.PodExecutor{Tags: []string{digest}}},
			want: []string{prefix + "/fn@" + digest}},
		{name: "a constraint, then a digest", fc: &configpb.FunctionConfig{Image: "fn", Pod: &configpb.PodExecutor{Tags: []string{"~1.0", digest, "v1"}}},
			want: []string{prefix + "/fn@" + digest}},
		{name: "a digest under a prefix", fc: &configpb.FunctionConfig{Image: "fn", Prefixes: []string{"Other.Example/x"}, Pod: &configpb.PodExecutor{Tags: []string{digest}}},
			want: []string{"other.example/x/fn@" + digest}},
		{name: "constraints only", fc: &configpb.FunctionConfig{Image: "fn", Pod: &configpb.PodExecutor{Tags: []string{"~1.0"}}}},
		{name: "no pod executor", fc: &configpb.FunctionConfig{Image: "fn"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.fc.Namespace, tc.fc.Name = "ns", "fc"
			tables := executortable.Build(&configpb.Snapshot{DefaultImagePrefix: prefix, Functions: []*configpb.FunctionConfig{tc.fc}})
			got := warmUpImages(tables)
			assert.Equal(t, tc.want, got)
			for _, image := range got {
				ref, err := imagematch.Parse(image, "")
				require.NoError(t, err, "warm-up image %q", image)
				assert.Equal(t, image, ref.String())
			}
		})
	}
}

// A FunctionConfig that claims a digest gets its pod at warm-up.
func TestWarmUpPullsADigestClaim(t *testing.T) {
	reg := testregistry.New(t)
	prefix := reg.Host + "/fns"
	digest := reg.Push(t, prefix+"/fn:v1", v1.Config{Entrypoint: []string{"/fn"}})
	tables := executortable.Build(&configpb.Snapshot{DefaultImagePrefix: prefix, Functions: []*configpb.FunctionConfig{{
		Namespace: "ns", Name: "fn", Image: "fn", Pod: &configpb.PodExecutor{Tags: []string{digest.String()}},
	}}})
	pods := &recordingPods{}
	s := testServer(tables, testResolver(t, reg, imagemeta.Options{}), pods, Options{})
	s.WarmUp(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)), time.Minute)
	assert.Equal(t, []string{prefix + "/fn@" + digest.String()}, pods.images)
}
