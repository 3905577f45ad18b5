package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/tests/harness"
)

func TestSameInputsSameDigest(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "svc")
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755))
	spec := func(label string) Spec {
		return Spec{Files: []File{{Src: bin, Dst: "/svc", Mode: 0o755}}, Entrypoint: []string{"/svc"}, Labels: map[string]string{"l": label}}
	}
	digest := func(s Spec) v1.Hash {
		img, err := Build(s)
		require.NoError(t, err)
		d, err := img.Digest()
		require.NoError(t, err)
		return d
	}
	a, b := digest(spec("x")), digest(spec("x"))
	assert.Equal(t, a, b, "digests of the same inputs")
	assert.NotEqual(t, a, digest(spec("y")), "a different label kept the digest")
}

// An image may name its program by Cmd alone, with no entrypoint (as
// function images do that a runtime starts by their command).
func TestCmdWithoutEntrypoint(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "fn")
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755))
	img, err := Build(Spec{Files: []File{{Src: bin, Dst: "/fn", Mode: 0o755}}, Cmd: []string{"/fn"}})
	require.NoError(t, err)
	cfg, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Empty(t, cfg.Config.Entrypoint, "entrypoint")
	assert.Equal(t, []string{"/fn"}, cfg.Config.Cmd, "cmd")
}

// Every image Bazel builds is pushed to a registry on loopback, pulled back
// and checked: config, layers, static binaries that run.
func TestServiceImages(t *testing.T) {
	entries := strings.Fields(os.Getenv("FNRUNNER_IMAGES"))
	require.NotEmpty(t, entries, "FNRUNNER_IMAGES is not set: run with tools/bazel test")
	reg := httptest.NewServer(registry.New())
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	for _, e := range entries {
		svc, path, _ := strings.Cut(e, "=")
		t.Run(svc, func(t *testing.T) {
			local, err := tarball.ImageFromPath(harness.Runfile(t, path), nil)
			require.NoError(t, err)
			ref, err := name.NewTag(host + "/fnrunner/" + svc + ":test")
			require.NoError(t, err)
			require.NoError(t, remote.Write(ref, local), "push")
			img, err := remote.Image(ref)
			require.NoError(t, err, "pull")
			want, _ := local.Digest()
			assert.Equal(t, want, mustDigest(t, img), "pulled digest differs from the built one")
			cfg, err := img.ConfigFile()
			require.NoError(t, err)
			assert.Equal(t, "65532:65532", cfg.Config.User, "config: user")
			assert.Equal(t, "linux", cfg.OS, "config: os")
			assert.Equal(t, "amd64", cfg.Architecture, "config: architecture")
			assert.Equal(t, "fnrunner-"+svc, cfg.Config.Labels["org.opencontainers.image.title"], "labels = %v", cfg.Config.Labels)
			files := extract(t, img)
			assert.Contains(t, files, "etc/ssl/certs/ca-certificates.crt", "no CA bundle in the image")
			dir := t.TempDir()
			if svc == "functions" {
				for _, fn := range []string{"set-namespace", "apply-setters", "apply-replacements", "starlark"} {
					bin := writeExec(t, dir, files, "functions/"+fn)
					cmd := exec.Command(bin)
					cmd.Stdin = strings.NewReader("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n")
					// Each runs as a KRM function: a ResourceList in, one out (with
					// an error result and exit 1 from those that need a functionConfig).
					out, err := cmd.Output()
					assert.Contains(t, string(out), "kind: ResourceList", "%s did not run as a function: %v", fn, err)
				}
				return
			}
			assert.Equal(t, []string{"/" + svc}, cfg.Config.Entrypoint, "entrypoint")
			bin := writeExec(t, dir, files, svc)
			out, err := exec.Command(bin, "--help").CombinedOutput()
			assert.NoError(t, err, "%s --help\n%s", svc, out)
			assert.Contains(t, string(out), "Usage", "%s --help", svc)
		})
	}
}

func mustDigest(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	require.NoError(t, err)
	return d
}

// extract reads the image's files.
func extract(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	layers, err := img.Layers()
	require.NoError(t, err)
	files := map[string][]byte{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		require.NoError(t, err)
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
			if h.Typeflag == tar.TypeReg {
				b, _ := io.ReadAll(tr)
				files[h.Name] = b
			}
		}
		rc.Close()
	}
	return files
}

// writeExec writes an image file out as an executable after checking it is
// a static binary (no ELF interpreter: it runs on an empty base).
func writeExec(t *testing.T, dir string, files map[string][]byte, name string) string {
	t.Helper()
	require.Contains(t, files, name, "no %s in the image", name)
	data := files[name]
	f, err := elf.NewFile(bytes.NewReader(data))
	require.NoError(t, err, name)
	for _, p := range f.Progs {
		assert.NotEqual(t, elf.PT_INTERP, p.Type, "%s is dynamically linked", name)
	}
	out := filepath.Join(dir, filepath.Base(name))
	require.NoError(t, os.WriteFile(out, data, 0o755))
	return out
}

func TestRevisionFromWorkspaceStatus(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "tools"), 0o755))
	script := "#!/bin/sh\necho STABLE_VERSION 0.1.0\necho STABLE_GIT_COMMIT abc123-dirty\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tools", "workspace_status.sh"), []byte(script), 0o755))
	assert.Equal(t, "abc123-dirty", revision(dir), "revision")
	assert.Empty(t, revision(t.TempDir()), "revision without a status command")
}
