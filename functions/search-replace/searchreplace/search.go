package searchreplace

//lint:file-ignore SA1019 kpt and porch still write and read the legacy config.kubernetes.io annotations beside the new ones

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"sigs.k8s.io/kustomize/kyaml/kio/kioutil"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fnrunner/fnrunner/functions/internal/budget"
	"github.com/fnrunner/fnrunner/functions/internal/treesize"
)

// Match is one field a search matched (and, with a mutator, changed).
type Match struct {
	// FilePath is the package file of the resource, from its path
	// annotation.
	FilePath string
	// FieldPath is the field's path, e.g. spec.containers[0].image. For a
	// list field commented by put-comment, it is the by-path expression
	// followed by " # " and the comment; for a value put at an absolute
	// by-path, it is by-path.
	FieldPath string
	// Value is the field's value after the change, as YAML (with its line
	// comment, if any); for a value put at an absolute by-path, put-value
	// as it is.
	Value string
}

// search runs s on one resource node, in place, and returns the fields it
// reports. count is the number of fields it matched, which can be more than
// the fields reported (see scalar). What it adds is spent from b.
func (s *searcher) search(node *yaml.RNode, b *budget.Budget) (matches []Match, count int, err error) {
	filePath, err := fileAnnotations(node)
	if err != nil {
		return nil, 0, err
	}
	if s.ByFilePath != "" {
		// A bad pattern is reported as doublestar reports it, and only
		// when there is a resource to match it against, as in the
		// catalog's Perform.
		ok, err := matchFilePath(s.ByFilePath, filePath)
		if err != nil {
			return nil, 0, err
		}
		if !ok {
			return nil, 0, nil
		}
	}
	w := walk{searcher: s, filePath: filePath, budget: b}
	if s.path != nil {
		w.at = newPathMatcher(s.path)
	}
	if s.putsByPath() {
		err = w.putByPath(node.YNode())
	} else {
		err = w.node(node.YNode())
	}
	return w.matches, w.count, err
}

// errMissingMetadata is kyaml's error for a resource with neither
// apiVersion, kind nor metadata.
var errMissingMetadata = errors.New("missing Resource metadata")

// fileAnnotations returns the resource's file path as search-replace
// v0.2.0 reads it (kioutil.GetFileAnnotations of kyaml v0.10.21, in
// Perform): the legacy config.kubernetes.io/path annotation alone, with the
// resource left as it is. A resource with only kpt's current
// internal.config.kubernetes.io/path has no path: a by-file-path matches
// nothing there, and a change there is made but not reported (see
// walk.scalar). A resource without metadata is an error.
func fileAnnotations(node *yaml.RNode) (string, error) {
	if isMissingMetadata(node) {
		return "", errMissingMetadata
	}
	//lint:ignore SA1019 v0.2.0's kyaml knew only the legacy annotation.
	return annotationValues(node)[kioutil.LegacyPathAnnotation], nil
}

// annotationValues reads the resource's annotations as kyaml's GetMeta
// does: each key's scalar value, "" for a null, nothing if the
// annotations are not a map.
func annotationValues(node *yaml.RNode) map[string]string {
	out := map[string]string{}
	annotations := lookup(node.YNode(), yaml.MetadataField, yaml.AnnotationsField)
	if annotations == nil || annotations.Kind != yaml.MappingNode {
		return out
	}
	content := annotations.Content
	for i := 0; i+1 < len(content); i += 2 {
		out[scalarValue(content[i])] = scalarValue(content[i+1])
	}
	return out
}

// isMissingMetadata says whether kyaml v0.12's GetMeta finds nothing of a
// resource: no apiVersion, no kind, and no name, namespace, labels or
// annotations.
func isMissingMetadata(node *yaml.RNode) bool {
	for _, path := range [][]string{
		{yaml.APIVersionField}, {yaml.KindField},
		{yaml.MetadataField, yaml.NameField}, {yaml.MetadataField, yaml.NamespaceField},
		{yaml.MetadataField, yaml.LabelsField}, {yaml.MetadataField, yaml.AnnotationsField},
	} {
		if !yaml.IsYNodeNilOrEmpty(lookup(node.YNode(), path...)) {
			return false
		}
	}
	return true
}

// lookup is the value of the fields path under n, as kyaml's Lookup finds
// it without its cost: nil when a field is missing or what it is in is not
// a map.
func lookup(n *yaml.Node, fields ...string) *yaml.Node {
	for _, f := range fields {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var value *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == f {
				value = n.Content[i+1]
				break
			}
		}
		n = value
	}
	return n
}

// walk is one search through one resource.
type walk struct {
	*searcher
	filePath string
	matches  []Match
	count    int
	budget   *budget.Budget
	// path is where the walk is: the fields and list items it went into.
	path []pathStep
	// at says whether the path matches by-path; nil without one.
	at *pathMatcher
}

// pathStep is one step of a walk: into a field, or into item index of a
// list (field "").
type pathStep struct {
	field string
	index int
}

// fieldPath is the walk's path as results report it, e.g.
// spec.containers[0].image.
func (w *walk) fieldPath() string {
	var b strings.Builder
	for _, s := range w.path {
		if s.index < 0 {
			b.WriteString(pathDelimiter)
			b.WriteString(s.field)
			continue
		}
		b.WriteString("[")
		b.WriteString(strconv.Itoa(s.index))
		b.WriteString("]")
	}
	return strings.TrimPrefix(b.String(), pathDelimiter)
}

// fieldPathLen is len(w.fieldPath()), without making it.
func (w *walk) fieldPathLen() int {
	n := 0
	for _, s := range w.path {
		if s.index < 0 {
			n += len(pathDelimiter) + len(s.field)
		} else {
			n += len("[]") + len(strconv.Itoa(s.index))
		}
	}
	if n > 0 && w.path[0].index < 0 {
		n -= len(pathDelimiter)
	}
	return n
}

// node visits n and everything under it. Every field is searched, kpt's
// own annotations (config.kubernetes.io/path, index,
// internal.config.kubernetes.io/*) included, as the catalog's code does at
// 76fe381 (acceptImpl in searchreplace/walk.go).
func (w *walk) node(n *yaml.Node) error {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := w.node(c); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		return w.mapping(n)
	case yaml.SequenceNode:
		for i, c := range n.Content {
			w.path = append(w.path, pathStep{index: i})
			var old pathElement
			var replaced bool
			if w.at != nil {
				old, replaced = w.at.pushIndex(i)
			}
			err := w.node(c)
			if w.at != nil {
				w.at.popIndex(old, replaced)
			}
			w.path = w.path[:len(w.path)-1]
			if err != nil {
				return err
			}
		}
	case yaml.ScalarNode:
		return w.scalar(n)
	}
	return nil
}

// mapping visits a mapping: first the list fields put-comment applies to,
// then every field's value.
func (w *walk) mapping(n *yaml.Node) error {
	if err := w.commentLists(n); err != nil {
		return err
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		field := n.Content[i].Value
		w.path = append(w.path, pathStep{field: field, index: -1})
		depth := 0
		if w.at != nil {
			depth = w.at.depth()
			w.at.pushField(field)
		}
		err := w.node(n.Content[i+1])
		if w.at != nil {
			w.at.pop(w.at.depth() - depth)
		}
		w.path = w.path[:len(w.path)-1]
		if err != nil {
			return err
		}
	}
	return nil
}

// commentLists puts the put-comment, as it is, on the key of each non-empty
// list field of n that by-path matches, whatever the list holds.
//
// As the catalog's code does at 76fe381 (visitMapping in
// searchreplace/search_replace.go): only by-path decides, so lists are
// commented even when by-value or by-value-regex is given too; the key is
// matched as YAML text, so a key with a comment of its own (above it or
// after it) never matches; and the list is left in block style, even if it
// was a flow list.
func (w *walk) commentLists(n *yaml.Node) error {
	if w.PutComment == "" || w.at == nil {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, value := n.Content[i], n.Content[i+1]
		if value.Kind != yaml.SequenceNode || len(value.Content) == 0 {
			continue
		}
		keyText, err := w.text(key)
		if err != nil {
			return err
		}
		if !w.at.matchesField(keyText) {
			continue
		}
		key.LineComment = w.PutComment
		// The list as YAML text, once for each list it is in.
		if err := w.budget.Spend(encodeBytes + encodeFactor*treesize.Bytes(value)); err != nil {
			return err
		}
		list, err := flowString(value)
		if err != nil {
			return err
		}
		fieldPath := w.ByPath + " # " + w.PutComment
		if err := w.budget.Spend(matchBytes + 2*len(list) + len(fieldPath)); err != nil {
			return err
		}
		w.matches = append(w.matches, Match{
			FilePath:  w.filePath,
			FieldPath: fieldPath,
			Value:     list,
		})
		w.count++
	}
	return nil
}

// scalar matches one field value and applies the mutators to it.
//
// As the catalog's code does at 76fe381 (matchAndReplace in
// searchreplace/search_replace.go), a field of a resource without a path
// annotation is matched, counted and changed but not reported.
func (w *walk) scalar(n *yaml.Node) error {
	if !w.matchesField(n.Value) {
		return nil
	}
	w.count++
	if err := w.mutate(n); err != nil {
		return err
	}
	if w.filePath == "" {
		return nil
	}
	value, err := w.text(n)
	if err != nil {
		return err
	}
	if err := w.budget.Spend(matchBytes + 2*len(value) + w.fieldPathLen()); err != nil {
		return err
	}
	w.matches = append(w.matches, Match{
		FilePath:  w.filePath,
		FieldPath: w.fieldPath(),
		Value:     value,
	})
	return nil
}

// text is a scalar node as YAML, without the spaces around it.
func (w *walk) text(n *yaml.Node) (string, error) {
	if s, ok := quickText(n); ok {
		return s, nil
	}
	if err := w.budget.Spend(encodeBytes + encodeFactor*treesize.Bytes(n)); err != nil {
		return "", err
	}
	s, err := yaml.String(n)
	return strings.TrimSpace(s), err
}

// matchesField applies the matchers to the field the walk is at, of the
// given value: they are ANDed, and at least one of by-value,
// by-value-regex and by-path must be given.
func (w *walk) matchesField(value string) bool {
	byValue := w.ByValue != "" || w.valueRegex != nil
	if !byValue && w.at == nil {
		return false
	}
	if byValue && !w.valueMatches(value) {
		return false
	}
	return w.at == nil || w.at.matches()
}

// valueMatches applies by-value or by-value-regex (anywhere in the value).
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
		if err := w.budget.Spend(len(comment)); err != nil {
			return err
		}
		n.LineComment = comment
	}
	if w.PutValue != "" {
		value, err := w.resolve(n.Value, w.PutValue)
		if err != nil {
			return err
		}
		if err := w.budget.Spend(len(value)); err != nil {
			return err
		}
		// The type follows from the new value; style and comments stay.
		n.Value = value
		n.Tag = yaml.NodeTagEmpty
	}
	return nil
}

// putByPath sets put-value at the absolute by-path on the resource root,
// the way the catalog's code does at 76fe381 (putValueByPath in
// searchreplace/search_replace.go, with kyaml v0.12.0's LookupCreate and
// SetField): the maps on the way are created where missing, a number in
// the path is a list index, and:
//
//   - put-comment is ignored: the field gets the value only;
//   - the result reports put-value as it is, and is reported (and counted)
//     even when nothing was set: when the path runs into a null or past the
//     end of a list;
//   - going through a field that is not a map (or, for an index, not a
//     list) is kyaml's "wrong Node Kind" error.
//
// An existing field keeps its style. The catalog replaces its node, which
// drops its comments, but kpt copies a field's comments back when a function
// drops them, so they are kept here.
func (w *walk) putByPath(root *yaml.Node) error {
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if err := w.budget.Spend(matchBytes + len(w.ByPath) + 2*len(w.PutValue)); err != nil {
		return err
	}
	w.matches = append(w.matches, Match{FilePath: w.filePath, FieldPath: w.ByPath, Value: w.PutValue})
	w.count++

	parent := root
	for i, part := range w.putParents {
		if isNull(parent) {
			return nil
		}
		// A map, where it is created.
		if err := w.budget.Spend(2*nodeBytes + len(part)); err != nil {
			return err
		}
		next, err := lookupCreate(parent, part, func() []string { return fieldNames(w.putParents[:i]) })
		if err != nil || next == nil {
			return err
		}
		parent = next
	}
	if isNull(parent) {
		// kyaml adds the field to the null node's content, which is not
		// part of its YAML: nothing changes.
		return nil
	}
	if parent.Kind != yaml.MappingNode {
		return wrongKind(parent, yaml.MappingNode, fieldNames(w.putParents))
	}
	name := w.putName
	if err := w.budget.Spend(2*nodeBytes + len(name) + len(w.PutValue)); err != nil {
		return err
	}
	for i := 0; i+1 < len(parent.Content); i += 2 {
		if parent.Content[i].Value != name {
			continue
		}
		field := parent.Content[i+1]
		field.Kind = yaml.ScalarNode
		field.Tag = yaml.NodeTagEmpty
		field.Value = w.PutValue
		field.Content = nil
		field.Anchor = ""
		field.Alias = nil
		return nil
	}
	parent.Content = append(parent.Content,
		&yaml.Node{Kind: yaml.ScalarNode, Value: name},
		&yaml.Node{Kind: yaml.ScalarNode, Value: w.PutValue})
	return nil
}

// fieldNames is the map fields among the parts of a path: those that are
// no list index.
func fieldNames(parts []string) []string {
	var names []string
	for _, part := range parts {
		if _, isIndex := indexPart(part); !isIndex && part != "-" {
			names = append(names, part)
		}
	}
	return names
}

// cleanPath is kyaml's cleanPath: path elements trimmed, empty ones
// dropped.
func cleanPath(elems []string) []string {
	var out []string
	for _, e := range elems {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// indexPart says whether a path element is a list index to kyaml's
// PathGetter (any integer strconv.Atoi accepts), and which.
func indexPart(part string) (int, bool) {
	for i := 0; i < len(part); i++ {
		// strconv.Atoi's error costs more than this.
		if c := part[i]; (c < '0' || c > '9') && (i > 0 || c != '-' && c != '+') {
			return 0, false
		}
	}
	i, err := strconv.Atoi(part)
	return i, err == nil
}

// lookupCreate is one step of kyaml v0.12.0's LookupCreate(MappingNode,
// ...) from the non-null node parent, reached through the map fields names
// returns: an index or "-" (last element) in a list, else the field part
// of a map, added as an empty map where missing. nil means the lookup stops
// there without an error.
func lookupCreate(parent *yaml.Node, part string, names func() []string) (*yaml.Node, error) {
	if idx, ok := indexPart(part); ok || part == "-" {
		if ok && idx < 0 {
			return nil, fmt.Errorf("array index %d cannot be negative", idx)
		}
		if parent.Kind != yaml.SequenceNode {
			return nil, wrongKind(parent, yaml.SequenceNode, names())
		}
		if part == "-" {
			if len(parent.Content) == 0 {
				// The catalog's binary panics here.
				return nil, errors.New("runtime error: index out of range [-1]")
			}
			return parent.Content[len(parent.Content)-1], nil
		}
		if idx >= len(parent.Content) {
			return nil, nil
		}
		return parent.Content[idx], nil
	}
	if parent.Kind != yaml.MappingNode {
		return nil, wrongKind(parent, yaml.MappingNode, names())
	}
	for i := 0; i+1 < len(parent.Content); i += 2 {
		if parent.Content[i].Value == part {
			return parent.Content[i+1], nil
		}
	}
	child := &yaml.Node{Kind: yaml.MappingNode}
	parent.Content = append(parent.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: part}, child)
	return child, nil
}

// wrongKind is kyaml v0.12.0's ErrorIfInvalid error for node n, reached
// through the map fields names, when it is not of the kind expected.
func wrongKind(n *yaml.Node, expected yaml.Kind, names []string) error {
	text, _ := yaml.String(n)
	return fmt.Errorf("wrong Node Kind for %s expected: %v was %v: value: {%s}",
		strings.Join(names, "."), kindName(expected), kindName(n.Kind), strings.TrimSpace(text))
}

// isNull says whether n is null to kyaml (IsMissingOrNull): tagged !!null,
// as an empty field, ~ or null is when read.
func isNull(n *yaml.Node) bool {
	return n.Tag == yaml.NodeTagNull
}

// kindName names a YAML node kind as kyaml v0.12.0's errors do.
func kindName(k yaml.Kind) string {
	switch k {
	case yaml.SequenceNode:
		return "SequenceNode"
	case yaml.MappingNode:
		return "MappingNode"
	case yaml.ScalarNode:
		return "ScalarNode"
	case yaml.DocumentNode:
		return "DocumentNode"
	case yaml.AliasNode:
		return "AliasNode"
	default:
		return ""
	}
}

// captureGroupRef is a reference to a numbered capture group in a put-value
// or put-comment pattern.
var captureGroupRef = regexp.MustCompile(`\$\{([0-9]+)\}`)

// resolve replaces ${N} in pattern with capture group N of by-value-regex
// matched against value. Without by-value-regex the pattern is used as it
// is.
//
// As the catalog's code does at 76fe381 (resolvePattern in
// searchreplace/search_replace.go): the groups are those of the leftmost
// match, substituted in order (${1} first), a group that took no part in
// the match is replaced by "", and any ${N} left over is the error "unable
// to resolve capture groups".
func (w *walk) resolve(value, pattern string) (string, error) {
	if w.valueRegex == nil {
		return pattern, nil
	}
	groups := w.valueRegex.FindStringSubmatch(value)
	if err := w.budget.Spend(16 * len(groups)); err != nil {
		return "", err
	}
	out := pattern
	// Once no "${" is left, no group can replace anything.
	for i := 1; i < len(groups) && strings.Contains(out, "${"); i++ {
		ref := "${" + strconv.Itoa(i) + "}"
		// Reading out, and what the replacement writes.
		n := strings.Count(out, ref)
		if err := w.budget.Spend(len(out) + n*len(groups[i])); err != nil {
			return "", err
		}
		if n > 0 {
			out = strings.ReplaceAll(out, ref, groups[i])
		}
	}
	if captureGroupRef.MatchString(out) {
		return "", errors.New("unable to resolve capture groups")
	}
	return out, nil
}

// flowString is a list in flow style, e.g. [a, b]. The list is then left in
// folded style (block style for a list), as the catalog leaves it.
func flowString(list *yaml.Node) (string, error) {
	list.Style = yaml.FlowStyle
	s, err := yaml.String(list)
	list.Style = yaml.FoldedStyle
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(s), nil
}
