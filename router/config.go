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
	// TokensPerBlock is the block size of prefix matching, in tokens
	// (default 32, TensorRT-LLM's and the simulator's KV block size).
	TokensPerBlock int `mapstructure:"tokens_per_block" help:"tokens per block for prefix matching"`
	// MaxSessions bounds the session table; the least recently used
	// session is evicted beyond it (default 100000).
	MaxSessions int `mapstructure:"max_sessions" help:"sessions kept in the session table (LRU beyond)"`
	// SessionTTL evicts a session idle this long (default 60m: the gap
	// between turns of real chats reaches tens of minutes).
	SessionTTL time.Duration `mapstructure:"session_ttl" help:"idle time after which a session is forgotten"`
	// HashSkipCount ignores matches that do not go beyond this many leading
	// blocks (default 0; shared prefixes are also detected automatically).
	HashSkipCount int `mapstructure:"hash_skip_count" help:"leading blocks a prefix match must go beyond"`
	// ContinuationSlackBlocks is how many full blocks at the end of a
	// session's previous prompt a request without an id (or with a new id)
	// may leave out, besides the partial last block, and still continue
	// that session (default 1: a chat template that re-renders the end of
	// the previous turn; a trace that hashes 512-token blocks needs 512 /
	// tokens_per_block). Whatever it is set to, the part shared must reach
	// beyond what the session's first prompt shared with other sessions'
	// prompts (a common system prompt), and a session whose first prompt
	// shared nothing is continued only by its entire previous prompt.
	ContinuationSlackBlocks int `mapstructure:"continuation_slack_blocks" help:"full blocks at the end of a session's previous prompt that a continuation may leave out"`
	// SpillLoadFactor spills a gen leg when its pinned worker's load (KV
	// occupancy) is above this multiple of the other workers' mean (default
	// 2.0; 0 turns spilling off on both legs).
	SpillLoadFactor float64 `mapstructure:"spill_load_factor" help:"gen: spill when the pinned worker's load exceeds this multiple of the others' mean (0: never spill)"`
	// SpillMinTokens is the gen load, in tokens, below which a pinned gen
	// worker is never considered overloaded (default 16384).
	SpillMinTokens int64 `mapstructure:"spill_min_tokens" help:"gen: pinned load in tokens below which no spill happens"`
	// SpillMarginTokens is how much more prefill work a pinned ctx worker
	// may have ahead of a request than the least-loaded other worker would
	// before the request spills there, beyond the spill's own cost (the
	// whole prompt there, counting the cached tokens it recomputes twice:
	// once for this request, once for those queued behind it) (default 0).
	// The pin stays, so the next turn goes home.
	SpillMarginTokens int64 `mapstructure:"spill_margin_tokens" help:"ctx: extra prefill tokens a pinned worker may carry over the best alternative before a spill"`
	// VirtualNodes is the consistent-hash ring's points per worker
	// (default 100).
	VirtualNodes int `mapstructure:"virtual_nodes" help:"consistent-hash ring points per worker"`
	// Fallback is how many more workers consistent-hash tries clockwise
	// when its choice is unavailable (default 2).
	Fallback int `mapstructure:"fallback" help:"workers consistent-hash walks clockwise past an unavailable one"`
	// LoadWeight is kv-aware's weight of load (tokens in flight) against
	// matched prefix (cached tokens) (default 1.0).
	LoadWeight float64 `mapstructure:"load_weight" help:"kv-aware: weight of in-flight tokens against cached tokens"`
	// KVBlocksPerWorker is a worker's KV cache, in blocks of
	// tokens_per_block: kv-aware remembers that many block hashes per
	// worker, and the conversation policy's cache model sizes each ctx
	// worker's cache by it (ctxcache.go): a session's prefix is expected
	// evicted as that worker computes other prompts, all of it once that
	// many blocks were touched since. 0 (the default) takes the size each
	// worker reports (Endpoint.KVCacheTokens), and
	// DefaultKVBlocksPerWorker for a worker that reports none; a value set
	// here wins over the workers' reports.
	KVBlocksPerWorker int `mapstructure:"kv_blocks_per_worker" help:"a worker's KV cache in blocks: kv-aware's memory per worker, the conversation policy's cache model (0: the size each worker reports, else 14000)"`
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

// maxKVBlocksPerWorker bounds kv_blocks_per_worker: kv-aware indexes a
// worker's blocks with 32-bit numbers, and 2^30 blocks of 32 tokens is far
// beyond any GPU's KV cache.
const maxKVBlocksPerWorker = 1 << 30

// Defaults returns the default configuration.
func Defaults() Config {
	return Config{Policy: PolicyConversation, TokensPerBlock: 32, MaxSessions: 100000, SessionTTL: 60 * time.Minute, ContinuationSlackBlocks: 1,
		SpillLoadFactor: 2.0, SpillMinTokens: 16384, SpillMarginTokens: 0, VirtualNodes: 100, Fallback: 2, LoadWeight: 1.0, KVBlocksPerWorker: 0,
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
	case c.HashSkipCount < 0:
		return fmt.Errorf("hash_skip_count: must be >= 0, got %d", c.HashSkipCount)
	case c.ContinuationSlackBlocks < 0:
		return fmt.Errorf("continuation_slack_blocks: must be >= 0, got %d", c.ContinuationSlackBlocks)
	case c.SpillLoadFactor < 0 || (c.SpillLoadFactor > 0 && c.SpillLoadFactor < 1):
		return fmt.Errorf("spill_load_factor: must be 0 (off) or >= 1, got %g", c.SpillLoadFactor)
	case c.SpillMinTokens < 0:
		return fmt.Errorf("spill_min_tokens: must be >= 0, got %d", c.SpillMinTokens)
	case c.SpillMarginTokens < 0:
		return fmt.Errorf("spill_margin_tokens: must be >= 0, got %d", c.SpillMarginTokens)
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
