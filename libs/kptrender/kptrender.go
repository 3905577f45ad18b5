// Package kptrender renders a kpt package the way `kpt fn render` does, with
// every function call going to a FunctionEvaluator (the gateway): it reads
// the package (honouring .krmignore), renders its subpackages, runs the
// Kptfile's mutators and then its validators, writes the package back, and
// reports a kpt FunctionResultList.
//
// kpt's render library cannot be imported here (its Kubernetes libraries
// are older than the root module's; tools/porchrender builds it in its own
// module and the conformance suite holds the two to the same results), so
// this package follows kpt v1.0.0-beta.61's internal/util/render by hand.
// kpt's own Kptfile packages do import (they need little beyond kyaml): a
// Kptfile is decoded by kpt's kptfileutil (every field known, no old
// apiVersion) and its pipeline validated by kpt's kptfile/v1 when it runs
// (image names, image or exec, configMap or configPath, a configPath
// naming one KRM resource of the package). By hand: subpackages depth
// first (kpt's default order), each package's pipeline on its own
// resources plus its subpackages' rendered ones, or top-down when the root
// Kptfile has kpt.dev/bfs-rendering: "true"; mutators and validators with
// their selectors and exclude (a resource goes to the function when it
// matches any selector, or there are none, and matches no exclude; a
// mutator's output replaces what it was given); the Kptfiles among the
// resources; each function through kyaml's function filter in a kio
// pipeline (comments and field order come back, legacy and current path
// annotations are kept in step); kpt's checks of what a function returns
// (KRM only, no two resources at one path); kpt's attribution of Config
// Connector resources. Unlike kpt, nothing is written, read as a config or
// pruned through a symbolic link.
// Exec functions run on this machine when Options.AllowExec says so, as
// kpt fn render --allow-exec runs them.
package kptrender

//lint:file-ignore SA1019 kpt and porch still write and read the legacy config.kubernetes.io annotations beside the new ones

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/shlex"
	kptfilev1 "github.com/kptdev/kpt/pkg/api/kptfile/v1"
	"github.com/kptdev/kpt/pkg/kptfile/kptfileutil"
	"github.com/kptdev/kpt/pkg/lib/runneroptions"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/fn/framework"
	"sigs.k8s.io/kustomize/kyaml/fn/runtime/runtimeutil"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/kustomize/kyaml/kio/kioutil"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fnrunner/fnrunner/libs/fnresult"
	"github.com/fnrunner/fnrunner/libs/resourcelist"
	pb "github.com/fnrunner/fnrunner/protos/evaluator"
)

// Evaluator runs one function; pb.FunctionEvaluatorClient implements it.
type Evaluator interface {
	EvaluateFunction(ctx context.Context, in *pb.EvaluateFunctionRequest, opts ...grpc.CallOption) (*pb.EvaluateFunctionResponse, error)
}

// Kptfile is the part of a Kptfile the renderer reads.
type Kptfile struct {
	Metadata struct {
		Name        string            `yaml:"name"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"metadata"`
	Pipeline struct {
		Mutators   []Function `yaml:"mutators"`
		Validators []Function `yaml:"validators"`
	} `yaml:"pipeline"`
	// kpt is the same Kptfile as kpt's own type, for kpt's validation.
	kpt *kptfilev1.KptFile
}

// Function is one step of a Kptfile pipeline.
type Function struct {
	Image      string            `yaml:"image"`
	Exec       string            `yaml:"exec"`
	ConfigMap  map[string]string `yaml:"configMap"`
	ConfigPath string            `yaml:"configPath"`
	Name       string            `yaml:"name"`
	Selectors  []Selector        `yaml:"selectors"`
	Exclude    []Selector        `yaml:"exclude"`
}

// Selector picks resources for a pipeline function: every field set must
// match.
type Selector struct {
	APIVersion  string            `yaml:"apiVersion"`
	Kind        string            `yaml:"kind"`
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// IsEmpty says that s sets no field (it then matches everything).
func (s Selector) IsEmpty() bool {
	return s.APIVersion == "" && s.Kind == "" && s.Name == "" && s.Namespace == "" && len(s.Labels) == 0 && len(s.Annotations) == 0
}

// Matches says whether every field s sets matches n.
func (s Selector) Matches(n *yaml.RNode) bool {
	match := func(want, got string) bool { return want == "" || want == got }
	return match(s.APIVersion, n.GetApiVersion()) && match(s.Kind, n.GetKind()) &&
		match(s.Name, n.GetName()) && match(s.Namespace, n.GetNamespace()) &&
		subset(s.Labels, n.GetLabels()) && subset(s.Annotations, n.GetAnnotations())
}

func subset(want, got map[string]string) bool {
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			return false
		}
	}
	return true
}

// selects says whether a function with these selectors and exclusions gets
// n: it matches one of the selectors (or there are none) and none of the
// non-empty exclusions.
func selects(selectors, exclude []Selector, n *yaml.RNode) bool {
	selected := len(selectors) == 0
	for _, s := range selectors {
		if s.Matches(n) {
			selected = true
			break
		}
	}
	if !selected {
		return false
	}
	for _, x := range exclude {
		if !x.IsEmpty() && x.Matches(n) {
			return false
		}
	}
	return true
}

// resourceIDAnnotation marks each resource, while a function with
// selectors runs, so that its output can be put back in place (kpt's
// annotation, removed afterwards).
const resourceIDAnnotation = "internal.config.k8s.io/kpt-resource-id"

// ResultList is kpt's FunctionResultList.
type ResultList struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	ExitCode int          `yaml:"exitCode"`
	Items    []StepResult `yaml:"items,omitempty"`
	// Packages is fnrunner's addition: how many packages rendered.
	Packages int `yaml:"-"`
}

// StepResult is one function's outcome.
type StepResult struct {
	Image string `yaml:"image,omitempty"`
	// ExecPath is an exec function's command, as its Kptfile has it.
	ExecPath string            `yaml:"exec,omitempty"`
	Stderr   string            `yaml:"stderr,omitempty"`
	ExitCode int               `yaml:"exitCode"`
	Results  framework.Results `yaml:"results,omitempty"`
	// Duration is fnrunner's addition: how long the call took.
	Duration time.Duration `yaml:"-"`
}

// Options change how a package is rendered.
type Options struct {
	// MapImage rewrites a Kptfile image before it is sent (nil: unchanged).
	MapImage func(string) string
	// Progress, if set, gets one line per step.
	Progress io.Writer
	// AllowExec runs a pipeline's exec functions (kpt fn render
	// --allow-exec) on this machine, as kpt does, not through the
	// evaluator; without it a pipeline with one fails, ErrExecNotAllowed.
	AllowExec bool
	// NoAttribution leaves off the annotation kpt stamps on Config
	// Connector resources it renders (see attribute); kpt leaves it off
	// when KRM_DISABLE_ATTRIBUTION is set.
	NoAttribution bool
	// Output, when set, gets the rendered resources as one ResourceList,
	// with their path annotations, and the package is left as it was
	// (kpt fn render -o).
	Output io.Writer
	// ExecTimeout bounds each exec function's run (0: kpt's 5 minutes).
	ExecTimeout time.Duration
}

// Render renders the package in dir as kpt fn render does: each
// subpackage (a directory below with its own Kptfile) first, depth first in
// path order, then the package's own pipeline on its resources and the
// rendered resources of its subpackages (top-down instead under
// kpt.dev/bfs-rendering, see hydrateBFS). It writes the package back, and
// removes files left without resources, when every function succeeded.
// The ResultList is returned even when a function failed (ExitCode 1); err
// is for problems of the package or of the call itself (unreachable
// gateway, unknown image, a function's output kpt refuses, ...).
func Render(ctx context.Context, dir string, ev Evaluator, opts Options) (*ResultList, error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	r := &renderer{root: root, ev: ev, opts: opts, list: &ResultList{APIVersion: "kpt.dev/v1", Kind: "FunctionResultList"}, read: map[string]bool{}}
	r.list.Metadata.Name = "fnresults"
	kf, err := ReadKptfile(root)
	if err != nil {
		return nil, err
	}
	hydrate := r.hydrate
	if strings.EqualFold(kf.Metadata.Annotations[bfsRenderingAnnotation], "true") {
		hydrate = r.hydrateBFS
	}
	items, err := hydrate(ctx, root)
	if err != nil || r.list.ExitCode != 0 {
		return r.list, err
	}
	for _, it := range items {
		if err := relativeToRoot(it, root); err != nil {
			return r.list, err
		}
		if !opts.NoAttribution {
			if err := attribute(it); err != nil {
				return r.list, err
			}
		}
	}
	if opts.Output != nil {
		w := kio.ByteWriter{
			Writer:                opts.Output,
			KeepReaderAnnotations: true,
			WrappingAPIVersion:    kio.ResourceListAPIVersion,
			WrappingKind:          kio.ResourceListKind,
		}
		if err := w.Write(items); err != nil {
			return r.list, fmt.Errorf("writing the rendered resources: %w", err)
		}
		return r.list, nil
	}
	if err := writePackage(root, items, r.read); err != nil {
		return r.list, fmt.Errorf("writing package %s: %w", dir, err)
	}
	return r.list, nil
}

// writePackage writes items below root by their paths and removes the
// files of read that no item is in any more (kpt prunes only what it read
// for the packages it rendered). It refuses to write or remove through a
// symbolic link: a package, or a function, must not reach outside root.
func writePackage(root string, items []*yaml.RNode, read map[string]bool) error {
	written := map[string]bool{}
	for _, it := range items {
		p, _, err := kioutil.GetFileAnnotations(it)
		if err != nil {
			return err
		}
		if err := noSymlinkBelow(root, p); err != nil {
			return err
		}
		written[p] = true
	}
	for p := range read {
		if err := noSymlinkBelow(root, p); err != nil {
			return err
		}
	}
	w := &kio.LocalPackageWriter{PackagePath: root}
	if err := w.Write(items); err != nil {
		return err
	}
	for p := range read {
		if written[p] {
			continue
		}
		if err := os.Remove(filepath.Join(root, p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("pruning %s: %w", p, err)
		}
	}
	return nil
}

// noSymlinkBelow says whether rel, a path relative to root, names a file
// reached through a symbolic link (or outside root): such a file is not
// read, written or removed.
func noSymlinkBelow(root, rel string) error {
	clean := filepath.Clean(rel)
	if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return fmt.Errorf("resource path %q is outside the package", rel)
	}
	cur := root
	for _, part := range strings.Split(clean, string(filepath.Separator)) {
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // created by the write, below no link
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("resource path %q goes through the symbolic link %s", rel, cur)
		}
	}
	return nil
}

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

// runPipeline runs the Kptfile kf's pipeline, of the package at dir, on
// input. A function that failed sets r.list.ExitCode and stops it.
func (r *renderer) runPipeline(ctx context.Context, dir string, kf *Kptfile, input []*yaml.RNode) ([]*yaml.RNode, error) {
	steps := append(append([]Function{}, kf.Pipeline.Mutators...), kf.Pipeline.Validators...)
	if len(steps) > 0 {
		if err := kf.validatePipeline(dir); err != nil {
			return nil, err
		}
	}
	// kpt refuses an exec mutator before the first mutator runs (it builds
	// the mutators' chain first), an exec validator when it comes to it.
	for _, f := range kf.Pipeline.Mutators {
		if f.Exec != "" && !r.opts.AllowExec {
			return nil, fmt.Errorf("package %s: %w", dir, ErrExecNotAllowed)
		}
	}
	if len(steps) == 0 {
		if err := areKRM(input); err != nil {
			return nil, fmt.Errorf("package %s: input resource list must contain only KRM resources: %w", dir, err)
		}
		return input, nil
	}
	for i, f := range steps {
		mutator := i < len(kf.Pipeline.Mutators)
		out, step, err := runStep(ctx, r.ev, f, dir, mutator, input, r.opts)
		if step == nil {
			return nil, fmt.Errorf("package %s: %w", dir, err)
		}
		// As kpt, a call that failed (a function, or the call itself) is
		// an item of the result list and fails it.
		r.list.Items = append(r.list.Items, *step)
		if step.ExitCode != 0 {
			r.list.ExitCode = 1
		}
		if err != nil {
			return nil, fmt.Errorf("package %s: %w", dir, err)
		}
		if r.opts.Progress != nil {
			verdict := "ok"
			if step.ExitCode != 0 {
				verdict = fmt.Sprintf("failed (exit code %d)", step.ExitCode)
			}
			where := ""
			if rel, err := filepath.Rel(r.root, dir); err == nil && rel != "." {
				where = filepath.ToSlash(rel) + " "
			}
			fmt.Fprintf(r.opts.Progress, "[%s%d/%d] %s: %s in %v, %d results\n", where, i+1, len(steps), f.name(), verdict, step.Duration.Round(time.Millisecond), len(step.Results))
		}
		if step.ExitCode != 0 {
			return nil, nil
		}
		if mutator {
			input = out
		}
	}
	return input, nil
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

// areKRM says which resource, if any, lacks apiVersion, kind or
// metadata.name (kpt's check; kustomization files are exempt).
func areKRM(items []*yaml.RNode) error {
	for _, it := range items {
		p, _, _ := kioutil.GetFileAnnotations(it)
		switch base := filepath.Base(p); {
		case base == "kustomization.yaml" || base == "kustomization.yml" || base == "Kustomization",
			strings.HasPrefix(it.GetApiVersion(), "kustomize.config.k8s.io"),
			it.GetApiVersion() == "" && it.GetKind() == "Kustomization":
			continue
		case it.GetApiVersion() == "":
			return fmt.Errorf("%s: resource must have `apiVersion`", p)
		case it.GetKind() == "":
			return fmt.Errorf("%s: resource must have `kind`", p)
		case it.GetName() == "":
			return fmt.Errorf("%s: resource must have `metadata.name`", p)
		}
	}
	return nil
}

// checkPaths is kpt's check of a function's output: no resource outside its
// package, no two at the same path and index of one package.
func checkPaths(items []*yaml.RNode) error {
	type key struct{ pkg, path, index string }
	seen := map[key]bool{}
	for _, it := range items {
		p, index, err := kioutil.GetFileAnnotations(it)
		if err != nil {
			return err
		}
		clean := path.Clean(p)
		if clean == ".." || strings.HasPrefix(clean, "../") {
			return fmt.Errorf("function must not modify resources outside of package: resource has path %s", p)
		}
		k := key{it.GetAnnotations()[packagePathAnnotation], clean, index}
		if seen[k] {
			return fmt.Errorf("resource at path %q and index %q already exists", clean, index)
		}
		seen[k] = true
	}
	return nil
}

// packageReadWriter reads and writes a package's resources as kpt does: its
// YAML files and its Kptfile, which functions get too (the Kptfile is
// local config: most functions leave it alone).
func packageReadWriter(dir string, subpackages bool) *kio.LocalPackageReadWriter {
	return &kio.LocalPackageReadWriter{
		PackagePath:        dir,
		PackageFileName:    "Kptfile",
		MatchFilesGlob:     append([]string{"Kptfile"}, kio.MatchAll...),
		IncludeSubpackages: subpackages,
		PreserveSeqIndent:  true,
		WrapBareSeqNode:    true,
	}
}

// Eval runs one function on the package in dir, as `kpt fn eval` does: on
// every resource of the package and its subpackages, the Kptfiles
// included, with config as its functionConfig (nil: none); it writes the
// package back when the function succeeded.
func Eval(ctx context.Context, dir string, ev Evaluator, image string, config *yaml.RNode, opts Options) (*ResultList, error) {
	rw := packageReadWriter(dir, true)
	items, err := rw.Read()
	if err != nil {
		return nil, fmt.Errorf("reading package %s: %w", dir, err)
	}
	// The files read, the ones that may be pruned.
	files, err := filesRead(dir, items)
	if err != nil {
		return nil, err
	}
	read := map[string]bool{}
	for _, p := range files {
		read[p] = true
	}
	list := &ResultList{APIVersion: "kpt.dev/v1", Kind: "FunctionResultList"}
	list.Metadata.Name = "fnresults"
	out, step, err := callFunction(ctx, ev, Function{Image: image}, "", items, config, opts)
	if step != nil {
		list.Items = append(list.Items, *step)
		if step.ExitCode != 0 {
			list.ExitCode = 1
		}
	}
	if err != nil || list.ExitCode != 0 {
		return list, err
	}
	for _, it := range out {
		if err := relativeToRoot(it, ""); err != nil {
			return list, err
		}
	}
	if err := writePackage(dir, out, read); err != nil {
		return list, fmt.Errorf("writing package %s: %w", dir, err)
	}
	return list, nil
}

// EvalConfig is the functionConfig kpt fn eval makes of its arguments
// after --, as kpt v1.0.0-beta.61's cmdeval makes it: always one, named
// function-input, of kind ConfigMap or of the first argument when it is
// not KEY=VALUE, each VALUE a string in data (none: data is empty).
func EvalConfig(args []string) (*yaml.RNode, error) {
	rc, err := yaml.Parse("metadata:\n  name: function-input\ndata: {}\n")
	if err != nil {
		return nil, err
	}
	kind := "ConfigMap"
	data, err := rc.Pipe(yaml.Lookup("data"))
	if err != nil {
		return nil, err
	}
	for i, arg := range args {
		k, v, ok := strings.Cut(arg, "=")
		if i == 0 && !ok {
			kind = arg
			continue
		}
		if !ok {
			return nil, fmt.Errorf("args must have keys and values separated by =, not %q", arg)
		}
		if err := data.PipeE(yaml.SetField(k, yaml.NewStringRNode(v))); err != nil {
			return nil, err
		}
	}
	if err := rc.PipeE(yaml.SetField("kind", yaml.NewScalarRNode(kind))); err != nil {
		return nil, err
	}
	if err := rc.PipeE(yaml.SetField("apiVersion", yaml.NewScalarRNode("v1"))); err != nil {
		return nil, err
	}
	return rc, nil
}

// ReadKptfile reads dir/Kptfile as kpt does (kpt's own decoder: a field
// kpt's Kptfile type lacks, or an old apiVersion, is refused). Its pipeline
// is validated when it runs.
func ReadKptfile(dir string) (*Kptfile, error) {
	data, err := os.ReadFile(filepath.Join(dir, "Kptfile"))
	if err != nil {
		return nil, fmt.Errorf("reading Kptfile: %w", err)
	}
	// kpt's own decoding (kptfileutil): apiVersion and kind, every field
	// known, kpt's messages.
	kkf, err := kptfileutil.DecodeKptfile(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("Kptfile in %s: %w", dir, err)
	}
	var kf Kptfile
	if err := yaml.Unmarshal(data, &kf); err != nil {
		return nil, fmt.Errorf("parsing Kptfile: %w", err)
	}
	kf.kpt = kkf
	return &kf, nil
}

// validatePipeline is kpt's validation of the pipeline of the package at
// dir (kptfile/v1 KptFile.Validate), which kpt runs when it comes to run a
// pipeline: functions, image names, configMap and configPath, and each
// configPath naming one KRM resource of the package.
func (kf *Kptfile) validatePipeline(dir string) error {
	kkf := kf.kpt
	if kkf == nil {
		return errors.New("Kptfile not read by ReadKptfile")
	}
	// kpt reads a configPath through a symbolic link, even one out of the
	// package; it is refused here before kpt's validation reads it.
	var fns []kptfilev1.Function
	if kkf.Pipeline != nil {
		fns = append(slices.Clone(kkf.Pipeline.Mutators), kkf.Pipeline.Validators...)
	}
	for _, f := range fns {
		p := filepath.Clean(f.ConfigPath)
		if strings.TrimSpace(f.ConfigPath) == "" || filepath.IsAbs(p) || strings.Contains(p, "..") {
			continue // kpt's validation refuses these itself
		}
		if err := noSymlinkBelow(dir, p); err != nil {
			return fmt.Errorf("Kptfile in %s: function %q: configPath: %w", dir, f.Image, err)
		}
		// kpt's validation indexes the file's first document unchecked: a
		// file without one would crash it.
		if err := hasDocument(filepath.Join(dir, f.ConfigPath)); err != nil {
			return fmt.Errorf("Kptfile in %s: function %q: configPath %q: %w", dir, f.Image, f.ConfigPath, err)
		}
	}
	if err := validateKptfile((*kptfilev1.KptFile).Validate, kkf, dir); err != nil {
		return fmt.Errorf("Kptfile in %s: %w", dir, err)
	}
	return nil
}

// hasDocument says whether the file at p (if there is one: kpt reports a
// missing one) holds a YAML document, read as kpt reads a configPath.
func hasDocument(p string) error {
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	nodes, err := (&kio.ByteReader{Reader: bytes.NewReader(data), PreserveSeqIndent: true, WrapBareSeqNode: true, DisableUnwrapping: true}).Read()
	if err != nil {
		return nil // kpt's validation says what is wrong with it
	}
	if len(nodes) == 0 {
		return errors.New("functionConfig must contain a config, the file has none")
	}
	return nil
}

// validateKptfile runs kpt's KptFile.Validate, given as validate, on the
// package at dir. Its package path parameter is of a type in kpt's
// internal packages, which cannot be named here: P is that type, inferred
// from validate's signature.
func validateKptfile[P ~string](validate func(*kptfilev1.KptFile, filesys.FileSystem, P) error, kf *kptfilev1.KptFile, dir string) error {
	return validate(kf, filesys.MakeFsOnDisk(), P(dir))
}

// runStep runs one step (a mutator or a validator) of the pipeline of the
// package at pkg on items.
func runStep(ctx context.Context, ev Evaluator, f Function, pkg string, mutator bool, items []*yaml.RNode, opts Options) ([]*yaml.RNode, *StepResult, error) {
	switch {
	case f.Exec != "" && !opts.AllowExec:
		return nil, nil, ErrExecNotAllowed
	case f.Image == "" && f.Exec == "":
		return nil, nil, errors.New("a pipeline function has no image")
	}
	config, err := functionConfig(f, pkg, items, mutator)
	if err != nil {
		return nil, nil, err
	}
	if len(f.Selectors) == 0 && len(f.Exclude) == 0 {
		return callFunction(ctx, ev, f, pkg, items, config, opts)
	}
	if !mutator {
		// A validator's output is not kept: kpt gives it the selected
		// resources as they are, with no resource ids.
		var selected []*yaml.RNode
		for _, it := range items {
			if selects(f.Selectors, f.Exclude, it) {
				selected = append(selected, it)
			}
		}
		return callFunction(ctx, ev, f, pkg, selected, config, opts)
	}
	// Only the selected resources go to the function; its output takes
	// their place, by kpt's resource ids: a selected resource missing from
	// the output was deleted, an output without an id is new (appended).
	var selected []*yaml.RNode
	isSelected := make([]bool, len(items))
	for i, it := range items {
		if err := it.PipeE(yaml.SetAnnotation(resourceIDAnnotation, strconv.Itoa(i))); err != nil {
			return nil, nil, err
		}
		if isSelected[i] = selects(f.Selectors, f.Exclude, it); isSelected[i] {
			selected = append(selected, it)
		}
	}
	defer func() {
		for _, it := range items {
			_ = it.PipeE(yaml.ClearAnnotation(resourceIDAnnotation))
		}
	}()
	out, step, err := callFunction(ctx, ev, f, pkg, selected, config, opts)
	if err != nil || step.ExitCode != 0 {
		return nil, step, err
	}
	byID := map[string]*yaml.RNode{}
	var added []*yaml.RNode
	for _, o := range out {
		if id := o.GetAnnotations()[resourceIDAnnotation]; id != "" {
			if _, dup := byID[id]; !dup {
				byID[id] = o
			}
		} else {
			added = append(added, o)
		}
	}
	var merged []*yaml.RNode
	for i, it := range items {
		switch o, ok := byID[strconv.Itoa(i)]; {
		case !isSelected[i]:
			merged = append(merged, it)
		case ok:
			merged = append(merged, o)
		}
	}
	merged = append(merged, added...)
	for _, it := range merged {
		if err := it.PipeE(yaml.ClearAnnotation(resourceIDAnnotation)); err != nil {
			return nil, nil, err
		}
	}
	return merged, step, nil
}

// callFunction sends items and config to the function f names and returns
// its output items (nil when it failed) and its StepResult. It goes
// through kyaml's function filter in a kio pipeline, as kpt does, so that
// what the function returns gets back the comments and field order of what
// it was given (a function that re-encodes resources, as starlark does,
// loses both), a resource it adds gets a default path, and a path changed
// in either annotation (config.kubernetes.io/path, the legacy one, or
// internal.config.kubernetes.io/path) is changed in both. A resource it
// adds belongs to pkg (when not empty); the output must be KRM with no two
// resources at one path and index of a package, or err says which.
func callFunction(ctx context.Context, ev Evaluator, f Function, pkg string, items []*yaml.RNode, config *yaml.RNode, opts Options) ([]*yaml.RNode, *StepResult, error) {
	if err := areKRM(items); err != nil {
		return nil, nil, fmt.Errorf("%s: input resource list must contain only KRM resources: %w", f.name(), err)
	}
	// kpt resolves a catalog function's short name (no "/") to the
	// catalog's registry, calls that and names the result by it; porch's
	// renders send it so too. A mapping applies to the Kptfile's spelling.
	resolve := (&runneroptions.RunnerOptions{}).ResolveToImageForCLIFunc(runneroptions.GHCRImagePrefix)
	var image, name string
	if f.Image != "" {
		image = f.Image
		if opts.MapImage != nil {
			image = opts.MapImage(image)
		}
		image, _ = resolve(ctx, image)
		name, _ = resolve(ctx, f.Image)
	}
	step := &StepResult{Image: name, ExecPath: f.Exec}
	// A function run on this machine, not sent: kpt's builtin, or an exec
	// function (its stderr kept on success; on failure ExecExitError has it).
	var runLocal func(input []byte) ([]byte, error)
	switch {
	case f.Image == builtinPkgContext:
		runLocal = genPkgContext
	case f.Exec != "":
		timeout := opts.ExecTimeout
		if timeout <= 0 {
			timeout = defaultExecTimeout
		}
		runLocal = func(input []byte) ([]byte, error) {
			output, stderr, err := runExec(ctx, f.Exec, input, timeout)
			step.Stderr = string(stderr)
			return output, err
		}
	}
	var callErr error
	filter := &runtimeutil.FunctionFilter{
		FunctionConfig: config,
		// Every resource is the function's; none is scoped out by the
		// directory of its functionConfig.
		GlobalScope:  true,
		DeferFailure: true,
		Run: func(in io.Reader, out io.Writer) error {
			input, err := io.ReadAll(in)
			if err != nil {
				return err
			}
			start := time.Now()
			if runLocal != nil {
				output, err := runLocal(input)
				step.Duration = time.Since(start)
				if err != nil {
					callErr = err
					return err
				}
				if rs, err := resourcelist.Results(output); err == nil {
					step.Results = rs
				}
				_, err = out.Write(output)
				return err
			}
			resp, err := ev.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: image, ResourceList: input})
			step.Duration = time.Since(start)
			if err != nil {
				callErr = err
				return err
			}
			step.Stderr = string(resp.GetLog())
			rl, err := resourcelist.Parse(resp.GetResourceList())
			if err != nil {
				callErr = err
				return err
			}
			step.Results = rl.Results
			_, err = out.Write(resp.GetResourceList())
			return err
		},
	}
	copies := make([]*yaml.RNode, len(items))
	for i, it := range items {
		copies[i] = it.Copy()
	}
	output := &kio.PackageBuffer{}
	err := kio.Pipeline{
		Inputs:                []kio.Reader{&kio.PackageBuffer{Nodes: copies}},
		Filters:               []kio.Filter{filter},
		Outputs:               []kio.Writer{output},
		ContinueOnEmptyResult: true,
	}.Execute()
	out := output.Nodes
	var exitErr *ExecExitError
	switch {
	case errors.As(callErr, &exitErr):
		// The exec function failed: kpt keeps its exit code and stderr,
		// and the results it printed.
		step.ExitCode, step.Stderr = exitErr.ExitCode, string(exitErr.Stderr)
		if rs, err := resourcelist.Results(exitErr.Stdout); err == nil {
			step.Results = rs
		}
		return nil, step, nil
	case callErr != nil && f.Exec != "":
		step.ExitCode = 1
		return nil, step, fmt.Errorf("%s: %w", f.Exec, callErr)
	case callErr != nil && status.Code(callErr) == codes.Internal:
		// The function failed: its results and stderr are in the details.
		step.ExitCode = 1
		if d, ok := fnresult.FailureDetails(callErr); ok {
			step.Stderr = string(d.GetLog())
			if rs, err := resourcelist.Results(d.GetResourceList()); err == nil {
				step.Results = rs
			}
		} else {
			step.Stderr = status.Convert(callErr).Message()
		}
		return nil, step, nil
	case callErr != nil:
		// The call failed (no such function, the runner unreachable,
		// ...): kpt records the function as failed, exit code 1.
		step.ExitCode = 1
		return nil, step, fmt.Errorf("%s: %w", f.Image, callErr)
	case err != nil:
		// What the function returned could not be read back.
		step.ExitCode = 1
		return nil, step, fmt.Errorf("%s: %w", step.Name(), err)
	}
	for _, o := range out {
		if pkg != "" && o.GetAnnotations()[packagePathAnnotation] == "" {
			if err := o.PipeE(yaml.SetAnnotation(packagePathAnnotation, pkg)); err != nil {
				return nil, nil, err
			}
		}
	}
	if err := checkPaths(out); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", step.Name(), err)
	}
	if err := areKRM(out); err != nil {
		return nil, nil, fmt.Errorf("%s: output resource list must contain only KRM resources: %w", step.Name(), err)
	}
	return out, step, nil
}

// functionConfig builds a step's functionConfig as kpt does: a mutator's
// configPath is the resource of the package at pkg at exactly that path as
// earlier steps left it, else (and always for a validator) the file as it
// is on disk; without configPath, a ConfigMap named function-input holding
// configMap (as kpt's, no annotations; none for an empty configMap).
func functionConfig(f Function, pkg string, items []*yaml.RNode, mutator bool) (*yaml.RNode, error) {
	if f.ConfigPath != "" {
		if mutator {
			for _, it := range items {
				p, _, err := kioutil.GetFileAnnotations(it)
				if err == nil && p == f.ConfigPath && it.GetAnnotations()[packagePathAnnotation] == pkg {
					return it.Copy(), nil
				}
			}
		}
		if pkg == "" {
			return nil, fmt.Errorf("%s: configPath %q needs a package", f.Image, f.ConfigPath)
		}
		if err := noSymlinkBelow(pkg, f.ConfigPath); err != nil {
			return nil, fmt.Errorf("%s: configPath: %w", f.Image, err)
		}
		b, err := os.ReadFile(filepath.Join(pkg, f.ConfigPath))
		if err != nil {
			return nil, fmt.Errorf("%s: missing function config %q: %w", f.Image, f.ConfigPath, err)
		}
		n, err := yaml.Parse(string(b))
		if err != nil {
			return nil, fmt.Errorf("%s: invalid function config %q: %w", f.Image, f.ConfigPath, err)
		}
		return n, nil
	}
	if len(f.ConfigMap) == 0 {
		// kpt sends no functionConfig for an empty configMap either.
		return nil, nil
	}
	cm := yaml.NewMapRNode(nil)
	for _, kv := range [][2]string{{"apiVersion", "v1"}, {"kind", "ConfigMap"}} {
		if err := cm.PipeE(yaml.SetField(kv[0], yaml.NewScalarRNode(kv[1]))); err != nil {
			return nil, err
		}
	}
	if err := cm.PipeE(yaml.SetK8sName("function-input")); err != nil {
		return nil, err
	}
	cm.SetDataMap(f.ConfigMap)
	return cm, nil
}

// BuildResourceList serializes items and an optional functionConfig as a
// config.kubernetes.io/v1 ResourceList.
func BuildResourceList(items []*yaml.RNode, config *yaml.RNode) ([]byte, error) {
	var b strings.Builder
	w := kio.ByteWriter{
		Writer:                &b,
		KeepReaderAnnotations: true,
		WrappingAPIVersion:    resourcelist.V1,
		WrappingKind:          resourcelist.Kind,
		FunctionConfig:        config,
	}
	copies := make([]*yaml.RNode, len(items))
	for i, it := range items {
		copies[i] = it.Copy()
	}
	if err := w.Write(copies); err != nil {
		return nil, fmt.Errorf("building ResourceList: %w", err)
	}
	return []byte(b.String()), nil
}

// defaultExecTimeout is kpt's bound on an exec function's run.
const defaultExecTimeout = 5 * time.Minute

// ErrExecNotAllowed is kpt's refusal of a pipeline with an exec function
// when exec functions were not allowed.
var ErrExecNotAllowed = errors.New("must run with `--allow-exec` option to allow running function binaries")

// ExecExitError is an exec function that exited with a status other
// than 0.
type ExecExitError struct {
	ExitCode       int
	Stdout, Stderr []byte
}

func (e *ExecExitError) Error() string {
	return fmt.Sprintf("exit status %d", e.ExitCode)
}

// runExec runs an exec function as kpt does: its command split as a shell
// would (kpt's shlex), the program found as exec.Command finds it (a
// relative path from the working directory), input on its stdin, its
// stdout the output; its stderr is returned too. Unlike kpt's, it runs in a
// process group of its own, and whatever of that group is left when the
// program exits is killed then (kpt leaves it, and waits for it while it
// holds the output open); when ctx ends or after timeout the whole group is
// killed.
func runExec(ctx context.Context, command string, input []byte, timeout time.Duration) (stdout, stderr []byte, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	words, err := shlex.Split(command)
	if err != nil {
		return nil, nil, fmt.Errorf("exec command %q must be valid: %w", command, err)
	}
	if len(words) == 0 {
		return nil, nil, fmt.Errorf("exec command %q names no program", command)
	}
	cmd := exec.CommandContext(ctx, words[0], words[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// Only a process that left the group (setsid) can hold the output
	// open once the group is killed: not for longer than this.
	cmd.WaitDelay = time.Second
	cmd.Stdin = bytes.NewReader(input)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	// The program's exit, not reaped yet: its group id cannot be taken by
	// another group while what it left is killed.
	var info unix.Siginfo
	for {
		if werr := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil); !errors.Is(werr, unix.EINTR) {
			break
		}
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	err = cmd.Wait()
	var xe *exec.ExitError
	switch {
	case errors.As(err, &xe) && ctx.Err() == nil:
		return nil, nil, &ExecExitError{ExitCode: xe.ExitCode(), Stdout: out.Bytes(), Stderr: errOut.Bytes()}
	case err != nil && ctx.Err() != nil:
		return nil, nil, fmt.Errorf("%w (%v)", ctx.Err(), err)
	case err != nil:
		return nil, nil, err
	}
	return out.Bytes(), errOut.Bytes(), nil
}

// name is how kpt names a function: its image, or its exec command.
func (f Function) name() string {
	if f.Image != "" {
		return f.Image
	}
	return f.Exec
}

// Name is how kpt names a step's function: its image, or its exec command.
func (s *StepResult) Name() string {
	if s.Image != "" {
		return s.Image
	}
	return s.ExecPath
}
