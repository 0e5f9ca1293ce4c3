// Package tokenizer turns prompts into token ids and token ids into chained
// block hashes, the same way in the orchestrator and in the simulated worker
// so that both count the same tokens and agree on which blocks a prompt
// shares with another.
//
// It implements tiktoken's byte-pair encoding over the cl100k_base and
// o200k_base tables that tiktoken-go-loader embeds (nothing is downloaded
// at run time): a hand-written pre-tokenizer equivalent to tiktoken's split
// patterns (tokenizer/pretok, shared with tokenizer/hf), and merging as tiktoken does it (merge.go;
// pieces of 100 bytes or more in a tournament tree, tournament.go, with
// merges looked up by token ids, pairs.go), with pieces longer than 8 KiB
// merged in chunks so that the cost of any input is linear in its size
// (piece.go). For real text the ids are the ones tiktoken-go returned
// before (TestEncodeGolden, and tests that compare with tiktoken-go
// directly). It renders chat messages with one fixed ChatML-style template
// (see RenderChat), keeps a bounded per-message token cache so that turn N
// of a conversation tokenizes only its new messages, and hashes token
// blocks with xxhash, each block's hash covering every token before it.
//
// Concurrency: a Tokenizer is safe for concurrent use; its message cache is
// guarded by one mutex and encoding happens outside it, each call with its
// own scratch space from a sync.Pool. The tables of an encoding are built
// once, by the first New for it, and then only read.
package tokenizer
