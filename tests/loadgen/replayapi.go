package loadgen

import (
	"errors"

	"github.com/duet-serve/duet/tokenizer"
)

// Workload returns the configuration as a run would use it (defaults
// applied, seed set) and the sessions its profiling phase sends, for
// `duet replay`: a synthetic workload of --num-sessions sessions, or the
// sessions of --input-file (the first --num-sessions of them when set).
// Workloads bounded only by a request count or a duration need a live
// server's pace and are refused.
func Workload(cfg Config, corpus *Corpus) (Config, []*Session, error) {
	if err := cfg.Validate(); err != nil {
		return cfg, nil, err
	}
	if !cfg.SeedSet {
		cfg.Seed, cfg.SeedSet = 0, true // a replay is reproducible by default
	}
	if cfg.InputFile != "" {
		sessions, err := LoadInputFile(cfg.InputFile, cfg.DatasetType, corpus, cfg.HashBlockSize, cfg.Seed)
		if err != nil {
			return cfg, nil, err
		}
		cfg = promoteFixedSchedule(cfg, sessions).withDefaults()
		if cfg.FixedSchedule {
			if err := checkTimestamps(sessions); err != nil {
				return cfg, nil, err
			}
		}
		if cfg.NumSessions > 0 && cfg.NumSessions < len(sessions) {
			sessions = sessions[:cfg.NumSessions]
		}
		return cfg, sessions, nil
	}
	if cfg.NumSessions == 0 {
		return cfg, nil, errors.New("--num-sessions: a replayed synthetic workload needs a session count")
	}
	cfg = cfg.withDefaults()
	return cfg, newSynthetic(cfg, corpus, cfg.Seed, 1, cfg.NumSessions).all(), nil
}

// Transcript is the client side of one session as `duet replay` plays it:
// what each turn sends, given the replies so far.
type Transcript struct{ c *conversation }

// NewTranscript starts a session's transcript.
func NewTranscript(s *Session) Transcript { return Transcript{newConversation(s)} }

// Prompt returns the tokens duet's frontend sees for turn k (see
// promptTokens).
func (t Transcript) Prompt(tok *tokenizer.Tokenizer, endpoint string, k int) []int {
	return promptTokens(tok, endpoint, t.c.messages(k))
}

// Answered records turn k's reply, which later turns resend.
func (t Transcript) Answered(k int, reply string) { t.c.answered(k, reply) }

// PrefixPrompts returns the prefix prompt pool (the documents) of a
// synthetic workload with --prefix-prompt-pool-size, in pool order, as
// Workload's sessions draw from it; nil without a pool.
func PrefixPrompts(cfg Config, corpus *Corpus) []string {
	p := newPrefixPool(cfg, corpus, cfg.Seed)
	if p == nil {
		return nil
	}
	return p.prompts
}
