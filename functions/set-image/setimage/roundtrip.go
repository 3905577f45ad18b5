package setimage

import (
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// The JSON round trip of a resource (see setAdditionalImages) keeps its
// structure when the resource has no anchors or aliases (which JSON
// expands), no merge keys, null keys or field twice in a map (which JSON
// merges):
// the resource out of it then has the same maps, fields and lists, its
// fields sorted and its comments dropped. Restoring its comments and order
// from the resource as it was is then a walk of both together, in time in
// proportion to their size, which copyComments and syncOrder do with the
// results of kyaml's comments.CopyComments and order.SyncOrder; kyaml's
// walks cost hundreds of bytes a node, copy subtrees at each map, and look
// fields and list items up one by one.

// keepsStructure says whether the JSON round trip keeps the structure of
// the tree under n.
func keepsStructure(n *yaml.Node) bool {
	if n == nil {
		return true
	}
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return false
	}
	if n.Kind == yaml.MappingNode && !uniqueKeys(n) {
		return false
	}
	for _, c := range n.Content {
		if !keepsStructure(c) {
			return false
		}
	}
	return true
}

// uniqueKeys says whether the keys of map n are distinct, none the merge
// key "<<" or null.
func uniqueKeys(n *yaml.Node) bool {
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if seen[k.Value] || k.Value == "<<" || k.Tag == yaml.NodeTagNull {
			return false
		}
		seen[k.Value] = true
	}
	return true
}

// copyComments is comments.CopyComments(from, to) for to, from through the
// JSON round trip: the comments of each node of from go to the node of to
// in its place (the field of the same key, the list item of the same
// index) where that has none, but for a list item that is a scalar whose
// value the round trip changed, as kyaml compares list items' values
// first.
func copyComments(from, to *yaml.Node) {
	if from == nil || to == nil {
		return
	}
	copyNodeComments(from, to)
	switch {
	case from.Kind == yaml.MappingNode && to.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(from.Content); i += 2 {
			key, value := field(to, from.Content[i].Value)
			if key == nil {
				continue
			}
			copyNodeComments(from.Content[i], key)
			copyComments(from.Content[i+1], value)
		}
	case from.Kind == yaml.SequenceNode && to.Kind == yaml.SequenceNode:
		for i := 0; i < len(from.Content) && i < len(to.Content); i++ {
			if from.Content[i].Value == to.Content[i].Value {
				copyComments(from.Content[i], to.Content[i])
			}
		}
	}
}

// copyNodeComments is kyaml's copyFieldComments: each comment of from
// where to has none.
func copyNodeComments(from, to *yaml.Node) {
	if to.LineComment == "" {
		to.LineComment = from.LineComment
	}
	if to.HeadComment == "" {
		to.HeadComment = from.HeadComment
	}
	if to.FootComment == "" {
		to.FootComment = from.FootComment
	}
}

// field is the first field of map n of the given key: its key and value
// nodes, nil if none.
func field(n *yaml.Node, key string) (k, v *yaml.Node) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i], n.Content[i+1]
		}
	}
	return nil, nil
}

// syncOrder is order.SyncOrder(from, to) for to, from through the JSON
// round trip, comments copied: each map of to takes the order of its
// fields in from (its fields not in from after them, in their order), down
// the fields and list items of both; then rearrangeHeadCommentOfSeqNode.
func syncOrder(from, to *yaml.Node) {
	sortLike(from, to)
	rearrangeHeadCommentOfSeqNode(to)
}

func sortLike(from, to *yaml.Node) {
	if yaml.IsYNodeNilOrEmpty(from) || yaml.IsYNodeNilOrEmpty(to) {
		return
	}
	switch {
	case from.Kind == yaml.MappingNode && to.Kind == yaml.MappingNode:
		position := make(map[string]int, len(from.Content)/2)
		for i := 0; i+1 < len(from.Content); i += 2 {
			position[from.Content[i].Value] = i / 2
		}
		fields := make([][2]*yaml.Node, len(from.Content)/2)
		var rest []*yaml.Node
		for i := 0; i+1 < len(to.Content); i += 2 {
			if p, ok := position[to.Content[i].Value]; ok {
				fields[p] = [2]*yaml.Node{to.Content[i], to.Content[i+1]}
			} else {
				rest = append(rest, to.Content[i], to.Content[i+1])
			}
		}
		content := make([]*yaml.Node, 0, len(to.Content))
		for _, f := range fields {
			if f[0] != nil {
				content = append(content, f[0], f[1])
			}
		}
		to.Content = append(content, rest...)
		for i := 0; i+1 < len(from.Content); i += 2 {
			if _, value := field(to, from.Content[i].Value); value != nil {
				sortLike(from.Content[i+1], value)
			}
		}
	case from.Kind == yaml.SequenceNode && to.Kind == yaml.SequenceNode:
		for i := 0; i < len(from.Content) && i < len(to.Content); i++ {
			sortLike(from.Content[i], to.Content[i])
		}
	}
}

// rearrangeHeadCommentOfSeqNode is kyaml's (in order.SyncOrder): a list
// item starting with a scalar (a map's first key, a list's first item)
// gets that scalar's head comment, added to its own if it has one (and the
// scalar's is then dropped).
func rearrangeHeadCommentOfSeqNode(node *yaml.Node) {
	if node == nil {
		return
	}
	switch node.Kind {
	case yaml.DocumentNode, yaml.MappingNode:
		for _, n := range node.Content {
			rearrangeHeadCommentOfSeqNode(n)
		}
	case yaml.SequenceNode:
		for _, n := range node.Content {
			if len(n.Content) > 0 && n.Content[0].Kind == yaml.ScalarNode {
				if n.HeadComment == "" {
					n.HeadComment = n.Content[0].HeadComment
					continue
				}
				if n.Content[0].HeadComment != "" {
					n.HeadComment += "\n" + n.Content[0].HeadComment
					n.Content[0].HeadComment = ""
				}
			}
		}
	}
}
