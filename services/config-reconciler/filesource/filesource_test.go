package filesource

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	configpb "github.com/fnrunner/fnrunner/protos/configstream"
	"github.com/fnrunner/fnrunner/services/config-reconciler/configs"
)

type recorder struct {
	mu   sync.Mutex
	last []*configpb.FunctionConfig
	n    int
}

func (r *recorder) Replace(f []*configpb.FunctionConfig) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last, r.n = f, r.n+1
	return true
}

func (r *recorder) images() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[string]bool{}
	for _, f := range r.last {
		m[f.GetImage()] = true
	}
	return m
}

const setNamespace = `apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata:
  name: set-namespace
spec:
  image: set-namespace
  goExecutor:
    tags: [v0.4.5]
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: ignored
data:
  a: b
`

func TestLoadAndReload(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sn.yaml"), []byte(setNamespace), 0o644))
	objs, err := Load(dir, "local")
	require.NoError(t, err, "Load")
	require.Len(t, objs, 1, "Load")
	require.Equal(t, "local", objs[0].Namespace, "Load = %+v", objs)
	require.NotNil(t, objs[0].Spec.GoExecutor, "Load = %+v", objs)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := &recorder{}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	done := make(chan error, 1)
	go func() { done <- Run(ctx, log, dir, "local", configs.Options{}, rec) }()

	require.Eventually(t, func() bool { return rec.images()["set-namespace"] }, 30*time.Second, 20*time.Millisecond, "condition not reached")
	more := `apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata:
  name: starlark
spec:
  image: starlark
  binaryExecutor:
    tags: [v0.5.5]
    path: starlark
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "starlark.yml"), []byte(more), 0o644))
	require.Eventually(t, func() bool { return rec.images()["starlark"] && rec.images()["set-namespace"] }, 30*time.Second, 20*time.Millisecond, "condition not reached")
	require.NoError(t, os.Remove(filepath.Join(dir, "sn.yaml")))
	require.Eventually(t, func() bool { return !rec.images()["set-namespace"] && rec.images()["starlark"] }, 30*time.Second, 20*time.Millisecond, "condition not reached")

	// A broken file is reported; the others are still served.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte("apiVersion: config.porch.kpt.dev/v1alpha1\nkind: FunctionConfig\nspec: [\n"), 0o644))
	_, err = Load(dir, "local")
	assert.Error(t, err, "a broken file loaded without error")
	cancel()
	require.NoError(t, <-done)
	assert.True(t, rec.images()["starlark"], "a broken file took the good ones out of the table")
}
