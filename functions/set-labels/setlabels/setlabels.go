// Package setlabels is fnrunner's own implementation of the kpt function
// catalog's set-labels function, with the behaviour the catalog documents
// and ships at commit 76fe3817f9496724ca04414d136917a9926e5e40
// (2025-06-25), the version fnrunner's test corpus was taken from.
//
// set-labels adds labels to every resource that is not local config
// (annotation config.kubernetes.io/local-config), replacing a label of the
// same key. Besides metadata.labels it updates the label fields that the
// catalog knows for built-in kinds: selectors, pod templates, job templates,
// volume claim templates, topology spread constraints and network policy
// peers (see setObject). Labels are set in the order of their keys.
//
// The functionConfig is either a ConfigMap, whose data are the labels, or a
// resource of kind SetLabels in group fn.kpt.dev with a labels field:
//
//	apiVersion: fn.kpt.dev/v1alpha1
//	kind: SetLabels
//	metadata:
//	  name: my-labels
//	labels:
//	  color: orange
//
// Results: "set N labels in total" (info), where N counts every label of
// the config at every label field visited, set or not; "no input resources"
// (info) when there is nothing to label; a warning when the config has no
// labels; and one error result per resource whose fields could not be
// updated. Without a functionConfig, or with kpt's empty placeholder (a
// ConfigMap named function-input without data), the function fails, with
// no other result than "`FunctionConfig` is not given", unless there is
// nothing to label.
//
// Limits (the function runs in the binary-runner's process): a config of
// more than 1024 labels, or a run that would set more than its input warrants
// (see budget), fails with an error result wrapping ErrTooLarge.
package setlabels

import (
	"errors"
	"fmt"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fnrunner/fnrunner/functions/internal/budget"
)

// Kind is the kind of set-labels' own functionConfig, in group
// fn.kpt.dev (fn.KptFunctionGroup), any version.
const Kind = "SetLabels"

// placeholderName is the name of the ConfigMap kpt passes as
// functionConfig when it is given key/value arguments, or none.
const placeholderName = "function-input"

// SetLabels is the functionConfig of kind SetLabels.
type SetLabels struct {
	// Labels are the labels to set.
	Labels map[string]string `json:"labels,omitempty" yaml:"labels,omitempty"`
}

var _ fn.ResourceListProcessorFunc = Run

// Run sets the labels of rl's functionConfig on rl's items. It reports
// what it did, and what went wrong, as results in rl; it returns false
// when the function failed and never returns an error.
func Run(rl *fn.ResourceList) (bool, error) {
	input := inputBytes(rl)
	config := rl.FunctionConfig
	if config == nil {
		config = fn.NewEmptyKubeObject()
	}
	labels, err := configure(config, &rl.Results)
	if err != nil {
		rl.Results.ErrorE(err)
		return false, nil
	}
	var results fn.Results
	ok := transform(config, rl.Items, labels, newBudget(input), &results)
	rl.Results = append(rl.Results, results...)
	return ok, nil
}

// configure reads the labels from config. An absent config, or kpt's
// placeholder ConfigMap with empty data, gives no labels and an info
// result.
func configure(config *fn.KubeObject, results *fn.Results) (map[string]string, error) {
	if config.IsEmpty() || fn.EmptyFunctionConfig(config) {
		results.Infof("`FunctionConfig` is not given")
		return nil, nil
	}
	labels, err := labelsOf(config)
	if len(labels) > maxLabels {
		return nil, fmt.Errorf("%w: %d labels, more than %d", ErrTooLarge, len(labels), maxLabels)
	}
	return labels, err
}

// labelsOf reads the labels from a functionConfig.
func labelsOf(config *fn.KubeObject) (map[string]string, error) {
	switch config.GroupKind() {
	case schema.GroupKind{Kind: "ConfigMap"}:
		data, _, err := config.NestedStringMap("data")
		if data == nil {
			return nil, err
		}
		return data, nil
	case schema.GroupKind{Group: fn.KptFunctionGroup, Kind: Kind}:
		var c SetLabels
		if err := config.As(&c); err != nil {
			return nil, err
		}
		return c.Labels, nil
	default:
		return nil, fmt.Errorf("unknown FunctionConfig `%v`, expect `%v.%v` or `ConfigMap.v1`",
			config.GroupKind(), Kind, fn.KptFunctionGroup)
	}
}

// transform sets labels on the items that are not local config and says
// whether it succeeded. Once the budget is spent, it stops there.
func transform(config *fn.KubeObject, items fn.KubeObjects, labels map[string]string, b *budget.Budget, results *fn.Results) bool {
	objects := items.WhereNot(fn.IsLocalConfig)
	if len(objects) == 0 || objects[0] == nil {
		results.Infof("no input resources")
		return true
	}
	if isPlaceholder(config) {
		// Nothing to set, and nothing said: kpt reports the failure.
		return false
	}
	if len(labels) == 0 {
		results.Warningf("no `labels` arguments are given in FunctionConfig")
		return true
	}
	s := newSetter(labels, b)
	for _, o := range objects {
		err := s.setObject(o)
		s.settle(o)
		if err != nil {
			results.ErrorE(err)
			if errors.Is(err, ErrTooLarge) {
				return false
			}
		}
	}
	results.Infof("set %d labels in total", s.count)
	return results.ExitCode() != 1
}

// isPlaceholder says whether config is what kpt passes when the user gave
// no functionConfig: an empty object, or a ConfigMap named function-input
// without data.
func isPlaceholder(config *fn.KubeObject) bool {
	if config.GetKind() == "ConfigMap" && config.GetName() == placeholderName {
		data, _, _ := config.NestedStringMap("data")
		return len(data) == 0
	}
	return config.GetKind() == "" && config.GetName() == ""
}
