// Package setannotations is fnrunner's own implementation of the kpt
// function catalog's set-annotations function: Run with the behaviour the
// catalog documents and ships at commit
// 76fe3817f9496724ca04414d136917a9926e5e40 (2025-06-25), the version
// fnrunner's test corpus was taken from; RunV014 as release v0.1.4 (see
// v014 for what differs).
//
// set-annotations adds annotations to every resource, local config
// included, replacing an annotation of the same key. Like the catalog it
// uses kustomize's annotations filter: the annotations go to
// metadata.annotations and to the pod and job templates of built-in kinds
// (kustomize's commonAnnotations field specs, see DefaultFieldSpecs), plus
// any field specs the config adds. Resources are read as kustomize reads
// them (kustomize's resmap): each must have a kind and a metadata.name, no
// two may have the same kustomize resource id (group, version, kind,
// namespace, name), and empty ones are dropped.
//
// The functionConfig is either a ConfigMap (apiVersion v1), whose data are
// the annotations, or a resource of apiVersion fn.kpt.dev/v1alpha1 and kind
// SetAnnotations (or its old name SetAnnotationConfig):
//
//	apiVersion: fn.kpt.dev/v1alpha1
//	kind: SetAnnotations
//	metadata:
//	  name: my-annotations
//	annotations:
//	  color: orange
//	additionalAnnotationFields:
//	  - kind: MyResource
//	    group: dev.example.com
//	    path: spec/selector/annotations
//	    create: true
//
// Results: one per annotations field set, per file and index of the
// resource (from kpt's path and index annotations), with message
// `set annotations: {"key":"value",...}`, the field path and the file, no
// severity, sorted by file; or a single "no annotations applied" when
// nothing was set. A bad config or a bad resource fails the function with
// a single error result.
//
// Limits (the function runs in the binary-runner's process): a config of
// more than 1024 annotations or a SetAnnotations of more than 256 KiB, or a
// run that would set more than its input warrants (see budget), fails
// with an error wrapping ErrTooLarge.
package setannotations

import (
	"errors"
	"fmt"
	"slices"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/resid"
	"sigs.k8s.io/kustomize/kyaml/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/fnrunner/fnrunner/functions/internal/shape"
	"github.com/fnrunner/fnrunner/functions/internal/treesize"
)

const (
	// APIVersion is the apiVersion of set-annotations' own
	// functionConfig.
	APIVersion = fn.KptFunctionAPIVersion
	// Kind is the kind of set-annotations' own functionConfig.
	Kind = "SetAnnotations"
	// LegacyKind is the kind's older name, still accepted.
	LegacyKind = "SetAnnotationConfig"
)

// SetAnnotations is the functionConfig of kind SetAnnotations.
type SetAnnotations struct {
	// Annotations are the annotations to set.
	Annotations map[string]string `json:"annotations,omitempty" yaml:"annotations,omitempty"`
	// FieldSpecs is the deprecated name of AdditionalAnnotationFields.
	FieldSpecs []types.FieldSpec `json:"fieldSpecs,omitempty" yaml:"fieldSpecs,omitempty"`
	// AdditionalAnnotationFields are fields, besides DefaultFieldSpecs,
	// that get the annotations: a kustomize path (fields separated by
	// "/"), optionally for one group, version or kind only, created when
	// missing if create is true.
	AdditionalAnnotationFields []types.FieldSpec `json:"additionalAnnotationFields,omitempty" yaml:"additionalAnnotationFields,omitempty"`
}

var (
	_ fn.ResourceListProcessorFunc = Run
	_ fn.ResourceListProcessorFunc = RunV014
)

// Run sets the annotations of rl's functionConfig on rl's items, as the
// catalog's function did at commit 76fe381. It reports what it did, or
// what went wrong, as results in rl; it returns false when the function
// failed and never returns an error.
func Run(rl *fn.ResourceList) (bool, error) { return run(rl, unstable()) }

// RunV014 sets the annotations as set-annotations v0.1.4 does: no result
// on success, a failure's error result in place of rl's results, and
// items without a kind or a name annotated as the rest. A failure also
// returns an error that says v0.1.4's log (see exitlog.ErrorResult).
func RunV014(rl *fn.ResourceList) (bool, error) { return run(rl, v014()) }

func run(rl *fn.ResourceList, rel release) (bool, error) {
	config, err := configure(rl.FunctionConfig, rel)
	if err != nil {
		return false, rel.fail(rl, fmt.Errorf("failed to configure function: %w", err), false)
	}
	if err := shape.CheckMetadata(rl.Items); err != nil {
		return false, rel.fail(rl, fmt.Errorf("failed to run function: %w", err), true)
	}
	items, results, err := annotate(rl.Items, config.Annotations, config.fieldSpecs(), rel)
	if err != nil {
		return false, rel.fail(rl, fmt.Errorf("failed to run function: %w", err), true)
	}
	rl.Items = items
	rl.Results = append(rl.Results, results...)
	return true, nil
}

// configure reads the functionConfig; it must give at least one
// annotation.
func configure(o *fn.KubeObject, rel release) (*SetAnnotations, error) {
	var config *SetAnnotations
	rn := toRNode(o)
	switch apiVersion, kind := typeOf(rn); {
	case apiVersion == "v1" && kind == "ConfigMap":
		config = &SetAnnotations{Annotations: rn.GetDataMap()}
	case apiVersion == APIVersion && (kind == Kind || kind == LegacyKind):
		// Read through YAML text and JSON, at a cost of hundreds of
		// bytes for each of its bytes.
		if size := treesize.TextBytes(rn.YNode()); size > maxConfigBytes {
			return nil, fmt.Errorf("%w: a %s of about %d bytes, more than %d", ErrTooLarge, kind, size, maxConfigBytes)
		}
		s, err := rn.String()
		if err != nil {
			return nil, fmt.Errorf("cannot get YAML from RNode: %w", err)
		}
		if config, err = parse([]byte(s), rel.decodesPlugin); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("`functionConfig` must be a `ConfigMap` or `%s`", Kind)
	}
	if len(config.Annotations) == 0 {
		return nil, errors.New("input annotation list cannot be empty")
	}
	if len(config.Annotations) > maxAnnotations {
		return nil, fmt.Errorf("%w: %d annotations, more than %d", ErrTooLarge, len(config.Annotations), maxAnnotations)
	}
	return config, nil
}

// toRNode returns a copy of o as a kyaml node, nil for no object.
func toRNode(o *fn.KubeObject) *yaml.RNode {
	if o == nil || o.IsEmpty() {
		return nil
	}
	return o.CopyToResourceNode()
}

// typeOf returns rn's apiVersion and kind, empty when rn is not an
// object.
func typeOf(rn *yaml.RNode) (apiVersion, kind string) {
	meta, err := rn.GetMeta()
	if err != nil {
		return "", ""
	}
	return meta.APIVersion, meta.Kind
}

// parse reads a SetAnnotations (or SetAnnotationConfig) from YAML;
// asPlugin decodes it as v0.1.4 did, into its type plugin, which a decode
// error names.
func parse(data []byte, asPlugin bool) (*SetAnnotations, error) {
	var c SetAnnotations
	var err error
	if asPlugin {
		type plugin SetAnnotations
		var p plugin
		err = sigsyaml.Unmarshal(data, &p)
		c = SetAnnotations(p)
	} else {
		err = sigsyaml.Unmarshal(data, &c)
	}
	if err != nil {
		return nil, fmt.Errorf("failed to unmarshal config %q: %w", data, err)
	}
	switch {
	case c.AdditionalAnnotationFields != nil && c.FieldSpecs != nil:
		return nil, errors.New("`fieldSpecs` has been deprecated, please rename it to `additionalAnnotationFields`")
	case c.FieldSpecs != nil:
		c.AdditionalAnnotationFields, c.FieldSpecs = c.FieldSpecs, nil
	}
	return &c, nil
}

// fieldSpecs returns the fields c's annotations go to: its additional
// fields, then the defaults.
func (c *SetAnnotations) fieldSpecs() types.FsSlice {
	return append(slices.Clone(c.AdditionalAnnotationFields), DefaultFieldSpecs()...)
}

// DefaultFieldSpecs returns the fields every set of annotations goes to,
// kustomize's commonAnnotations field specs: metadata.annotations of every
// resource, and the annotations of the pod templates of
// ReplicationController (v1), Deployment, ReplicaSet, DaemonSet,
// StatefulSet and Job (batch), and of the job template and its pod
// template in CronJob (batch); all created when missing.
func DefaultFieldSpecs() types.FsSlice {
	const podTemplate = "spec/template/metadata/annotations"
	spec := func(group, version, kind, path string) types.FieldSpec {
		return types.FieldSpec{
			Gvk:                resid.Gvk{Group: group, Version: version, Kind: kind},
			Path:               path,
			CreateIfNotPresent: true,
		}
	}
	return types.FsSlice{
		spec("", "", "", "metadata/annotations"),
		spec("", "v1", "ReplicationController", podTemplate),
		spec("", "", "Deployment", podTemplate),
		spec("", "", "ReplicaSet", podTemplate),
		spec("", "", "DaemonSet", podTemplate),
		spec("", "", "StatefulSet", podTemplate),
		spec("batch", "", "Job", podTemplate),
		spec("batch", "", "CronJob", "spec/jobTemplate/metadata/annotations"),
		spec("batch", "", "CronJob", "spec/jobTemplate/spec/template/metadata/annotations"),
	}
}
