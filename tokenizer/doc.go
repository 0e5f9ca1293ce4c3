// Package tokenizer turns prompts into token ids and token ids into chained
// block hashes, the same way in the orchestrator and in the simulated worker
// so that both count the same tokens and agree on which blocks a prompt
// shares with another.
//
// It wraps tiktoken-go with its offline BPE loader (nothing is downloaded at
// run time), renders chat messages with one fixed ChatML-style template
// (see RenderChat), keeps a bounded per-message token cache so that turn N of
// a conversation tokenizes only its new messages, and hashes token blocks
// with xxhash, each block's hash covering every token before it.
//
// Concurrency: a Tokenizer is safe for concurrent use; its message cache is
// guarded by one mutex and encoding happens outside it.
package tokenizer
