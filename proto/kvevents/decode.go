package kvevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Bounds on what one payload may hold. A payload over a bound is malformed:
// memory per decoded batch is bounded by MaxPayloadBytes and these counts.
const (
	// MaxPayloadBytes bounds a batch payload (and so any ZeroMQ frame the
	// subscriber accepts).
	MaxPayloadBytes = 16 << 20
	// MaxEventsPerBatch bounds the events in one batch.
	MaxEventsPerBatch = 1 << 16
	// MaxHashesPerEvent bounds block_hashes in one event (a 1M-token prompt in
	// 16-token blocks).
	MaxHashesPerEvent = 1 << 16
	// MaxTokensPerEvent bounds token_ids in one BlockStored.
	MaxTokensPerEvent = 1 << 21
	// maxFields bounds the keys of one map.
	maxFields = 256
)

// ErrMalformed is wrapped by every error DecodeBatch returns.
var ErrMalformed = errors.New("kvevents: malformed payload")

// Event tags: msgspec's tag=True uses the class name.
const (
	tagBlockStored      = "BlockStored"
	tagBlockRemoved     = "BlockRemoved"
	tagAllBlocksCleared = "AllBlocksCleared"
)

// DecodeBatch decodes one msgpack batch payload as vLLM and SGLang publish it
// (see the package doc for the layouts). It accepts both event layouts, even
// mixed in one batch, and ignores fields it does not know, which newer engines
// add. Topic and Seq are left zero: they travel in other frames. Events with no
// block hashes are dropped. Any other deviation (wrong types, unknown event
// tag, trailing bytes, bounds exceeded) is an error wrapping ErrMalformed.
// DecodeBatch never panics; the result does not alias payload.
func DecodeBatch(payload []byte) (Batch, error) {
	if len(payload) > MaxPayloadBytes {
		return Batch{}, fmt.Errorf("%w: %d bytes exceed %d", ErrMalformed, len(payload), MaxPayloadBytes)
	}
	r := &mpReader{b: payload}
	b, err := decodeBatch(r)
	if err == nil && r.remaining() != 0 {
		err = fmt.Errorf("%d trailing bytes", r.remaining())
	}
	if err != nil {
		return Batch{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return b, nil
}

// decodeBatch reads EventBatch: positional [ts, events, dp_rank?, ...] as
// every engine sends it, or a map with the same field names.
func decodeBatch(r *mpReader) (Batch, error) {
	var b Batch
	c, err := r.peek()
	if err != nil {
		return b, err
	}
	if isMapCode(c) {
		return decodeBatchMap(r)
	}
	n, err := r.arrayLen(maxFields, "batch")
	if err != nil {
		return b, err
	}
	if n < 2 {
		return b, fmt.Errorf("batch: %d elements, want at least 2", n)
	}
	if b.TS, err = r.float("batch.ts"); err != nil {
		return b, err
	}
	if b.Events, err = decodeEvents(r); err != nil {
		return b, err
	}
	if n >= 3 {
		if b.DataParallelRank, err = r.optInt64("batch.data_parallel_rank"); err != nil {
			return b, err
		}
	}
	for i := 3; i < n; i++ {
		if _, err := r.skip(1); err != nil {
			return b, err
		}
	}
	return b, nil
}

func decodeBatchMap(r *mpReader) (Batch, error) {
	var b Batch
	n, err := r.mapLen(maxFields, "batch")
	if err != nil {
		return b, err
	}
	var haveTS, haveEvents bool
	for i := 0; i < n; i++ {
		key, err := r.strBytes("batch key")
		if err != nil {
			return b, err
		}
		switch string(key) {
		case "ts":
			b.TS, err = r.float("batch.ts")
			haveTS = true
		case "events":
			b.Events, err = decodeEvents(r)
			haveEvents = true
		case "data_parallel_rank", "attn_dp_rank":
			b.DataParallelRank, err = r.optInt64("batch." + string(key))
		default:
			_, err = r.skip(1)
		}
		if err != nil {
			return b, err
		}
	}
	if !haveTS || !haveEvents {
		return b, errors.New("batch: ts or events missing")
	}
	return b, nil
}

func decodeEvents(r *mpReader) ([]Event, error) {
	n, err := r.arrayLen(MaxEventsPerBatch, "events")
	if err != nil {
		return nil, err
	}
	events := make([]Event, 0, n)
	for i := 0; i < n; i++ {
		ev, err := decodeEvent(r)
		if err != nil {
			return nil, fmt.Errorf("events[%d]: %w", i, err)
		}
		if ev != nil {
			events = append(events, ev)
		}
	}
	return events, nil
}

func isMapCode(c byte) bool { return (c >= 0x80 && c <= 0x8f) || c == 0xde || c == 0xdf }

// decodeEvent reads one event in either layout; it returns nil for an event
// that carries no block hashes.
func decodeEvent(r *mpReader) (Event, error) {
	c, err := r.peek()
	if err != nil {
		return nil, err
	}
	var f eventFields
	if isMapCode(c) {
		err = f.readMap(r)
	} else {
		err = f.readArray(r)
	}
	if err != nil {
		return nil, err
	}
	return f.build()
}

// eventFields is the union of all event fields, filled from either layout.
type eventFields struct {
	tag                      string
	hashes                   []BlockHash
	haveHashes               bool
	parent                   BlockHash
	hasParent                bool
	tokens                   []int
	haveTokens               bool
	blockSize                int64
	haveBlockSize            bool
	loraID                   *int64
	medium                   string
	loraName                 string
	cacheSalt                string
	sessionID                string
	extraKeys                []byte
	groupIdx                 *int64
	kvCacheSpecKind          string
	kvCacheSpecSlidingWindow *int64
	locality                 string
	ownership                string
	eventVersion             int64
}

// Array layout positions (msgspec array_like): vLLM BlockStored
// [tag, block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium,
// lora_name, extra_keys, group_idx, kv_cache_spec_kind,
// kv_cache_spec_sliding_window]; SGLang has metadata ({"cache_salt": s}) where
// vLLM has lora_name. BlockRemoved [tag, block_hashes, medium, group_idx].
func (f *eventFields) readArray(r *mpReader) error {
	n, err := r.arrayLen(maxFields, "event")
	if err != nil {
		return err
	}
	if n == 0 {
		return errors.New("event: empty array, want a tag")
	}
	tag, err := r.strBytes("event tag")
	if err != nil {
		return err
	}
	f.tag = string(tag)
	var fields []string
	switch f.tag {
	case tagBlockStored:
		if n < 5 {
			return fmt.Errorf("BlockStored: %d elements, want at least 5", n)
		}
		fields = storedArrayFields
	case tagBlockRemoved:
		if n < 2 {
			return fmt.Errorf("BlockRemoved: %d elements, want at least 2", n)
		}
		fields = removedArrayFields
	case tagAllBlocksCleared:
	default:
		return fmt.Errorf("unknown event tag %q", f.tag)
	}
	for i := 1; i < n; i++ {
		name := ""
		if i-1 < len(fields) {
			name = fields[i-1]
		}
		if name == "lora_name" {
			// SGLang puts its metadata map where vLLM has lora_name.
			if c, err := r.peek(); err == nil && isMapCode(c) {
				name = "metadata"
			}
		}
		if err := f.readField(r, name); err != nil {
			return err
		}
	}
	return nil
}

var (
	storedArrayFields = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size",
		"lora_id", "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind",
		"kv_cache_spec_sliding_window"}
	removedArrayFields = []string{"block_hashes", "medium", "group_idx"}
)

func (f *eventFields) readMap(r *mpReader) error {
	n, err := r.mapLen(maxFields, "event")
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		key, err := r.strBytes("event key")
		if err != nil {
			return err
		}
		if string(key) == "type" {
			tag, err := r.strBytes("event type")
			if err != nil {
				return err
			}
			f.tag = string(tag)
			continue
		}
		if err := f.readField(r, string(key)); err != nil {
			return err
		}
	}
	switch f.tag {
	case tagBlockStored:
		if !f.haveHashes || !f.haveTokens || !f.haveBlockSize {
			return errors.New("BlockStored: block_hashes, token_ids or block_size missing")
		}
	case tagBlockRemoved:
		if !f.haveHashes {
			return errors.New("BlockRemoved: block_hashes missing")
		}
	case tagAllBlocksCleared:
	case "":
		return errors.New("event: no type key")
	default:
		return fmt.Errorf("unknown event tag %q", f.tag)
	}
	return nil
}

// readField reads the value of one named field; an unknown name is skipped.
func (f *eventFields) readField(r *mpReader, name string) error {
	var err error
	switch name {
	case "block_hashes":
		f.hashes, err = readHashes(r)
		f.haveHashes = true
	case "parent_block_hash":
		if !r.tryNil() {
			f.parent, err = readHash(r, "parent_block_hash")
			f.hasParent = true
		}
	case "token_ids":
		f.tokens, err = readTokens(r)
		f.haveTokens = true
	case "block_size":
		f.blockSize, err = r.int64In(0, math.MaxInt32, "block_size")
		f.haveBlockSize = true
	case "lora_id":
		f.loraID, err = r.optInt64("lora_id")
	case "medium":
		f.medium, err = r.optString("medium")
	case "lora_name":
		f.loraName, err = r.optString("lora_name")
	case "cache_salt":
		f.cacheSalt, err = r.optString("cache_salt")
	case "session_id":
		f.sessionID, err = r.optString("session_id")
	case "metadata":
		err = f.readMetadata(r)
	case "extra_keys":
		if !r.tryNil() {
			var raw []byte
			raw, err = r.skip(1)
			f.extraKeys = append([]byte(nil), raw...)
		}
	case "group_idx":
		f.groupIdx, err = r.optInt64("group_idx")
	case "kv_cache_spec_kind":
		f.kvCacheSpecKind, err = r.optString("kv_cache_spec_kind")
	case "kv_cache_spec_sliding_window":
		f.kvCacheSpecSlidingWindow, err = r.optInt64("kv_cache_spec_sliding_window")
	case "locality":
		f.locality, err = r.optString("locality")
	case "ownership":
		f.ownership, err = r.optString("ownership")
	case "event_version":
		var v *int64
		v, err = r.optInt64("event_version")
		if v != nil {
			f.eventVersion = *v
		}
	default:
		_, err = r.skip(1)
	}
	return err
}

// readMetadata reads SGLang's BlockStoredMetadata map ({"cache_salt": s}).
func (f *eventFields) readMetadata(r *mpReader) error {
	if r.tryNil() {
		return nil
	}
	n, err := r.mapLen(maxFields, "metadata")
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		key, err := r.strBytes("metadata key")
		if err != nil {
			return err
		}
		if string(key) == "cache_salt" {
			f.cacheSalt, err = r.optString("metadata.cache_salt")
		} else {
			_, err = r.skip(1)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (f *eventFields) build() (Event, error) {
	switch f.tag {
	case tagBlockStored:
		if len(f.hashes) == 0 {
			return nil, nil
		}
		return &BlockStored{
			BlockHashes: f.hashes, ParentBlockHash: f.parent, HasParent: f.hasParent,
			TokenIDs: f.tokens, BlockSize: int(f.blockSize), LoraID: f.loraID,
			Medium: f.medium, LoraName: f.loraName, CacheSalt: f.cacheSalt, SessionID: f.sessionID,
			ExtraKeys: f.extraKeys, GroupIdx: f.groupIdx, KVCacheSpecKind: f.kvCacheSpecKind,
			KVCacheSpecSlidingWindow: f.kvCacheSpecSlidingWindow, Locality: f.locality,
			Ownership: f.ownership, EventVersion: f.eventVersion,
		}, nil
	case tagBlockRemoved:
		if len(f.hashes) == 0 {
			return nil, nil
		}
		return &BlockRemoved{BlockHashes: f.hashes, Medium: f.medium, GroupIdx: f.groupIdx,
			Locality: f.locality, Ownership: f.ownership}, nil
	default:
		return &AllBlocksCleared{}, nil
	}
}

// readHash reads an integer or bytes block hash.
func readHash(r *mpReader, what string) (BlockHash, error) {
	c, err := r.peek()
	if err != nil {
		return BlockHash{}, err
	}
	if c == 0xc4 || c == 0xc5 || c == 0xc6 {
		p, err := r.binBytes(what)
		if err != nil {
			return BlockHash{}, err
		}
		return HashFromBytes(p), nil
	}
	v, _, err := r.integer(what)
	return HashFromUint64(v), err
}

func readHashes(r *mpReader) ([]BlockHash, error) {
	n, err := r.arrayLen(MaxHashesPerEvent, "block_hashes")
	if err != nil {
		return nil, err
	}
	hashes := make([]BlockHash, n)
	for i := range hashes {
		if hashes[i], err = readHash(r, "block_hashes"); err != nil {
			return nil, fmt.Errorf("block_hashes[%d]: %w", i, err)
		}
	}
	return hashes, nil
}

// readTokens reads token_ids: integers, or (token, next_token) pairs as
// SGLang's EAGLE bigram radix cache emits them, of which the token is kept.
func readTokens(r *mpReader) ([]int, error) {
	n, err := r.arrayLen(MaxTokensPerEvent, "token_ids")
	if err != nil {
		return nil, err
	}
	tokens := make([]int, n)
	for i := range tokens {
		if t, ok := r.fastToken(); ok {
			tokens[i] = t
			continue
		}
		c, err := r.peek()
		if err != nil {
			return nil, err
		}
		var t int64
		if c >= 0x90 && c <= 0x9f || c == 0xdc || c == 0xdd {
			t, err = readBigram(r)
		} else {
			t, err = r.int64In(0, math.MaxInt32, "token_ids")
		}
		if err != nil {
			return nil, fmt.Errorf("token_ids[%d]: %w", i, err)
		}
		tokens[i] = int(t)
	}
	return tokens, nil
}

// fastToken reads a token id in its usual encodings (positive fixint, uint8,
// uint16, uint32 <= MaxInt32) without the general integer path; ok false
// leaves the reader unmoved.
func (r *mpReader) fastToken() (int, bool) {
	b, off := r.b, r.off
	if off >= len(b) {
		return 0, false
	}
	switch c := b[off]; {
	case c <= 0x7f:
		r.off++
		return int(c), true
	case c == 0xcc && off+1 < len(b):
		r.off += 2
		return int(b[off+1]), true
	case c == 0xcd && off+2 < len(b):
		r.off += 3
		return int(binary.BigEndian.Uint16(b[off+1:])), true
	case c == 0xce && off+4 < len(b):
		if v := binary.BigEndian.Uint32(b[off+1:]); v <= math.MaxInt32 {
			r.off += 5
			return int(v), true
		}
	}
	return 0, false
}

func readBigram(r *mpReader) (int64, error) {
	n, err := r.arrayLen(maxFields, "token pair")
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, errors.New("empty token pair")
	}
	t, err := r.int64In(0, math.MaxInt32, "token pair")
	if err != nil {
		return 0, err
	}
	for i := 1; i < n; i++ {
		if _, err := r.skip(1); err != nil {
			return 0, err
		}
	}
	return t, nil
}
