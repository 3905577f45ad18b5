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

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"sigs.k8s.io/kustomize/kyaml/fn/framework"
	"sigs.k8s.io/kustomize/kyaml/kio"

	pb "github.com/fnrunner/fnrunner/protos/evaluator"
)

// Evaluator runs one function; pb.FunctionEvaluatorClient implements it.
type Evaluator interface {
	EvaluateFunction(ctx context.Context, in *pb.EvaluateFunctionRequest, opts ...grpc.CallOption) (*pb.EvaluateFunctionResponse, error)
}

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

// Name is how kpt names a step's function: its image, or its exec command.
func (s *StepResult) Name() string {
	if s.Image != "" {
		return s.Image
	}
	return s.ExecPath
}
