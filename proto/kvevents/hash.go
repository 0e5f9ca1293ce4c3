package kvevents

import (
	"encoding/hex"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// BlockHash is one engine block hash as it appears in events, normalised to a
// comparable value.
//
// Engines send two shapes (vLLM's ExternalBlockHash is `bytes | int`,
// vllm/v1/core/kv_cache_utils.py):
//   - an integer: vLLM with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES (the low 64 bits
//     of the big-endian digest, so 0..2^64-1), SGLang (a signed int64 from
//     hash_str_to_int64) and TensorRT-LLM (a size_t). Both signs are kept as
//     their 64-bit two's-complement pattern, so -1 and 2^64-1 are the same hash;
//   - bytes: vLLM's default, the raw sha256 (32 bytes) or xxh3-128 (16 bytes)
//     digest of the block.
//
// Two hashes are equal (==) exactly when they have the same shape and the same
// wire value. Key gives a 64-bit key for compact indexes: the integer itself,
// or xxhash64 of the bytes (collisions between distinct byte hashes are then
// possible, with probability ~2^-64 per pair). The zero BlockHash is the
// integer 0.
type BlockHash struct {
	key uint64 // the integer, or xxhash64(raw) for a bytes hash
	raw string // the bytes of a bytes hash; "" for an integer hash
	isb bool   // a bytes hash (raw may still be empty: a zero-length bytes hash)
}

// HashFromUint64 returns the integer hash v.
func HashFromUint64(v uint64) BlockHash { return BlockHash{key: v} }

// HashFromInt64 returns the integer hash v, kept as its 64-bit pattern.
func HashFromInt64(v int64) BlockHash { return BlockHash{key: uint64(v)} }

// HashFromBytes returns the bytes hash b. It copies b.
func HashFromBytes(b []byte) BlockHash {
	return BlockHash{key: xxhash.Sum64(b), raw: string(b), isb: true}
}

// hashFromString is HashFromBytes for bytes already held in a string (no copy).
func hashFromString(s string) BlockHash {
	return BlockHash{key: xxhash.Sum64String(s), raw: s, isb: true}
}

// Key returns the 64-bit key of h: the integer value, or xxhash64 of the bytes.
func (h BlockHash) Key() uint64 { return h.key }

// IsBytes reports whether h was sent as bytes.
func (h BlockHash) IsBytes() bool { return h.isb }

// Bytes returns the bytes of a bytes hash (a fresh copy) and true, or nil and
// false for an integer hash.
func (h BlockHash) Bytes() ([]byte, bool) {
	if !h.isb {
		return nil, false
	}
	return []byte(h.raw), true
}

// String renders h for logs: the decimal integer, or "0x" and the hex bytes.
func (h BlockHash) String() string {
	if h.isb {
		return "0x" + hex.EncodeToString([]byte(h.raw))
	}
	return strconv.FormatUint(h.key, 10)
}
