package orchestrator

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/duet-serve/duet/orchestrator/protocol/adapters"
)

// Config is the orchestrator: section.
type Config struct {
	// Protocol is the workers' disaggregation protocol (default trtllm).
	Protocol string `mapstructure:"protocol" help:"workers' disaggregation protocol: trtllm, vllm or sglang"`
	// Models are the model names clients may ask for (default: the fleet's
	// models; empty accepts any name).
	Models []string `mapstructure:"models" help:"model names clients may request (empty: any)"`
	// MaxRetries is how many times a failed attempt is retried on other
	// workers before the client gets an error (default 2).
	MaxRetries int `mapstructure:"max_retries" help:"retries of a failed attempt on other workers"`
	// MaxMigrations is how many times one generation may move to another
	// gen worker after its worker failed mid-stream (see migrate.go;
	// default 2, 0 turns migration off).
	MaxMigrations int `mapstructure:"max_migrations" help:"times a failed generation may continue on another gen worker (0: never)"`
	// ContextTimeout bounds the context phase (default 60s).
	ContextTimeout time.Duration `mapstructure:"context_timeout" help:"time limit of the context phase"`
	// FirstEventTimeout bounds the wait for the gen worker's response
	// headers and first event (default 60s); a whole non-streaming
	// generation is bounded by StreamTotalTimeout.
	FirstEventTimeout time.Duration `mapstructure:"first_event_timeout" help:"time limit until the gen worker's first event"`
	// StreamIdleTimeout ends a stream whose worker sent nothing for this
	// long (default 60s).
	StreamIdleTimeout time.Duration `mapstructure:"stream_idle_timeout" help:"longest silence of a generation stream"`
	// StreamTotalTimeout bounds a whole generation (default 30m).
	StreamTotalTimeout time.Duration `mapstructure:"stream_total_timeout" help:"time limit of a whole generation"`
	// PingInterval is how often a silent stream gets a ": ping" comment so
	// that a gone client is noticed (default 100ms).
	PingInterval time.Duration `mapstructure:"ping_interval" help:"SSE keep-alive comment interval during silences"`
	// MaxLocalPrefillTokens turns on cache-aware conditional
	// disaggregation: when at most this many of the prompt's tokens are not
	// already held by the chosen gen worker (as the router expects), the
	// context phase is skipped and the gen worker prefills them (default 0 =
	// always disaggregate).
	MaxLocalPrefillTokens int `mapstructure:"max_local_prefill_tokens" help:"skip the context phase when at most this many prompt tokens are uncached on the gen worker (0: never)"`
	// DefaultMaxTokens is the output length assumed for load accounting
	// when a request sets no limit (default 256).
	DefaultMaxTokens int `mapstructure:"default_max_tokens" help:"output tokens assumed for load when a request sets no limit"`
	// MaxConnsPerWorker caps pooled connections per worker (default 2048);
	// each live stream holds one.
	MaxConnsPerWorker int `mapstructure:"max_conns_per_worker" help:"connection pool size per worker"`
	// ConnWaitTimeout is how long a request waits for a free pooled
	// connection (default 5s).
	ConnWaitTimeout time.Duration `mapstructure:"conn_wait_timeout" help:"wait for a free upstream connection"`
	// SessionHeaders are extra headers read as session keys after the
	// built-in ones (default none).
	SessionHeaders []string `mapstructure:"session_headers" help:"extra request headers that carry a session id"`
	// MaxSessionIDLength bounds a session id (default 256 bytes).
	MaxSessionIDLength int `mapstructure:"max_session_id_length" help:"longest accepted session id, bytes"`
	// MaxModelLen is a model's context length: prompt plus output tokens
	// (default 131072, like vLLM's max_model_len). Workers that report
	// their own (vLLM and SGLang in GET /v1/models, and sim workers
	// speaking their protocols) lower it: a request must fit the smallest
	// context length the available workers reported, when that is smaller.
	// A request beyond the limit is a 400, naming the limit that applied,
	// before any worker is called.
	MaxModelLen int `mapstructure:"max_model_len" help:"context length (prompt + output tokens) of every model; the workers' own, when they report a smaller one"`
	// MaxModelLenByModel overrides MaxModelLen per model, as "MODEL=LEN"
	// entries (a list, since model names may hold dots); the workers'
	// reported context length lowers these too.
	MaxModelLenByModel []string `mapstructure:"max_model_len_by_model" help:"per-model context lengths, MODEL=LEN entries"`
}

// maxModelLenLimit bounds max_model_len so that every token sum duet makes
// (prompt + output, summed over requests) stays far from overflow.
const maxModelLenLimit = 1 << 30

// ModelLen returns the context length of model.
func (c Config) ModelLen(model string) int { return c.modelLens().of(model) }

// modelLens is MaxModelLen and MaxModelLenByModel parsed once, for the
// per-request checks.
type modelLens struct {
	byModel  map[string]int
	fallback int
}

func (c Config) modelLens() modelLens {
	l := modelLens{byModel: make(map[string]int, len(c.MaxModelLenByModel)), fallback: c.MaxModelLen}
	for _, e := range c.MaxModelLenByModel {
		if name, n, ok := parseModelLen(e); ok {
			if _, seen := l.byModel[name]; !seen { // the first entry for a model wins
				l.byModel[name] = n
			}
		}
	}
	return l
}

// of returns the context length of model.
func (l modelLens) of(model string) int {
	if n, ok := l.byModel[model]; ok {
		return n
	}
	return l.fallback
}

// parseModelLen splits a "MODEL=LEN" entry at its last '='.
func parseModelLen(e string) (string, int, bool) {
	i := strings.LastIndexByte(e, '=')
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(e[i+1:])
	return e[:i], n, err == nil && n >= 1 && n <= maxModelLenLimit
}

// Defaults returns the default configuration.
func Defaults() Config {
	return Config{
		Protocol:           "trtllm",
		MaxRetries:         2,
		MaxMigrations:      2,
		ContextTimeout:     60 * time.Second,
		FirstEventTimeout:  60 * time.Second,
		StreamIdleTimeout:  60 * time.Second,
		StreamTotalTimeout: 30 * time.Minute,
		PingInterval:       100 * time.Millisecond,
		DefaultMaxTokens:   256,
		MaxConnsPerWorker:  2048,
		ConnWaitTimeout:    5 * time.Second,
		MaxSessionIDLength: 256,
		MaxModelLen:        131072,
	}
}

// Validate checks the configuration; errors name the key.
func (c Config) Validate() error {
	if _, err := adapters.ByName(c.Protocol); err != nil {
		return fmt.Errorf("protocol: %w", err)
	}
	positive := []struct {
		key string
		d   time.Duration
	}{
		{"context_timeout", c.ContextTimeout}, {"first_event_timeout", c.FirstEventTimeout},
		{"stream_idle_timeout", c.StreamIdleTimeout}, {"stream_total_timeout", c.StreamTotalTimeout},
		{"ping_interval", c.PingInterval}, {"conn_wait_timeout", c.ConnWaitTimeout},
	}
	for _, p := range positive {
		if p.d <= 0 {
			return fmt.Errorf("%s: must be > 0, got %s", p.key, p.d)
		}
	}
	switch {
	case c.MaxRetries < 0:
		return fmt.Errorf("max_retries: must be >= 0, got %d", c.MaxRetries)
	case c.MaxMigrations < 0:
		return fmt.Errorf("max_migrations: must be >= 0, got %d", c.MaxMigrations)
	case c.MaxLocalPrefillTokens < 0:
		return fmt.Errorf("max_local_prefill_tokens: must be >= 0, got %d", c.MaxLocalPrefillTokens)
	case c.MaxLocalPrefillTokens > 0 && c.Protocol == "sglang":
		return fmt.Errorf("max_local_prefill_tokens: must be 0 with protocol sglang (SGLang decode workers cannot prefill locally)")
	case c.DefaultMaxTokens < 1:
		return fmt.Errorf("default_max_tokens: must be >= 1, got %d", c.DefaultMaxTokens)
	case c.MaxConnsPerWorker < 1:
		return fmt.Errorf("max_conns_per_worker: must be >= 1, got %d", c.MaxConnsPerWorker)
	case c.MaxSessionIDLength < 1:
		return fmt.Errorf("max_session_id_length: must be >= 1, got %d", c.MaxSessionIDLength)
	case c.MaxModelLen < 1 || c.MaxModelLen > maxModelLenLimit:
		return fmt.Errorf("max_model_len: must be between 1 and %d, got %d", maxModelLenLimit, c.MaxModelLen)
	case c.DefaultMaxTokens > c.MaxModelLen:
		return fmt.Errorf("default_max_tokens: must be <= max_model_len (%d), got %d", c.MaxModelLen, c.DefaultMaxTokens)
	}
	for i, e := range c.MaxModelLenByModel {
		if _, _, ok := parseModelLen(e); !ok {
			return fmt.Errorf("max_model_len_by_model[%d]: %q is not MODEL=LEN with LEN between 1 and %d", i, e, maxModelLenLimit)
		}
	}
	for i, h := range c.SessionHeaders {
		if strings.TrimSpace(h) == "" || strings.ContainsAny(h, " :\t") {
			return fmt.Errorf("session_headers[%d]: %q is not a header name", i, h)
		}
	}
	return nil
}
