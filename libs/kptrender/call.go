// One function call: through kyaml's function filter to the evaluator or
// run here, and kpt's checks of what comes back.

package kptrender

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/kptdev/kpt/pkg/lib/runneroptions"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/kustomize/kyaml/fn/runtime/runtimeutil"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/kustomize/kyaml/kio/kioutil"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fnrunner/fnrunner/libs/fnresult"
	"github.com/fnrunner/fnrunner/libs/resourcelist"
	pb "github.com/fnrunner/fnrunner/protos/evaluator"
)

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
	image, name := resolveImage(ctx, f, opts)
	c := &functionCall{ctx: ctx, ev: ev, image: image, step: &StepResult{Image: name, ExecPath: f.Exec}}
	c.runLocal = localRunner(ctx, f, c.step, opts)
	out, err := c.pipe(items, config)
	if failed, err := c.failed(f, err); failed {
		return nil, c.step, err
	}
	if err := checkOutput(out, pkg, c.step); err != nil {
		return nil, nil, err
	}
	return out, c.step, nil
}

// resolveImage is the image a call of f sends, mapped by opts.MapImage,
// and the name its result gets ("" for an exec function). kpt resolves a
// catalog function's short name (no "/") to the catalog's registry, calls
// that and names the result by it; porch's renders send it so too. A
// mapping applies to the Kptfile's spelling.
func resolveImage(ctx context.Context, f Function, opts Options) (image, name string) {
	resolve := (&runneroptions.RunnerOptions{}).ResolveToImageForCLIFunc(runneroptions.GHCRImagePrefix)
	if f.Image != "" {
		image = f.Image
		if opts.MapImage != nil {
			image = opts.MapImage(image)
		}
		image, _ = resolve(ctx, image)
		name, _ = resolve(ctx, f.Image)
	}
	return image, name
}

// localRunner runs f on this machine when it is not sent: kpt's builtin, or
// an exec function (its stderr kept in step on success; on failure
// ExecExitError has it). It is nil for a function the evaluator runs.
func localRunner(ctx context.Context, f Function, step *StepResult, opts Options) func(input []byte) ([]byte, error) {
	switch {
	case f.Image == builtinPkgContext:
		return genPkgContext
	case f.Exec != "":
		timeout := opts.ExecTimeout
		if timeout <= 0 {
			timeout = defaultExecTimeout
		}
		return func(input []byte) ([]byte, error) {
			output, stderr, err := runExec(ctx, f.Exec, input, timeout)
			step.Stderr = string(stderr)
			return output, err
		}
	}
	return nil
}

// functionCall is one call of a function, through kyaml's function filter.
type functionCall struct {
	ctx context.Context
	ev  Evaluator
	// image is what is sent to ev, unless runLocal is set.
	image string
	// runLocal, when set, runs the function on this machine instead.
	runLocal func(input []byte) ([]byte, error)
	// step is the call's StepResult, filled in as it goes.
	step *StepResult
	// err is the call's failure: the function's, or the call's itself.
	err error
}

// pipe runs the function on copies of items, with config as its
// functionConfig, in a kio pipeline, and returns its output and the
// pipeline's error.
func (c *functionCall) pipe(items []*yaml.RNode, config *yaml.RNode) ([]*yaml.RNode, error) {
	filter := &runtimeutil.FunctionFilter{
		FunctionConfig: config,
		// Every resource is the function's; none is scoped out by the
		// directory of its functionConfig.
		GlobalScope:  true,
		DeferFailure: true,
		Run:          c.run,
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
	return output.Nodes, err
}

// run is the function filter's Run: the ResourceList in to the function,
// here or through the evaluator, and what it returns out.
func (c *functionCall) run(in io.Reader, out io.Writer) error {
	input, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	if c.runLocal != nil {
		return c.runHere(input, out)
	}
	return c.send(input, out)
}

// runHere runs the function on this machine.
func (c *functionCall) runHere(input []byte, out io.Writer) error {
	start := time.Now()
	output, err := c.runLocal(input)
	c.step.Duration = time.Since(start)
	if err != nil {
		c.err = err
		return err
	}
	if rs, err := resourcelist.Results(output); err == nil {
		c.step.Results = rs
	}
	_, err = out.Write(output)
	return err
}

// send has the evaluator run the function.
func (c *functionCall) send(input []byte, out io.Writer) error {
	start := time.Now()
	resp, err := c.ev.EvaluateFunction(c.ctx, &pb.EvaluateFunctionRequest{Image: c.image, ResourceList: input})
	c.step.Duration = time.Since(start)
	if err != nil {
		c.err = err
		return err
	}
	c.step.Stderr = string(resp.GetLog())
	rl, err := resourcelist.Parse(resp.GetResourceList())
	if err != nil {
		c.err = err
		return err
	}
	c.step.Results = rl.Results
	_, err = out.Write(resp.GetResourceList())
	return err
}

// failed says whether the call of f failed, given the pipeline's error,
// and records how in c.step; err is for a failure of the call itself, not
// of the function.
func (c *functionCall) failed(f Function, pipeErr error) (failed bool, err error) {
	step, callErr := c.step, c.err
	var exitErr *ExecExitError
	switch {
	case errors.As(callErr, &exitErr):
		// The exec function failed: kpt keeps its exit code and stderr,
		// and the results it printed.
		step.ExitCode, step.Stderr = exitErr.ExitCode, string(exitErr.Stderr)
		if rs, err := resourcelist.Results(exitErr.Stdout); err == nil {
			step.Results = rs
		}
		return true, nil
	case callErr != nil && f.Exec != "":
		step.ExitCode = 1
		return true, fmt.Errorf("%s: %w", f.Exec, callErr)
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
		return true, nil
	case callErr != nil:
		// The call failed (no such function, the runner unreachable,
		// ...): kpt records the function as failed, exit code 1.
		step.ExitCode = 1
		return true, fmt.Errorf("%s: %w", f.Image, callErr)
	case pipeErr != nil:
		// What the function returned could not be read back.
		step.ExitCode = 1
		return true, fmt.Errorf("%s: %w", step.Name(), pipeErr)
	}
	return false, nil
}

// checkOutput gives a resource the function added to pkg (when not empty)
// and runs kpt's checks of the output of step's function.
func checkOutput(out []*yaml.RNode, pkg string, step *StepResult) error {
	for _, o := range out {
		if pkg != "" && o.GetAnnotations()[packagePathAnnotation] == "" {
			if err := o.PipeE(yaml.SetAnnotation(packagePathAnnotation, pkg)); err != nil {
				return err
			}
		}
	}
	if err := checkPaths(out); err != nil {
		return fmt.Errorf("%s: %w", step.Name(), err)
	}
	if err := areKRM(out); err != nil {
		return fmt.Errorf("%s: output resource list must contain only KRM resources: %w", step.Name(), err)
	}
	return nil
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
