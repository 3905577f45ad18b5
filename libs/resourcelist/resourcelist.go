// Package resourcelist reads and checks KRM function ResourceLists
// (config.kubernetes.io/v1 ResourceList) and the structured results in them.
package resourcelist

import (
	"errors"
	"fmt"
	"strings"

	"sigs.k8s.io/kustomize/kyaml/fn/framework"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// Kind and the API versions a ResourceList may have.
const (
	Kind      = "ResourceList"
	APIGroup  = "config.kubernetes.io"
	V1        = APIGroup + "/v1"
	V1alpha1  = APIGroup + "/v1alpha1"
	itemsKey  = "items"
	resultKey = "results"
)

// ErrInvalid is wrapped by every error about input that is not a ResourceList.
var ErrInvalid = errors.New("invalid ResourceList")

// ResourceList is a parsed ResourceList.
type ResourceList struct {
	// Node is the whole document.
	Node *yaml.RNode
	// Items are the resources.
	Items []*yaml.RNode
	// FunctionConfig is the function's configuration, or nil.
	FunctionConfig *yaml.RNode
	// Results are the structured results, if any.
	Results framework.Results
}

// Parse reads one ResourceList. It fails with ErrInvalid for input that is
// not YAML, not a mapping, not of kind ResourceList, or whose items or
// results are malformed.
func Parse(data []byte) (*ResourceList, error) {
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil, fmt.Errorf("%w: empty input", ErrInvalid)
	}
	node, err := yaml.Parse(string(data))
	if err != nil {
		return nil, fmt.Errorf("%w: not YAML: %w", ErrInvalid, err)
	}
	if node.YNode().Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%w: the document is not a mapping", ErrInvalid)
	}
	if k := node.GetKind(); k != Kind {
		return nil, fmt.Errorf("%w: kind is %q, want %q", ErrInvalid, k, Kind)
	}
	if v := node.GetApiVersion(); v != V1 && v != V1alpha1 {
		return nil, fmt.Errorf("%w: apiVersion is %q, want %q", ErrInvalid, v, V1)
	}
	rl := &ResourceList{Node: node}
	if items := node.Field(itemsKey); items != nil && !yaml.IsYNodeNilOrEmpty(items.Value.YNode()) {
		if items.Value.YNode().Kind != yaml.SequenceNode {
			return nil, fmt.Errorf("%w: items is not a list", ErrInvalid)
		}
		rl.Items, err = items.Value.Elements()
		if err != nil {
			return nil, fmt.Errorf("%w: items: %w", ErrInvalid, err)
		}
		for i, it := range rl.Items {
			if it.YNode().Kind != yaml.MappingNode {
				return nil, fmt.Errorf("%w: items[%d] is not an object", ErrInvalid, i)
			}
		}
	}
	if fc := node.Field("functionConfig"); fc != nil && !yaml.IsYNodeNilOrEmpty(fc.Value.YNode()) {
		rl.FunctionConfig = fc.Value
	}
	rl.Results, err = decodeResults(node)
	if err != nil {
		return nil, err
	}
	return rl, nil
}

// Results reads only the structured results of a ResourceList; it is for
// output of a failed function, which may be partial.
func Results(data []byte) (framework.Results, error) {
	rl, err := Parse(data)
	if err != nil {
		return nil, err
	}
	return rl.Results, nil
}

// decodeResults reads results in the forms kpt reads (kpt
// v1.0.0-beta.61 parseStructuredResult): a list of results, or the legacy
// Go SDK's {items: [...]}; a legacy resourceRef.metadata's name and
// namespace and a field.suggestedValue are moved to where they are now.
func decodeResults(node *yaml.RNode) (framework.Results, error) {
	f := node.Field(resultKey)
	if f == nil || yaml.IsYNodeNilOrEmpty(f.Value.YNode()) {
		return nil, nil
	}
	list := f.Value
	if list.YNode().Kind == yaml.MappingNode {
		if items := list.Field(itemsKey); items != nil && !yaml.IsYNodeNilOrEmpty(items.Value.YNode()) {
			list = items.Value
		}
	}
	var results framework.Results
	if err := list.YNode().Decode(&results); err != nil {
		return nil, fmt.Errorf("%w: results: %w", ErrInvalid, err)
	}
	elems, err := list.Elements()
	if err != nil {
		return nil, fmt.Errorf("%w: results: %w", ErrInvalid, err)
	}
	for i, e := range elems {
		if i >= len(results) || results[i] == nil {
			continue
		}
		upliftLegacy(e, results[i])
	}
	return results, nil
}

// upliftLegacy moves what the legacy result form r was read from (e) puts
// elsewhere: resourceRef.metadata.name and .namespace, and
// field.suggestedValue (now field.proposedValue).
func upliftLegacy(e *yaml.RNode, r *framework.Result) {
	if md := e.Field("resourceRef"); md != nil {
		if meta := md.Value.Field("metadata"); meta != nil {
			if r.ResourceRef == nil {
				r.ResourceRef = &yaml.ResourceIdentifier{}
			}
			if n := meta.Value.Field("name"); n != nil {
				r.ResourceRef.Name = strings.TrimSpace(n.Value.YNode().Value)
			}
			if ns := meta.Value.Field("namespace"); ns != nil {
				if v := strings.TrimSpace(ns.Value.YNode().Value); v != "" && v != "''" {
					r.ResourceRef.Namespace = v
				}
			}
		}
	}
	if fld := e.Field("field"); fld != nil {
		if sv := fld.Value.Field("suggestedValue"); sv != nil {
			if r.Field == nil {
				r.Field = &framework.Field{}
			}
			r.Field.ProposedValue = sv.Value
		}
	}
}

// ErrorSummary is the messages of the error results, one per line, for a
// status message; "" when there are none.
func ErrorSummary(results framework.Results) string {
	var lines []string
	for _, r := range results {
		if r != nil && r.Severity == framework.Error {
			lines = append(lines, r.String())
		}
	}
	return strings.Join(lines, "\n")
}
