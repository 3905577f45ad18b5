package server

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/executortable"
	"github.com/fnrunner/fnrunner/libs/imagematch"
	configpb "github.com/fnrunner/fnrunner/protos/configstream"
)

// imageSeen answers with the image it was given.
type imageSeen struct{}

func (imageSeen) Evaluate(_ context.Context, ref imagematch.Reference, req *evalwire.Request) (*evalwire.Response, error) {
	return &evalwire.Response{Log: []byte(req.Image + " " + ref.Tag + " tag=" + req.Tag)}, nil
}

// Porch after April 2026 sends the image without a tag and a tag field: an
// exact tag, or a semver constraint resolved against the tags the
// FunctionConfigs claim (as porch's pod evaluator resolves it against a
// registry's); porch before sends "image:tag", which stays as it was.
func TestTagFromNewerPorch(t *testing.T) {
	tables := executortable.Build(&configpb.Snapshot{Functions: []*configpb.FunctionConfig{{
		Namespace: "ns", Name: "set-namespace", Image: "set-namespace",
		Go:  &configpb.GoExecutor{Tags: []string{"v0.4.5"}},
		Pod: &configpb.PodExecutor{Tags: []string{"v0.4.1", "v0.3.0", "v0.5.0", ">= 0.6.0"}},
	}}})
	ev := NewEvaluator(slog.New(slog.NewTextHandler(io.Discard, nil)), fixedTables{tables},
		Route{Kind: executortable.Go, Client: imageSeen{}}, Route{Kind: executortable.Pod, Client: imageSeen{}, Unclaimed: true})
	for _, tc := range []struct {
		name, image, tag string
		want             string
		code             codes.Code
	}{
		{name: "older porch: image with its tag", image: "set-namespace:v0.4.1", want: "set-namespace:v0.4.1 v0.4.1 tag="},
		{name: "an exact tag", image: "set-namespace", tag: "v0.3.0", want: "set-namespace:v0.3.0 v0.3.0 tag="},
		{name: "a constraint: the highest claimed version in it", image: "set-namespace", tag: ">= 0.4.0 < 0.5.0", want: "set-namespace:v0.4.5 v0.4.5 tag="},
		{name: "a caret constraint", image: "set-namespace", tag: "^0.5", want: "set-namespace:v0.5.0 v0.5.0 tag="},
		{name: "the image's own tag wins", image: "set-namespace:v0.3.0", tag: ">= 0.4.0", want: "set-namespace:v0.3.0 v0.3.0 tag="},
		{name: "no claimed tag satisfies it: the pod executor resolves it", image: "set-namespace", tag: ">= 1.0.0", want: "set-namespace latest tag=>= 1.0.0"},
		{name: "neither tag nor constraint", image: "set-namespace", tag: ">= zero", code: codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := ev.EvaluateFunction(context.Background(), &evalwire.Request{Image: tc.image, Tag: tc.tag, ResourceList: evalwire.Bytes([]byte(resourceList))})
			if tc.code != codes.OK {
				assert.Equal(t, tc.code, status.Code(err), "%v", err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(resp.Log))
		})
	}
}

// Fields no image or tag is near, as an attacker on :9445 sends them: a
// tag of semver ranges (its parse is quadratic) and a huge image name. Both
// are refused at once, with a message that does not repeat them.
func TestHostileImageAndTagFields(t *testing.T) {
	tables := executortable.Build(&configpb.Snapshot{Functions: []*configpb.FunctionConfig{{
		Namespace: "ns", Name: "set-namespace", Image: "set-namespace",
		Go: &configpb.GoExecutor{Tags: []string{"v0.4.5"}},
	}}})
	ev := NewEvaluator(slog.New(slog.NewTextHandler(io.Discard, nil)), fixedTables{tables},
		Route{Kind: executortable.Go, Client: imageSeen{}}, Route{Kind: executortable.Pod, Client: imageSeen{}, Unclaimed: true})
	for _, tc := range []struct{ name, image, tag string }{
		{"a tag field of a million ranges", "set-namespace", strings.Repeat("1 - 1 ", 1<<20)},
		{"a tag field just over the bound", "set-namespace", strings.Repeat("1", imagematch.MaxTagFieldLen+1)},
		{"an image of 6 MiB", strings.Repeat("a", 6<<20), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ev.EvaluateFunction(context.Background(), &evalwire.Request{Image: tc.image, Tag: tc.tag, ResourceList: evalwire.Bytes([]byte(resourceList))})
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%.200v", err)
			assert.Less(t, len(err.Error()), 300, "the message repeats the field: %.200v", err)
		})
	}
	// At the bound, a constraint still resolves.
	resp, err := ev.EvaluateFunction(context.Background(), &evalwire.Request{Image: "set-namespace", Tag: ">= 0.4.0" + strings.Repeat(" ", imagematch.MaxTagFieldLen-len(">= 0.4.0")), ResourceList: evalwire.Bytes([]byte(resourceList))})
	require.NoError(t, err)
	assert.Equal(t, "set-namespace:v0.4.5 v0.4.5 tag=", string(resp.Log))
}
