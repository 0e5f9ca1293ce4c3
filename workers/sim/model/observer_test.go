package model

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// recorder is an Observer that records what it is told, as strings, copying
// the slices it is lent.
type recorder struct{ got []string }

func (r *recorder) Stored(s StoredBlocks) {
	parent := "none"
	if s.HasParent {
		parent = fmt.Sprint(s.Parent)
	}
	r.got = append(r.got, fmt.Sprintf("stored first=%d parent=%s hashes=%v tokens=%v bs=%d",
		s.First, parent, slices.Clone(s.Hashes), slices.Clone(s.Tokens), s.BlockSize))
}

func (r *recorder) Evicted(h uint64) { r.got = append(r.got, fmt.Sprintf("evicted %d", h)) }
func (r *recorder) Cleared()         { r.got = append(r.got, "cleared") }

// toks returns n token ids counting from base.
func toks(base, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = base + i
	}
	return out
}

func TestKVCacheObserverStored(t *testing.T) {
	tests := []struct {
		name string
		run  func(c *KVCache)
		want []string
	}{
		{"a new sequence: one run with no parent", func(c *KVCache) {
			a, _ := c.Allocate(hs(1, 2), 2, 3)
			c.CommitTokens(a, hs(1, 2), toks(100, 5)) // a partial third block has no hash
		}, []string{"stored first=0 parent=none hashes=[1 2] tokens=[100 101 102 103] bs=2"}},
		{"cache hits are not stored again; the rest chains onto them", func(c *KVCache) {
			a, _ := c.Allocate(hs(1, 2), 2, 2)
			c.CommitTokens(a, hs(1, 2), toks(100, 4))
			c.Release(a)
			b, _ := c.Allocate(hs(1, 4), 4, 4)
			c.CommitTokens(b, hs(1, 4), toks(100, 8))
		}, []string{
			"stored first=0 parent=none hashes=[1 2] tokens=[100 101 102 103] bs=2",
			"stored first=2 parent=2 hashes=[3 4] tokens=[104 105 106 107] bs=2",
		}},
		{"a second commit stores only the new blocks (output after prompt)", func(c *KVCache) {
			a, _ := c.Allocate(hs(1, 1), 1, 3)
			c.CommitTokens(a, hs(1, 1), toks(100, 2))
			c.CommitTokens(a, hs(1, 3), toks(100, 6))
		}, []string{
			"stored first=0 parent=none hashes=[1] tokens=[100 101] bs=2",
			"stored first=1 parent=1 hashes=[2 3] tokens=[102 103 104 105] bs=2",
		}},
		{"a block whose hash another block holds splits the run", func(c *KVCache) {
			a, _ := c.Allocate(hs(2, 1), 0, 1) // registers hash 2 on its own
			c.CommitTokens(a, []uint64{2}, toks(0, 2))
			b, _ := c.Allocate(nil, 0, 3)
			c.CommitTokens(b, hs(1, 3), toks(100, 6))
		}, []string{
			"stored first=0 parent=none hashes=[2] tokens=[0 1] bs=2",
			"stored first=0 parent=none hashes=[1] tokens=[100 101] bs=2",
			"stored first=2 parent=2 hashes=[3] tokens=[104 105] bs=2",
		}},
		{"Commit passes no tokens", func(c *KVCache) {
			a, _ := c.Allocate(hs(1, 2), 2, 2)
			c.Commit(a, hs(1, 2))
		}, []string{"stored first=0 parent=none hashes=[1 2] tokens=[] bs=2"}},
		{"a released allocation commits nothing", func(c *KVCache) {
			a, _ := c.Allocate(hs(1, 2), 2, 2)
			c.Release(a)
			c.CommitTokens(a, hs(1, 2), toks(100, 4))
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewKVCache(8, 2)
			rec := &recorder{}
			c.SetObserver(rec)
			tt.run(c)
			require.Equal(t, tt.want, rec.got)
		})
	}
}

func TestKVCacheObserverEvicted(t *testing.T) {
	c := NewKVCache(4, 2)
	rec := &recorder{}
	c.SetObserver(rec)
	a, _ := c.Allocate(hs(1, 3), 3, 3)
	c.CommitTokens(a, hs(1, 3), toks(100, 6))
	c.Release(a)
	rec.got = nil
	x, ok := c.Allocate(nil, 0, 3) // one free block, then the LRU's tail blocks
	require.True(t, ok)
	require.Equal(t, []string{"evicted 3", "evicted 2"}, rec.got)
	c.Release(x)
}

func TestKVCacheReset(t *testing.T) {
	c := NewKVCache(4, 2)
	rec := &recorder{}
	c.SetObserver(rec)
	a, _ := c.Allocate(hs(1, 2), 2, 2)
	c.CommitTokens(a, hs(1, 2), toks(100, 4))
	rec.got = nil

	require.False(t, c.Reset(), "a referenced block blocks the reset")
	require.Empty(t, rec.got)
	require.Equal(t, 2, c.Lookup(hs(1, 2)))

	c.Release(a)
	require.True(t, c.Reset())
	require.Equal(t, []string{"cleared"}, rec.got)
	require.Equal(t, 0, c.Lookup(hs(1, 2)))
	requireKV(t, c, 0, 0, 4)

	c.SetObserver(nil)
	require.True(t, c.Reset(), "an empty cache resets; no observer is told")
	require.Equal(t, []string{"cleared"}, rec.got)
}

// ResetSilently drops what Reset would, keeps the hashed blocks a running
// sequence holds (where Reset fails), and tells the observer nothing.
func TestKVCacheResetSilently(t *testing.T) {
	c := NewKVCache(8, 2)
	rec := &recorder{}
	c.SetObserver(rec)
	a, _ := c.Allocate(hs(1, 2), 2, 2) // prefix 1, 2: released, cached
	c.CommitTokens(a, hs(1, 2), toks(100, 4))
	c.Release(a)
	b, _ := c.Allocate(hs(11, 3), 3, 3) // prefix 11..13: held by a running sequence
	c.CommitTokens(b, hs(11, 3), toks(200, 6))
	rec.got = nil

	dropped, kept := c.ResetSilently()
	require.Equal(t, 2, dropped)
	require.Equal(t, 3, kept)
	require.Empty(t, rec.got, "no Cleared, no Evicted")
	require.Equal(t, 0, c.Lookup(hs(1, 2)), "cached blocks are gone")
	require.Equal(t, 3, c.Lookup(hs(11, 3)), "referenced blocks stay findable")
	requireKV(t, c, 3, 0, 5)

	c.Release(b)
	requireKV(t, c, 0, 3, 5)
	dropped, kept = c.ResetSilently()
	require.Equal(t, 3, dropped)
	require.Zero(t, kept)
	requireKV(t, c, 0, 0, 8)
	require.Empty(t, rec.got)
}
