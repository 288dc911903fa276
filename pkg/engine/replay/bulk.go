package replay

import "github.com/mongoferry/mongoferry/pkg/engine/catalog"

// grouper splits a writer's batch into runs of one namespace each, in
// order of first appearance, keeping the queue order inside each run. It
// keeps its buffers from one batch to the next.
type grouper struct {
	index  map[catalog.Namespace]int
	groups [][]item
	one    [1][]item
}

// group returns batch's runs; they are valid until the next call. A batch
// of one namespace (the common case) is returned as is, without copying.
func (g *grouper) group(batch []item) [][]item {
	single := true
	for i := 1; i < len(batch); i++ {
		if batch[i].ns != batch[0].ns {
			single = false
			break
		}
	}
	if single {
		// Not kept in groups: their buffers are reused below, and batch's
		// belongs to the writer.
		g.one[0] = batch
		return g.one[:]
	}
	if g.index == nil {
		g.index = map[catalog.Namespace]int{}
	}
	clear(g.index)
	n := 0
	for _, it := range batch {
		k, ok := g.index[it.ns]
		if !ok {
			k = n
			g.index[it.ns] = k
			if n == len(g.groups) {
				g.groups = append(g.groups, nil)
			}
			g.groups[k] = g.groups[k][:0]
			n++
		}
		g.groups[k] = append(g.groups[k], it)
	}
	return g.groups[:n]
}
