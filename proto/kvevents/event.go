package kvevents

// Event is one KV cache event: *BlockStored, *BlockRemoved or
// *AllBlocksCleared. The set is closed (the unexported method); a consumer
// switches on the concrete type.
type Event interface {
	kvEvent()
}

// BlockStored reports that full KV blocks were stored, in prefix order: block
// i's parent is block i-1, block 0's parent is ParentBlockHash.
//
// Optional wire fields that were absent or null decode to their zero value
// ("" for strings, nil for pointers); the engine's own None and an absent field
// are not distinguished, as neither vLLM nor SGLang gives them different
// meanings.
type BlockStored struct {
	// BlockHashes are the stored blocks, in order. Never empty after decoding.
	BlockHashes []BlockHash
	// ParentBlockHash is the hash of the block before BlockHashes[0]; valid only
	// when HasParent (false: the blocks start the sequence).
	ParentBlockHash BlockHash
	HasParent       bool
	// TokenIDs are the tokens of all the blocks, concatenated
	// (len = len(BlockHashes)*BlockSize for full blocks).
	TokenIDs []int
	// BlockSize is the number of tokens per block.
	BlockSize int
	// LoraID is vLLM's deprecated numeric LoRA id; nil without LoRA.
	LoraID *int64
	// Medium is the storage tier: vLLM "GPU", "CPU", "STORAGE"; SGLang "GPU",
	// "CPU_PINNED", "DISK", "EXTERNAL". "" when not sent (read it as "GPU").
	Medium string
	// LoraName is the LoRA adapter name (vLLM >= #27577); "" without LoRA.
	LoraName string
	// CacheSalt is SGLang's cache_salt (its BlockStored field, or the legacy
	// metadata map); vLLM sends the salt inside ExtraKeys instead.
	CacheSalt string
	// SessionID is the session that emitted the event (vLLM and SGLang, newer).
	SessionID string
	// ExtraKeys is vLLM's extra_keys value as raw msgpack (per-block keys that
	// went into the hash: multimodal ids, LoRA, cache_salt), relayed opaque; nil
	// when absent.
	ExtraKeys []byte
	// GroupIdx is vLLM's KV cache group (hybrid attention); nil when absent.
	GroupIdx *int64
	// KVCacheSpecKind ("full_attention", "sliding_window", ...) and
	// KVCacheSpecSlidingWindow describe the group (vLLM #40984).
	KVCacheSpecKind          string
	KVCacheSpecSlidingWindow *int64
	// Locality is "LOCAL" or "REMOTE" relative to the publisher; Ownership names
	// a secondary offloading tier (newer vLLM).
	Locality  string
	Ownership string
	// EventVersion is vLLM's event_version (newest vLLM, default 1); 0 when
	// absent.
	EventVersion int64
}

// BlockRemoved reports that blocks were evicted from Medium.
type BlockRemoved struct {
	// BlockHashes are the removed blocks. Never empty after decoding.
	BlockHashes []BlockHash
	// Medium is the tier the blocks left; "" when not sent (read it as "GPU").
	Medium string
	// GroupIdx is vLLM's KV cache group; nil when absent.
	GroupIdx *int64
	// Locality and Ownership are as in BlockStored.
	Locality  string
	Ownership string
}

// AllBlocksCleared reports that the engine dropped its whole prefix cache.
type AllBlocksCleared struct{}

func (*BlockStored) kvEvent()      {}
func (*BlockRemoved) kvEvent()     {}
func (*AllBlocksCleared) kvEvent() {}

// Batch is one published message: the events of one engine step.
type Batch struct {
	// Topic is the ZeroMQ topic frame the batch came with ("" by default).
	Topic string
	// Seq is the publisher's sequence number (the 8-byte big-endian frame). vLLM
	// and SGLang count from 0 per publisher process; a newer TensorRT-LLM
	// publisher starts at its wall clock in nanoseconds.
	Seq uint64
	// TS is the engine's wall clock when it built the batch, in Unix seconds.
	TS float64
	// Events are the batch's events in order. Empty for a heartbeat.
	Events []Event
	// DataParallelRank is vLLM's data_parallel_rank, SGLang's attn_dp_rank;
	// nil when not sent.
	DataParallelRank *int64
}

// Layout is how events are laid out in the msgpack payload.
type Layout int

const (
	// LayoutMap encodes each event as a map tagged by a "type" key: vLLM after
	// #42892 (releases after v0.23), SGLang after #37482.
	LayoutMap Layout = iota
	// LayoutArray encodes each event as an array whose first element is the tag
	// (msgspec array_like=True): vLLM up to v0.23, older SGLang.
	LayoutArray
)

// String names the layout.
func (l Layout) String() string {
	switch l {
	case LayoutMap:
		return "map"
	case LayoutArray:
		return "array"
	default:
		return "unknown"
	}
}
