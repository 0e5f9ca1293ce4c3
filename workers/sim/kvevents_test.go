package sim

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/duet-serve/duet/proto/kvevents"
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
func drain(k *kvEventSink) []kvBatch {
	var out []kvBatch
	for {
		select {
		case b := <-k.queue:
			out = append(out, b)
		default:
			return out
		}
	}
}

// drainEvents returns the events of the batches queued in k, which must
// skip no sequence number.
func drainEvents(t *testing.T, k *kvEventSink) [][]kvevents.Event {
	t.Helper()
	var out [][]kvevents.Event
	for _, b := range drain(k) {
		require.Zero(t, b.skip)
		out = append(out, b.events)
	}
	return out
}

func TestKVEventSinkStoredSplitsLongRuns(t *testing.T) {
	k := newKVEventSink(4, nil, nil)
	n := kvEventMaxBlocks + 2
	k.Stored(model.StoredBlocks{Hashes: u64sFrom(10, n), Parent: 9, HasParent: true, First: 1,
		Tokens: intsFrom(0, 2*n), BlockSize: 2})
	k.flush()
	batches := drainEvents(t, k)
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
	k := newKVEventSink(4, nil, nil)
	k.Evicted(1)
	k.Evicted(2)
	k.Stored(model.StoredBlocks{Hashes: []uint64{5}, Tokens: []int{7, 8}, BlockSize: 2})
	k.Evicted(3)
	k.Cleared()
	k.flush()
	batches := drainEvents(t, k)
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
// batch queued skips its sequence number, so a subscriber sees a gap; it
// sends no AllBlocksCleared (the cache was not cleared).
func TestKVEventSinkDropsOnOverflow(t *testing.T) {
	removed := func(h uint64) []kvevents.Event {
		return []kvevents.Event{&kvevents.BlockRemoved{BlockHashes: []kvevents.BlockHash{kvevents.HashFromUint64(h)}, Medium: mediumGPU}}
	}
	k := newKVEventSink(1, nil, nil)
	k.Evicted(1)
	k.flush() // fills the queue
	k.Evicted(2)
	k.flush() // dropped
	k.Evicted(3)
	k.flush() // dropped
	require.Equal(t, uint64(2), k.stats.droppedBatches.Load())
	require.Equal(t, uint64(2), k.stats.droppedEvents.Load())
	require.Equal(t, []kvBatch{{events: removed(1)}}, drain(k))

	k.Evicted(4)
	k.flush()
	require.Equal(t, []kvBatch{{skip: 2, events: removed(4)}}, drain(k), "one number per dropped batch")
	k.Evicted(5)
	k.flush()
	require.Equal(t, []kvBatch{{events: removed(5)}}, drain(k), "skipped once")

	// Blocks whose tokens are unknown cannot be published: their step skips
	// a number too.
	k.Stored(model.StoredBlocks{Hashes: []uint64{5}, BlockSize: 2})
	k.Evicted(6)
	k.flush()
	require.Equal(t, []kvBatch{{skip: 1, events: removed(6)}}, drain(k))
	require.Equal(t, uint64(3), k.stats.droppedEvents.Load())
}

// kv_events_paused: a step that ends while it is set is discarded and
// counted, with no skipped number (the stream just goes quiet), and
// clearing it publishes the next step as usual. A number owed by a batch
// dropped before the pause is still skipped after it.
func TestKVEventSinkPaused(t *testing.T) {
	var paused atomic.Bool
	k := newKVEventSink(1, paused.Load, nil)
	k.Evicted(1)
	k.flush() // fills the queue
	k.Evicted(2)
	k.flush() // dropped: owes a skip
	drain(k)

	paused.Store(true)
	k.Evicted(3)
	k.Stored(model.StoredBlocks{Hashes: []uint64{4}, Tokens: []int{7, 8}, BlockSize: 2})
	k.flush()
	k.Stored(model.StoredBlocks{Hashes: []uint64{5}, BlockSize: 2}) // lost while paused: no skip
	k.flush()
	require.Empty(t, drain(k))
	require.Equal(t, uint64(1), k.stats.pausedBatches.Load())
	require.Equal(t, uint64(2), k.stats.pausedEvents.Load())

	paused.Store(false)
	k.Evicted(6)
	k.flush()
	got := drain(k)
	require.Len(t, got, 1)
	require.Equal(t, 1, got[0].skip, "the drop before the pause, nothing for the pause")
	require.Len(t, got[0].events, 1)
	require.IsType(t, &kvevents.BlockRemoved{}, got[0].events[0])
}

// fakePublisher records batches and numbers them as kvevents.Publisher
// does, Skip included; with gate set, Publish waits for it.
type fakePublisher struct {
	gate chan struct{}
	fail bool

	mu      sync.Mutex // guards the fields below
	batches [][]kvevents.Event
	seqs    []uint64 // of batches
	next    uint64
	closed  bool
}

var _ batchPublisher = (*fakePublisher)(nil)

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
	seq := f.next
	f.next++
	f.batches = append(f.batches, events)
	f.seqs = append(f.seqs, seq)
	return seq, nil
}

func (f *fakePublisher) Skip() (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return 0, errors.New("skip after close")
	}
	seq := f.next
	f.next++
	return seq, nil
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
	k := newKVEventSink(8, nil, nil)
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

// The publishing goroutine skips the numbers of dropped batches right
// before the batch that follows them, so the gap sits where they were lost.
func TestKVEventPublisherSkipsDroppedBatches(t *testing.T) {
	k := newKVEventSink(2, nil, nil)
	for i := range 5 { // two fill the queue, three are dropped
		k.Evicted(uint64(i))
		k.flush()
	}
	fake := &fakePublisher{}
	p := startKVEventPublisher(k, fake, zap.NewNop())
	waitUntil(t, "the queue drained", func() bool { return k.stats.publishedBatches.Load() == 2 })
	k.Evicted(9)
	k.flush()
	require.NoError(t, p.Stop())
	require.Equal(t, uint64(3), k.stats.droppedBatches.Load())
	require.Equal(t, []uint64{0, 1, 5}, fake.seqs, "three numbers skipped right before the batch after the drops")
	require.Equal(t, []uint64{9}, keys(fake.batches[2][0].(*kvevents.BlockRemoved).BlockHashes))
}

func TestKVEventPublisherCountsFailures(t *testing.T) {
	k := newKVEventSink(8, nil, nil)
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
