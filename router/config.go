package router

import (
	"fmt"
	"time"
)

// Config is the router: section.
type Config struct {
	// Policy picks the (ctx, gen) pair: conversation (default),
	// round-robin, least-load, consistent-hash or kv-aware.
	Policy string `mapstructure:"policy" help:"routing policy: conversation, round-robin, least-load, consistent-hash or kv-aware"`
	// StickinessTokens is the weight of a session's pin in the cost model:
	// the ctx worker its last turn ran on costs this many tokens less, so
	// that a session does not move between near-equal workers (default
	// 256).
	StickinessTokens int64 `mapstructure:"stickiness_tokens" help:"conversation: tokens a session's pinned ctx worker may cost more than another and keep the session"`
	// TokensPerBlock is the block size of prefix matching, in tokens
	// (default 32, TensorRT-LLM's and the simulator's KV block size).
	TokensPerBlock int `mapstructure:"tokens_per_block" help:"tokens per block for prefix matching"`
	// MaxSessions bounds the session table; the least recently used
	// session is evicted beyond it (default 100000).
	MaxSessions int `mapstructure:"max_sessions" help:"sessions kept in the session table (LRU beyond)"`
	// SessionTTL evicts a session idle this long (default 60m: the gap
	// between turns of real chats reaches tens of minutes).
	SessionTTL time.Duration `mapstructure:"session_ttl" help:"idle time after which a session is forgotten"`
	// SpillLoadFactor bounds the gen leg's reuse: a gen worker whose load
	// (KV occupancy) is above this multiple of the other gen workers' mean
	// takes no session it is pinned to and no prompt it holds (default
	// 2.0; 0: no bound).
	SpillLoadFactor float64 `mapstructure:"spill_load_factor" help:"gen: a worker loaded past this multiple of the others' mean takes no pinned or cached request (0: no bound)"`
	// SpillMinTokens is the gen load, in tokens, below which a gen worker
	// is never past the bound (default 16384).
	SpillMinTokens int64 `mapstructure:"spill_min_tokens" help:"gen: load in tokens below which a worker is never past the bound"`
	// VirtualNodes is the consistent-hash ring's points per worker
	// (default 100).
	VirtualNodes int `mapstructure:"virtual_nodes" help:"consistent-hash ring points per worker"`
	// Fallback is how many more workers consistent-hash tries clockwise
	// when its choice is unavailable (default 2).
	Fallback int `mapstructure:"fallback" help:"workers consistent-hash walks clockwise past an unavailable one"`
	// LoadWeight is the cost model's weight of a ctx worker's prefill
	// backlog (the tokens charged to it in flight) against the tokens the
	// request would compute there (default 0.5: a token queued delays this
	// request once; a cached token recomputed elsewhere also takes cache
	// space from other prompts, so the cache counts twice the backlog;
	// measured on three workloads, docs/routing.md).
	LoadWeight float64 `mapstructure:"load_weight" help:"conversation, kv-aware: weight of a ctx worker's prefill backlog against the tokens a request computes there"`
	// KVBlocksPerWorker is a worker's KV cache, in blocks of
	// tokens_per_block: the size of the cache index's estimate of each
	// worker's cache. 0 (the default) takes the size each worker reports
	// (Endpoint.KVCacheTokens), and DefaultKVBlocksPerWorker for a worker
	// that reports none; a value set here wins over the workers' reports.
	KVBlocksPerWorker int `mapstructure:"kv_blocks_per_worker" help:"a worker's KV cache in blocks, the size of the cache index's estimate (0: the size each worker reports, else 14000)"`
	// EjectBackoff is how long passive health first takes a failing worker
	// out of routing; it doubles with each ejection in a row (default 1s).
	EjectBackoff time.Duration `mapstructure:"eject_backoff" help:"passive health: first ejection of a failing worker (doubles per ejection in a row)"`
	// EjectMaxBackoff bounds the ejection time (default 30s).
	EjectMaxBackoff time.Duration `mapstructure:"eject_max_backoff" help:"passive health: longest ejection"`
	// EjectAfter5xx is how many 5xx answers in a row eject a worker
	// (default 3; a connect error ejects at once).
	EjectAfter5xx int `mapstructure:"eject_after_5xx" help:"passive health: 5xx answers in a row that eject a worker"`
}

// DefaultKVBlocksPerWorker is the KV cache, in blocks, assumed for a worker
// that reports no size when kv_blocks_per_worker is 0 (the simulator's
// default cache).
const DefaultKVBlocksPerWorker = 14000

// Where a worker's KV cache size comes from (Router.CacheSize).
const (
	CacheSizeConfig   = "config"  // kv_blocks_per_worker
	CacheSizeReported = "worker"  // the worker reported it
	CacheSizeDefault  = "default" // DefaultKVBlocksPerWorker
)

// cacheSize returns worker ep's KV cache in tokens and where the figure
// comes from: kv_blocks_per_worker when set, else what ep reported, else
// DefaultKVBlocksPerWorker blocks. ep may be nil (a worker no longer in
// the pool).
func (c Config) cacheSize(ep *Endpoint) (int64, string) {
	if c.KVBlocksPerWorker > 0 {
		return int64(c.KVBlocksPerWorker) * int64(c.TokensPerBlock), CacheSizeConfig
	}
	if ep != nil {
		if n := ep.KVCacheTokens(); n > 0 {
			return n, CacheSizeReported
		}
	}
	return DefaultKVBlocksPerWorker * int64(c.TokensPerBlock), CacheSizeDefault
}

// cacheTokens is cacheSize's figure.
func (c Config) cacheTokens(ep *Endpoint) int64 {
	n, _ := c.cacheSize(ep)
	return n
}

// cacheBlocks is cacheTokens in whole blocks, within [1, the maximum
// kv_blocks_per_worker].
func (c Config) cacheBlocks(ep *Endpoint) int {
	return int(min(max(c.cacheTokens(ep)/int64(c.TokensPerBlock), 1), maxKVBlocksPerWorker))
}

// maxKVBlocksPerWorker bounds kv_blocks_per_worker: the cache index numbers a
// worker's blocks with 32-bit numbers, and 2^30 blocks of 32 tokens is far
// beyond any GPU's KV cache.
const maxKVBlocksPerWorker = 1 << 30

// Defaults returns the default configuration.
func Defaults() Config {
	return Config{Policy: PolicyConversation, TokensPerBlock: 32, MaxSessions: 100000, SessionTTL: 60 * time.Minute, SpillLoadFactor: 2.0, SpillMinTokens: 16384, StickinessTokens: 256, VirtualNodes: 100, Fallback: 2, LoadWeight: 0.5, KVBlocksPerWorker: 0,
		EjectBackoff: time.Second, EjectMaxBackoff: 30 * time.Second, EjectAfter5xx: 3}
}

// Validate checks the configuration; errors name the key.
func (c Config) Validate() error {
	if err := checkPolicyName(c.Policy); err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	switch {
	case c.TokensPerBlock < 1:
		return fmt.Errorf("tokens_per_block: must be >= 1, got %d", c.TokensPerBlock)
	case c.MaxSessions < 1:
		return fmt.Errorf("max_sessions: must be >= 1, got %d", c.MaxSessions)
	case c.SessionTTL <= 0:
		return fmt.Errorf("session_ttl: must be > 0, got %s", c.SessionTTL)
	case c.SpillLoadFactor < 0 || (c.SpillLoadFactor > 0 && c.SpillLoadFactor < 1):
		return fmt.Errorf("spill_load_factor: must be 0 (off) or >= 1, got %g", c.SpillLoadFactor)
	case c.SpillMinTokens < 0:
		return fmt.Errorf("spill_min_tokens: must be >= 0, got %d", c.SpillMinTokens)
	case c.StickinessTokens < 0:
		return fmt.Errorf("stickiness_tokens: must be >= 0, got %d", c.StickinessTokens)
	case c.VirtualNodes < 1:
		return fmt.Errorf("virtual_nodes: must be >= 1, got %d", c.VirtualNodes)
	case c.Fallback < 0:
		return fmt.Errorf("fallback: must be >= 0, got %d", c.Fallback)
	case c.LoadWeight < 0:
		return fmt.Errorf("load_weight: must be >= 0, got %g", c.LoadWeight)
	case c.KVBlocksPerWorker < 0 || c.KVBlocksPerWorker > maxKVBlocksPerWorker:
		return fmt.Errorf("kv_blocks_per_worker: must be 0 (as each worker reports) or between 1 and %d, got %d", maxKVBlocksPerWorker, c.KVBlocksPerWorker)
	case c.EjectBackoff <= 0:
		return fmt.Errorf("eject_backoff: must be > 0, got %s", c.EjectBackoff)
	case c.EjectMaxBackoff < c.EjectBackoff:
		return fmt.Errorf("eject_max_backoff: must be >= eject_backoff (%s), got %s", c.EjectBackoff, c.EjectMaxBackoff)
	case c.EjectAfter5xx < 1:
		return fmt.Errorf("eject_after_5xx: must be >= 1, got %d", c.EjectAfter5xx)
	}
	return nil
}
