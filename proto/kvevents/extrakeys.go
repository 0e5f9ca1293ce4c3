package kvevents

import "github.com/vmihailenco/msgpack/v5"

// ExtraKeysNameOnly reports whether the event's ExtraKeys say nothing but
// that its blocks belong to the LoRA adapter name: absent, or one entry
// per block, each null or the tuple (name,). That is what vLLM sends for an
// adapter's request without multimodal inputs or a cache salt
// (vllm/v1/core/kv_cache_utils.py, generate_block_hash_extra_keys: the
// adapter's name, then multimodal hashes, then the salt on the first
// block). With name "", only null entries pass.
func (e *BlockStored) ExtraKeysNameOnly(name string) bool {
	if len(e.ExtraKeys) == 0 {
		return true
	}
	var keys []any
	if msgpack.Unmarshal(e.ExtraKeys, &keys) != nil {
		return false
	}
	for _, k := range keys {
		switch v := k.(type) {
		case nil:
		case []any:
			if name == "" || len(v) != 1 || v[0] != name {
				return false
			}
		default:
			return false
		}
	}
	return true
}
