// The package tree: finding and reading its packages, depth first or
// top-down, and the paths of what they hold.

package kptrender

//lint:file-ignore SA1019 kpt and porch still write and read the legacy config.kubernetes.io annotations beside the new ones

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/kustomize/kyaml/kio/kioutil"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// packagePathAnnotation is kpt's: the package a resource belongs to (an
// absolute path), set while a package tree renders and removed before it is
// written. Functions see it, as they do under kpt.
const packagePathAnnotation = "internal.config.kubernetes.io/package-path"

// renderer renders a package tree.
type renderer struct {
	root string
	ev   Evaluator
	opts Options
	list *ResultList
	// read holds the files the rendered packages were read from, relative
	// to root: the ones that may be pruned.
	read map[string]bool
}

// hydrate renders the package at dir and returns its resources and those
// of its subpackages, each annotated with its package and a path relative
// to it. A function that failed sets r.list.ExitCode and stops the render.
func (r *renderer) hydrate(ctx context.Context, dir string) ([]*yaml.RNode, error) {
	kf, err := ReadKptfile(dir)
	if err != nil {
		return nil, err
	}
	subs, err := subpackages(dir)
	if err != nil {
		return nil, err
	}
	var input []*yaml.RNode
	for _, sub := range subs {
		out, err := r.hydrate(ctx, sub)
		if err != nil || r.list.ExitCode != 0 {
			return nil, err
		}
		input = append(input, out...)
	}
	local, err := r.readLocal(dir)
	if err != nil {
		return nil, err
	}
	return r.runPipeline(ctx, dir, kf, append(input, local...))
}

// bfsRenderingAnnotation on the root Kptfile, "true" (any case), makes
// kpt render the tree top-down (kpt v1.0.0-beta.61 hydrateBfsOrder).
const bfsRenderingAnnotation = "kpt.dev/bfs-rendering"

// hydrateBFS renders the tree at root top-down, as kpt does under
// kpt.dev/bfs-rendering: the packages in breadth-first order (each
// package's subpackages in path order), each package's pipeline on its own
// resources and, after them, those of its descendants as the packages
// above left them (a child's, then that child's descendants', then the
// next child's). What the pipeline returns goes back to the packages by
// each resource's package annotation (none: this package); a package the
// output names none of keeps what it had, as in kpt. So a package can
// change its subpackages, and no subpackage its parent or its siblings
// (they are not in its input).
func (r *renderer) hydrateBFS(ctx context.Context, root string) ([]*yaml.RNode, error) {
	type node struct {
		dir       string
		kf        *Kptfile
		resources []*yaml.RNode
		children  []*node
	}
	var all []*node
	for queue := []*node{{dir: root}}; len(queue) > 0; queue = queue[1:] {
		n := queue[0]
		all = append(all, n)
		var err error
		if n.kf, err = ReadKptfile(n.dir); err != nil {
			return nil, err
		}
		if n.resources, err = r.readLocal(n.dir); err != nil {
			return nil, err
		}
		subs, err := subpackages(n.dir)
		if err != nil {
			return nil, err
		}
		for _, sub := range subs {
			c := &node{dir: sub}
			n.children = append(n.children, c)
			queue = append(queue, c)
		}
	}
	for _, n := range all {
		input := slices.Clone(n.resources)
		var descend func(*node)
		descend = func(m *node) {
			for _, c := range m.children {
				input = append(input, c.resources...)
				descend(c)
			}
		}
		descend(n)
		out, err := r.runPipeline(ctx, n.dir, n.kf, input)
		if err != nil || r.list.ExitCode != 0 {
			return nil, err
		}
		byPackage := map[string][]*yaml.RNode{}
		for _, o := range out {
			pkg := o.GetAnnotations()[packagePathAnnotation]
			if pkg == "" {
				pkg = n.dir
			}
			byPackage[pkg] = append(byPackage[pkg], o)
		}
		for _, m := range all {
			if got, ok := byPackage[m.dir]; ok || m == n {
				m.resources = got
			}
		}
	}
	var items []*yaml.RNode
	for _, n := range all {
		items = append(items, n.resources...)
	}
	return items, nil
}

// readLocal reads the resources of the package at dir itself (not of its
// subpackages), each annotated with the package, and notes the files read.
func (r *renderer) readLocal(dir string) ([]*yaml.RNode, error) {
	local, err := (&kio.LocalPackageReader{
		PackagePath:       dir,
		PackageFileName:   "Kptfile",
		MatchFilesGlob:    append([]string{"Kptfile"}, kio.MatchAll...),
		PreserveSeqIndent: true,
		WrapBareSeqNode:   true,
		SetAnnotations:    map[string]string{packagePathAnnotation: dir},
	}).Read()
	if err != nil {
		return nil, fmt.Errorf("reading package %s: %w", dir, err)
	}
	rel, err := filepath.Rel(r.root, dir)
	if err != nil {
		return nil, err
	}
	files, err := filesRead(dir, local)
	if err != nil {
		return nil, err
	}
	for _, p := range files {
		r.read[filepath.Join(rel, p)] = true
	}
	r.list.Packages++
	return local, nil
}

// filesRead are the files items were read from, relative to dir and
// cleaned. kpt reads a file through a symbolic link, even one to outside
// the package; here none may have been read through one.
func filesRead(dir string, items []*yaml.RNode) ([]string, error) {
	var files []string
	for _, it := range items {
		p, _, err := kioutil.GetFileAnnotations(it)
		if err != nil {
			return nil, err
		}
		if err := noSymlinkBelow(dir, p); err != nil {
			return nil, fmt.Errorf("reading package %s: %w", dir, err)
		}
		files = append(files, filepath.Clean(p))
	}
	return files, nil
}

// subpackages are the directories below dir holding a Kptfile, not below
// another such directory (.git skipped), in path order, as kpt finds them.
func subpackages(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() || p == dir {
			return nil
		}
		if d.Name() == ".git" {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(p, "Kptfile")); err == nil {
			out = append(out, p)
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("finding subpackages of %s: %w", dir, err)
	}
	sort.Slice(out, func(i, j int) bool { return filepath.ToSlash(out[i]) < filepath.ToSlash(out[j]) })
	return out, nil
}

// relativeToRoot makes n's path relative to the root package (it is
// relative to n's own package while the tree renders), as kpt does after a
// render, and drops the package annotation.
func relativeToRoot(n *yaml.RNode, root string) error {
	pkg := n.GetAnnotations()[packagePathAnnotation]
	p, _, err := kioutil.GetFileAnnotations(n)
	if err != nil {
		return err
	}
	rel := "."
	if pkg != "" && pkg != root {
		var err error
		rel, err = filepath.Rel(root, pkg)
		if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return fmt.Errorf("resource %s: package %s is not below %s", p, pkg, root)
		}
	}
	// As kpt: "./a.yaml" and "/a.yaml" are a.yaml of the package.
	p = filepath.Join(rel, filepath.Clean(p))
	for _, a := range []string{kioutil.PathAnnotation, kioutil.LegacyPathAnnotation} { //nolint:staticcheck // kpt sets both
		if err := n.PipeE(yaml.SetAnnotation(a, p)); err != nil {
			return err
		}
	}
	return n.PipeE(yaml.ClearAnnotation(packagePathAnnotation))
}
