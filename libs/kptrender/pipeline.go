// A package's pipeline: its mutators then its validators, step by step,
// each with its functionConfig.

package kptrender

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"sigs.k8s.io/kustomize/kyaml/kio/kioutil"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

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
