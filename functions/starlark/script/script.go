// Package script runs the catalog's starlark function (v0.5.5: a
// StarlarkRun or ConfigMap functionConfig, its source run over the
// ResourceList as ctx.resource_list) with the bounds the catalog's own
// entry point lacks: a step limit, a call-depth limit, an http module that
// reaches only the allowed hosts, and an empty ctx.environment. Everything
// else is the catalog's: its config parsing, its wrapping of the
// resources, its starlark dialect (set, while, top-level control, global
// reassignment and recursion on) and its library modules.
package script

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	catalog "github.com/kptdev/krm-functions-catalog/functions/go/starlark/starlark"
	kyamlstarlark "github.com/kptdev/krm-functions-catalog/functions/go/starlark/third_party/sigs.k8s.io/kustomize/kyaml/fn/runtime/starlark"
	"github.com/kptdev/krm-functions-sdk/go/fn"
	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
	"go.starlark.net/syntax"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fnrunner/fnrunner/functions/starlark/bounds"
	"github.com/qri-io/starlib/util"
)

// ErrHostNotAllowed is a request to a host --allowed-hosts does not name.
var ErrHostNotAllowed = errors.New("host not allowed (the runner's --starlark-allowed-hosts)")

// stepChunk is how often, in steps, the depth and step limits are checked.
const stepChunk = 1000

// Process returns the starlark function bounded by b, as a ResourceList
// processor. A failing script, as in the catalog, ends in one error result.
func Process(b bounds.Bounds) fn.ResourceListProcessorFunc {
	return func(rl *fn.ResourceList) (bool, error) {
		if err := run(b, rl); err != nil {
			rl.Results = []*fn.Result{{Message: err.Error(), Severity: fn.Error}}
			return false, nil
		}
		return true, nil
	}
}

func run(b bounds.Bounds, rl *fn.ResourceList) error {
	sr := &catalog.StarlarkRun{}
	if err := sr.Config(rl.FunctionConfig); err != nil {
		return err
	}
	fc, err := yaml.Parse(rl.FunctionConfig.String())
	if err != nil {
		return err
	}
	nodes := make([]*yaml.RNode, 0, len(rl.Items))
	for _, o := range rl.Items {
		n, err := yaml.Parse(o.String())
		if err != nil {
			return err
		}
		nodes = append(nodes, n)
	}
	in, err := kyamlstarlark.WrapResources(nodes, fc)
	if err != nil {
		return err
	}
	m, err := in.Map()
	if err != nil {
		return err
	}
	value, err := util.Marshal(m)
	if err != nil {
		return err
	}
	if err := execute(b, sr.Name, sr.Source, value); err != nil {
		return err
	}
	// The script may have left a value that holds itself, or nests deeper
	// than the conversion's recursion can go (a fatal stack overflow).
	if err := checkShape(value); err != nil {
		return err
	}
	out, err := util.Unmarshal(value)
	if err != nil {
		return err
	}
	text, err := yaml.Marshal(out)
	if err != nil {
		return err
	}
	outRL, err := yaml.Parse(string(text))
	if err != nil {
		return err
	}
	outNodes, _, err := kyamlstarlark.UnwrapResources(outRL)
	if err != nil {
		return err
	}
	items := make(fn.KubeObjects, 0, len(outNodes))
	for _, n := range outNodes {
		o, err := fn.ParseKubeObject([]byte(n.MustString()))
		if err != nil {
			return err
		}
		items = append(items, o)
	}
	rl.Items = items
	return nil
}

// The ResourceList a script leaves is bounded before it is converted:
// maxNesting levels (far beyond any Kubernetes object, well within the Go
// stack that the conversion's recursion uses) and maxValues values in all
// (a list that holds another many times over expands on conversion).
const (
	maxNesting = 1000
	maxValues  = 10_000_000
)

// errShape is a ResourceList too deep, too large once expanded, or holding
// itself.
var errShape = errors.New("the script's ResourceList holds itself, nests deeper than 1000 levels or expands to more than 10 million values")

// checkShape walks v as util.Unmarshal will, failing with errShape before
// that could overflow the stack or never end.
func checkShape(v starlark.Value) error {
	w := shapeWalk{onPath: map[starlark.Value]bool{}, budget: maxValues}
	return w.walk(v, maxNesting)
}

type shapeWalk struct {
	onPath map[starlark.Value]bool
	budget int
}

func (w *shapeWalk) walk(v starlark.Value, depth int) error {
	w.budget--
	if depth == 0 || w.budget < 0 {
		return errShape
	}
	var children []starlark.Value
	switch x := v.(type) {
	case *starlark.Dict:
		for _, kv := range x.Items() {
			children = append(children, kv[0], kv[1])
		}
	case *starlark.List:
		for i := 0; i < x.Len(); i++ {
			children = append(children, x.Index(i))
		}
	case starlark.Tuple:
		children = x
	case *starlark.Set:
		iter := x.Iterate()
		var e starlark.Value
		for iter.Next(&e) {
			children = append(children, e)
		}
		iter.Done()
	case *starlarkstruct.Struct:
		for _, name := range x.AttrNames() {
			if a, err := x.Attr(name); err == nil {
				children = append(children, a)
			}
		}
	default:
		return nil
	}
	switch v.(type) {
	case *starlark.Dict, *starlark.List, *starlark.Set:
		if w.onPath[v] {
			return errShape
		}
		w.onPath[v] = true
		defer delete(w.onPath, v)
	}
	for _, c := range children {
		if err := w.walk(c, depth-1); err != nil {
			return err
		}
	}
	return nil
}

// dialect is the catalog's: it turns these on in go.starlark.net/resolve
// before every run.
func dialect() *syntax.FileOptions {
	return &syntax.FileOptions{Set: true, While: true, TopLevelControl: true, GlobalReassign: true, Recursion: true}
}

func execute(b bounds.Bounds, name, source string, resourceList starlark.Value) error {
	thread := &starlark.Thread{Name: name, Load: modules{http: client(b)}.load}
	// The limits are checked every stepChunk steps, on the thread itself.
	thread.SetMaxExecutionSteps(stepChunk)
	thread.OnMaxSteps = func(t *starlark.Thread) {
		switch {
		case b.MaxSteps > 0 && t.ExecutionSteps() >= b.MaxSteps:
			t.Cancel(fmt.Sprintf("too many steps: the script took more than %d (the runner's --starlark-max-steps)", b.MaxSteps))
		case b.MaxDepth > 0 && t.CallStackDepth() > b.MaxDepth:
			t.Cancel(fmt.Sprintf("call stack deeper than %d (the runner's --starlark-max-call-depth): unbounded recursion?", b.MaxDepth))
		default:
			t.SetMaxExecutionSteps(t.ExecutionSteps() + stepChunk)
		}
	}
	ctx := starlarkstruct.FromStringDict(starlarkstruct.Default, starlark.StringDict{
		"resource_list": resourceList,
		"open_api":      &kyamlstarlark.LazyInitializationOpenapi{},
		// The runner's environment is not the script's business.
		"environment": starlark.NewDict(0),
	})
	_, err := starlark.ExecFileOptions(dialect(), thread, name, source, starlark.StringDict{"ctx": ctx})
	return err
}

// client is the http module's client: it dials only the allowed hosts, by
// the name the script gave, through no proxy, and follows a redirect only
// to an allowed host (each connection is dialled here).
func client(b bounds.Bounds) *http.Client {
	dialer := &net.Dialer{Timeout: 30 * time.Second}
	return &http.Client{
		Timeout: 2 * time.Minute,
		Transport: &http.Transport{
			Proxy: nil,
			DialContext: func(ctx context.Context, network, address string) (net.Conn, error) {
				if !b.Permits(address) {
					return nil, fmt.Errorf("%w: %s", ErrHostNotAllowed, address)
				}
				return dialer.DialContext(ctx, network, address)
			},
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: time.Minute,
			ForceAttemptHTTP2:     true,
		},
	}
}
