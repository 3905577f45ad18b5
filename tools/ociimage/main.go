// Command ociimage assembles an fnrunner service binary into an OCI image
// with go-containerregistry and writes it as a tarball or pushes it.
//
//	ociimage --file bazel-bin/.../gateway=/gateway:0755 --file ca.crt=/etc/ssl/certs/ca-certificates.crt \
//	  --entrypoint /gateway --label org.opencontainers.image.title=gateway --tarball gateway.tar
//	ociimage ... --repository registry.example.com/fnrunner/gateway --tag v0.1.0
//
// Images run as 65532:65532, need no shell, carry the CA bundle, and are
// reproducible: the same inputs give the same digest.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func run(args []string, stdout, stderr io.Writer) error {
	var files, labels, entrypoint, cmd listFlag
	var out, repository, tag, base, revisionDir string
	fs := flag.NewFlagSet("ociimage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Var(&files, "file", "SRC=DST[:MODE] to put into the image (repeatable), e.g. bin/gateway=/gateway:0755.")
	fs.Var(&entrypoint, "entrypoint", "Entrypoint argument (repeatable, in order).")
	fs.Var(&cmd, "cmd", "Cmd argument (repeatable, in order): the entrypoint's arguments, or the program in an image without one.")
	fs.Var(&labels, "label", "KEY=VALUE image label (repeatable).")
	fs.StringVar(&base, "base", "", "Base image, pinned by digest (REGISTRY/REPO@sha256:...). Default: none (empty base).")
	fs.StringVar(&out, "tarball", "", "Write the image as a docker/OCI tarball to this file.")
	fs.StringVar(&repository, "repository", "", "Push to this repository, e.g. registry.example.com/fnrunner/gateway.")
	fs.StringVar(&tag, "tag", "latest", "Tag to push.")
	fs.StringVar(&revisionDir, "revision-from", os.Getenv("BUILD_WORKSPACE_DIRECTORY"), "Workspace whose status (tools/workspace_status.sh: STABLE_GIT_COMMIT) becomes the org.opencontainers.image.revision label. Empty: no label.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (out == "") == (repository == "") {
		return errors.New("give exactly one of --tarball and --repository")
	}
	spec := Spec{Entrypoint: entrypoint, Cmd: cmd, Labels: map[string]string{}}
	for _, f := range files {
		src, dst, ok := strings.Cut(f, "=")
		if !ok {
			return fmt.Errorf("--file %q is not SRC=DST[:MODE]", f)
		}
		file := File{Src: src, Dst: dst}
		if d, m, ok := strings.Cut(dst, ":"); ok {
			mode, err := strconv.ParseInt(m, 8, 64)
			if err != nil {
				return fmt.Errorf("--file %q: mode: %w", f, err)
			}
			file.Dst, file.Mode = d, mode
		}
		spec.Files = append(spec.Files, file)
	}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return fmt.Errorf("--label %q is not KEY=VALUE", l)
		}
		spec.Labels[k] = v
	}
	if revisionDir != "" {
		if rev := revision(revisionDir); rev != "" {
			spec.Labels["org.opencontainers.image.revision"] = rev
		}
	}
	if base != "" {
		ref, err := name.NewDigest(base)
		if err != nil {
			return fmt.Errorf("--base must be pinned by digest: %w", err)
		}
		img, err := remote.Image(ref, remote.WithAuthFromKeychain(authn.DefaultKeychain))
		if err != nil {
			return fmt.Errorf("base image: %w", err)
		}
		spec.Base = img
	}
	img, err := Build(spec)
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	if out != "" {
		ref, _ := name.NewTag("fnrunner/image:build")
		if err := tarball.WriteToFile(out, ref, img); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s %s\n", out, digest)
		return nil
	}
	return push(img, repository, tag, digest, stdout)
}

func push(img v1.Image, repository, tag string, digest v1.Hash, stdout io.Writer) error {
	ref, err := name.NewTag(repository + ":" + tag)
	if err != nil {
		return err
	}
	if err := remote.Write(ref, img, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("pushing %s: %w", ref, err)
	}
	fmt.Fprintf(stdout, "pushed %s@%s\n", ref, digest)
	return nil
}

// revision is STABLE_GIT_COMMIT from the workspace status command Bazel
// stamps with (tools/workspace_status.sh: git HEAD, -dirty when modified).
func revision(dir string) string {
	cmd := exec.Command(filepath.Join(dir, "tools", "workspace_status.sh"))
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == "STABLE_GIT_COMMIT" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "ociimage: %v\n", err)
		os.Exit(1)
	}
}
