package router

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Route decisions, as X-Duet-Route and the metric label report them.
const (
	DecisionSticky   = "sticky"   // a known session on its pinned pair
	DecisionImplicit = "implicit" // a request without id matched a session by prefix
	DecisionNew      = "new"      // a new session placed by load
	DecisionRepin    = "repin"    // a pinned leg was unavailable and was picked again
	DecisionSpill    = "spill"    // prefix of spill:<reason>: the pinned worker was overloaded
	DecisionHash     = "hash"     // consistent-hash's first choice
	DecisionFallback = "fallback" // consistent-hash walked past an unavailable worker
)

// Conversation pins each conversation to a (ctx, gen) pair, places new
// conversations on the least-loaded workers by token-weighted load,
// recognises continuations without an id by prefix, re-picks only a leg
// that became unavailable, and spills away from overloaded pinned workers.
type Conversation struct {
	cfg   Config
	now   func() time.Time
	stats *Stats
	// ctxTurn and genTurn rotate ties, one counter per leg so that the
	// legs do not step each other's rotation.
	ctxTurn, genTurn atomic.Uint64

	// mu guards table and index (and every session in them).
	mu    sync.Mutex
	table *sessionTable
	index *prefixIndex
}

var _ picker = (*Conversation)(nil)

func newConversation(cfg Config, now func() time.Time, stats *Stats) *Conversation {
	c := &Conversation{cfg: cfg, now: now, stats: stats, index: newPrefixIndex(cfg.TokensPerBlock, cfg.HashSkipCount)}
	c.table = newSessionTable(cfg.MaxSessions, cfg.SessionTTL, func(s *session, reason string) {
		c.index.forget(s)
		stats.addBreak(reason)
	})
	return c
}

func (c *Conversation) pick(req *Request, ctxCands, genCands []*Endpoint) choice {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	c.table.expire(now)
	s, ch := c.lookup(req, now)
	c.placeLegs(s, &ch, req, ctxCands, genCands)
	c.table.touch(s, now)
	s.inflight++
	c.index.record(s, req.Tokens, req.Hashes)
	ch.session = s.key
	return ch.charge(req)
}

// lookup finds the request's session: by key, else by prefix, else a new
// one (with a minted key when the request had none).
func (c *Conversation) lookup(req *Request, now time.Time) (*session, choice) {
	if req.SessionKey != "" {
		if s := c.table.get(req.SessionKey, now); s != nil {
			return s, choice{decision: DecisionSticky}
		}
		return c.table.add(req.SessionKey, now), choice{decision: DecisionNew}
	}
	if s := c.index.match(req.Tokens, req.Hashes); s != nil {
		if !s.idle(now, c.cfg.SessionTTL) {
			return s, choice{decision: DecisionImplicit}
		}
		c.table.remove(s, reasonTTL)
	}
	key := mintSessionID()
	return c.table.add(key, now), choice{decision: DecisionNew, minted: true}
}

// placeLegs chooses each leg: the pinned worker when it is available and not
// overloaded, else the least-loaded one. A leg that had to be picked again
// is re-pinned; a spill leaves the pin (and its cache) in place.
func (c *Conversation) placeLegs(s *session, ch *choice, req *Request, ctxCands, genCands []*Endpoint) {
	promptLen := len(req.Tokens)
	uncached := int64(promptLen - min(s.ctxHeld, promptLen))
	ctx, ctxWhy := c.leg(s.ctx, ctxCands, req.ExcludeCtx, "ctx", &c.ctxTurn, func(pinned, alt *Endpoint) bool {
		return c.prefillBacklogged(pinned, alt, uncached, int64(promptLen))
	})
	gen, genWhy := c.leg(s.gen, otherThan(genCands, ctx), req.ExcludeGen, "gen", &c.genTurn, func(pinned, _ *Endpoint) bool {
		return c.occupied(pinned, otherThan(genCands, pinned))
	})
	ctxWhy, genWhy = lostLeg(ctxWhy, s.ctxLost), lostLeg(genWhy, s.genLost)
	s.ctxLost, s.genLost = false, false
	ch.ctx, ch.gen = ctx, gen
	ch.decision = combine(ch.decision, ctxWhy, genWhy)
	if s.ctx != "" && ctxWhy == "" {
		ch.ctxCached = fullBlocks(min(s.ctxHeld, promptLen), c.cfg.TokensPerBlock)
	}
	if s.gen != "" && genWhy == "" {
		ch.genCached = fullBlocks(min(s.genHeld, promptLen), c.cfg.TokensPerBlock)
	}
	pinCtx, pinGen := s.ctx, s.gen
	if pinCtx == "" || ctxWhy == DecisionRepin {
		pinCtx, s.ctxHeld = ctx.ID, 0
	}
	if pinGen == "" || genWhy == DecisionRepin {
		pinGen, s.genHeld = gen.ID, 0
	}
	c.table.pin(s, pinCtx, pinGen)
}

// lostLeg turns a leg placed afresh because its worker was removed into a
// re-pin: the session had a pinned worker there.
func lostLeg(why string, lost bool) string {
	if lost && why == "" {
		return DecisionRepin
	}
	return why
}

// fullBlocks rounds tokens down to whole blocks: engines cache and report
// only full blocks, never the partial last one.
func fullBlocks(tokens, blockSize int) int { return tokens / blockSize * blockSize }

// combine reports the most telling decision: a spill, then a re-pin (of a
// session that existed), then how the session was found.
func combine(base string, whys ...string) string {
	for _, w := range whys {
		if strings.HasPrefix(w, DecisionSpill) {
			return w
		}
	}
	for _, w := range whys {
		if w == DecisionRepin && base != DecisionNew {
			return DecisionRepin
		}
	}
	return base
}

// leg returns the worker for one leg and why it is not the pinned one:
// "" (pinned, or newly placed), repin, or spill:<role>-overload when
// overloaded(pinned, best alternative) says the pinned worker is worse.
func (c *Conversation) leg(pinned string, cands []*Endpoint, excluded map[string]bool, role string, turn *atomic.Uint64, overloaded func(pinned, alt *Endpoint) bool) (*Endpoint, string) {
	if pinned == "" {
		return leastLoaded(cands, turn.Add(1)), ""
	}
	ep := find(cands, pinned)
	if ep == nil {
		c.stats.addBreak(unavailableReason(pinned, excluded))
		return leastLoaded(cands, turn.Add(1)), DecisionRepin
	}
	others := otherThan(cands, ep)
	if c.cfg.SpillLoadFactor == 0 || len(others) == len(cands) {
		return ep, ""
	}
	if alt := leastLoaded(others, turn.Add(1)); overloaded(ep, alt) {
		c.stats.addSpill(role + "-overload")
		c.stats.addBreak(reasonSpill)
		return alt, DecisionSpill + ":" + role + "-overload"
	}
	return ep, ""
}

// unavailableReason says why a pinned worker is not among the candidates:
// a retry excluded it, or it is unhealthy, draining or gone. (Removed
// workers are also counted when membership changes.)
func unavailableReason(pinned string, excluded map[string]bool) string {
	if excluded[pinned] {
		return reasonRetry
	}
	return reasonUnavailable
}

// prefillBacklogged compares the prefill work ahead of the request: on the
// pinned ctx worker its backlog plus the request's uncached tokens, on the
// alternative its backlog plus the whole prompt (it holds none of it). The
// request spills when the pinned worker is worse by more than
// spill_margin_tokens.
func (c *Conversation) prefillBacklogged(pinned, alt *Endpoint, uncached, prompt int64) bool {
	return pinned.Load()+uncached > alt.Load()+prompt+c.cfg.SpillMarginTokens
}

// occupied reports whether a pinned gen worker's load (KV occupancy) is
// past the bound: above spill_min_tokens and above spill_load_factor times
// the others' mean.
func (c *Conversation) occupied(ep *Endpoint, others []*Endpoint) bool {
	if len(others) == 0 {
		return false
	}
	load := ep.Load()
	return load > c.cfg.SpillMinTokens && float64(load) > c.cfg.SpillLoadFactor*meanLoad(others)
}

// done records what the pinned workers hold after a turn: only a phase that
// ran on the pinned worker (not a spill target, not a skipped phase) puts
// the prompt there. The session's idle time starts now.
func (c *Conversation) done(key, ctxID, genID string, promptTokens int, o Outcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.table.byKey[key]
	if s == nil {
		return
	}
	s.inflight = max(s.inflight-1, 0)
	c.table.touch(s, c.now())
	if o.CtxRan && s.ctx == ctxID {
		s.ctxHeld = promptTokens
	}
	if o.GenRan && s.gen == genID {
		s.genHeld = int(SaturatingAdd(promptTokens, o.OutputTokens)) // a worker's count is not trusted
	}
}

// workersChanged drops the legs that point at removed workers.
func (c *Conversation) workersChanged(present map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for w := range c.table.byWorker {
		if !present[w] {
			c.stats.addBreakN(reasonWorkerGone, c.table.workerGone(w))
		}
	}
}

// sessionsPerWorker counts pinned sessions by worker ID.
func (c *Conversation) sessionsPerWorker() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.table.perWorker()
}

// sessions is the number of live sessions.
func (c *Conversation) sessions() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.table.expire(c.now())
	return len(c.table.byKey)
}

// mintSessionID makes a session id for a request that had none; it goes
// back to the client in X-Session-ID.
func mintSessionID() string { return fmt.Sprintf("duet-%016x", rand.Uint64()) }
