package kvindex

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/tokenizer"
)

func seq(n, start int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = start + i
	}
	return out
}

func TestEstimateEvictsTailsBeforePrefixes(t *testing.T) {
	c := NewCache(4, 6)
	a := tokenizer.BlockHashes(seq(16, 0), 4)   // 4 blocks
	b := tokenizer.BlockHashes(seq(12, 100), 4) // 3 blocks
	c.Sent(a)
	require.Equal(t, 4, c.Match(a).Blocks())
	c.Sent(b) // 7 blocks in a cache of 6: a's tail goes first
	require.Equal(t, 3, c.Match(a).Blocks())
	require.Equal(t, 3, c.Match(b).Blocks())
	c.Sent(a[:2]) // a's first two blocks touched again: its third is now the oldest
	c.Sent(tokenizer.BlockHashes(seq(4, 500), 4))
	require.Equal(t, 2, c.Match(a).Blocks())
	require.Equal(t, 3, c.Match(b).Blocks())
	est, ev := c.Held()
	require.Equal(t, 6, est)
	require.Equal(t, -1, ev)
	require.Equal(t, StateEstimate, mustState(c))
}

func mustState(c *Cache) State {
	s, _ := c.State()
	return s
}

// stored is a BlockStored event for blocks [from, to) of tokens, with the
// engine's hashes made distinct from duet's (as an engine's sha256 are).
func stored(tokens []int, from, to, bs int) Stored {
	s := Stored{Tokens: tokens[from*bs : to*bs], BlockSize: bs}
	for i := from; i < to; i++ {
		s.Hashes = append(s.Hashes, uint64(1000+i)^0xabcdef)
	}
	if from > 0 {
		s.Parent, s.HasParent = uint64(1000+from-1)^0xabcdef, true
	}
	return s
}

func TestEventsAreNamedByDuetHashes(t *testing.T) {
	c := NewCache(4, 100)
	c.AttachEvents()
	toks := seq(20, 7)
	hashes := tokenizer.BlockHashes(toks, 4)
	require.False(t, c.Stored(stored(toks, 0, 2, 4)).Changed())
	require.False(t, c.Stored(stored(toks, 2, 5, 4)).Changed(), "a continuation chains onto its parent")
	p := c.Match(hashes)
	require.True(t, p.FromEvents)
	require.Equal(t, 5, p.Blocks())
	require.Zero(t, p.Estimate, "the estimate learned nothing")
	c.Removed([]uint64{uint64(1000+4) ^ 0xabcdef, 99})
	require.Equal(t, 4, c.Match(hashes).Blocks())
	orphan := stored(seq(8, 900), 1, 2, 4) // its parent was never stored
	c.Stored(orphan)
	_, ev := c.Held()
	require.Equal(t, 4, ev, "a block whose parent is unknown is skipped")
	c.Sent(hashes)
	c.Cleared()
	p = c.Match(hashes)
	require.Zero(t, p.Events)
	require.Zero(t, p.Estimate, "an engine that cleared its cache holds nothing in either view")
}

func TestBlockSizeMismatchFallsBack(t *testing.T) {
	c := NewCache(32, 100)
	c.AttachEvents()
	ch := c.Stored(stored(seq(48, 0), 0, 2, 24))
	require.Equal(t, Change{From: StateEvents, To: StateFallback, Reason: "its KV block size is 24 tokens, router.tokens_per_block is 32"}, ch)
	require.False(t, c.Match(tokenizer.BlockHashes(seq(64, 0), 32)).FromEvents)
}

func TestWatchdogDemotesEventsThatDisagreeAndPromotesThemBack(t *testing.T) {
	c := NewCache(4, 1000)
	c.AttachEvents()
	toks := seq(40, 0)
	hashes := tokenizer.BlockHashes(toks, 4)
	c.Stored(stored(toks, 0, 10, 4))
	p := c.Match(hashes)
	require.Equal(t, 9, min(p.Events, 39/4))
	var last Change
	for range demoteAfter { // the engine reports none of it: its cache was reset without an event
		last = c.Observe(p, len(toks), 0)
	}
	require.Equal(t, StateFallback, last.To)
	require.NotEmpty(t, last.Reason)
	require.False(t, c.Match(hashes).FromEvents)
	for i := range watchWindow - 1 { // agreeing reports: 36 cached tokens, 9 blocks
		require.False(t, c.Observe(p, len(toks), 36).Changed(), "observation %d", i)
	}
	last = c.Observe(p, len(toks), 36)
	require.Equal(t, Change{From: StateFallback, To: StateEvents, Reason: "its KV events agree with the cached tokens it reports again"}, last)
}

func TestEventsLostFallBackUntilTheyAgree(t *testing.T) {
	c := NewCache(4, 1000)
	c.AttachEvents()
	ch := c.Lost("sequence gap")
	require.Equal(t, Change{From: StateEvents, To: StateFallback, Reason: "sequence gap"}, ch)
	require.Equal(t, StateFallback, mustState(c))
}

func TestEstimateForgottenWhenTheEngineReportsNoneOfItRepeatedly(t *testing.T) {
	c := NewCache(4, 1000)
	toks := seq(40, 0)
	hashes := tokenizer.BlockHashes(toks, 4)
	c.Sent(hashes)
	p := c.Match(hashes)
	for range estimateLostAfter - 1 {
		c.Observe(p, len(toks), 0)
	}
	require.Equal(t, 10, c.Match(hashes).Estimate, "not yet")
	c.Observe(p, len(toks), 0)
	require.Zero(t, c.Match(hashes).Estimate, "a worker restarted behind duet's back is cold")
}

func TestEventsBeyondTheCacheDemote(t *testing.T) {
	c := NewCache(1, 1)
	c.AttachEvents()
	var ch Change
	for i := range 2000 {
		if x := c.Stored(Stored{Hashes: []uint64{uint64(i)}, Tokens: []int{i}, BlockSize: 1}); x.Changed() {
			ch = x
		}
	}
	require.Equal(t, StateFallback, ch.To)
	_, ev := c.Held()
	require.LessOrEqual(t, ev, 2*1+1024, "memory stays bounded")
}

// BenchmarkMatch64Workers matches a 32k-token prompt against 64 caches that
// hold its first 2k tokens.
func BenchmarkMatch64Workers(b *testing.B) {
	hashes := tokenizer.BlockHashes(seq(32768, 0), 32)
	caches := make([]*Cache, 64)
	for i := range caches {
		caches[i] = NewCache(32, 65536)
		caches[i].Sent(hashes[:64])
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, c := range caches {
			if c.Match(hashes).Blocks() != 64 {
				b.Fatal("wrong match")
			}
		}
	}
}

// BenchmarkCacheMemory reports the estimate's bytes per indexed block: 64
// workers holding 2M tokens each (65,536 blocks of 32 tokens each).
func BenchmarkCacheMemory(b *testing.B) {
	const workers, blocks = 64, 65536
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		caches := make([]*Cache, workers)
		for w := range caches {
			caches[w] = NewCache(32, blocks)
			hs := make([]uint64, blocks)
			for i := range hs {
				hs[i] = uint64(w)<<32 | uint64(i)
			}
			caches[w].Sent(hs)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(workers*blocks), "bytes/block")
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "MiB")
		runtime.KeepAlive(caches)
	}
}

func ExampleCache() {
	c := NewCache(4, 100)
	prompt := tokenizer.BlockHashes(seq(10, 0), 4)
	c.Sent(prompt)
	fmt.Println(c.Match(prompt).Blocks())
	// Output: 2
}

func TestReportedBlockSizeMismatch(t *testing.T) {
	estimateOnly := NewCache(32, 100)
	ch := estimateOnly.BlockSizeMismatch(16)
	require.Equal(t, Change{From: StateEstimate, To: StateEstimate, Reason: "its KV block size is 16 tokens, router.tokens_per_block is 32"}, ch)
	state, why := estimateOnly.State()
	require.Equal(t, StateEstimate, state)
	require.Equal(t, ch.Reason, why)

	fits := NewCache(32, 100)
	fits.AttachEvents()
	require.Equal(t, StateEvents, fits.BlockSizeMismatch(64).To, "64-token blocks are two of duet's each")

	withEvents := NewCache(32, 100)
	withEvents.AttachEvents()
	require.Equal(t, StateFallback, withEvents.BlockSizeMismatch(48).To)
	toks := seq(64, 0)
	hashes := tokenizer.BlockHashes(toks, 32)
	p := withEvents.Match(hashes)
	for range 2 * watchWindow { // agreeing reports never promote events of the wrong block size
		withEvents.Observe(p, len(toks), 0)
	}
	require.Equal(t, StateFallback, mustState(withEvents))
}

// Engine blocks that divide duet's, or that duet's divide, are named by
// duet's blocks: an engine block completes the duet blocks whose last token
// it holds, and removing it removes them.
func TestEventsOfOtherFittingBlockSizes(t *testing.T) {
	toks := seq(96, 3)
	hashes := tokenizer.BlockHashes(toks, 8) // 12 duet blocks of 8
	for _, tc := range []struct {
		name          string
		engine        int
		removeTail    int // engine blocks removed from the end
		wantAfterTail int
	}{
		{"finer: 4-token engine blocks", 4, 3, 10},     // 24 engine blocks; removing 3 leaves 84 tokens: 10 duet blocks
		{"coarser: 16-token engine blocks", 16, 1, 10}, // 6 engine blocks; removing 1 leaves 80 tokens
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCache(8, 1000)
			c.AttachEvents()
			n := len(toks) / tc.engine
			// Stored in three events, each chained onto the last.
			for _, r := range [][2]int{{0, 1}, {1, n / 2}, {n / 2, n}} {
				require.False(t, c.Stored(stored(toks, r[0], r[1], tc.engine)).Changed())
			}
			require.Equal(t, 12, c.Match(hashes).Events)
			var tail []uint64
			for i := n - tc.removeTail; i < n; i++ {
				tail = append(tail, uint64(1000+i)^0xabcdef)
			}
			c.Removed(tail)
			require.Equal(t, tc.wantAfterTail, c.Match(hashes).Events)
		})
	}
}
