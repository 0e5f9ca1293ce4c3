package loadgen

import "time"

// Benchmark phases (metadata.benchmark_phase).
const (
	PhaseWarmup    = "warmup"
	PhaseProfiling = "profiling"
)

// Record is one request of a run: who sent it, when, what the server
// reported and, for a failed request, why it failed.
type Record struct {
	Phase string
	// SessionNum numbers the sessions of the phase in start order.
	SessionNum int
	// ConversationID is the dataset's session id; CorrelationID the id sent
	// in the session header on every turn; RequestID the X-Request-ID.
	ConversationID, CorrelationID, RequestID string
	// URL is the base URL the request went to (see Config.URLs).
	URL string
	// TurnIndex is the turn's position in its session, from 0.
	TurnIndex int
	Streaming bool

	// Start is when the request was written; Ack when the response headers
	// arrived; End when its last byte was read (zero when unknown).
	Start, Ack, End time.Time
	// FirstContent, SecondContent and LastContent are the arrival offsets,
	// from Start, of the first, second and last chunks with content;
	// ContentChunks counts those chunks.
	FirstContent, SecondContent, LastContent time.Duration
	ContentChunks                            int

	// Server-reported usage, valid when HasUsage.
	HasUsage                                     bool
	PromptTokens, CompletionTokens, CachedTokens int
	// ClientPromptTokens is the prompt's length with duet's tokenizer (the
	// rendering duet's frontend tokenizes); ClientOutputTokens the reply's.
	ClientPromptTokens, ClientOutputTokens int
	// OracleTokens is the longest block-aligned prefix of the prompt's
	// tokens shared with any prompt sent before it in the run.
	OracleTokens int
	// RequestedOutputTokens is the max_completion_tokens sent, 0 for none.
	RequestedOutputTokens int

	// Err is nil for a successful request.
	Err *ErrorDetails
	// Cancelled reports a request cut off by the end of the run.
	Cancelled bool
}

// OK reports whether the request succeeded.
func (r *Record) OK() bool { return r.Err == nil }

// InputTokens is the input sequence length: the server's prompt_tokens,
// else the client's count.
func (r *Record) InputTokens() int {
	if r.HasUsage && r.PromptTokens > 0 {
		return r.PromptTokens
	}
	return r.ClientPromptTokens
}

// OutputTokens is the output sequence length: the server's
// completion_tokens, else the client's count of the reply.
func (r *Record) OutputTokens() int {
	if r.HasUsage && r.CompletionTokens > 0 {
		return r.CompletionTokens
	}
	return r.ClientOutputTokens
}

// Latency is the request latency: to the last content chunk when
// streaming, to the end of the body otherwise.
func (r *Record) Latency() (time.Duration, bool) {
	if !r.OK() {
		return 0, false
	}
	if r.Streaming {
		return r.LastContent, r.ContentChunks > 0
	}
	return r.End.Sub(r.Start), true
}

// TTFT is the time to the first content chunk (streaming only).
func (r *Record) TTFT() (time.Duration, bool) {
	return r.FirstContent, r.OK() && r.Streaming && r.ContentChunks > 0
}

// TTST is the time from the first to the second content chunk.
func (r *Record) TTST() (time.Duration, bool) {
	return r.SecondContent - r.FirstContent, r.OK() && r.Streaming && r.ContentChunks > 1
}

// ITL is (latency - TTFT) / (output tokens - 1), in nanoseconds.
func (r *Record) ITL() (float64, bool) {
	lat, ok1 := r.Latency()
	ttft, ok2 := r.TTFT()
	n := r.OutputTokens()
	if !ok1 || !ok2 || n < 2 {
		return 0, false
	}
	return float64(lat-ttft) / float64(n-1), true
}

// TokensPerSecPerUser is 1 / ITL in tokens per second.
func (r *Record) TokensPerSecPerUser() (float64, bool) {
	itl, ok := r.ITL()
	if !ok || itl <= 0 {
		return 0, false
	}
	return 1e9 / itl, true
}

// responseEnd is when the last response of a successful request arrived.
func (r *Record) responseEnd() time.Time {
	if lat, ok := r.Latency(); ok {
		return r.Start.Add(lat)
	}
	return r.End
}
