package sim

import (
	"sync/atomic"

	"github.com/duet-serve/duet/proto/kvevents"
	"github.com/duet-serve/duet/workers/sim/model"
)

// KV events: with kv_events_endpoint set, the worker publishes its KV cache's
// block events as vLLM does (vllm/v1/core/block_pool.py): BlockStored when
// full blocks get their hash (here: when a sequence commits, see
// seqBlocks), with the parent block's hash (null for a sequence's first
// block), the blocks' token ids and block_size; BlockRemoved when a cached
// block is evicted; AllBlocksCleared when the cache is reset
// (POST /reset_prefix_cache). Block hashes are the sim's own chained hashes,
// sent as integers (vLLM's VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES form); a
// subscriber names blocks by their token ids, not by these values. The
// blocks of a LoRA adapter's sequence (lora.go; their hashes are salted
// with the adapter) carry lora_name and lora_id, the adapter's lora_int_id,
// as vLLM's do; vLLM's extra_keys, which also name the adapter per block,
// are not sent.
//
// Differences from vLLM, none visible to a subscriber that follows the
// protocol: consecutive evictions of one step share one BlockRemoved (vLLM
// sends one per block); a long run of stored blocks is split into several
// BlockStored events, each chained onto the one before, and a step's
// events into several batches, so no payload nears kvevents.MaxPayloadBytes;
// and where vLLM's publisher queue blocks the engine when full, the sim's
// drops the batch (counted) and skips its sequence number
// (kvevents.Publisher.Skip) before publishing the next one queued, so a
// subscriber sees a gap no replay can fill and resets. (The sim used to
// send AllBlocksCleared instead; that claimed the cache was empty while it
// was not, where a reset says what is true: the subscriber no longer knows.)
//
// Two faults (faults.go) break the stream on purpose: kv_events_paused
// discards every step's events while set, with no gap and no
// AllBlocksCleared; reset_cache_silently empties the cache without
// AllBlocksCleared.

// Bounds on what the sim puts in one event, one batch and the queue.
const (
	kvEventMaxBlocks   = 1024    // block hashes per event
	kvEventMaxTokens   = 1 << 17 // token ids per BlockStored
	kvBatchMaxItems    = 1 << 20 // hashes plus token ids per batch (~5-9 MiB encoded)
	kvEventQueueLength = 1024    // batches waiting for the publishing goroutine
)

// mediumGPU is vLLM's MEDIUM_GPU, the medium of every event the sim sends.
const mediumGPU = "GPU"

// kvEventSink is the KV cache's observer when KV events are on. It turns the
// cache's block events into vLLM events, collects one scheduler step's
// events into batches, and at the step's end (flush, from scheduler.unlock)
// hands them to the publishing goroutine through a bounded queue, never
// blocking: a batch that does not fit is dropped and counted.
type kvEventSink struct {
	// paused reports whether kv_events_paused is set (faults.kvEventsPaused);
	// nil: never. flush asks it once per step with events.
	paused func() bool
	// loraIDs is each LoRA adapter's lora_id (see adapterIDs); read-only.
	loraIDs map[string]int64

	// step, items, stepLost and skip are guarded by scheduler.mu: the cache
	// calls the observer methods under it, and flush runs under it.
	step     [][]kvevents.Event // the step's batches; the last one is open
	items    int                // hashes plus tokens in the open batch
	stepLost bool               // the step lost an event (blocks without tokens)
	skip     int                // sequence numbers the next batch queued skips: batches lost since the last one queued

	// queue carries batches to the publishing goroutine (kvEventPublisher.run).
	queue chan kvBatch
	stats kvEventCounters
}

// kvBatch is one batch on its way to the publisher: skip sequence numbers
// to skip first (kvevents.Publisher.Skip), one per batch lost just before
// it, then events to publish.
type kvBatch struct {
	skip   int
	events []kvevents.Event
}

var _ model.Observer = (*kvEventSink)(nil)

// kvEventCounters count batches and events by outcome; atomics.
type kvEventCounters struct {
	publishedBatches, publishedEvents atomic.Uint64 // sent (or kept for replay with no subscriber)
	droppedBatches, droppedEvents     atomic.Uint64 // the queue was full, or the blocks' tokens were unknown
	failedBatches, failedEvents       atomic.Uint64 // the publisher returned an error
	pausedBatches, pausedEvents       atomic.Uint64 // discarded while kv_events_paused was set
}

// newKVEventSink returns a sink whose queue holds queueLength batches;
// paused (nil: never) says when to discard steps (kv_events_paused);
// adapters are the worker's LoRA adapters (lora_adapters), in order.
func newKVEventSink(queueLength int, paused func() bool, adapters []string) *kvEventSink {
	return &kvEventSink{paused: paused, loraIDs: adapterIDs(adapters), queue: make(chan kvBatch, queueLength)}
}

// Stored implements model.Observer: BlockStored, split into events of at
// most kvEventMaxBlocks blocks and kvEventMaxTokens tokens. Blocks of a LoRA
// adapter's sequence carry its lora_name and lora_id.
func (k *kvEventSink) Stored(b model.StoredBlocks) {
	if len(b.Tokens) != len(b.Hashes)*b.BlockSize {
		// A BlockStored without its tokens is useless to a subscriber and
		// breaks its chain: treat it as lost. The sim always passes them.
		k.stats.droppedEvents.Add(1)
		k.stepLost = true
		return
	}
	per := max(1, min(kvEventMaxBlocks, kvEventMaxTokens/b.BlockSize))
	parent, hasParent := b.Parent, b.HasParent
	for from := 0; from < len(b.Hashes); from += per {
		to := min(from+per, len(b.Hashes))
		ev := &kvevents.BlockStored{
			BlockHashes:     wireHashes(b.Hashes[from:to]),
			ParentBlockHash: kvevents.HashFromUint64(parent),
			HasParent:       hasParent,
			TokenIDs:        append([]int(nil), b.Tokens[from*b.BlockSize:to*b.BlockSize]...),
			BlockSize:       b.BlockSize,
			Medium:          mediumGPU,
		}
		if b.LoRA != "" {
			// vLLM: lora_id=request.lora_request.adapter_id, lora_name=request.lora_request.name
			// (vllm/v1/core/block_pool.py cache_full_blocks).
			id := k.loraIDs[b.LoRA]
			ev.LoraID, ev.LoraName = &id, b.LoRA
		}
		k.add(ev, len(ev.BlockHashes)+len(ev.TokenIDs))
		parent, hasParent = b.Hashes[to-1], true
	}
}

// Evicted implements model.Observer: BlockRemoved, extending the open
// batch's last event when it is a BlockRemoved with room.
func (k *kvEventSink) Evicted(hash uint64) {
	if n := len(k.step); n > 0 && len(k.step[n-1]) > 0 {
		open := k.step[n-1]
		if r, ok := open[len(open)-1].(*kvevents.BlockRemoved); ok && len(r.BlockHashes) < kvEventMaxBlocks && k.items < kvBatchMaxItems {
			r.BlockHashes = append(r.BlockHashes, kvevents.HashFromUint64(hash))
			k.items++
			return
		}
	}
	k.add(&kvevents.BlockRemoved{BlockHashes: []kvevents.BlockHash{kvevents.HashFromUint64(hash)}, Medium: mediumGPU}, 1)
}

// Cleared implements model.Observer: AllBlocksCleared.
func (k *kvEventSink) Cleared() { k.add(&kvevents.AllBlocksCleared{}, 0) }

// add appends ev to the open batch, opening a new one when ev would take it
// past kvBatchMaxItems.
func (k *kvEventSink) add(ev kvevents.Event, items int) {
	if n := len(k.step); n == 0 || (len(k.step[n-1]) > 0 && k.items+items > kvBatchMaxItems) {
		k.step = append(k.step, nil)
		k.items = 0
	}
	k.step[len(k.step)-1] = append(k.step[len(k.step)-1], ev)
	k.items += items
}

// flush hands the step's batches to the publishing goroutine without
// blocking and starts the next step. While kv_events_paused is set the
// step is discarded (counted) and leaves no trace: no skipped number, so
// the stream looks merely quiet. A batch that finds the queue full is
// dropped (counted) and the next batch queued skips its sequence number; a
// step that lost an event skips one too. Called under scheduler.mu.
func (k *kvEventSink) flush() {
	if len(k.step) == 0 && !k.stepLost {
		return
	}
	if k.paused != nil && k.paused() {
		for _, b := range k.step {
			if len(b) > 0 {
				k.stats.pausedBatches.Add(1)
				k.stats.pausedEvents.Add(uint64(len(b)))
			}
		}
		k.reset()
		return
	}
	if k.stepLost {
		k.skip++
	}
	for _, b := range k.step {
		if len(b) == 0 {
			continue
		}
		select {
		case k.queue <- kvBatch{skip: k.skip, events: b}:
			k.skip = 0
		default:
			k.stats.droppedBatches.Add(1)
			k.stats.droppedEvents.Add(uint64(len(b)))
			k.skip++
		}
	}
	k.reset()
}

// reset starts the next step, keeping skip. Called under scheduler.mu.
func (k *kvEventSink) reset() {
	clear(k.step)
	k.step, k.items, k.stepLost = k.step[:0], 0, false
}

// wireHashes converts the sim's chained hashes to integer block hashes.
func wireHashes(hs []uint64) []kvevents.BlockHash {
	out := make([]kvevents.BlockHash, len(hs))
	for i, h := range hs {
		out[i] = kvevents.HashFromUint64(h)
	}
	return out
}
