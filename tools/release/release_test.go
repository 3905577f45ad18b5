package main

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// A base as deploy/ has it: the gateway by its unpinned name, and the
// pod-manager naming the wrapper-server image in its environment.
const base = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: fnrunner-gateway
spec:
  template:
    spec:
      containers:
      - name: gateway
        image: fnrunner/gateway
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: fnrunner-pod-manager
spec:
  template:
    spec:
      containers:
      - name: pod-manager
        image: fnrunner/pod-manager
        env:
        - name: POD_NAME
          value: x
        - name: WRAPPER_SERVER_IMAGE
          value: fnrunner/wrapper-server
`

// Every image lands in the registry, and the overlay runs exactly those
// images by digest, the wrapper-server's for function pods included.
func TestReleasePushesAndPins(t *testing.T) {
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	dir := t.TempDir()
	args := []string{"--repository", host + "/fnrunner", "--tag", "v0.1.0", "--insecure", "--overlay", filepath.Join(dir, "overlays", "release")}
	digests := map[string]string{}
	for _, n := range []string{"gateway", "pod-manager", "wrapper-server"} {
		img, err := random.Image(256, 1)
		require.NoError(t, err)
		path := filepath.Join(dir, n+".tar")
		tag, err := name.NewTag("fnrunner/" + n)
		require.NoError(t, err)
		require.NoError(t, tarball.WriteToFile(path, tag, img))
		d, err := img.Digest()
		require.NoError(t, err)
		digests[n] = d.String()
		args = append(args, "--image="+n+"="+path)
	}
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "overlays", "local"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "overlays", "local", "workloads.yaml"), []byte(base), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "overlays", "local", "kustomization.yaml"), []byte("resources: [workloads.yaml]\n"), 0o644))

	o, err := parse(args, io.Discard)
	require.NoError(t, err)
	require.NoError(t, run(context.Background(), o, io.Discard))

	for n, d := range digests {
		ref, err := name.ParseReference(host+"/fnrunner/"+n+"@"+d, name.Insecure)
		require.NoError(t, err)
		_, err = remote.Head(ref)
		assert.NoError(t, err, "%s not in the registry", ref)
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(dir, "overlays", "release"))
	require.NoError(t, err)
	out, err := m.AsYaml()
	require.NoError(t, err)
	for n, d := range digests {
		assert.Contains(t, string(out), host+"/fnrunner/"+n+"@"+d, "%s not pinned", n)
	}
	assert.NotContains(t, string(out), "image: fnrunner/", "an image left unpinned")
	assert.NotContains(t, string(out), "value: fnrunner/wrapper-server", "the function pods' wrapper-server left unpinned")
	assert.Contains(t, string(out), "name: POD_NAME", "the pod-manager's other environment")
}

func TestReleaseNeedsRepositoryTagAndImages(t *testing.T) {
	for _, args := range [][]string{
		{"--tag", "v1", "--image=a=a.tar"},
		{"--repository", "r", "--image=a=a.tar"},
		{"--repository", "r", "--tag", "v1"},
		{"--repository", "r", "--tag", "v1", "--image=no-path"},
		{"--repository", "r", "--tag", "v1", "--image=a=a.tar", "stray"},
	} {
		_, err := parse(args, io.Discard)
		assert.Error(t, err, "%v", args)
	}
}
