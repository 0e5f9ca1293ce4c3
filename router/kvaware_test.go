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

// kv-aware remembers as many blocks per worker as the worker's cache holds:
// kv_blocks_per_worker, else what the worker reported, else the default;
// a worker that reports another size (restarted) starts empty.
func TestKVAwareRemembersWhatEachWorkersCacheHolds(t *testing.T) {
	p := fleet(1, 1)
	reportCacheSizes(p, 8) // 2 blocks of 4 tokens
	cfg := Defaults()
	cfg.TokensPerBlock = 4
	k := newKVAware(cfg, p)
	k.remember("ctx-0", []uint64{1, 2, 3})
	require.Equal(t, 2, k.blocks["ctx-0"].capacity)
	require.Equal(t, 0, k.matched("ctx-0", []uint64{1, 2, 3}), "block 1 was evicted")
	require.Equal(t, 2, k.matched("ctx-0", []uint64{2, 3}))

	reportCacheSizes(p, 40)
	k.remember("ctx-0", []uint64{9})
	require.Equal(t, 10, k.blocks["ctx-0"].capacity)
	require.Equal(t, 0, k.matched("ctx-0", []uint64{2, 3}), "a new size: a restarted, empty cache")

	cfg.KVBlocksPerWorker = 3
	k = newKVAware(cfg, p)
	k.remember("ctx-0", []uint64{1})
	require.Equal(t, 3, k.blocks["ctx-0"].capacity, "a set kv_blocks_per_worker wins")
	reportCacheSizes(p, 0)
	cfg.KVBlocksPerWorker = 0
	k = newKVAware(cfg, p)
	k.remember("ctx-0", []uint64{1})
	require.Equal(t, DefaultKVBlocksPerWorker, k.blocks["ctx-0"].capacity, "nothing reported: the default")
}

func TestCacheSizeSaysWhereItComesFrom(t *testing.T) {
	p := fleet(1, 1)
	ep := p.Get("ctx-0")
	cfg := Defaults()
	n, src := cfg.cacheSize(ep)
	require.Equal(t, int64(DefaultKVBlocksPerWorker*cfg.TokensPerBlock), n)
	require.Equal(t, CacheSizeDefault, src)
	reportCacheSizes(p, 1000)
	n, src = cfg.cacheSize(ep)
	require.Equal(t, int64(1000), n)
	require.Equal(t, CacheSizeReported, src)
	cfg.KVBlocksPerWorker = 2
	n, src = cfg.cacheSize(ep)
	require.Equal(t, int64(2*cfg.TokensPerBlock), n)
	require.Equal(t, CacheSizeConfig, src)
	n, src = cfg.cacheSize(nil)
	require.Equal(t, int64(2*cfg.TokensPerBlock), n)
	require.Equal(t, CacheSizeConfig, src)

	cfg.KVBlocksPerWorker = -1
	require.ErrorContains(t, cfg.Validate(), "kv_blocks_per_worker: must be 0 (as each worker reports) or between 1 and")
}
