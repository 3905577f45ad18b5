package searchreplace

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
	"sigs.k8s.io/kustomize/kyaml/kio/kioutil"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// Match is one field a search matched (and, with a mutator, changed).
type Match struct {
	// FilePath is the package file of the resource, from its path
	// annotation.
	FilePath string
	// FieldPath is the field's path, e.g. spec.containers[0].image. For a
	// list field commented by put-comment, it is the by-path expression
	// followed by " # " and the comment.
	FieldPath string
	// Value is the field's value after the change, as YAML (with its line
	// comment, if any).
	Value string
}

// search runs s on one resource node, in place, and returns the fields it
// matched.
func (s *searcher) search(node *yaml.RNode) ([]Match, error) {
	filePath, _, err := kioutil.GetFileAnnotations(node)
	if err != nil {
		return nil, fmt.Errorf("read file annotations: %w", err)
	}
	if s.ByFilePath != "" {
		ok, err := doublestar.Match(s.ByFilePath, filePath)
		if err != nil {
			return nil, fmt.Errorf("match %s %q: %w", ByFilePath, s.ByFilePath, err)
		}
		if !ok {
			return nil, nil
		}
	}
	w := walk{searcher: s, filePath: filePath}
	if s.putsByPath() {
		err = w.putByPath(node.YNode())
	} else {
		err = w.node(node.YNode(), "")
	}
	return w.matches, err
}

// walk is one search through one resource.
type walk struct {
	*searcher
	filePath string
	matches  []Match
}

// node visits n, at field path path (with a leading delimiter, empty at the
// root), and everything under it.
func (w *walk) node(n *yaml.Node, path string) error {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := w.node(c, path); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		return w.mapping(n, path)
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if err := w.node(c, path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
	case yaml.ScalarNode:
		return w.scalar(n, path)
	}
	return nil
}

// mapping visits a mapping: first the list fields put-comment applies to,
// then every field's value.
func (w *walk) mapping(n *yaml.Node, path string) error {
	if err := w.commentLists(n, path); err != nil {
		return err
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key := n.Content[i].Value
		if isOrchestratorAnnotation(path, key) {
			continue
		}
		if err := w.node(n.Content[i+1], path+pathDelimiter+key); err != nil {
			return err
		}
	}
	return nil
}

// commentLists puts the put-comment, as it is, on the key of each non-empty
// list field of n that by-path matches, whatever the list holds. A list has
// no value for by-value or by-value-regex to match, so with either of them
// no list is commented.
func (w *walk) commentLists(n *yaml.Node, path string) error {
	if w.PutComment == "" || w.path == nil || w.ByValue != "" || w.valueRegex != nil {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, value := n.Content[i], n.Content[i+1]
		if value.Kind != yaml.SequenceNode || len(value.Content) == 0 {
			continue
		}
		fieldPath := strings.TrimPrefix(path+pathDelimiter+key.Value, pathDelimiter)
		if !w.path.matches(splitFieldPath(fieldPath)) {
			continue
		}
		key.LineComment = w.PutComment
		list, err := flowString(value)
		if err != nil {
			return fmt.Errorf("%s: %w", fieldPath, err)
		}
		w.matches = append(w.matches, Match{
			FilePath:  w.filePath,
			FieldPath: w.ByPath + " # " + w.PutComment,
			Value:     list,
		})
	}
	return nil
}

// scalar matches one field value and applies the mutators to it.
func (w *walk) scalar(n *yaml.Node, path string) error {
	fieldPath := strings.TrimPrefix(path, pathDelimiter)
	if !w.matchesField(n.Value, fieldPath) {
		return nil
	}
	if err := w.mutate(n); err != nil {
		return fmt.Errorf("%s: %w", fieldPath, err)
	}
	return w.report(n, fieldPath)
}

// matchesField applies the matchers to a field: they are ANDed, and at
// least one of by-value, by-value-regex and by-path must be given.
func (w *walk) matchesField(value, fieldPath string) bool {
	byValue := w.ByValue != "" || w.valueRegex != nil
	if !byValue && w.path == nil {
		return false
	}
	if byValue && !w.valueMatches(value) {
		return false
	}
	return w.path == nil || w.path.matches(splitFieldPath(fieldPath))
}

// valueMatches applies by-value or by-value-regex.
func (w *walk) valueMatches(value string) bool {
	if w.valueRegex != nil {
		return w.valueRegex.MatchString(value)
	}
	return value == w.ByValue
}

// mutate applies put-comment and put-value to a matched scalar; both
// resolve capture groups against its value before the change.
func (w *walk) mutate(n *yaml.Node) error {
	if w.PutComment != "" {
		comment, err := w.resolve(n.Value, w.PutComment)
		if err != nil {
			return err
		}
		n.LineComment = comment
	}
	if w.PutValue != "" {
		value, err := w.resolve(n.Value, w.PutValue)
		if err != nil {
			return err
		}
		setScalar(n, value)
	}
	return nil
}

// setScalar sets a scalar's value and lets its type follow from the value,
// keeping its style and comments.
func setScalar(n *yaml.Node, value string) {
	n.Value = value
	n.Tag = yaml.NodeTagEmpty
}

// report records a matched field.
func (w *walk) report(n *yaml.Node, fieldPath string) error {
	value, err := yaml.String(n)
	if err != nil {
		return fmt.Errorf("%s: %w", fieldPath, err)
	}
	w.matches = append(w.matches, Match{
		FilePath:  w.filePath,
		FieldPath: fieldPath,
		Value:     strings.TrimSpace(value),
	})
	return nil
}

// putByPath sets the field by-path names on the resource root, creating it
// and the maps above it where missing.
func (w *walk) putByPath(root *yaml.Node) error {
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	parent := root
	for _, name := range w.path[:len(w.path)-1] {
		child, err := mapChild(parent, name, yaml.MappingNode)
		if err != nil {
			return fmt.Errorf("%s: %w", w.ByPath, err)
		}
		parent = child
	}
	field, err := mapChild(parent, w.path[len(w.path)-1], yaml.ScalarNode)
	if err != nil {
		return fmt.Errorf("%s: %w", w.ByPath, err)
	}
	if err := w.mutate(field); err != nil {
		return fmt.Errorf("%s: %w", w.ByPath, err)
	}
	return w.report(field, w.ByPath)
}

// mapChild returns the value of field name of mapping m, adding an empty
// node of the given kind when there is none. An existing value of another
// kind is replaced, except that only a null is replaced by a map on the way
// to the field: anything else there is an error.
func mapChild(m *yaml.Node, name string, kind yaml.Kind) (*yaml.Node, error) {
	if m.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("cannot set field %q in a %s", name, kindName(m.Kind))
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value != name {
			continue
		}
		value := m.Content[i+1]
		switch {
		case value.Kind == kind:
			return value, nil
		case kind == yaml.MappingNode && !isNull(value):
			return nil, fmt.Errorf("field %q is a %s, not a map", name, kindName(value.Kind))
		default:
			replacement := &yaml.Node{Kind: kind, Tag: emptyTag(kind), LineComment: value.LineComment}
			m.Content[i+1] = replacement
			return replacement, nil
		}
	}
	key := &yaml.Node{Kind: yaml.ScalarNode, Tag: yaml.NodeTagString, Value: name}
	value := &yaml.Node{Kind: kind, Tag: emptyTag(kind)}
	m.Content = append(m.Content, key, value)
	return value, nil
}

// isNull says whether n is a null scalar (an empty field, ~ or null).
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == yaml.NodeTagNull
}

// emptyTag is the tag of a new empty node of the given kind.
func emptyTag(kind yaml.Kind) string {
	if kind == yaml.MappingNode {
		return yaml.NodeTagMap
	}
	return yaml.NodeTagEmpty
}

// kindName names a YAML node kind in errors.
func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "map"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		return "scalar"
	default:
		return "node of kind " + strconv.Itoa(int(k))
	}
}

// captureGroupRef is a reference to a numbered capture group in a put-value
// or put-comment pattern.
var captureGroupRef = regexp.MustCompile(`\$\{([0-9]+)\}`)

// resolve replaces ${N} in pattern with capture group N of by-value-regex
// matched against value. Without by-value-regex the pattern is used as it
// is.
func (w *walk) resolve(value, pattern string) (string, error) {
	if w.valueRegex == nil {
		return pattern, nil
	}
	groups := w.valueRegex.FindStringSubmatch(value)
	unresolved := false
	out := captureGroupRef.ReplaceAllStringFunc(pattern, func(ref string) string {
		i, err := strconv.Atoi(ref[2 : len(ref)-1])
		if err != nil || i < 1 || i >= len(groups) {
			unresolved = true
			return ref
		}
		return groups[i]
	})
	if unresolved {
		return "", fmt.Errorf("unable to resolve capture groups in %q", pattern)
	}
	return out, nil
}

// flowString is a list in flow style, e.g. [a, b]; the list is left in
// block style.
func flowString(list *yaml.Node) (string, error) {
	list.Style = yaml.FlowStyle
	s, err := yaml.String(list)
	list.Style = 0
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(s), nil
}

// isOrchestratorAnnotation says whether key, a field of the mapping at
// path, is one of the annotations kpt adds to the resources it passes to a
// function (file path, index, id): bookkeeping, not the package's content,
// so never searched.
func isOrchestratorAnnotation(path, key string) bool {
	if path != ".metadata.annotations" {
		return false
	}
	switch key {
	case kioutil.LegacyPathAnnotation, kioutil.LegacyIndexAnnotation, kioutil.LegacyIdAnnotation:
		return true
	}
	return strings.HasPrefix(key, "internal.config.kubernetes.io/")
}
