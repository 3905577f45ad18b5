// Package treesize estimates the memory a parsed YAML tree takes, which the
// functions' work budgets are measured against.
package treesize

import "sigs.k8s.io/kustomize/kyaml/yaml"

// NodeBytes is what one node of a tree takes beside its strings.
const NodeBytes = 200

// Bytes is the memory n's tree takes: NodeBytes per node and its strings.
func Bytes(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	size := NodeBytes + len(n.Value) + len(n.Anchor) + len(n.HeadComment) + len(n.LineComment) + len(n.FootComment)
	for _, c := range n.Content {
		size += Bytes(c)
	}
	return size
}
