// Package treesize estimates the memory a parsed YAML tree takes, which the
// functions' work budgets are measured against, the size of its text, and
// what following its aliases adds to going through it.
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

// TextBytes is the size of the tree under n as YAML, roughly: its text and
// a few bytes a node.
func TextBytes(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	size := 4 + len(n.Value) + len(n.Anchor) + len(n.HeadComment) + len(n.LineComment) + len(n.FootComment)
	for _, c := range n.Content {
		size += TextBytes(c)
	}
	return size
}

// AliasBytes is what going through the tree under n costs beyond its own
// nodes when its aliases are followed (as kustomize's field specs and
// yaml.v3's decoder do): NodeBytes for each node reached through an alias.
func AliasBytes(n *yaml.Node) int {
	a := Aliases{}
	a.Reached(n)
	return a.Extra * NodeBytes
}

// Aliases counts the nodes reached through aliases: Extra, saturating at
// MaxReached. It remembers, for each anchored node, the nodes under it,
// aliases followed. An alias to a node it is under (an endless tree, which
// yaml.v3 parses) sets Cycle and saturates Extra: whoever follows aliases
// there never ends.
type Aliases struct {
	// Extra is the number of nodes reached through an alias so far.
	Extra int
	// Cycle says whether an alias to a node it is under was reached.
	Cycle bool

	reach map[*yaml.Node]int
}

// MaxReached is where Aliases stops counting.
const MaxReached = 1 << 40

// Reached is the number of nodes under n, aliases followed; it adds those
// reached through an alias to Extra.
func (a *Aliases) Reached(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	if n.Kind == yaml.AliasNode {
		r := a.Reached(n.Alias)
		a.Extra = min(a.Extra+r, MaxReached)
		return min(1+r, MaxReached)
	}
	if r, ok := a.reach[n]; ok {
		if r != inProgress {
			return r
		}
		a.Cycle = true
		a.Extra = MaxReached
		return MaxReached
	}
	if n.Anchor != "" {
		if a.reach == nil {
			a.reach = map[*yaml.Node]int{}
		}
		a.reach[n] = inProgress
	}
	r := 1
	for _, c := range n.Content {
		r = min(r+a.Reached(c), MaxReached)
	}
	if n.Anchor != "" {
		a.reach[n] = r
	}
	return r
}

// inProgress marks an anchored node Reached is counting.
const inProgress = -1
