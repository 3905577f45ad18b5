// Package catalog lists the KRM catalog functions the binary-runner's go
// executor serves. Those whose work is bounded by their input are linked in
// and run in-process, each the function's own processor run exactly as its
// binary runs it (fn.Run, as fn.AsMain does); the others run as their
// binaries, each call in a process of its own, under the sandbox and the
// call's memory bound, killed at its deadline.
//
// In process, a call cannot be stopped (Go cannot stop a goroutine) and
// shares the runner's memory; so a function runs there only when its work
// is linear in its input, or checked against a budget computed from its
// input before it is done. set-namespace walks each resource once, a
// RoleBinding's subjects once each, and follows no alias (yaml.v3, which
// decodes its functionConfig, refuses excessive aliasing); fnrunner's own
// six functions spend budgets; apply-setters is checked against one (settersWork) before it
// runs. apply-replacements is not bounded by its input: one value copied
// into many targets turns 83 KB into a gigabyte, and its work can outlive
// the call. It runs out of process, where the call's memory bound and
// deadline end it.
package catalog

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/kptdev/krm-functions-catalog/functions/go/apply-setters/applysetters"
	setnamespace "github.com/kptdev/krm-functions-catalog/functions/go/set-namespace/transformer"
	"github.com/kptdev/krm-functions-sdk/go/fn"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fnrunner/fnrunner/services/binary-runner/functions/treesize"

	"github.com/fnrunner/fnrunner/services/binary-runner/functions/ensure-name-substring/ensurenamesubstring"
	"github.com/fnrunner/fnrunner/services/binary-runner/functions/search-replace/searchreplace"
	"github.com/fnrunner/fnrunner/services/binary-runner/functions/set-annotations/setannotations"
	"github.com/fnrunner/fnrunner/services/binary-runner/functions/set-image/setimage"
	"github.com/fnrunner/fnrunner/services/binary-runner/functions/set-labels/setlabels"
	"github.com/fnrunner/fnrunner/services/binary-runner/functions/upsert-resource/upsertresource"
)

// Functions returns the linked-in functions by ID (the catalog image name),
// with the catalog version each was built from.
func Functions() map[string]Function {
	return map[string]Function{
		"set-namespace":      {Version: "v0.4.5", Process: setnamespace.Run},
		"apply-setters":      {Version: "v0.2.2", Process: ApplySetters},
		"apply-replacements": {Version: "v0.1.5", Binary: "apply-replacements"},
		// fnrunner's own implementations (no module of theirs is served):
		// the catalog's behaviour at the corpus's commit, answering the
		// binary tag porch ships (see each package).
		"ensure-name-substring": {Version: "v0.1.1", Process: ensurenamesubstring.Run},
		"search-replace":        {Version: "v0.2.1", Process: searchreplace.Run},
		"set-annotations":       {Version: "v0.1.5", Process: setannotations.Run},
		"set-image":             {Version: "v0.1.2", Process: setimage.Run},
		"set-labels":            {Version: "v0.2.2", Process: setlabels.Run},
		"upsert-resource":       {Version: "v0.2.1", Process: upsertresource.Run},
		// Scripts are written by users: one can end the Go runtime that
		// runs it (unbounded recursion overflows the stack, a fatal error,
		// not a panic), spin forever or write to fd 2. In a process of its
		// own, fnrunner's bounded build of it (functions/starlark), that
		// costs the call and nothing else.
		"starlark": {Version: "v0.5.5", Binary: "starlark", Script: true},
	}
}

// Function is one linked-in catalog function.
type Function struct {
	// Version of the catalog module it is built from.
	Version string
	// Process is its ResourceList processor, run in-process; nil when
	// Binary is set.
	Process fn.ResourceListProcessorFunc
	// Binary, when set, is the function's binary in the binary-runner's
	// functions directory, run in its own process as the binary executor
	// runs binaries.
	Binary string
	// Script says that Binary runs user scripts and takes the runner's
	// bounds for them (functions/starlark/bounds) as arguments.
	Script bool
}

// ApplySetters is apply-setters v0.2.2 on the current krm-functions-sdk. The
// catalog's own main for v0.2.2 is written against kyaml v0.10's framework
// and no longer compiles with the kyaml the other functions need; its
// applysetters package does, and this reproduces what that main reports:
// one result per field set, "no matches for input setter(s)" when nothing
// matched, and an error result on failure.
func ApplySetters(rl *fn.ResourceList) (bool, error) {
	fail := func(err error) (bool, error) {
		rl.Results = append(rl.Results, &fn.Result{
			Message:  fmt.Sprintf("failed to apply setters: %v", err),
			Severity: fn.Error,
		})
		return false, nil
	}
	nodes := make([]*yaml.RNode, 0, len(rl.Items))
	for _, o := range rl.Items {
		n, err := yaml.Parse(o.String())
		if err != nil {
			return fail(err)
		}
		nodes = append(nodes, n)
	}
	var config *yaml.RNode
	if rl.FunctionConfig != nil {
		n, err := yaml.Parse(rl.FunctionConfig.String())
		if err != nil {
			return fail(err)
		}
		config = n
	}
	var setters applysetters.ApplySetters
	applysetters.Decode(config, &setters)
	if err := checkSetters(nodes, setters.Setters); err != nil {
		return fail(err)
	}
	out, err := setters.Filter(nodes)
	if err != nil {
		return fail(err)
	}
	items := make(fn.KubeObjects, 0, len(out))
	for _, n := range out {
		o, err := fn.ParseKubeObject([]byte(n.MustString()))
		if err != nil {
			return fail(err)
		}
		items = append(items, o)
	}
	rl.Items = items
	if len(setters.Results) == 0 {
		rl.Results = append(rl.Results, &fn.Result{Message: "no matches for input setter(s)"})
		return true, nil
	}
	for _, r := range setters.Results {
		rl.Results = append(rl.Results, &fn.Result{
			Message: fmt.Sprintf("set field value to %q", r.Value),
			Field:   &fn.Field{Path: r.FieldPath},
			File:    &fn.File{Path: r.FilePath},
		})
	}
	return true, nil
}

// ErrTooMuchWork is a run refused before it starts: what it would do is
// more than its input warrants.
var ErrTooMuchWork = errors.New("too much work for the input")

// settersBudget is the work apply-setters may do, in bytes handled, beyond
// settersWorkPerByte for each byte of its input's text; settersGrowth is
// what it may add to its input.
const (
	settersBudget      = 256 << 20
	settersWorkPerByte = 64
	settersGrowth      = 8 << 20
)

// checkSetters computes, before apply-setters runs, what it would do to
// nodes, and refuses a run that would do more than its input warrants
// (ErrTooMuchWork). The function goes through every field building its
// path; for each one tagged "# kpt-set: pattern" it substitutes each setter
// in turn into the pattern (a value may name another setter, so the
// pattern can double with each one) and matches the pattern, as a regular
// expression, against the field's value. Each of those is counted here at
// its length, and every substitution is made here, its length known before
// it is made, so that this check is bounded by the budget itself.
func checkSetters(nodes []*yaml.RNode, setters []applysetters.Setter) error {
	size := 0
	for _, n := range nodes {
		size += treesize.TextBytes(n.YNode())
	}
	c := &settersCheck{setters: setters, limit: settersBudget + settersWorkPerByte*size, growthLimit: settersGrowth + size}
	for _, n := range nodes {
		if err := c.walk(n.YNode(), 0); err != nil {
			return err
		}
	}
	return nil
}

type settersCheck struct {
	setters             []applysetters.Setter
	work, limit         int
	growth, growthLimit int
}

func (c *settersCheck) spend(n int) error {
	c.work += n
	if c.work > c.limit {
		return fmt.Errorf("%w: setting would take more than %d bytes of work (%d MiB and %d for each byte of the input)", ErrTooMuchWork, c.limit, settersBudget>>20, settersWorkPerByte)
	}
	return nil
}

// walk goes through n as the function does (its path is pathLen long).
func (c *settersCheck) walk(n *yaml.Node, pathLen int) error {
	if err := c.spend(pathLen + 1); err != nil {
		return err
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, child := range n.Content {
			if err := c.walk(child, pathLen); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, value := n.Content[i], n.Content[i+1]
			if value.Kind == yaml.SequenceNode {
				if err := c.tagged(key.LineComment+value.LineComment, ""); err != nil {
					return err
				}
			}
			if err := c.walk(value, pathLen+1+len(key.Value)); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for i, child := range n.Content {
			if err := c.walk(child, pathLen+2+len(strconv.Itoa(i))); err != nil {
				return err
			}
		}
	case yaml.ScalarNode:
		return c.tagged(n.LineComment, n.Value)
	}
	return nil
}

// tagged counts the work on one field with comment, its current value
// being value: the setters substituted one after another, then the
// pattern matched against the value.
func (c *settersCheck) tagged(comment, value string) error {
	pattern, ok := strings.CutPrefix(comment, applysetters.SetterCommentIdentifier)
	if !ok {
		return nil
	}
	pattern = strings.TrimSpace(pattern)
	if err := c.spend(len(c.setters) * len(pattern)); err != nil {
		return err
	}
	original := len(pattern)
	for _, s := range c.setters {
		name := "${" + s.Name + "}"
		if err := c.spend(len(pattern)); err != nil {
			return err
		}
		n := strings.Count(pattern, name)
		if n == 0 {
			continue
		}
		grown := len(pattern) + n*(len(s.Value)-len(name))
		if err := c.spend(grown); err != nil {
			return err
		}
		if c.growth+grown > c.growthLimit {
			return fmt.Errorf("%w: setters would add more than %d bytes (%d MiB and the input's size)", ErrTooMuchWork, c.growthLimit, settersGrowth>>20)
		}
		pattern = strings.ReplaceAll(pattern, name, s.Value)
	}
	c.growth += len(pattern)
	return c.spend(original*max(len(value), 1) + len(value))
}
