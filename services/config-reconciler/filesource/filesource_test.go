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
	if err := os.WriteFile(filepath.Join(dir, "sn.yaml"), []byte(setNamespace), 0o644); err != nil {
		t.Fatal(err)
	}
	objs, err := Load(dir, "local")
	if err != nil || len(objs) != 1 || objs[0].Namespace != "local" || objs[0].Spec.GoExecutor == nil {
		t.Fatalf("Load = %+v, %v", objs, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := &recorder{}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	done := make(chan error, 1)
	go func() { done <- Run(ctx, log, dir, "local", configs.Options{}, rec) }()

	waitFor(t, func() bool { return rec.images()["set-namespace"] })
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
	if err := os.WriteFile(filepath.Join(dir, "starlark.yml"), []byte(more), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return rec.images()["starlark"] && rec.images()["set-namespace"] })
	if err := os.Remove(filepath.Join(dir, "sn.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return !rec.images()["set-namespace"] && rec.images()["starlark"] })

	// A broken file is reported; the others are still served.
	if err := os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte("apiVersion: config.porch.kpt.dev/v1alpha1\nkind: FunctionConfig\nspec: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir, "local"); err == nil {
		t.Error("a broken file loaded without error")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !rec.images()["starlark"] {
		t.Error("a broken file took the good ones out of the table")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i > 1500 {
			t.Fatal("condition not reached")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
