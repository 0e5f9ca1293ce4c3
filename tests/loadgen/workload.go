package loadgen

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// Session is one conversation of a workload: the user turns sent in order,
// each after the model's answer to the one before.
type Session struct {
	// ID is the dataset's conversation id (conversation_id in the exports).
	ID string
	// System is the system message, empty for none.
	System string
	// Turns are the user turns, at least one.
	Turns []Turn
	// Stateless sessions send each turn's text as the whole prompt, without
	// earlier turns or replies: a mooncake row's hash_ids already describe
	// the full prompt.
	Stateless bool
}

// Turn is one user turn of a session.
type Turn struct {
	// Text is the user message.
	Text string
	// MaxTokens is sent as max_completion_tokens (max_tokens for
	// completions); 0 sends no limit.
	MaxTokens int
	// Delay is the think time between the previous turn's answer and this
	// turn; 0 for the first turn.
	Delay time.Duration
	// Timestamp is the send time relative to the start of the run in
	// fixed-schedule mode, valid when HasTimestamp.
	Timestamp    time.Duration
	HasTimestamp bool
}

// requests counts the turns of sessions.
func requests(sessions []*Session) int {
	n := 0
	for _, s := range sessions {
		n += len(s.Turns)
	}
	return n
}

// source hands out the sessions a phase runs. Implementations are safe for
// concurrent use.
type source interface {
	// next returns the next session, or false when there are no more.
	next() (*Session, bool)
}

// listSource yields a fixed list once, or round and round when cycle is
// set, at most limit sessions in all when limit > 0.
type listSource struct {
	mu       sync.Mutex // guards i
	sessions []*Session
	i        int
	cycle    bool
	limit    int
}

func (s *listSource) next() (*Session, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.sessions) == 0 || (!s.cycle && s.i >= len(s.sessions)) || (s.limit > 0 && s.i >= s.limit) {
		return nil, false
	}
	sess := s.sessions[s.i%len(s.sessions)]
	s.i++
	return sess, true
}

// synthetic generates sessions as aiperf's synthetic multi-turn dataset
// does: a shared system prompt, a context prompt per session, a prefix
// prompt from a pool before the first turn, and normally distributed turn
// counts, think times, input and output lengths. Session i is the same for
// the same seed whoever asks for it.
type synthetic struct {
	cfg    Config
	corpus *Corpus
	system string
	prefix *prefixPool // nil without --prefix-prompt-pool-size

	mu    sync.Mutex // guards rng, n
	rng   *rand.Rand
	n     int
	limit int // sessions to generate, 0 for no limit
}

// newSynthetic returns a generator seeded with (seed, stream); limit 0
// generates sessions for ever.
func newSynthetic(cfg Config, corpus *Corpus, seed, stream uint64, limit int) *synthetic {
	g := &synthetic{cfg: cfg, corpus: corpus, rng: rand.New(rand.NewPCG(seed, stream)), limit: limit}
	if cfg.SharedSystemPromptLength > 0 {
		// The shared prompt depends on the seed only, so the warm-up phase
		// and the profiled phase share it as real users would.
		g.system = corpus.Text(rand.New(rand.NewPCG(seed, 0)), cfg.SharedSystemPromptLength)
	}
	g.prefix = newPrefixPool(cfg, corpus, seed)
	return g
}

func (g *synthetic) next() (*Session, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.limit > 0 && g.n >= g.limit {
		return nil, false
	}
	g.n++
	return g.session(), true
}

// all generates the remaining sessions of a limited generator.
func (g *synthetic) all() []*Session {
	var out []*Session
	for {
		s, ok := g.next()
		if !ok {
			return out
		}
		out = append(out, s)
	}
}

func (g *synthetic) session() *Session {
	c := g.cfg
	s := &Session{ID: uuidFrom(g.rng), System: g.system}
	if c.UserContextPromptLength > 0 {
		ctx := g.corpus.Text(g.rng, c.UserContextPromptLength)
		if s.System != "" {
			s.System += "\n\n" + ctx
		} else {
			s.System = ctx
		}
	}
	turns := max(1, normalInt(g.rng, c.TurnsMean, c.TurnsStddev))
	for k := 0; k < turns; k++ {
		t := Turn{Text: g.corpus.Text(g.rng, max(1, normalInt(g.rng, float64(c.ISL), c.ISLStddev)))}
		if k == 0 && g.prefix != nil {
			t.Text = g.prefix.prepend(g.rng, t.Text)
		}
		if c.OSL > 0 {
			t.MaxTokens = max(1, normalInt(g.rng, float64(c.OSL), c.OSLStddev))
		}
		if k > 0 {
			ms := math.Max(0, g.rng.NormFloat64()*c.TurnDelayStddev+c.TurnDelayMean) * c.TurnDelayRatio
			t.Delay = time.Duration(ms * float64(time.Millisecond))
		}
		s.Turns = append(s.Turns, t)
	}
	return s
}

// normalInt draws round(N(mean, stddev)).
func normalInt(rng *rand.Rand, mean, stddev float64) int {
	if stddev == 0 {
		return int(math.Round(mean))
	}
	return int(math.Round(rng.NormFloat64()*stddev + mean))
}

// uuidFrom formats 128 random bits from rng as a version 4 UUID, so that
// ids are reproducible with --random-seed.
func uuidFrom(rng *rand.Rand) string {
	hi, lo := rng.Uint64(), rng.Uint64()
	hi = hi&^(0xf<<12) | 4<<12 // version 4
	lo = lo&^(0x3<<62) | 2<<62 // RFC 4122 variant
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", hi>>32, hi>>16&0xffff, hi&0xffff, lo>>48, lo&0xffffffffffff)
}
