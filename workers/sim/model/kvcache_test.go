package model

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// hs returns n distinct fake chained hashes starting at base.
func hs(base uint64, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = base + uint64(i)
	}
	return out
}

func requireKV(t *testing.T, c *KVCache, referenced, cached, free int) {
	t.Helper()
	st := c.Stats()
	require.Equal(t, KVStats{Capacity: c.Capacity(), Referenced: referenced, Cached: cached, Free: free}, st)
	require.Equal(t, c.Capacity(), st.Referenced+st.Cached+st.Free, "every block is in exactly one state")
	require.Equal(t, cached+countHashedReferenced(c), c.byHash.Len())
}

func countHashedReferenced(c *KVCache) int {
	n := 0
	for _, b := range c.blocks {
		if b.refs > 0 && b.hashed {
			n++
		}
	}
	return n
}

func TestKVCacheReuse(t *testing.T) {
	tests := []struct {
		name        string
		second      []uint64
		maxMatch    int
		wantMatched int
	}{
		{"full prefix", hs(100, 3), 3, 3},
		{"capped by maxMatch", hs(100, 3), 2, 2},
		{"diverges after two blocks", append(hs(100, 2), 999), 3, 2},
		{"diverges at first block", hs(500, 3), 3, 0},
		{"longer prompt", hs(100, 5), 5, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewKVCache(10, 16)
			a, ok := c.Allocate(hs(100, 3), 3, 4) // 3 full prompt blocks + 1 for output
			require.True(t, ok)
			require.Equal(t, 0, a.matched)
			c.Commit(a, hs(100, 3))
			c.Release(a)
			requireKV(t, c, 0, 3, 7)

			b, ok := c.Allocate(tt.second, tt.maxMatch, len(tt.second)+1)
			require.True(t, ok)
			require.Equal(t, tt.wantMatched, b.matched)
			for i := 0; i < tt.wantMatched; i++ {
				require.Equal(t, a.blocks[i], b.blocks[i], "block %d is reused", i)
			}
			c.Commit(b, tt.second)
			c.Release(b)
			require.Equal(t, 0, c.Stats().Referenced)
		})
	}
}

func TestKVCacheSharedPrefixIsReferencedTwice(t *testing.T) {
	c := NewKVCache(8, 16)
	a, _ := c.Allocate(hs(1, 2), 2, 2)
	c.Commit(a, hs(1, 2))
	b, ok := c.Allocate(hs(1, 2), 2, 3)
	require.True(t, ok)
	require.Equal(t, 2, b.matched)
	requireKV(t, c, 3, 0, 5)
	c.Release(a)
	requireKV(t, c, 3, 0, 5) // b still references the shared blocks
	c.Release(b)
	requireKV(t, c, 0, 2, 6)
	c.Release(b) // twice is a no-op
	requireKV(t, c, 0, 2, 6)
}

func TestKVCacheEvictsOnlyUnreferencedLRU(t *testing.T) {
	c := NewKVCache(6, 16)
	held, _ := c.Allocate(hs(10, 2), 2, 2) // referenced throughout
	c.Commit(held, hs(10, 2))
	old, _ := c.Allocate(hs(20, 2), 2, 2)
	c.Commit(old, hs(20, 2))
	c.Release(old)
	young, _ := c.Allocate(hs(30, 2), 2, 2)
	c.Commit(young, hs(30, 2))
	c.Release(young)
	requireKV(t, c, 2, 4, 0)

	// Five fresh blocks cannot be found without touching referenced ones:
	// refused, and nothing changed.
	_, ok := c.Allocate(hs(40, 5), 0, 5)
	require.False(t, ok)
	requireKV(t, c, 2, 4, 0)

	// Two fresh blocks evict the least recently used sequence, tail first.
	x, ok := c.Allocate(nil, 0, 2)
	require.True(t, ok)
	require.Equal(t, 0, c.Lookup(hs(20, 2)), "the older sequence was evicted")
	require.Equal(t, 2, c.Lookup(hs(30, 2)), "the younger sequence survives")
	require.Equal(t, 2, c.Lookup(hs(10, 2)), "referenced blocks are never evicted")
	c.Release(x)
	c.Release(held)
	requireKV(t, c, 0, 4, 2)
}

func TestKVCacheEvictsTailBlocksFirst(t *testing.T) {
	c := NewKVCache(4, 16)
	a, _ := c.Allocate(hs(1, 4), 4, 4)
	c.Commit(a, hs(1, 4))
	c.Release(a)
	x, ok := c.Allocate(nil, 0, 1)
	require.True(t, ok)
	require.Equal(t, 3, c.Lookup(hs(1, 4)), "the last block goes first, the prefix stays")
	c.Release(x)
}

func TestKVCacheMatchingCachedBlocksDoesNotCountThemAsEvictable(t *testing.T) {
	c := NewKVCache(4, 16)
	a, _ := c.Allocate(hs(1, 3), 3, 3)
	c.Commit(a, hs(1, 3))
	c.Release(a)
	requireKV(t, c, 0, 3, 1)
	// Reusing the 3 cached blocks and needing 2 fresh ones: only 1 free and
	// the cached ones are being reused, so it must fail without changes.
	_, ok := c.Allocate(hs(1, 3), 3, 5)
	require.False(t, ok)
	requireKV(t, c, 0, 3, 1)
	b, ok := c.Allocate(hs(1, 3), 3, 4)
	require.True(t, ok)
	requireKV(t, c, 4, 0, 0)
	c.Release(b)
}

func TestKVCacheConcurrentIdenticalCommit(t *testing.T) {
	c := NewKVCache(8, 16)
	a, _ := c.Allocate(hs(1, 2), 2, 2)
	b, _ := c.Allocate(hs(1, 2), 2, 2) // nothing registered yet: no match
	require.Equal(t, 0, b.matched)
	c.Commit(a, hs(1, 2))
	c.Commit(b, hs(1, 2)) // same prefix: a's blocks keep the hashes
	c.Release(a)
	c.Release(b)
	requireKV(t, c, 0, 2, 6)
}

// BenchmarkKVCacheTurn is one request's KV work under the scheduler lock for
// an 8k-token prompt (256 blocks of 32) that is fully cached but the last
// block: allocate with reuse, commit prompt and output, release.
//
//	go test -run '^$' -bench BenchmarkKVCacheTurn ./workers/sim/
func BenchmarkKVCacheTurn(b *testing.B) {
	c := NewKVCache(14000, 32)
	prompt := hs(1, 256)
	withOutput := hs(1, 272)
	a, _ := c.Allocate(prompt, 255, 272)
	c.Commit(a, withOutput)
	c.Release(a)
	b.ReportAllocs()
	for b.Loop() {
		a, ok := c.Allocate(prompt, 255, 272)
		if !ok {
			b.Fatal("allocate failed")
		}
		c.Commit(a, withOutput)
		c.Release(a)
	}
}
