// Package searchreplace is fnrunner's own implementation of the KRM function
// catalog's search-replace function, written to what search-replace's code
// does at github.com/kptdev/krm-functions-catalog commit
// 76fe3817f9496724ca04414d136917a9926e5e40 (2025-06-25), the catalog version
// fnrunner's KRM corpus was taken from, where its code and its README
// disagree. That is the code of release v0.2.0 (tag go/search-replace/v0.2.0),
// the version fnrunner claims, which ran on kyaml v0.10.21: a resource's file
// path is its legacy config.kubernetes.io/path annotation alone, and a
// failure's log is its error twice, as v0.2.0's framework and then its main
// printed it (exitlog.PrintedTwice).
//
// The functionConfig is a ConfigMap (the function reads the data of any
// kind) whose keys are matchers and mutators:
//
//   - by-value: the field's value is exactly this;
//   - by-value-regex: this RE2 expression matches the field's value,
//     anywhere in it (add ^ and $ to match whole values);
//   - by-path: the field's path matches this expression: elements separated
//     by ".", list elements as name[index], "*" for any one element or index,
//     "**" for any number of elements;
//   - by-file-path: only resources from files matching this glob (relative,
//     slash-separated; "**" for any number of directories);
//   - put-value: set matching fields to this value (the whole value);
//   - put-comment: set this line comment on matching fields.
//
// Matchers are ANDed; by-value and by-value-regex exclude each other, and a
// field matches only if at least one of by-value, by-value-regex and by-path
// is given. Both mutators apply when both are given; ${N} in them stands for
// capture group N of by-value-regex. When put-value comes with an absolute
// by-path (no wildcard, no list index) and no value matcher, the value is
// put at that path on every resource, created where missing, and
// put-comment is ignored. When put-comment comes with by-path, the keys of
// the non-empty list fields by-path matches get the comment too, as it is.
//
// Every field is searched, kpt's own annotations (config.kubernetes.io/path,
// index, internal.config.kubernetes.io/*) included; none is added.
//
// Results: one per reported field, without severity, "Matched field value
// %q" or, with a mutator, "Mutated field value to %q", with the field path
// and the file path (fields of a resource without a path annotation are
// changed but not reported); "no matches" when nothing was reported; a bad
// config or a failed mutation is one error result, "failed to perform
// search-replace operation: %q", and no resource changes.
//
// Limits (the function runs in the binary-runner's process): by-path of
// more than 64 elements, by-value-regex of more than 4 KiB or 1000 compiled
// instructions, by-file-path of more than 1 KiB or 64 alternatives, and a
// run that would report or write more than its input warrants (see budget)
// fail with an error wrapping ErrTooLarge.
package searchreplace

import (
	"fmt"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fnrunner/fnrunner/functions/internal/exitlog"
	"github.com/fnrunner/fnrunner/functions/internal/treesize"
)

// Run is the search-replace function as a fn.ResourceListProcessorFunc. It
// returns false (the function failed) when the functionConfig is invalid or
// a mutation fails; the reason is in rl.Results, rl.Items are unchanged,
// and the error it returns says v0.2.0's log (exitlog.PrintedTwice).
func Run(rl *fn.ResourceList) (bool, error) {
	cfg, err := ConfigFrom(rl.FunctionConfig)
	if err == nil {
		var matches []Match
		if matches, err = Search(rl.Items, cfg); err == nil {
			rl.Results = append(rl.Results, results(matches, cfg)...)
			return true, nil
		}
	}
	rl.Results = append(rl.Results, &fn.Result{
		Message:  fmt.Sprintf("failed to perform search-replace operation: %q", err.Error()),
		Severity: fn.Error,
	})
	// v0.2.0's framework printed the error, and its main printed it again.
	return false, exitlog.PrintedTwice(err)
}

// Search runs cfg on items and returns the fields it reports. Items are
// replaced by their updated copies only when every resource succeeded.
func Search(items fn.KubeObjects, cfg Config) ([]Match, error) {
	s, err := compile(cfg)
	if err != nil {
		return nil, err
	}
	var matches []Match
	nodes := make([]*yaml.RNode, len(items))
	input := 0
	for i, obj := range items {
		nodes[i] = obj.CopyToResourceNode()
		input += treesize.Bytes(nodes[i].YNode())
	}
	b := newBudget(input)
	for _, node := range nodes {
		m, _, err := s.search(node, b)
		if err != nil {
			return nil, err
		}
		matches = append(matches, m...)
	}
	// The walk worked on copies; they replace the items.
	for i := range items {
		items[i] = fn.MoveToKubeObject(nodes[i])
	}
	return matches, nil
}

// results turns matches into the function's results.
func results(matches []Match, cfg Config) fn.Results {
	if len(matches) == 0 {
		return fn.Results{{Message: "no matches"}}
	}
	format := "Matched field value %q"
	if cfg.PutValue != "" || cfg.PutComment != "" {
		format = "Mutated field value to %q"
	}
	out := make(fn.Results, 0, len(matches))
	for _, m := range matches {
		r := &fn.Result{
			Message: fmt.Sprintf(format, m.Value),
			Field:   &fn.Field{Path: m.FieldPath},
		}
		if m.FilePath != "" {
			r.File = &fn.File{Path: m.FilePath}
		}
		out = append(out, r)
	}
	return out
}
