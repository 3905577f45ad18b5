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
)

func TestSameInputsSameDigest(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "svc")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := func(label string) Spec {
		return Spec{Files: []File{{Src: bin, Dst: "/svc", Mode: 0o755}}, Entrypoint: []string{"/svc"}, Labels: map[string]string{"l": label}}
	}
	digest := func(s Spec) v1.Hash {
		img, err := Build(s)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	a, b := digest(spec("x")), digest(spec("x"))
	if a != b {
		t.Errorf("same inputs, digests %s and %s", a, b)
	}
	if c := digest(spec("y")); c == a {
		t.Errorf("a different label kept the digest %s", a)
	}
}

// Every image Bazel builds is pushed to a registry on loopback, pulled back
// and checked: config, layers, static binaries that run.
func TestServiceImages(t *testing.T) {
	entries := strings.Fields(os.Getenv("FNRUNNER_IMAGES"))
	if len(entries) == 0 {
		t.Fatal("FNRUNNER_IMAGES is not set: run with tools/bazel test")
	}
	reg := httptest.NewServer(registry.New())
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	for _, e := range entries {
		svc, path, _ := strings.Cut(e, "=")
		t.Run(svc, func(t *testing.T) {
			local, err := tarball.ImageFromPath(runfile(t, path), nil)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := name.NewTag(host + "/fnrunner/" + svc + ":test")
			if err != nil {
				t.Fatal(err)
			}
			if err := remote.Write(ref, local); err != nil {
				t.Fatalf("push: %v", err)
			}
			img, err := remote.Image(ref)
			if err != nil {
				t.Fatalf("pull: %v", err)
			}
			if want, _ := local.Digest(); mustDigest(t, img) != want {
				t.Errorf("pulled digest differs from the built one")
			}
			cfg, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Config.User != "65532:65532" || cfg.OS != "linux" || cfg.Architecture != "amd64" {
				t.Errorf("config: user %q os %q arch %q", cfg.Config.User, cfg.OS, cfg.Architecture)
			}
			if cfg.Config.Labels["org.opencontainers.image.title"] != "fnrunner-"+svc {
				t.Errorf("labels = %v", cfg.Config.Labels)
			}
			files := extract(t, img)
			if _, ok := files["etc/ssl/certs/ca-certificates.crt"]; !ok {
				t.Error("no CA bundle in the image")
			}
			dir := t.TempDir()
			if svc == "functions" {
				for _, fn := range []string{"set-namespace", "apply-setters", "apply-replacements", "starlark"} {
					bin := writeExec(t, dir, files, "functions/"+fn)
					cmd := exec.Command(bin)
					cmd.Stdin = strings.NewReader("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n")
					// Each runs as a KRM function: a ResourceList in, one out (with
					// an error result and exit 1 from those that need a functionConfig).
					if out, err := cmd.Output(); !strings.Contains(string(out), "kind: ResourceList") {
						t.Errorf("%s did not run as a function: %v\n%s", fn, err, out)
					}
				}
				return
			}
			if len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/"+svc {
				t.Errorf("entrypoint = %v", cfg.Config.Entrypoint)
			}
			bin := writeExec(t, dir, files, svc)
			if out, err := exec.Command(bin, "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "Usage") {
				t.Errorf("%s --help: %v\n%s", svc, err, out)
			}
		})
	}
}

func mustDigest(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// extract reads the image's files.
func extract(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
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
	data, ok := files[name]
	if !ok {
		t.Fatalf("no %s in the image", name)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked", name)
		}
	}
	out := filepath.Join(dir, filepath.Base(name))
	if err := os.WriteFile(out, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return out
}

func runfile(t *testing.T, p string) string {
	t.Helper()
	if filepath.IsAbs(p) {
		return p
	}
	if root, ws := os.Getenv("TEST_SRCDIR"), os.Getenv("TEST_WORKSPACE"); root != "" {
		return filepath.Join(root, ws, p)
	}
	return p
}

func TestRevisionFromWorkspaceStatus(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "tools"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\necho STABLE_VERSION 0.1.0\necho STABLE_GIT_COMMIT abc123-dirty\n"
	if err := os.WriteFile(filepath.Join(dir, "tools", "workspace_status.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := revision(dir); got != "abc123-dirty" {
		t.Errorf("revision = %q", got)
	}
	if got := revision(t.TempDir()); got != "" {
		t.Errorf("revision without a status command = %q", got)
	}
}
