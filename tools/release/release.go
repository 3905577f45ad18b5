// Command release pushes fnrunner's image tarballs to a registry and writes
// a kustomize overlay that runs exactly those images, pinned by digest:
//
//	tools/bazel run //deploy:release -- --repository REGISTRY/fnrunner --tag v0.1.0
//
// writes deploy/overlays/release/kustomization.yaml (on top of
// deploy/overlays/local unless --base says otherwise). The tarballs are
// reproducible, so the same sources give the same digests.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"sigs.k8s.io/yaml"
)

// options are the command line.
type options struct {
	repository string
	tag        string
	out        string
	base       string
	insecure   bool
	// images are name → image tarball.
	images map[string]string
}

func parse(args []string, stderr io.Writer) (*options, error) {
	o := &options{images: map[string]string{}}
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: release --repository REGISTRY/PATH --tag TAG --image NAME=IMAGE.tar... [flags]\n\nPushes each image as REPOSITORY/NAME:TAG and writes an overlay that pins them by digest.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.repository, "repository", "", "Where the images go: each is pushed as REPOSITORY/NAME:TAG (required).")
	fs.StringVar(&o.tag, "tag", "", "Tag of every image pushed (required).")
	out := "deploy/overlays/release"
	if ws := os.Getenv("BUILD_WORKSPACE_DIRECTORY"); ws != "" {
		out = filepath.Join(ws, out)
	}
	fs.StringVar(&o.out, "overlay", out, "Directory the overlay's kustomization.yaml is written to.")
	fs.StringVar(&o.base, "base", "../local", "The overlay's base, relative to --overlay.")
	fs.BoolVar(&o.insecure, "insecure", false, "Push over plain HTTP (a registry on loopback for tests).")
	fs.Func("image", "NAME=IMAGE.tar: an image to release as REPOSITORY/NAME (repeated; //deploy:release gives every service's).", func(v string) error {
		n, path, ok := strings.Cut(v, "=")
		if !ok || n == "" || path == "" {
			return fmt.Errorf("%q: want NAME=IMAGE.tar", v)
		}
		o.images[n] = path
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.repository == "" || o.tag == "" {
		fs.Usage()
		return nil, errors.New("--repository and --tag are required")
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	if len(o.images) == 0 {
		return nil, errors.New("no image to release")
	}
	return o, nil
}

// pushed is one image in the registry.
type pushed struct {
	name, repository, digest string
}

func run(ctx context.Context, o *options, stdout io.Writer) error {
	var done []pushed
	names := make([]string, 0, len(o.images))
	for n := range o.images {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		img, err := tarball.ImageFromPath(o.images[n], nil)
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		var nameOpts []name.Option
		if o.insecure {
			nameOpts = append(nameOpts, name.Insecure)
		}
		ref, err := name.NewTag(o.repository+"/"+n+":"+o.tag, nameOpts...)
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		if err := remote.Write(ref, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return fmt.Errorf("pushing %s: %w", ref, err)
		}
		digest, err := img.Digest()
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		fmt.Fprintf(stdout, "pushed %s@%s\n", ref, digest)
		done = append(done, pushed{name: n, repository: ref.Context().String(), digest: digest.String()})
	}
	data, err := overlay(o, done)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	path := filepath.Join(o.out, "kustomization.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\n", path)
	return nil
}

// overlay is the kustomization that runs the pushed images: every
// fnrunner/NAME image reference, and the wrapper-server image the
// pod-manager puts into function pods (an environment value, which
// kustomize's images do not reach).
func overlay(o *options, images []pushed) ([]byte, error) {
	type image struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		Digest  string `json:"digest"`
	}
	k := map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1beta1",
		"kind":       "Kustomization",
		"resources":  []string{o.base},
	}
	var list []image
	for _, p := range images {
		list = append(list, image{Name: "fnrunner/" + p.name, NewName: p.repository, Digest: p.digest})
		if p.name == "wrapper-server" {
			patch := fmt.Sprintf(`apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: fnrunner-pod-manager
spec:
  template:
    spec:
      containers:
      - name: pod-manager
        env:
        - name: WRAPPER_SERVER_IMAGE
          value: %s@%s
`, p.repository, p.digest)
			k["patches"] = []map[string]any{{"patch": patch}}
		}
	}
	k["images"] = list
	body, err := yaml.Marshal(k)
	if err != nil {
		return nil, err
	}
	head := fmt.Sprintf("# Written by //deploy:release: fnrunner %s from %s, pinned by digest.\n# kubectl apply --server-side -k %s\n", o.tag, o.repository, "deploy/overlays/release")
	return append([]byte(head), body...), nil
}

func main() {
	o, err := parse(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err == nil {
		err = run(context.Background(), o, os.Stdout)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "release: %v\n", err)
		os.Exit(1)
	}
}
