package searchreplace

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/kptdev/krm-functions-sdk/go/fn"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// The functionConfig's data keys: matchers (by-) and mutators (put-).
const (
	ByValue      = "by-value"
	ByValueRegex = "by-value-regex"
	ByPath       = "by-path"
	ByFilePath   = "by-file-path"
	PutValue     = "put-value"
	PutComment   = "put-comment"
)

// keys lists the functionConfig keys in the order errors name them.
func keys() []string {
	return []string{ByValue, ByFilePath, ByValueRegex, ByPath, PutValue, PutComment}
}

// Config is search-replace's functionConfig: the data of a ConfigMap.
type Config struct {
	// ByValue matches fields whose value is exactly this.
	ByValue string
	// ByValueRegex matches fields whose whole value matches this RE2
	// expression.
	ByValueRegex string
	// ByPath matches fields by path expression (see the package doc).
	ByPath string
	// ByFilePath restricts the search to resources of the files matching
	// this slash-separated glob, relative to the package.
	ByFilePath string
	// PutValue is the value set on matching fields; ${N} stands for capture
	// group N of ByValueRegex.
	PutValue string
	// PutComment is the line comment set on matching fields; ${N} as for
	// PutValue.
	PutComment string
}

// ConfigFrom reads a Config from the data of fc. Any kind is accepted, as
// the catalog does; keys other than the matchers and mutators are an error.
// An empty fc is an empty Config.
func ConfigFrom(fc *fn.KubeObject) (Config, error) {
	var cfg Config
	if fc == nil || fc.IsEmpty() {
		return cfg, nil
	}
	data, err := stringData(fc.CopyToResourceNode())
	if err != nil {
		return cfg, err
	}
	names := make([]string, 0, len(data))
	for k := range data {
		names = append(names, k)
	}
	sort.Strings(names)
	fields := map[string]*string{
		ByValue:      &cfg.ByValue,
		ByValueRegex: &cfg.ByValueRegex,
		ByPath:       &cfg.ByPath,
		ByFilePath:   &cfg.ByFilePath,
		PutValue:     &cfg.PutValue,
		PutComment:   &cfg.PutComment,
	}
	for _, k := range names {
		field, ok := fields[k]
		if !ok {
			return cfg, fmt.Errorf("invalid matcher %q, must be one of %q", k, keys())
		}
		*field = data[k]
	}
	return cfg, nil
}

// stringData returns the scalar values of the object's data as strings,
// whatever their YAML type.
func stringData(obj *yaml.RNode) (map[string]string, error) {
	data, err := obj.Pipe(yaml.Lookup("data"))
	if err != nil {
		return nil, fmt.Errorf("functionConfig data: %w", err)
	}
	out := map[string]string{}
	if data == nil || yaml.IsMissingOrNull(data) {
		return out, nil
	}
	if data.YNode().Kind != yaml.MappingNode {
		return nil, errors.New("functionConfig data must be a map")
	}
	err = data.VisitFields(func(f *yaml.MapNode) error {
		if f.Value.YNode().Kind != yaml.ScalarNode {
			return fmt.Errorf("functionConfig data %q must be a string", f.Key.YNode().Value)
		}
		out[f.Key.YNode().Value] = f.Value.YNode().Value
		return nil
	})
	return out, err
}

// searcher is a validated Config ready to run.
type searcher struct {
	Config
	// valueRegex is ByValueRegex anchored at both ends; nil without one.
	valueRegex *regexp.Regexp
	// path is ByPath split into its elements; nil without one.
	path pathPattern
}

// compile validates cfg and prepares its expressions.
func compile(cfg Config) (*searcher, error) {
	if cfg.ByValue != "" && cfg.ByValueRegex != "" {
		return nil, fmt.Errorf("only one of [%q, %q] can be provided", ByValue, ByValueRegex)
	}
	s := &searcher{Config: cfg}
	if cfg.ByValueRegex != "" {
		re, err := regexp.Compile("^(?:" + cfg.ByValueRegex + ")$")
		if err != nil {
			return nil, fmt.Errorf("invalid %s %q: %w", ByValueRegex, cfg.ByValueRegex, err)
		}
		s.valueRegex = re
	}
	if cfg.ByFilePath != "" && !doublestar.ValidatePattern(cfg.ByFilePath) {
		return nil, fmt.Errorf("invalid %s %q: %w", ByFilePath, cfg.ByFilePath, doublestar.ErrBadPattern)
	}
	if cfg.ByPath != "" {
		s.path = parsePathPattern(cfg.ByPath)
	}
	return s, nil
}

// putsByPath says whether the value is put at an absolute ByPath on every
// resource, creating the field where it is missing, rather than on the
// fields found by walking the resource.
func (s *searcher) putsByPath() bool {
	return s.PutValue != "" && s.ByValue == "" && s.ByValueRegex == "" &&
		s.path.isAbsolute() && !strings.Contains(s.ByPath, "[")
}

// mutates says whether matching fields are changed rather than only
// reported.
func (s *searcher) mutates() bool {
	return s.PutValue != "" || s.PutComment != ""
}
