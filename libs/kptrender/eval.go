// kpt fn eval: one function on a whole package.

package kptrender

import (
	"context"
	"fmt"
	"strings"

	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

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
