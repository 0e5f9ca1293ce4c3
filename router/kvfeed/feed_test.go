package kvfeed

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/proto/kvevents"
	"github.com/duet-serve/duet/router"
	"github.com/duet-serve/duet/router/kvindex"
	"github.com/duet-serve/duet/tokenizer"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// world is a router over one ctx worker that publishes KV events at
// endpoint, and one gen worker that publishes none, with a running feed.
type world struct {
	rt       *router.Router
	ctx      *router.Endpoint
	endpoint string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	endpoint := fmt.Sprintf("tcp://127.0.0.1:%d", freePort(t))
	pool := router.NewPool()
	pool.Sync([]router.Member{
		{ID: "ctx-0", URL: "http://127.0.0.1:1", Role: disagg.RoleContext, Healthy: true, KVCacheTokens: 32 * 1000, KVEvents: endpoint},
		{ID: "gen-0", URL: "http://127.0.0.1:2", Role: disagg.RoleGeneration, Healthy: true},
	})
	rt, err := router.New(pool, router.Defaults(), nil)
	require.NoError(t, err)
	feed := New(rt, zaptest.NewLogger(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); feed.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return &world{rt: rt, ctx: pool.Get("ctx-0"), endpoint: endpoint}
}

func publisher(t *testing.T, endpoint string) *kvevents.Publisher {
	t.Helper()
	p, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: endpoint}, zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// stored is the BlockStored a vLLM engine sends for blocks [from, to) of
// tokens (32-token blocks), with engine hashes unlike duet's.
func stored(tokens []int, from, to int) *kvevents.BlockStored {
	e := &kvevents.BlockStored{TokenIDs: tokens[from*32 : to*32], BlockSize: 32}
	for i := from; i < to; i++ {
		e.BlockHashes = append(e.BlockHashes, kvevents.HashFromUint64(uint64(7_000_000+i)))
	}
	if from > 0 {
		e.ParentBlockHash, e.HasParent = kvevents.HashFromUint64(uint64(7_000_000+from-1)), true
	}
	return e
}

// until publishes events until cond holds: a subscriber that has just
// connected misses what was published before (ZeroMQ's slow joiner).
func until(t *testing.T, p *kvevents.Publisher, cond func() bool, events ...kvevents.Event) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, err := p.Publish(events...)
		require.NoError(t, err)
		return cond()
	}, 15*time.Second, 20*time.Millisecond)
}

func TestFeedIndexesAWorkersEvents(t *testing.T) {
	w := newWorld(t)
	pub := publisher(t, w.endpoint)
	tokens := make([]int, 32*6)
	for i := range tokens {
		tokens[i] = 100 + i
	}
	hashes := tokenizer.BlockHashes(tokens, 32)
	match := func() kvindex.Prediction { return w.rt.Cache(w.ctx).Match(hashes) }
	until(t, pub, func() bool { return match().Events == 4 }, stored(tokens, 0, 4))
	require.True(t, match().FromEvents)
	require.Zero(t, match().Estimate, "the estimate learned nothing: duet sent nothing")
	state, _ := w.rt.Cache(w.ctx).State()
	require.Equal(t, kvindex.StateEvents, state)

	until(t, pub, func() bool { return match().Events == 6 }, stored(tokens, 4, 6))
	until(t, pub, func() bool { return match().Events == 4 }, // engines evict a sequence's tail first
		&kvevents.BlockRemoved{BlockHashes: []kvevents.BlockHash{kvevents.HashFromUint64(7_000_005), kvevents.HashFromUint64(7_000_004)}})
	until(t, pub, func() bool { return match().Events == 0 }, &kvevents.AllBlocksCleared{})

	offloaded := stored(tokens, 0, 2)
	offloaded.Medium = "CPU"
	lora := stored(tokens, 0, 2)
	lora.LoraName = "adapter"
	for i := range lora.BlockHashes { // an adapter's blocks have hashes of their own in the engine
		lora.BlockHashes[i] = kvevents.HashFromUint64(uint64(8_000_000 + i))
	}
	numbered := stored(tokens, 0, 2)
	numbered.LoraID = new(int64) // a LoRA adapter known only by its number: duet cannot name its chain
	for i := range numbered.BlockHashes {
		numbered.BlockHashes[i] = kvevents.HashFromUint64(uint64(9_000_000 + i))
	}
	adapterHashes := tokenizer.SaltedBlockHashes(tokens, 32, tokenizer.AdapterSalt("adapter", ""))
	adapterMatch := func() kvindex.Prediction { return w.rt.Cache(w.ctx).Match(adapterHashes) }
	until(t, pub, func() bool { return adapterMatch().Events == 2 }, offloaded, lora, numbered)
	until(t, pub, func() bool { return match().Events == 1 }, stored(tokens, 0, 1))
	require.Equal(t, 1, match().Events, "blocks offloaded from the GPU or stored for an adapter are not the base model's")
	require.Equal(t, 2, adapterMatch().Events, "an adapter's blocks are indexed on its own chain")
	require.Zero(t, w.rt.Cache(w.ctx).Match(tokenizer.SaltedBlockHashes(tokens, 32, tokenizer.AdapterSalt("other", ""))).Events)
}

func TestFeedFallsBackWhenEventsAreLost(t *testing.T) {
	w := newWorld(t)
	pub := publisher(t, w.endpoint)
	tokens := make([]int, 64)
	until(t, pub, func() bool { return w.rt.Cache(w.ctx).Match(tokenizer.BlockHashes(tokens, 32)).Events == 2 }, stored(tokens, 0, 2))
	_, err := pub.Skip() // a batch the engine could not send: a gap no replay socket fills
	require.NoError(t, err)
	until(t, pub, func() bool { s, _ := w.rt.Cache(w.ctx).State(); return s == kvindex.StateFallback }, &kvevents.AllBlocksCleared{})
	_, why := w.rt.Cache(w.ctx).State()
	require.Contains(t, why, "gap")
}

func TestFeedFollowsMembership(t *testing.T) {
	w := newWorld(t)
	pool := w.rt.Pool()
	pool.Sync([]router.Member{{ID: "gen-0", URL: "http://127.0.0.1:2", Role: disagg.RoleGeneration, Healthy: true}})
	// ctx-0 is gone: its subscriber stops (the feed joins it at the end of
	// the test); a worker added with events gets one.
	endpoint := fmt.Sprintf("tcp://127.0.0.1:%d", freePort(t))
	pool.Sync([]router.Member{
		{ID: "gen-0", URL: "http://127.0.0.1:2", Role: disagg.RoleGeneration, Healthy: true},
		{ID: "ctx-1", URL: "http://127.0.0.1:3", Role: disagg.RoleContext, Healthy: true, KVEvents: endpoint},
	})
	pub := publisher(t, endpoint)
	tokens := make([]int, 32)
	ep := pool.Get("ctx-1")
	until(t, pub, func() bool { return w.rt.Cache(ep).Match(tokenizer.BlockHashes(tokens, 32)).Events == 1 }, stored(tokens, 0, 1))
}
