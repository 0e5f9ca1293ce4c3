package kvevents

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// BlockUpdated reports that a block changed cache level or priority without
// being stored or removed. Only TensorRT-LLM sends it ("updated"); a block
// moving to CacheLevel 1 went from GPU to host memory.
type BlockUpdated struct {
	BlockHash BlockHash
	// CacheLevel and OldCacheLevel are set when the level changed (0 the
	// primary, GPU, pool; 1 the secondary, host, pool).
	CacheLevel, OldCacheLevel *int64
	// Priority and OldPriority are set when the retention priority changed.
	Priority, OldPriority *int64
}

func (*BlockUpdated) kvEvent() {}

// TRTLLMEvent is one event from trtllm-serve's POST /kv_cache_events.
type TRTLLMEvent struct {
	// EventID is the engine's event counter.
	EventID uint64
	// WindowSize is the attention window of the cache the event belongs to
	// (newer TensorRT-LLM; 0 when absent).
	WindowSize int64
	// AttentionDPRank is set under attention data parallelism.
	AttentionDPRank *int64
	// Event is *BlockStored, *BlockRemoved, *BlockUpdated, or
	// *AllBlocksCleared for "created" (a new, empty cache).
	Event Event
}

// trtllmWire mirrors KVCacheEventSerializer (tensorrt_llm/_utils.py).
type trtllmWire struct {
	EventID         *uint64         `json:"event_id"`
	Data            json.RawMessage `json:"data"`
	WindowSize      *int64          `json:"window_size"`
	AttentionDPRank *int64          `json:"attention_dp_rank"`
}

type trtllmData struct {
	Type        string          `json:"type"`
	ParentHash  *uint64         `json:"parent_hash"`
	Blocks      []trtllmBlock   `json:"blocks"`
	BlockHashes []uint64        `json:"block_hashes"`
	BlockHash   *uint64         `json:"block_hash"`
	CacheLevel  *trtllmDiff     `json:"cache_level"`
	Priority    *trtllmDiff     `json:"priority"`
	NumBlocks   json.RawMessage `json:"num_blocks_per_cache_level"`
}

type trtllmBlock struct {
	BlockHash *uint64 `json:"block_hash"`
	Tokens    []struct {
		TokenID *int64 `json:"token_id"`
	} `json:"tokens"`
	CacheLevel *int64 `json:"cache_level"`
}

type trtllmDiff struct {
	NewValue *int64 `json:"new_value"`
	OldValue *int64 `json:"old_value"`
}

// DecodeTRTLLMEvents decodes the JSON array that trtllm-serve's POST
// /kv_cache_events returns. Errors wrap ErrMalformed; bodies over
// MaxPayloadBytes are refused.
func DecodeTRTLLMEvents(body []byte) ([]TRTLLMEvent, error) {
	if len(body) > MaxPayloadBytes {
		return nil, fmt.Errorf("%w: %d bytes exceed %d", ErrMalformed, len(body), MaxPayloadBytes)
	}
	var wire []trtllmWire
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&wire); err != nil {
		return nil, fmt.Errorf("%w: trtllm events: %w", ErrMalformed, err)
	}
	if len(wire) > MaxEventsPerBatch {
		return nil, fmt.Errorf("%w: %d trtllm events exceed %d", ErrMalformed, len(wire), MaxEventsPerBatch)
	}
	out := make([]TRTLLMEvent, 0, len(wire))
	for i, w := range wire {
		if w.EventID == nil {
			return nil, fmt.Errorf("%w: trtllm events[%d]: no event_id", ErrMalformed, i)
		}
		ev, err := trtllmEvent(w.Data)
		if err != nil {
			return nil, fmt.Errorf("%w: trtllm events[%d]: %w", ErrMalformed, i, err)
		}
		te := TRTLLMEvent{EventID: *w.EventID, AttentionDPRank: w.AttentionDPRank, Event: ev}
		if w.WindowSize != nil {
			te.WindowSize = *w.WindowSize
		}
		out = append(out, te)
	}
	return out, nil
}

func trtllmEvent(raw json.RawMessage) (Event, error) {
	var d trtllmData
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, err
	}
	switch d.Type {
	case "created":
		return &AllBlocksCleared{}, nil
	case "stored":
		if len(d.Blocks) == 0 || len(d.Blocks) > MaxHashesPerEvent {
			return nil, fmt.Errorf("stored: %d blocks", len(d.Blocks))
		}
		ev := &BlockStored{BlockSize: len(d.Blocks[0].Tokens), Medium: trtllmMedium(d.Blocks[0].CacheLevel)}
		if d.ParentHash != nil {
			ev.ParentBlockHash, ev.HasParent = HashFromUint64(*d.ParentHash), true
		}
		for j, b := range d.Blocks {
			if b.BlockHash == nil {
				return nil, fmt.Errorf("stored: blocks[%d]: no block_hash", j)
			}
			ev.BlockHashes = append(ev.BlockHashes, HashFromUint64(*b.BlockHash))
			for _, tok := range b.Tokens {
				if tok.TokenID == nil || *tok.TokenID < 0 {
					return nil, fmt.Errorf("stored: blocks[%d]: bad token_id", j)
				}
				ev.TokenIDs = append(ev.TokenIDs, int(*tok.TokenID))
			}
		}
		if len(ev.TokenIDs) > MaxTokensPerEvent {
			return nil, fmt.Errorf("stored: %d tokens", len(ev.TokenIDs))
		}
		return ev, nil
	case "removed":
		if len(d.BlockHashes) == 0 || len(d.BlockHashes) > MaxHashesPerEvent {
			return nil, fmt.Errorf("removed: %d block hashes", len(d.BlockHashes))
		}
		ev := &BlockRemoved{}
		for _, h := range d.BlockHashes {
			ev.BlockHashes = append(ev.BlockHashes, HashFromUint64(h))
		}
		return ev, nil
	case "updated":
		if d.BlockHash == nil {
			return nil, errors.New("updated: no block_hash")
		}
		ev := &BlockUpdated{BlockHash: HashFromUint64(*d.BlockHash)}
		if d.CacheLevel != nil {
			ev.CacheLevel, ev.OldCacheLevel = d.CacheLevel.NewValue, d.CacheLevel.OldValue
		}
		if d.Priority != nil {
			ev.Priority, ev.OldPriority = d.Priority.NewValue, d.Priority.OldValue
		}
		return ev, nil
	default:
		return nil, fmt.Errorf("unknown event type %q", d.Type)
	}
}

// trtllmMedium names a TensorRT-LLM cache level as a medium.
func trtllmMedium(level *int64) string {
	if level != nil && *level > 0 {
		return "CPU"
	}
	return "GPU"
}
