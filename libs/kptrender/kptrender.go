// Package kptrender renders a kpt package the way `kpt fn render` does, with
// every function call going to a FunctionEvaluator (the gateway): it reads
// the package (honouring .krmignore), runs the Kptfile's mutators and then
// its validators, writes the package back, and reports a kpt
// FunctionResultList.
//
// Supported: mutators and validators with image plus configMap or
// configPath. Not supported (reported as errors): exec functions,
// selectors/exclude, subpackages.
package kptrender

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/kustomize/kyaml/fn/framework"
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
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Pipeline struct {
		Mutators   []Function `yaml:"mutators"`
		Validators []Function `yaml:"validators"`
	} `yaml:"pipeline"`
}

// Function is one step of a Kptfile pipeline.
type Function struct {
	Image      string            `yaml:"image"`
	Exec       string            `yaml:"exec"`
	ConfigMap  map[string]string `yaml:"configMap"`
	ConfigPath string            `yaml:"configPath"`
	Name       string            `yaml:"name"`
	Selectors  []any             `yaml:"selectors"`
	Exclude    []any             `yaml:"exclude"`
}

// ResultList is kpt's FunctionResultList.
type ResultList struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	ExitCode int          `yaml:"exitCode"`
	Items    []StepResult `yaml:"items"`
}

// StepResult is one function's outcome.
type StepResult struct {
	Image    string            `yaml:"image,omitempty"`
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
}

// Render runs dir's pipeline and writes the package back when every
// function succeeded. The ResultList is returned even when a function
// failed (ExitCode 1); err is for problems of the package or of the call
// itself (unreachable gateway, unknown image, ...).
func Render(ctx context.Context, dir string, ev Evaluator, opts Options) (*ResultList, error) {
	kf, err := ReadKptfile(dir)
	if err != nil {
		return nil, err
	}
	rw := &kio.LocalPackageReadWriter{
		PackagePath:       dir,
		PreserveSeqIndent: true,
	}
	items, err := rw.Read()
	if err != nil {
		return nil, fmt.Errorf("reading package %s: %w", dir, err)
	}
	list := &ResultList{APIVersion: "kpt.dev/v1", Kind: "FunctionResultList"}
	list.Metadata.Name = "fnresults"

	steps := append(append([]Function{}, kf.Pipeline.Mutators...), kf.Pipeline.Validators...)
	for i, f := range steps {
		mutator := i < len(kf.Pipeline.Mutators)
		out, step, err := runStep(ctx, ev, f, items, opts)
		if err != nil {
			return list, err
		}
		list.Items = append(list.Items, *step)
		if opts.Progress != nil {
			verdict := "ok"
			if step.ExitCode != 0 {
				verdict = fmt.Sprintf("failed (exit code %d)", step.ExitCode)
			}
			fmt.Fprintf(opts.Progress, "[%d/%d] %s: %s in %v, %d results\n", i+1, len(steps), f.Image, verdict, step.Duration.Round(time.Millisecond), len(step.Results))
		}
		if step.ExitCode != 0 {
			list.ExitCode = 1
			return list, nil
		}
		if mutator {
			items = out
		}
	}
	if err := rw.Write(items); err != nil {
		return list, fmt.Errorf("writing package %s: %w", dir, err)
	}
	return list, nil
}

// ReadKptfile reads dir/Kptfile.
func ReadKptfile(dir string) (*Kptfile, error) {
	data, err := os.ReadFile(filepath.Join(dir, "Kptfile"))
	if err != nil {
		return nil, fmt.Errorf("reading Kptfile: %w", err)
	}
	var kf Kptfile
	if err := yaml.Unmarshal(data, &kf); err != nil {
		return nil, fmt.Errorf("parsing Kptfile: %w", err)
	}
	return &kf, nil
}

func runStep(ctx context.Context, ev Evaluator, f Function, items []*yaml.RNode, opts Options) ([]*yaml.RNode, *StepResult, error) {
	switch {
	case f.Exec != "":
		return nil, nil, fmt.Errorf("exec functions are not supported (%s): fnrunner runs images", f.Exec)
	case f.Image == "":
		return nil, nil, errors.New("a pipeline function has no image")
	case len(f.Selectors) > 0 || len(f.Exclude) > 0:
		return nil, nil, fmt.Errorf("%s: selectors and exclude are not supported", f.Image)
	}
	config, err := functionConfig(f, items)
	if err != nil {
		return nil, nil, err
	}
	input, err := BuildResourceList(items, config)
	if err != nil {
		return nil, nil, err
	}
	image := f.Image
	if opts.MapImage != nil {
		image = opts.MapImage(image)
	}
	step := &StepResult{Image: f.Image}
	start := time.Now()
	resp, callErr := ev.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: image, ResourceList: input})
	step.Duration = time.Since(start)
	if callErr != nil {
		if status.Code(callErr) != codes.Internal {
			return nil, nil, fmt.Errorf("%s: %w", f.Image, callErr)
		}
		// The function failed: its results and stderr are in the details.
		step.ExitCode = 1
		if d, ok := fnresult.FailureDetails(callErr); ok {
			step.Stderr = string(d.GetLog())
			if rl, err := resourcelist.Parse(d.GetResourceList()); err == nil {
				step.Results = rl.Results
			}
		} else {
			step.Stderr = status.Convert(callErr).Message()
		}
		return nil, step, nil
	}
	step.Stderr = string(resp.GetLog())
	rl, err := resourcelist.Parse(resp.GetResourceList())
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", f.Image, err)
	}
	step.Results = rl.Results
	return rl.Items, step, nil
}

// functionConfig builds a step's functionConfig: the package resource at
// configPath, or a ConfigMap named function-input holding configMap.
func functionConfig(f Function, items []*yaml.RNode) (*yaml.RNode, error) {
	if f.ConfigPath != "" {
		want := filepath.Clean(f.ConfigPath)
		for _, it := range items {
			p, _, err := kioutil.GetFileAnnotations(it)
			if err == nil && filepath.Clean(p) == want {
				return it.Copy(), nil
			}
		}
		return nil, fmt.Errorf("%s: configPath %q is not a resource of the package", f.Image, f.ConfigPath)
	}
	if f.ConfigMap == nil {
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
	if err := cm.PipeE(yaml.SetAnnotation("config.kubernetes.io/local-config", "true")); err != nil {
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
