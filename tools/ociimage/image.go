package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// User is who every fnrunner image runs as (distroless' nonroot).
const User = "65532:65532"

// File is one file put into the image.
type File struct {
	Src  string // on this machine
	Dst  string // absolute path in the image
	Mode int64
}

// Spec says what goes into an image.
type Spec struct {
	Files      []File
	Entrypoint []string
	// Cmd is the image's command: the entrypoint's arguments, or the
	// program itself in an image without an entrypoint.
	Cmd    []string
	Labels map[string]string
	// Base is the image to add to (nil: empty).
	Base v1.Image
}

// epoch is every timestamp in the image: same inputs, same digest.
func epoch() time.Time { return time.Unix(0, 0).UTC() }

// Build assembles the image. It is deterministic: the same files, labels and
// base give the same digest.
func Build(s Spec) (v1.Image, error) {
	layer, err := filesLayer(s.Files)
	if err != nil {
		return nil, err
	}
	base := s.Base
	if base == nil {
		base = empty.Image
	}
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:   layer,
		History: v1.History{CreatedBy: "fnrunner tools/ociimage", Created: v1.Time{Time: epoch()}},
	})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Created = v1.Time{Time: epoch()}
	cfg.Config.User = User
	cfg.Config.Entrypoint = s.Entrypoint
	cfg.Config.Cmd = s.Cmd
	cfg.Config.WorkingDir = "/"
	cfg.Config.Env = []string{"PATH=/", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
	if cfg.Config.Labels == nil {
		cfg.Config.Labels = map[string]string{}
	}
	for k, v := range s.Labels {
		cfg.Config.Labels[k] = v
	}
	return mutate.ConfigFile(img, cfg)
}

// filesLayer makes one layer holding the files and their parent directories,
// in a fixed order with fixed ownership and times.
func filesLayer(files []File) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	sorted := append([]File(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Dst < sorted[j].Dst })
	for _, f := range sorted {
		if !path.IsAbs(f.Dst) {
			return nil, fmt.Errorf("%s: image paths must be absolute", f.Dst)
		}
		dst := strings.TrimPrefix(path.Clean(f.Dst), "/")
		for dir := path.Dir(dst); dir != "." && !dirs[dir]; dir = path.Dir(dir) {
			dirs[dir] = true
		}
	}
	var dirList []string
	for d := range dirs {
		dirList = append(dirList, d)
	}
	sort.Strings(dirList)
	for _, d := range dirList {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch(), Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	for _, f := range sorted {
		data, err := os.ReadFile(f.Src)
		if err != nil {
			return nil, err
		}
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(path.Clean(f.Dst), "/"), Mode: mode, Size: int64(len(data)), ModTime: epoch(), Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	content := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(content)), nil
	})
}
