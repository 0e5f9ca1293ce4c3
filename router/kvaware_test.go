package router

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBlockLRUEvictsTheLeastRecentlyUsed(t *testing.T) {
	b := newBlockLRU(3)
	for _, h := range []uint64{1, 2, 3} {
		b.add(h)
	}
	b.add(1) // touched: 2 is now the oldest
	b.add(4)
	require.False(t, b.has(2))
	for _, h := range []uint64{1, 3, 4} {
		require.True(t, b.has(h), h)
	}
	b.add(5) // evicts 3
	b.add(6) // evicts 1
	require.False(t, b.has(3))
	require.False(t, b.has(1))
	require.Len(t, b.items, 3)
	var order []uint64 // most recent first
	for i := b.head; i >= 0; i = b.nodes[i].next {
		order = append(order, b.nodes[i].hash)
	}
	require.Equal(t, []uint64{6, 5, 4}, order)

	one := newBlockLRU(1)
	one.add(7)
	one.add(7)
	one.add(8)
	require.True(t, one.has(8))
	require.False(t, one.has(7))
}
