package e2e_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tests/stack"
)

// withFields is a codec that sends a request with fields our proto does
// not declare appended, as a client built from a newer porch proto would.
type withFields struct{ extra []byte }

func (c withFields) Marshal(v any) ([]byte, error) {
	b, err := proto.Marshal(v.(proto.Message))
	return append(b, c.extra...), err
}
func (withFields) Unmarshal(data []byte, v any) error {
	return proto.Unmarshal(data, v.(proto.Message))
}
func (withFields) Name() string { return "proto" }

// execPath is newer porch's exec_path: a path inside the runner's file
// system that porch-server's own FunctionConfig store gave for the image.
// Porch's proto with it is not served here (the module proxy refuses
// github.com/kptdev/porch; nephio-project/porch has field 3, tag, and no
// more), so it is sent as field 4, following tag, and as field 5.
func execPath(field protowire.Number, path string) []byte {
	b := protowire.AppendTag(nil, field, protowire.BytesType)
	return protowire.AppendString(b, path)
}

// The request shapes porch sends, older and newer: image with its tag;
// image without a tag and a tag constraint (newer porch's pod-evaluator
// call); and image, tag and an exec_path (newer porch's function-runner
// call). exec_path is a hint at most: the gateway routes by image, never
// runs a path a client names, and answers NotFound when nothing claims the
// image, whatever binary the path names.
func TestEveryPorchRequestShape(t *testing.T) {
	s := stack.Start(t, stack.Options{Configs: map[string]string{"test-functions.yaml": testFunctions}})
	hang, err := filepath.EvalSymlinks(filepath.Join(s.FunctionsDir, "hang"))
	require.NoError(t, err)
	crash, err := filepath.EvalSymlinks(filepath.Join(s.FunctionsDir, "crash"))
	require.NoError(t, err)

	for _, tc := range []struct {
		name       string
		image, tag string
		extra      []byte
		code       codes.Code
	}{
		{name: "porch v1.5: image with its tag", image: "set-namespace:v0.4.5"},
		{name: "newer porch, pod evaluator: image and tag constraint", image: "ghcr.io/kptdev/krm-functions-catalog/set-namespace", tag: ">= 0.4.0 < 0.5.0"},
		{name: "newer porch, function runner: image, tag and exec_path", image: "ghcr.io/kptdev/krm-functions-catalog/set-namespace", tag: "v0.4.5", extra: execPath(4, crash)},
		{name: "exec_path as field 5", image: "set-namespace", tag: "v0.4.5", extra: execPath(5, crash)},
		{name: "exec_path naming a binary, image claimed by nothing", image: "example.com/nobody/claims-this", tag: "v1", extra: execPath(4, hang), code: codes.NotFound},
		{name: "exec_path naming a shell", image: "example.com/nobody/claims-this:v1", extra: execPath(4, "/bin/sh"), code: codes.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := s.Client().EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: tc.image, Tag: tc.tag, ResourceList: []byte(stack.Input)},
				grpc.ForceCodec(withFields{tc.extra}))
			if tc.code != codes.OK {
				// NotFound at once: the hang binary was not run (it
				// would have held the call to its deadline).
				assert.Equal(t, tc.code, status.Code(err), "%v", err)
				return
			}
			require.NoError(t, err)
			assert.Contains(t, string(resp.GetResourceList()), "namespace: prod", "set-namespace ran, not the binary exec_path names")
		})
	}
}
