package sim

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/duet-serve/duet/router/kvevents"
	"github.com/duet-serve/duet/workers/sim/model"
)

// intsFrom returns n ints counting from base.
func intsFrom(base, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = base + i
	}
	return out
}

func u64sFrom(base uint64, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = base + uint64(i)
	}
	return out
}

func keys(hs []kvevents.BlockHash) []uint64 {
	out := make([]uint64, len(hs))
	for i, h := range hs {
		out[i] = h.Key()
	}
	return out
}

// drain returns the batches queued in k.
func drain(k *kvEventSink) [][]kvevents.Event {
	var out [][]kvevents.Event
	for {
		select {
		case b := <-k.queue:
			out = append(out, b)
		default:
			return out
		}
	}
}

func TestKVEventSinkStoredSplitsLongRuns(t *testing.T) {
	k := newKVEventSink(4)
	n := kvEventMaxBlocks + 2
	k.Stored(model.StoredBlocks{Hashes: u64sFrom(10, n), Parent: 9, HasParent: true, First: 1,
		Tokens: intsFrom(0, 2*n), BlockSize: 2})
	k.flush()
	batches := drain(k)
	require.Len(t, batches, 1)
	require.Len(t, batches[0], 2)
	first, second := batches[0][0].(*kvevents.BlockStored), batches[0][1].(*kvevents.BlockStored)
	require.True(t, first.HasParent)
	require.Equal(t, uint64(9), first.ParentBlockHash.Key())
	require.Equal(t, u64sFrom(10, kvEventMaxBlocks), keys(first.BlockHashes))
	require.Equal(t, intsFrom(0, 2*kvEventMaxBlocks), first.TokenIDs)
	require.Equal(t, 2, first.BlockSize)
	require.Equal(t, mediumGPU, first.Medium)
	require.True(t, second.HasParent, "the second part chains onto the first")
	require.Equal(t, first.BlockHashes[len(first.BlockHashes)-1], second.ParentBlockHash)
	require.Equal(t, u64sFrom(10+uint64(kvEventMaxBlocks), 2), keys(second.BlockHashes))
	require.Equal(t, intsFrom(2*kvEventMaxBlocks, 4), second.TokenIDs)
}

func TestKVEventSinkCoalescesEvictions(t *testing.T) {
	k := newKVEventSink(4)
	k.Evicted(1)
	k.Evicted(2)
	k.Stored(model.StoredBlocks{Hashes: []uint64{5}, Tokens: []int{7, 8}, BlockSize: 2})
	k.Evicted(3)
	k.Cleared()
	k.flush()
	batches := drain(k)
	require.Len(t, batches, 1, "one step, one batch")
	b := batches[0]
	require.Len(t, b, 4)
	require.Equal(t, []uint64{1, 2}, keys(b[0].(*kvevents.BlockRemoved).BlockHashes))
	require.Equal(t, mediumGPU, b[0].(*kvevents.BlockRemoved).Medium)
	require.False(t, b[1].(*kvevents.BlockStored).HasParent)
	require.Equal(t, []uint64{3}, keys(b[2].(*kvevents.BlockRemoved).BlockHashes))
	require.IsType(t, &kvevents.AllBlocksCleared{}, b[3])

	k.flush()
	require.Empty(t, drain(k), "an empty step queues nothing")
}

// A batch that finds the queue full is dropped and counted, and the next
// batch that is queued starts with AllBlocksCleared, so a subscriber drops
// what it may have missed.
func TestKVEventSinkDropsOnOverflow(t *testing.T) {
	k := newKVEventSink(1)
	k.Evicted(1)
	k.flush() // fills the queue
	k.Evicted(2)
	k.flush() // dropped
	require.Equal(t, uint64(1), k.stats.droppedBatches.Load())
	require.Equal(t, uint64(1), k.stats.droppedEvents.Load())
	require.Equal(t, [][]kvevents.Event{{&kvevents.BlockRemoved{BlockHashes: []kvevents.BlockHash{kvevents.HashFromUint64(1)}, Medium: mediumGPU}}}, drain(k))

	k.Evicted(3)
	k.flush()
	got := drain(k)
	require.Len(t, got, 1)
	require.Len(t, got[0], 2)
	require.IsType(t, &kvevents.AllBlocksCleared{}, got[0][0])
	require.Equal(t, []uint64{3}, keys(got[0][1].(*kvevents.BlockRemoved).BlockHashes))

	k.Evicted(4)
	k.flush()
	got = drain(k)
	require.Len(t, got[0], 1, "the marker is sent once")

	// Blocks whose tokens are unknown cannot be published: lost as well.
	k.Stored(model.StoredBlocks{Hashes: []uint64{5}, BlockSize: 2})
	k.Evicted(6)
	k.flush()
	got = drain(k)
	require.IsType(t, &kvevents.AllBlocksCleared{}, got[0][0])
	require.Equal(t, uint64(2), k.stats.droppedEvents.Load())
}

// fakePublisher records batches; with gate set, Publish waits for it.
type fakePublisher struct {
	gate chan struct{}
	fail bool

	mu      sync.Mutex // guards the fields below
	batches [][]kvevents.Event
	closed  bool
}

func (f *fakePublisher) Publish(events ...kvevents.Event) (uint64, error) {
	if f.gate != nil {
		<-f.gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return 0, errors.New("publish after close")
	}
	if f.fail {
		return 0, errors.New("send failed")
	}
	f.batches = append(f.batches, events)
	return uint64(len(f.batches) - 1), nil
}

func (f *fakePublisher) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

// Stop publishes what was queued, in order, then closes the publisher; a
// publisher that blocks holds up only the goroutine, never flush.
func TestKVEventPublisherStopDrainsQueue(t *testing.T) {
	k := newKVEventSink(8)
	fake := &fakePublisher{gate: make(chan struct{})}
	p := startKVEventPublisher(k, fake, zap.NewNop())
	for i := range 5 {
		k.Evicted(uint64(i))
		k.flush() // never blocks, though the publisher is stuck
	}
	close(fake.gate)
	require.NoError(t, p.Stop())
	require.True(t, fake.closed)
	require.Len(t, fake.batches, 5)
	for i, b := range fake.batches {
		require.Equal(t, []uint64{uint64(i)}, keys(b[0].(*kvevents.BlockRemoved).BlockHashes))
	}
	require.Equal(t, uint64(5), k.stats.publishedBatches.Load())
	require.Equal(t, uint64(5), k.stats.publishedEvents.Load())
}

func TestKVEventPublisherCountsFailures(t *testing.T) {
	k := newKVEventSink(8)
	fake := &fakePublisher{fail: true}
	p := startKVEventPublisher(k, fake, zap.NewNop())
	k.Evicted(1)
	k.Evicted(2)
	k.Cleared()
	k.flush()
	require.NoError(t, p.Stop())
	require.Equal(t, uint64(1), k.stats.failedBatches.Load())
	require.Equal(t, uint64(2), k.stats.failedEvents.Load())
	require.Zero(t, k.stats.publishedBatches.Load())
}
