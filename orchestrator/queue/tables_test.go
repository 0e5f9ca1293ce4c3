package queue

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLRUBound(t *testing.T) {
	c := newLRU[int](3)
	for i := range 5 {
		c.put(fmt.Sprint(i), i)
	}
	require.Equal(t, 3, c.len())
	_, ok := c.peek("1")
	require.False(t, ok, "least recent evicted")
	c.put("2", 20) // refresh: 3 is now the oldest
	c.put("5", 5)
	_, ok = c.peek("3")
	require.False(t, ok)
	v, ok := c.peek("2")
	require.True(t, ok)
	require.Equal(t, 20, v)
}

func TestBoostTable(t *testing.T) {
	t0 := time.Unix(0, 0)
	b := newBoostTable(time.Minute, 2)
	require.False(t, b.boosted("s", t0))
	b.completed("s", t0)
	require.True(t, b.boosted("s", t0.Add(time.Minute)))
	require.False(t, b.boosted("s", t0.Add(time.Minute+1)), "TTL")
	require.Equal(t, 0, b.lru.len(), "an expired entry is dropped when seen")

	b.completed("a", t0)
	b.completed("b", t0.Add(time.Second))
	b.completed("c", t0.Add(2*time.Second))
	require.Equal(t, 2, b.lru.len(), "bounded")
	require.False(t, b.boosted("a", t0.Add(2*time.Second)), "oldest completion forgotten")
	b.completed("d", t0.Add(62*time.Second))
	require.Equal(t, 2, b.lru.len())
	require.False(t, b.boosted("b", t0.Add(62*time.Second)))
	b.completed("e", t0.Add(200*time.Second))
	require.Equal(t, 1, b.lru.len(), "expired completions are swept on insert")

	off := newBoostTable(0, 10)
	off.completed("s", t0)
	require.False(t, off.boosted("s", t0))
	require.False(t, b.boosted("", t0))
}

func TestUsageDecays(t *testing.T) {
	t0 := time.Unix(0, 0)
	u := newUsageTable(10 * time.Second)
	u.charge("a", 1000, t0)
	require.InDelta(t, 500, u.value("a", t0.Add(10*time.Second)), 1e-9)
	u.charge("a", 0, t0.Add(10*time.Second)) // counts as 1
	require.InDelta(t, 501, u.value("a", t0.Add(10*time.Second)), 1e-9)
	require.Zero(t, u.value("nobody", t0))
}
