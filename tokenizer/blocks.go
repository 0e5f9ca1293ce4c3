package tokenizer

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// BlockHashes returns the chained hashes of the full blocks of tokens:
// hash i covers tokens [0, (i+1)*blockSize), so two prompts share block i's
// hash only if they share every token up to the end of block i. A trailing
// partial block has no hash. blockSize must be > 0.
func BlockHashes(tokens []int, blockSize int) []uint64 {
	return ExtendBlockHashes(nil, tokens, blockSize)
}

// AdapterSalt scopes a cache salt (a request's cache_salt, "" for none) to
// a LoRA adapter ("" for the base model, which leaves salt as is): an
// adapter's KV is its own in every engine (vLLM folds the adapter's name
// into each block hash, vllm/v1/core/kv_cache_utils.py
// _gen_lora_extra_hash_keys), so its prompts share no block hash with the
// base model's or another adapter's.
func AdapterSalt(adapter, salt string) string {
	if adapter == "" {
		return salt
	}
	return "lora\x00" + adapter + "\x00" + salt
}

// SaltedBlockHashes is BlockHashes for a request that carries a cache salt
// (vLLM's cache_salt): the chain starts from the salt, so two prompts share
// no block hash unless they also share the salt, as the engine shares no
// KV cache between them. An empty salt gives BlockHashes.
func SaltedBlockHashes(tokens []int, blockSize int, salt string) []uint64 {
	return extendBlockHashes(nil, SaltSeed(salt), tokens, blockSize)
}

// SaltSeed is where the chain of SaltedBlockHashes with salt starts: the
// parent hash of its first block (0 for no salt, as BlockHashes).
func SaltSeed(salt string) uint64 {
	if salt == "" {
		return 0
	}
	return xxhash.Sum64String("cache_salt\x00" + salt)
}

// ExtendBlockHashes appends to prev the hashes of the full blocks of tokens
// after the len(prev) blocks prev already covers, and returns the result.
// prev must be BlockHashes of a prefix of tokens (with the same blockSize);
// this makes hashing a growing conversation cost only its new blocks.
func ExtendBlockHashes(prev []uint64, tokens []int, blockSize int) []uint64 {
	return extendBlockHashes(prev, 0, tokens, blockSize)
}

// extendBlockHashes extends prev; seed is the chain's start when prev is
// empty.
func extendBlockHashes(prev []uint64, seed uint64, tokens []int, blockSize int) []uint64 {
	n := len(tokens) / blockSize
	if len(prev) >= n {
		return prev
	}
	out := prev
	if cap(out) < n {
		out = make([]uint64, len(prev), n)
		copy(out, prev)
	}
	parent := seed
	if len(prev) > 0 {
		parent = prev[len(prev)-1]
	}
	buf := make([]byte, 8+4*blockSize)
	for i := len(prev); i < n; i++ {
		parent = hashBlock(buf, parent, tokens[i*blockSize:(i+1)*blockSize])
		out = append(out, parent)
	}
	return out
}

// hashBlock hashes the parent hash followed by the block's token ids as
// little-endian uint32s. buf must hold 8+4*len(block) bytes.
func hashBlock(buf []byte, parent uint64, block []int) uint64 {
	binary.LittleEndian.PutUint64(buf, parent)
	for j, tok := range block {
		binary.LittleEndian.PutUint32(buf[8+4*j:], uint32(tok))
	}
	return xxhash.Sum64(buf[:8+4*len(block)])
}

// HashTokens hashes a token sequence on its own (not chained), e.g. the
// partial block after a prompt's last full block.
func HashTokens(tokens []int) uint64 {
	buf := make([]byte, 8+4*len(tokens))
	return hashBlock(buf, 0, tokens)
}

// ChainBlockHashes returns the chained hashes of the full blocks of tokens
// when they follow a block whose chained hash is parent (0: tokens start
// a prompt): what BlockHashes gives for those blocks of the whole prompt.
// It names blocks an engine reports by their tokens (KV cache events).
func ChainBlockHashes(parent uint64, tokens []int, blockSize int) []uint64 {
	return extendBlockHashes(nil, parent, tokens, blockSize)
}
