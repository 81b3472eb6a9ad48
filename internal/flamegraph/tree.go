// Package flamegraph renders flame graphs and differential flame graphs as a
// self-contained SVG (or an HTML page around it): no external scripts,
// fonts or styles, so the file can be attached to a CI run or a ticket.
// Frames are laid out here; an inline script adds click-to-zoom, search
// (with the matched share) and details on hover, as flamegraph.pl's SVGs do.
package flamegraph

import "sort"

// Node is a frame in the call tree: its name, its width (Value: samples, or
// the comparison profile's share in a diff) and, in a diff, the baseline's
// value on the same scale.
type Node struct {
	Name     string
	Value    float64
	Before   float64
	Children []*Node

	index map[string]*Node
}

// NewRoot returns the tree's root ("all").
func NewRoot() *Node { return &Node{Name: "all"} }

// Add adds a stack (root first) with its value and, for diffs, its
// baseline value.
func (n *Node) Add(stack []string, value, before float64) {
	n.Value += value
	n.Before += before
	cur := n
	for _, name := range stack {
		cur = cur.child(name)
		cur.Value += value
		cur.Before += before
	}
}

func (n *Node) child(name string) *Node {
	if n.index == nil {
		n.index = map[string]*Node{}
	}
	c, ok := n.index[name]
	if !ok {
		c = &Node{Name: name}
		n.index[name] = c
		n.Children = append(n.Children, c)
	}
	return c
}

// Count is the number of nodes in the tree below n, n included.
func (n *Node) Count() int {
	c := 1
	for _, ch := range n.Children {
		c += ch.Count()
	}
	return c
}

// Depth is the number of levels below and including n.
func (n *Node) Depth() int {
	d := 0
	for _, ch := range n.Children {
		d = max(d, ch.Depth())
	}
	return d + 1
}

// sortChildren orders siblings by name, as flamegraph.pl does: the x axis
// is not time, and a stable order makes two graphs comparable by eye.
func (n *Node) sortChildren() {
	sort.Slice(n.Children, func(i, j int) bool { return n.Children[i].Name < n.Children[j].Name })
	for _, c := range n.Children {
		c.sortChildren()
	}
}
