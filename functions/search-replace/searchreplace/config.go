package searchreplace

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

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
	// ByValueRegex matches fields whose value this RE2 expression matches
	// (anywhere in the value: it is not anchored).
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
//
// As the catalog's code does at 76fe381 (Decode in
// searchreplace/search_replace.go, through kyaml's RNode.GetDataMap): data
// that is not a map reads as no data, and a value that is not a scalar (a
// map, a list, a null) reads as "" rather than being an error.
func ConfigFrom(fc *fn.KubeObject) (Config, error) {
	var cfg Config
	if fc == nil || fc.IsEmpty() {
		return cfg, nil
	}
	data := dataMap(fc.CopyToResourceNode())
	names := make([]string, 0, len(data))
	for k := range data {
		names = append(names, k)
	}
	// The catalog ranges over a Go map, so which of several unknown keys
	// it names is random; sorting makes it the first.
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

// dataMap returns the object's data as strings, the way kyaml's
// RNode.GetDataMap does: the scalar value of each key, "" for anything else.
func dataMap(obj *yaml.RNode) map[string]string {
	out := map[string]string{}
	data, err := obj.Pipe(yaml.Lookup("data"))
	if err != nil || data == nil || data.YNode().Kind != yaml.MappingNode {
		return out
	}
	content := data.YNode().Content
	for i := 0; i+1 < len(content); i += 2 {
		out[scalarValue(content[i])] = scalarValue(content[i+1])
	}
	return out
}

// scalarValue is a node's value as kyaml's GetValue reads it: "" for a
// null, the node's Value (empty for maps and lists) otherwise.
func scalarValue(n *yaml.Node) string {
	if n == nil || n.Tag == yaml.NodeTagNull {
		return ""
	}
	return n.Value
}

// searcher is a validated Config ready to run.
type searcher struct {
	Config
	// valueRegex is ByValueRegex compiled as it is; nil without one.
	valueRegex *regexp.Regexp
	// path is ByPath split into its elements; nil without one.
	path pathPattern
	// putParents and putName are ByPath as putByPath follows it: the
	// fields (or list indices) on the way, trimmed, and the field set.
	putParents []string
	putName    string
}

// compile validates cfg and prepares its expressions.
func compile(cfg Config) (*searcher, error) {
	if cfg.ByValue != "" && cfg.ByValueRegex != "" {
		return nil, fmt.Errorf("only one of [%q, %q] can be provided", ByValue, ByValueRegex)
	}
	if err := checkLimits(cfg); err != nil {
		return nil, err
	}
	s := &searcher{Config: cfg}
	if cfg.ByValueRegex != "" {
		// As the catalog's code does at 76fe381 (Filter and regexMatch
		// in searchreplace/search_replace.go): the expression is
		// compiled as it is, not anchored, and a field matches when the
		// expression matches anywhere in its value ("nginx" matches
		// "my-nginx-app:1"). A bad expression is reported with the
		// regexp package's own message.
		re, err := regexp.Compile(cfg.ByValueRegex)
		if err != nil {
			return nil, err
		}
		s.valueRegex = re
	}
	if cfg.ByPath != "" {
		s.path = parsePathPattern(cfg.ByPath)
		elems := strings.Split(cfg.ByPath, pathDelimiter)
		s.putParents, s.putName = cleanPath(elems[:len(elems)-1]), elems[len(elems)-1]
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
