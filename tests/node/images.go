package node

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// PushBinaryImage pushes an image of one file, bin at path, with the
// entrypoint and cmd given, to ref (in the node's registry, plain HTTP).
func PushBinaryImage(ref, bin, path string, entrypoint, cmd []string) error {
	img, err := BinaryImage(bin, path, entrypoint, cmd)
	if err != nil {
		return err
	}
	return PushImage(ref, img)
}

// PushImage pushes img to ref, in the node's registry (plain HTTP).
func PushImage(ref string, img v1.Image) error {
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return err
	}
	return remote.Write(r, img)
}

// BinaryImage is an image of one file, bin at path, with the entrypoint
// and cmd given.
func BinaryImage(bin, path string, entrypoint, cmd []string) (v1.Image, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	layer, err := layerOf([]layerEntry{{header: tar.Header{Name: path, Mode: 0o755, Typeflag: tar.TypeReg}, data: data}})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	return mutate.Config(img, v1.Config{Entrypoint: entrypoint, Cmd: cmd})
}

// PorchWrapperImage is porch's function-pod image laid out as porch's
// func/Dockerfile-wrapperserver lays it out (v1.5.8): its wrapper-server
// and grpc-health-probe, root's and mode 0555, in /home/nonroot/wrapper-server,
// a cp (busybox, alpine's there) on the PATH, and user nonroot (10001).
func PorchWrapperImage(wrapperServer, healthProbe, busybox string) (v1.Image, error) {
	return nonrootImage([]string{"/home/nonroot/wrapper-server"}, []imageFile{
		{from: busybox, path: "/bin/busybox", mode: 0o755},
		{from: wrapperServer, path: "/home/nonroot/wrapper-server/wrapper-server", mode: 0o555},
		{from: healthProbe, path: "/home/nonroot/wrapper-server/grpc-health-probe", mode: 0o555},
	})
}

// PorchRunnerImage is porch's function-runner image laid out as porch's
// func/Dockerfile lays it out (v1.5.8): its server and grpc-health-probe,
// root's and mode 0555, and config (the exec runtime's --config), mode
// 0444, in /home/nonroot; functions (file name → binary) in
// /home/nonroot/functions, root's and mode 0555, for the exec runtime
// config names; busybox's sh and cp (alpine's there); user nonroot (10001).
func PorchRunnerImage(server, healthProbe, busybox string, config []byte, functions map[string]string) (v1.Image, error) {
	files := []imageFile{
		{from: busybox, path: "/bin/busybox", mode: 0o755},
		{from: server, path: "/home/nonroot/server", mode: 0o555},
		{from: healthProbe, path: "/home/nonroot/grpc-health-probe", mode: 0o555},
		{data: config, path: "/home/nonroot/config.yaml", mode: 0o444},
	}
	names := make([]string, 0, len(functions))
	for name := range functions {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		files = append(files, imageFile{from: functions[name], path: "/home/nonroot/functions/" + name, mode: 0o555})
	}
	return nonrootImage([]string{"/home/nonroot/functions"}, files)
}

// imageFile is a file of an image: the file at from, or data.
type imageFile struct {
	from, path string
	data       []byte
	mode       int64
}

// nonrootImage is an alpine-like image as porch's Dockerfiles make them:
// /home/nonroot the user nonroot's (10001), dirs and files root's, cp and
// sh links to /bin/busybox, passwd and group naming both users, run as
// nonroot.
func nonrootImage(dirs []string, files []imageFile) (v1.Image, error) {
	var entries []layerEntry
	for _, d := range []struct {
		path     string
		uid, gid int
	}{{"/bin", 0, 0}, {"/etc", 0, 0}, {"/home", 0, 0}, {"/home/nonroot", 10001, 10001}} {
		entries = append(entries, layerEntry{header: tar.Header{Name: d.path + "/", Mode: 0o755, Uid: d.uid, Gid: d.gid, Typeflag: tar.TypeDir}})
	}
	for _, d := range dirs {
		entries = append(entries, layerEntry{header: tar.Header{Name: d + "/", Mode: 0o755, Typeflag: tar.TypeDir}})
	}
	for _, f := range files {
		data := f.data
		if f.from != "" {
			var err error
			if data, err = os.ReadFile(f.from); err != nil {
				return nil, err
			}
		}
		entries = append(entries, layerEntry{header: tar.Header{Name: f.path, Mode: f.mode, Typeflag: tar.TypeReg}, data: data})
	}
	for _, applet := range []string{"cp", "sh"} {
		entries = append(entries, layerEntry{header: tar.Header{Name: "/bin/" + applet, Linkname: "busybox", Mode: 0o777, Typeflag: tar.TypeSymlink}})
	}
	entries = append(entries,
		layerEntry{header: tar.Header{Name: "/etc/passwd", Mode: 0o644, Typeflag: tar.TypeReg}, data: []byte("root:x:0:0:root:/root:/bin/sh\nnonroot:x:10001:10001::/home/nonroot:/bin/sh\n")},
		layerEntry{header: tar.Header{Name: "/etc/group", Mode: 0o644, Typeflag: tar.TypeReg}, data: []byte("root:x:0:\nnonroot:x:10001:\n")})
	layer, err := layerOf(entries)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	return mutate.Config(img, v1.Config{User: "nonroot:nonroot", Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}})
}

// layerEntry is one file, directory or link of a layer.
type layerEntry struct {
	header tar.Header
	data   []byte
}

// layerOf is a layer of the entries, in their order.
func layerOf(entries []layerEntry) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.header
		h.Name = strings.TrimPrefix(h.Name, "/")
		h.Size = int64(len(e.data))
		if err := tw.WriteHeader(&h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
}
