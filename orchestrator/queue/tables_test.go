package queue

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBoostTable(t *testing.T) {
	t0 := time.Unix(0, 0)
	b := newBoostTable(time.Minute, 2)
	require.False(t, b.boosted("s", t0))
	b.completed("s", t0)
	require.True(t, b.boosted("s", t0.Add(time.Minute)))
	require.False(t, b.boosted("s", t0.Add(time.Minute+1)), "TTL")
	require.Equal(t, 0, b.lru.Len(), "an expired entry is dropped when seen")

	b.completed("a", t0)
	b.completed("b", t0.Add(time.Second))
	b.completed("c", t0.Add(2*time.Second))
	require.Equal(t, 2, b.lru.Len(), "bounded")
	require.False(t, b.boosted("a", t0.Add(2*time.Second)), "oldest completion forgotten")
	b.completed("d", t0.Add(62*time.Second))
	require.Equal(t, 2, b.lru.Len())
	require.False(t, b.boosted("b", t0.Add(62*time.Second)))
	b.completed("e", t0.Add(200*time.Second))
	require.Equal(t, 1, b.lru.Len(), "expired completions are swept on insert")

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
