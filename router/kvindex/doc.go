// Package kvindex is the router's cache index: for each worker, which
// prompt blocks it holds, keyed by duet's chained block hashes
// (tokenizer.BlockHashes), so that routing can weigh the tokens each worker
// would have to compute.
//
// One Cache per worker incarnation holds two views: an estimate of what
// duet sent there, an LRU of the worker's real cache size (the cache model
// of duet sim and duet replay: least recently used blocks evicted first, a
// prompt's tail before its prefix), and, for workers that publish them,
// the engine's KV cache events (BlockStored, BlockRemoved,
// AllBlocksCleared: vLLM's and SGLang's publishers, decoded by
// proto/kvevents). A watchdog compares each view's expectation with the
// cached tokens the engine reports per request, and falls back from events
// that stopped agreeing to the estimate.
//
// Memory: the estimate costs about 54 bytes a block (a map entry with the
// map's own overhead, and a 16-byte LRU node); the events view about as
// much again (two map entries). 64 workers holding 2M tokens each in
// 32-token blocks (4M blocks) take 217 MiB for the estimate
// (BenchmarkCacheMemory).
//
// Concurrency: a Cache is safe for concurrent use; one mutex guards both
// views and the watchdog. Match holds it for two binary searches.
package kvindex
