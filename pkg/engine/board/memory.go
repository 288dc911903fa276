package board

import (
	"context"
	"slices"
	"sync"
)

// MemoryBoard is a Board for subtasks of one process. The zero value is
// ready to use.
type MemoryBoard struct {
	mu  sync.Mutex
	pos map[string]Position
}

// NewMemoryBoard returns an empty board.
func NewMemoryBoard() *MemoryBoard { return &MemoryBoard{} }

// Publish implements Board.
func (b *MemoryBoard) Publish(_ context.Context, p Position) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pos == nil {
		b.pos = map[string]Position{}
	}
	b.pos[p.Shard] = p
	return nil
}

// Positions implements Board; the result is sorted by shard name.
func (b *MemoryBoard) Positions(context.Context) ([]Position, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Position, 0, len(b.pos))
	for _, p := range b.pos {
		out = append(out, p)
	}
	slices.SortFunc(out, func(x, y Position) int {
		switch {
		case x.Shard < y.Shard:
			return -1
		case x.Shard > y.Shard:
			return 1
		}
		return 0
	})
	return out, nil
}

// Check that MemoryBoard is a Board.
var _ Board = (*MemoryBoard)(nil)
