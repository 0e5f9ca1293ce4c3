package loadgen

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Endpoint types (--endpoint-type).
const (
	EndpointChat        = "chat"
	EndpointCompletions = "completions"
)

// Dataset types (--custom-dataset-type).
const (
	DatasetMultiTurn  = "multi_turn"
	DatasetSingleTurn = "single_turn"
	DatasetMooncake   = "mooncake_trace"
)

// Arrival patterns (--request-rate-mode).
const (
	ArrivalPoisson  = "poisson"
	ArrivalConstant = "constant"
)

// DefaultSessionHeader is the header that carries a session's id on every
// turn, as aiperf sends it.
const DefaultSessionHeader = "X-Correlation-ID"

// AffinityHeader is the second session header newer aiperf versions send,
// with the same value.
const AffinityHeader = "X-Session-Affinity"

// Header is one extra HTTP header sent with every request.
type Header struct {
	Name, Value string
}

// ExtraInput is one extra top-level field merged into every request body;
// Value is raw JSON.
type ExtraInput struct {
	Key   string
	Value []byte
}

// Config describes one benchmark. Field comments name the aiperf flag each
// field mirrors; zero values mean "not set" unless a default is given.
type Config struct {
	// URLs are the servers' base URLs; http:// is added to one without a
	// scheme (--url, repeatable or comma-separated, default
	// http://localhost:8000). With several, URLStrategy spreads the
	// requests over them.
	URLs []string
	// URLStrategy says how requests are spread over URLs (--url-strategy):
	// URLRoundRobin (the default, as aiperf does) or URLTurnRoundRobin.
	URLStrategy string
	// Model is the model name sent in every request (--model, required).
	Model string
	// EndpointType is chat or completions (--endpoint-type, default chat).
	EndpointType string
	// CustomEndpoint overrides the request path (--endpoint, default
	// /v1/chat/completions or /v1/completions).
	CustomEndpoint string
	// Streaming asks for SSE responses; TTFT and ITL exist only then
	// (--streaming, default false).
	Streaming bool
	// Headers are sent with every request (-H/--header).
	Headers []Header
	// APIKey is sent as "Authorization: Bearer <key>" (--api-key).
	APIKey string
	// SessionHeader names the header that carries the session id on every
	// turn; "none" sends no session header at all (--session-header,
	// default X-Correlation-ID).
	SessionHeader string
	// NoAffinityHeader stops X-Session-Affinity being sent next to the
	// session header (--no-session-affinity-header, default false).
	NoAffinityHeader bool
	// RequestTimeout bounds one request, body included
	// (--request-timeout-seconds, default 600s).
	RequestTimeout time.Duration
	// LegacyMaxTokens sends max_tokens instead of max_completion_tokens on
	// chat requests (--use-legacy-max-tokens).
	LegacyMaxTokens bool
	// ExtraInputs are merged into every body, replacing fields of the same
	// name (--extra-inputs key:value, repeatable).
	ExtraInputs []ExtraInput

	// NumSessions is the number of sessions to run; for synthetic
	// workloads also the number generated (--num-sessions).
	NumSessions int
	// TurnsMean and TurnsStddev shape the turns per synthetic session, a
	// rounded normal draw of at least 1 (--session-turns-mean, default 1;
	// --session-turns-stddev).
	TurnsMean, TurnsStddev float64
	// TurnDelayMean and TurnDelayStddev shape the think time before each
	// turn after the first, in milliseconds, a normal draw of at least 0
	// (--session-turn-delay-mean, --session-turn-delay-stddev).
	TurnDelayMean, TurnDelayStddev float64
	// TurnDelayRatio scales the synthetic think times (--session-delay-ratio,
	// default 1); a file's delays are used as written, as in aiperf 0.12,
	// where the ratio belongs to the synthetic dataset.
	TurnDelayRatio float64
	// ISL and ISLStddev shape the new user tokens per synthetic turn
	// (--isl, default 550; --isl-stddev).
	ISL       int
	ISLStddev float64
	// OSL and OSLStddev shape max_completion_tokens per synthetic turn; 0
	// sends no limit (--osl, --osl-stddev).
	OSL       int
	OSLStddev float64
	// SharedSystemPromptLength is the token length of a system prompt shared
	// by every session (--shared-system-prompt-length).
	SharedSystemPromptLength int
	// UserContextPromptLength is the token length of a context prompt unique
	// to each session, placed after the shared system prompt
	// (--user-context-prompt-length).
	UserContextPromptLength int
	// PrefixPromptPoolSize is the number of prefix prompts (documents) in
	// the pool; each synthetic session's first turn starts with one of
	// them, picked at random (--prefix-prompt-pool-size, aliases
	// --prompt-prefix-pool-size, --num-prefix-prompts; see prefixpool.go).
	PrefixPromptPoolSize int
	// PrefixPromptLength is the mean token length of a prefix prompt
	// (--prefix-prompt-length, alias --prompt-prefix-length).
	PrefixPromptLength int
	// PrefixPromptLengthStddev spreads the prefix lengths: each is a
	// rounded normal draw of at least 1 token (--prefix-prompt-length-stddev,
	// duet's; aiperf's prefixes all have the same length).
	PrefixPromptLengthStddev float64
	// PrefixPromptZipf makes some prefixes popular: prefix i of the pool is
	// picked with weight 1/(i+1)^s; 0 picks uniformly, as aiperf does
	// (--prefix-prompt-zipf, duet's).
	PrefixPromptZipf float64
	// Seed seeds every random draw; SeedSet reports whether it was given
	// (--random-seed; unset: from the clock, recorded in the exports).
	Seed    uint64
	SeedSet bool

	// InputFile is an aiperf JSONL dataset (--input-file).
	InputFile string
	// DatasetType is multi_turn, single_turn or mooncake_trace
	// (--custom-dataset-type, required with InputFile).
	DatasetType string
	// HashBlockSize is the tokens per mooncake hash id (--isl-block-size,
	// default 512).
	HashBlockSize int
	// FixedSchedule sends each turn at its timestamp (--fixed-schedule).
	FixedSchedule bool
	// FixedScheduleAutoOffset shifts timestamps so the first is 0
	// (--fixed-schedule-auto-offset).
	FixedScheduleAutoOffset bool

	// Concurrency is the number of sessions in flight; a session holds its
	// slot through think time. Alone it drives the load; with a rate or a
	// schedule it is a ceiling (--concurrency; default 1 when no other load
	// option is set).
	Concurrency int
	// RequestRate is the request rate in requests/s; each arrival sends
	// the next ready turn, continuations first (--request-rate).
	RequestRate float64
	// ArrivalPattern is poisson or constant (--request-rate-mode, default
	// poisson).
	ArrivalPattern string
	// UserCentricRate is the total rate in requests/s shared by NumUsers
	// users, each sending a turn every NumUsers/UserCentricRate seconds
	// (--user-centric-rate, --num-users).
	UserCentricRate float64
	NumUsers        int
	// RequestCount stops the run after this many requests
	// (--request-count; default max(10, 2 x concurrency) for synthetic
	// workloads with no other stop condition).
	RequestCount int
	// Duration stops sending after this long (--benchmark-duration).
	Duration time.Duration
	// GracePeriod is how long in-flight requests may finish after Duration
	// before they are cancelled (--benchmark-grace-period, default 30s).
	GracePeriod time.Duration
	// WarmupRequestCount requests from separate synthetic sessions run
	// before profiling and are not measured (--warmup-request-count).
	WarmupRequestCount int

	// OracleBlockSize is the block size of the oracle's prefix matching in
	// tokens (--oracle-block-size, default 32, the sim's block size).
	OracleBlockSize int
}

// URL strategies (--url-strategy).
const (
	// URLRoundRobin gives each session the next URL; all its turns go
	// there (aiperf's round_robin: its credit issuer picks a URL for a
	// session's first turn only, aiperf tests/timing/test_credit_issuer.py,
	// 2026-05).
	URLRoundRobin = "round_robin"
	// URLTurnRoundRobin sends every request to the next URL, so the turns
	// of one session reach different servers: what several router
	// replicas sharing their state must handle.
	URLTurnRoundRobin = "turn_round_robin"
)

// Defaults returns aiperf's defaults.
func Defaults() Config {
	return Config{
		URLs:            []string{"http://localhost:8000"},
		URLStrategy:     URLRoundRobin,
		EndpointType:    EndpointChat,
		SessionHeader:   DefaultSessionHeader,
		RequestTimeout:  600 * time.Second,
		TurnsMean:       1,
		TurnDelayRatio:  1,
		ISL:             550,
		HashBlockSize:   512,
		ArrivalPattern:  ArrivalPoisson,
		GracePeriod:     30 * time.Second,
		OracleBlockSize: 32,
	}
}

// Validate checks the configuration; errors name the flag.
func (c Config) Validate() error {
	var errs []error
	bad := func(flag, format string, a ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, a...)))
	}
	if c.Model == "" {
		bad("model", "required")
	}
	if len(c.URLs) == 0 || slices.Contains(c.URLs, "") {
		bad("url", "required, and no URL may be empty")
	}
	if c.URLStrategy != URLRoundRobin && c.URLStrategy != URLTurnRoundRobin {
		bad("url-strategy", "unknown strategy %q (valid: %s, %s)", c.URLStrategy, URLRoundRobin, URLTurnRoundRobin)
	}
	if c.EndpointType != EndpointChat && c.EndpointType != EndpointCompletions {
		bad("endpoint-type", "unknown type %q (valid: chat, completions)", c.EndpointType)
	}
	if c.CustomEndpoint != "" && !strings.HasPrefix(c.CustomEndpoint, "/") {
		bad("endpoint", "must start with /, got %q", c.CustomEndpoint)
	}
	if c.RequestTimeout <= 0 {
		bad("request-timeout-seconds", "must be > 0")
	}
	if c.SessionHeader == "" {
		bad("session-header", `must not be empty (use "none" to send no session header)`)
	}
	for _, h := range c.Headers {
		if h.Name == "" || strings.ContainsAny(h.Name, " :\r\n") {
			bad("header", "invalid header name %q", h.Name)
		}
	}
	c.validateWorkload(bad)
	c.validateLoad(bad)
	if c.OracleBlockSize < 1 {
		bad("oracle-block-size", "must be >= 1, got %d", c.OracleBlockSize)
	}
	return errors.Join(errs...)
}

func (c Config) validateWorkload(bad func(flag, format string, a ...any)) {
	nonNeg := []struct {
		flag string
		v    float64
	}{
		{"num-sessions", float64(c.NumSessions)}, {"session-turns-stddev", c.TurnsStddev},
		{"session-turn-delay-mean", c.TurnDelayMean}, {"session-turn-delay-stddev", c.TurnDelayStddev},
		{"session-delay-ratio", c.TurnDelayRatio}, {"isl-stddev", c.ISLStddev}, {"osl", float64(c.OSL)},
		{"osl-stddev", c.OSLStddev}, {"shared-system-prompt-length", float64(c.SharedSystemPromptLength)},
		{"user-context-prompt-length", float64(c.UserContextPromptLength)},
		{"prefix-prompt-pool-size", float64(c.PrefixPromptPoolSize)}, {"prefix-prompt-length", float64(c.PrefixPromptLength)},
		{"prefix-prompt-length-stddev", c.PrefixPromptLengthStddev}, {"prefix-prompt-zipf", c.PrefixPromptZipf},
	}
	for _, n := range nonNeg {
		if n.v < 0 {
			bad(n.flag, "must be >= 0, got %v", n.v)
		}
	}
	if c.TurnsMean < 1 {
		bad("session-turns-mean", "must be >= 1, got %v", c.TurnsMean)
	}
	if c.ISL < 1 {
		bad("isl", "must be >= 1, got %d", c.ISL)
	}
	if c.HashBlockSize < 1 {
		bad("isl-block-size", "must be >= 1, got %d", c.HashBlockSize)
	}
	switch {
	case c.InputFile != "" && c.DatasetType == "":
		bad("custom-dataset-type", "required with --input-file (valid: multi_turn, single_turn, mooncake_trace)")
	case c.InputFile == "" && c.DatasetType != "":
		bad("input-file", "required with --custom-dataset-type")
	case c.DatasetType != "" && c.DatasetType != DatasetMultiTurn && c.DatasetType != DatasetSingleTurn && c.DatasetType != DatasetMooncake:
		bad("custom-dataset-type", "unknown type %q (valid: multi_turn, single_turn, mooncake_trace)", c.DatasetType)
	}
	c.validatePrefixPool(bad)
	if c.FixedSchedule && c.InputFile == "" {
		bad("fixed-schedule", "needs an --input-file with timestamps")
	}
	if c.FixedScheduleAutoOffset && !c.FixedSchedule {
		bad("fixed-schedule-auto-offset", "only with --fixed-schedule")
	}
}

// validatePrefixPool checks the prefix prompt pool's options: a pool needs
// both a size and a length, is for synthetic sessions only (as in aiperf,
// whose synthetic composer alone prepends prefixes) and excludes the shared
// system and user context prompts (aiperf 0.12's PrefixPromptConfig refuses
// both modes together).
func (c Config) validatePrefixPool(bad func(flag, format string, a ...any)) {
	pool, length := c.PrefixPromptPoolSize > 0, c.PrefixPromptLength > 0
	switch {
	case length && !pool:
		bad("prefix-prompt-pool-size", "must be >= 1 with --prefix-prompt-length")
	case pool && !length:
		bad("prefix-prompt-length", "must be >= 1 with --prefix-prompt-pool-size")
	}
	if !pool && !length {
		for _, o := range []struct {
			flag string
			set  bool
		}{{"prefix-prompt-length-stddev", c.PrefixPromptLengthStddev > 0}, {"prefix-prompt-zipf", c.PrefixPromptZipf > 0}} {
			if o.set {
				bad(o.flag, "only with --prefix-prompt-pool-size and --prefix-prompt-length")
			}
		}
		return
	}
	if c.InputFile != "" {
		bad("prefix-prompt-pool-size", "only for synthetic sessions, not with --input-file")
	}
	if c.SharedSystemPromptLength > 0 || c.UserContextPromptLength > 0 {
		bad("prefix-prompt-pool-size", "mutually exclusive with --shared-system-prompt-length and --user-context-prompt-length")
	}
}

func (c Config) validateLoad(bad func(flag, format string, a ...any)) {
	if c.Concurrency < 0 {
		bad("concurrency", "must be >= 1, got %d", c.Concurrency)
	}
	if c.RequestRate < 0 {
		bad("request-rate", "must be > 0, got %v", c.RequestRate)
	}
	if c.ArrivalPattern != ArrivalPoisson && c.ArrivalPattern != ArrivalConstant {
		bad("request-rate-mode", "unknown pattern %q (valid: poisson, constant)", c.ArrivalPattern)
	}
	if c.UserCentricRate < 0 {
		bad("user-centric-rate", "must be > 0, got %v", c.UserCentricRate)
	}
	switch {
	case c.UserCentricRate > 0 && c.NumUsers < 1:
		bad("num-users", "required (>= 1) with --user-centric-rate")
	case c.UserCentricRate == 0 && c.NumUsers != 0:
		bad("num-users", "only with --user-centric-rate")
	}
	modes := 0
	for _, on := range []bool{c.RequestRate > 0, c.UserCentricRate > 0, c.FixedSchedule} {
		if on {
			modes++
		}
	}
	if modes > 1 {
		bad("request-rate", "--request-rate, --user-centric-rate and --fixed-schedule are mutually exclusive")
	}
	if c.UserCentricRate > 0 && c.InputFile == "" && c.TurnsMean < 2 {
		bad("user-centric-rate", "needs multi-turn sessions (--session-turns-mean >= 2)")
	}
	if c.RequestCount < 0 {
		bad("request-count", "must be >= 1, got %d", c.RequestCount)
	}
	if c.RequestCount > 0 && c.NumSessions > 0 {
		bad("request-count", "--request-count and --num-sessions are mutually exclusive")
	}
	if c.Duration < 0 {
		bad("benchmark-duration", "must be > 0")
	}
	if c.GracePeriod < 0 {
		bad("benchmark-grace-period", "must be >= 0")
	}
	if c.WarmupRequestCount < 0 {
		bad("warmup-request-count", "must be >= 1, got %d", c.WarmupRequestCount)
	}
}

// withDefaults fills in what depends on other fields: the scheme of the
// URL, the default concurrency and the default stop condition.
func (c Config) withDefaults() Config {
	urls := make([]string, len(c.URLs))
	for i, u := range c.URLs {
		if !strings.Contains(u, "://") {
			u = "http://" + u
		}
		urls[i] = strings.TrimRight(u, "/")
	}
	c.URLs = urls
	if c.Concurrency == 0 && c.RequestRate == 0 && c.UserCentricRate == 0 && !c.FixedSchedule {
		c.Concurrency = 1
	}
	if c.InputFile == "" && c.NumSessions == 0 && c.RequestCount == 0 && c.Duration == 0 {
		c.RequestCount = max(10, 2*c.Concurrency)
	}
	return c
}

// endpointPath is the request path for the endpoint type.
func (c Config) endpointPath() string {
	if c.CustomEndpoint != "" {
		return c.CustomEndpoint
	}
	if c.EndpointType == EndpointCompletions {
		return "/v1/completions"
	}
	return "/v1/chat/completions"
}

// mode names the load mode for the exports.
func (c Config) mode() string {
	switch {
	case c.FixedSchedule:
		return "fixed_schedule"
	case c.UserCentricRate > 0:
		return "user_centric"
	case c.RequestRate > 0:
		return c.ArrivalPattern
	default:
		return "concurrency_burst"
	}
}
