package router

import (
	"errors"
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
	DecisionFork     = "fork"     // a request with a new id continued a known session: a new session on its pair
	DecisionBranch   = "branch"   // a new session sharing a known session's own content (not continuing it), placed on its pair
	DecisionNew      = "new"      // a new session placed by load
	DecisionRepin    = "repin"    // a pinned leg was unavailable and was picked again
	DecisionSpill    = "spill"    // prefix of spill:<reason>: the pinned worker was overloaded
	DecisionHash     = "hash"     // consistent-hash's first choice
	DecisionFallback = "fallback" // consistent-hash walked past an unavailable worker
)

// Conversation pins each conversation to a (ctx, gen) pair, places new
// conversations on the least-loaded workers by token-weighted load (or,
// when one branches off a known session's own content, on its pair),
// recognises continuations without an id by prefix (and starts a new id
// that continues a known session on that session's pair), re-picks only a leg
// that became unavailable, and spills away from overloaded pinned workers.
// With shared state (several replicas), the store's view of a session wins
// over this replica's; the local table and index are what serves while the
// store is down.
type Conversation struct {
	cfg   Config
	now   func() time.Time
	stats *Stats
	pool  *Pool
	// shared is nil with local state; set before the first pick.
	shared SharedState
	// ctxTurn and genTurn rotate ties, one counter per leg so that the
	// legs do not step each other's rotation.
	ctxTurn, genTurn atomic.Uint64

	// mu guards table, index and blocks (and every session in them).
	mu     sync.Mutex
	table  *sessionTable
	index  *prefixIndex
	blocks *blockTable
}

var _ picker = (*Conversation)(nil)

func newConversation(cfg Config, now func() time.Time, stats *Stats, pool *Pool) *Conversation {
	c := &Conversation{cfg: cfg, now: now, stats: stats, pool: pool,
		index:  newPrefixIndex(cfg.TokensPerBlock, cfg.HashSkipCount, cfg.ContinuationSlackBlocks),
		blocks: newBlockTable(blockTableSlots(cfg.MaxSessions))}
	c.table = newSessionTable(cfg.MaxSessions, cfg.SessionTTL, func(s *session, reason string) {
		c.index.forget(s)
		stats.addBreak(reason)
	})
	return c
}

func (c *Conversation) pick(req *Request, ctxCands, genCands []*Endpoint) choice {
	found, answered, down := c.find(req) // outside the lock: it may wait for the store
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	c.table.expire(now)
	s, ch := c.lookup(req, found, answered, now)
	turnedOver := ""
	if down && req.SessionKey != "" {
		c.hashPins(s, ctxCands, genCands) // where every replica puts it, whatever its cache
	} else {
		turnedOver = c.forgetTurnedOver(s)
		if ch.decision == DecisionNew {
			c.branch(s, &ch, req, ctxCands, genCands)
		}
	}
	c.placeLegs(s, &ch, req, ctxCands, genCands, turnedOver)
	c.table.touch(s, now)
	s.inflight++
	c.index.record(s, req.Tokens, req.Hashes)
	c.blocks.record(req.Hashes, s.id)
	s.unread = c.shared != nil && !answered
	c.save(s)
	ch.session = s.key
	return ch.charge(req)
}

// find asks the shared store for the request's session (by key, else the
// sessions its prompt may continue). answered is false with local state and
// when the store could not answer: then the request is routed on local
// state, and a fallback is counted. down is true when the store is known to
// be down (not merely slow once): then sessions with an id are placed by
// rendezvous hashing, as on every replica.
func (c *Conversation) find(req *Request) (found []SessionRecord, answered, down bool) {
	if c.shared == nil {
		return nil, false, false
	}
	var ends []uint64
	if req.SessionKey == "" {
		ends = sharedEnds(req.Hashes, c.cfg.HashSkipCount)
	}
	found, err := c.shared.Find(req.SessionKey, ends)
	if err != nil {
		c.stats.addFallback()
		return nil, false, errors.Is(err, ErrStoreDown)
	}
	return found, true, false
}

// lookup finds the request's session: by key, else by prefix, else a new
// one (with a minted key when the request had none). A new key whose prompt
// continues a known session forks it: the new session starts on that
// session's pair. The shared store's record of a session (found) is taken
// over first. When the store answered, its prefix index is the only one
// asked: this replica's index misses the sessions other replicas placed,
// so it could see a continuation where the store sees several sessions
// with that prompt. (A session the store lost but this replica knows by
// key is still used.)
func (c *Conversation) lookup(req *Request, found []SessionRecord, answered bool, now time.Time) (*session, choice) {
	if req.SessionKey != "" {
		if rec := recordOf(found, req.SessionKey); rec != nil {
			return c.adopt(rec, now), choice{decision: DecisionSticky}
		}
		if s := c.table.get(req.SessionKey, now); s != nil {
			return s, choice{decision: DecisionSticky}
		}
		if from, shared := c.localMatch(req, answered, now); from != nil {
			return c.fork(req.SessionKey, from, shared, now), choice{decision: DecisionFork}
		}
		return c.newSession(req.SessionKey, req.Hashes, now), choice{decision: DecisionNew}
	}
	if rec := continuedRecord(found, req.Tokens, req.Hashes, c.cfg.TokensPerBlock); rec != nil {
		return c.adopt(rec, now), choice{decision: DecisionImplicit}
	}
	if s, shared := c.localMatch(req, answered, now); s != nil {
		s.ctxHeld, s.genHeld = heldOf(s, shared)
		return s, choice{decision: DecisionImplicit}
	}
	return c.newSession(mintSessionID(), req.Hashes, now), choice{decision: DecisionNew, minted: true}
}

// newSession adds a session whose first prompt has these block hashes,
// noting how far other sessions' prompts went through them.
func (c *Conversation) newSession(key string, hashes []uint64, now time.Time) *session {
	s := c.table.add(key, now)
	s.forkDepth = c.blocks.sharedDepth(hashes, s.id)
	s.commonDepth = s.forkDepth
	return s
}

// fork adds the session key for a request whose prompt continues from's
// (sharing shared tokens with its previous prompt): pinned to from's pair,
// holding what from's workers hold of the prompt, and with from's own
// content starting where from's did. from keeps its own state.
func (c *Conversation) fork(key string, from *session, shared int, now time.Time) *session {
	s := c.table.add(key, now)
	c.startFrom(s, from, shared, from.gen)
	s.forkDepth = from.forkDepth
	return s
}

// startFrom pins the new session s to from's ctx worker and to gen (from's
// gen worker, or "" to place that leg by load), holding what those workers
// hold of the shared tokens, with from's cache mark and common depth.
func (c *Conversation) startFrom(s, from *session, shared int, gen string) {
	c.table.pin(s, from.ctx, gen)
	s.ctxHeld, s.genHeld = heldOf(from, shared)
	if gen != from.gen {
		s.genHeld = 0
	}
	s.ctxMark, s.commonDepth = from.ctxMark, from.commonDepth
}

// branch starts a new session on the pair of the session whose own content
// its first prompt shares (a branch of that conversation: an edited or
// regenerated turn, another question over the same document), when the
// tokens that ctx worker is expected to hold still outweigh the backlog it
// has beyond the least-loaded one, by the rule a sticky turn spills by
// (see prefillBacklogged). What that session shares with prompts beyond
// its own conversation (a common system prompt: its commonDepth) does not
// count: every worker that served such a prompt holds it. Nor does a
// prefix within hash_skip_count blocks, nor one shared with a session
// whose first prompt shared nothing (the first conversation seen with a
// system prompt: nothing tells that prompt from its own first message).
// The gen leg goes to that session's gen worker too when it is available.
func (c *Conversation) branch(s *session, ch *choice, req *Request, ctxCands, genCands []*Endpoint) {
	from := c.branchParent(s, req.Hashes)
	if from == nil {
		return
	}
	ep := find(ctxCands, from.ctx)
	shared := s.forkDepth * c.cfg.TokensPerBlock
	ctxHeld, _ := heldOf(from, shared)
	expected := c.expectedHeld(from, min(ctxHeld, len(req.Tokens)))
	if ep == nil || expected == 0 {
		return
	}
	prompt := int64(len(req.Tokens))
	if others := otherThan(ctxCands, ep); len(others) > 0 &&
		c.prefillBacklogged(ep, leastLoaded(others, c.ctxTurn.Load()), prompt-expected, prompt) {
		return
	}
	gen := from.gen
	if find(otherThan(genCands, ep), gen) == nil {
		gen = ""
	}
	c.startFrom(s, from, shared, gen)
	ch.decision = DecisionBranch
}

// branchParent returns the live session whose own content the new session
// s's first prompt (with these block hashes) shares, nil when there is
// none to branch off (see branch).
func (c *Conversation) branchParent(s *session, hashes []uint64) *session {
	from := c.table.byID[c.blocks.writer(hashes, s.forkDepth)]
	if from == nil || from.commonDepth == 0 || s.forkDepth <= max(from.commonDepth, c.cfg.HashSkipCount) ||
		from.ctx == "" || c.cacheTurnedOver(from) {
		return nil
	}
	return from
}

// heldOf is what s's workers hold of a prompt that shares shared tokens
// with s's previous prompt: all they held when it holds the whole previous
// prompt, at most the shared part otherwise.
func heldOf(s *session, shared int) (ctx, gen int) {
	if shared >= s.promptLen {
		return s.ctxHeld, s.genHeld
	}
	return min(s.ctxHeld, shared), min(s.genHeld, shared)
}

// localMatch asks this replica's prefix index, unless the store answered,
// for a live session the request continues, and how many tokens it shares
// with it. A match that sat idle past the TTL is evicted instead.
func (c *Conversation) localMatch(req *Request, answered bool, now time.Time) (*session, int) {
	if answered {
		return nil, 0
	}
	s, shared := c.index.match(req.Tokens, req.Hashes)
	if s != nil && s.idle(now, c.cfg.SessionTTL) {
		c.table.remove(s, reasonTTL)
		return nil, 0
	}
	return s, shared
}

// recordOf returns the record keyed key, or nil.
func recordOf(recs []SessionRecord, key string) *SessionRecord {
	for i := range recs {
		if recs[i].Key == key {
			return &recs[i]
		}
	}
	return nil
}

// adopt makes the local session rec.Key what the store says it is. A pinned
// worker this replica does not know is a lost leg: it is picked again.
func (c *Conversation) adopt(rec *SessionRecord, now time.Time) *session {
	s := c.table.get(rec.Key, now)
	if s == nil {
		s = c.table.add(rec.Key, now)
	}
	ctx, gen := c.idOf(rec.Ctx), c.idOf(rec.Gen)
	c.table.pin(s, ctx, gen)
	s.ctxHeld, s.genHeld = rec.CtxHeld, rec.GenHeld
	// The mark is a reading of the ctx worker's cache clock, which every
	// replica reads the same (Endpoint.CacheClock); a record that has none
	// (an older duet's) is counted from now.
	s.ctxMark = rec.CtxMark
	if s.ctxMark <= 0 {
		s.ctxMark = c.clock(ctx)
	}
	s.ctxLost, s.genLost = ctx == "" && rec.Ctx != "", gen == "" && rec.Gen != ""
	c.index.put(s, rec.End, rec.EndDepth, rec.TailLen, rec.TailHash)
	return s
}

// hashPins pins a session that carries an id to the workers rendezvous
// hashing gives its key, as every replica does while the store is down, so
// that they still agree. A pin that moves counts as an affinity break.
func (c *Conversation) hashPins(s *session, ctxCands, genCands []*Endpoint) {
	ctx := rendezvous(s.key, ctxCands)
	gen := rendezvous(s.key, otherThan(genCands, ctx))
	if s.ctx != "" && s.ctx != ctx.ID {
		c.stats.addBreak(reasonStoreDown)
		s.ctxHeld = 0
	}
	if s.gen != "" && s.gen != gen.ID {
		s.genHeld = 0
	}
	c.table.pin(s, ctx.ID, gen.ID)
}

// save hands the session's state to the shared store (nil: local only),
// unless the store could not be read for the session's last request: this
// replica's copy may then be stale, and writing it would overwrite a record
// other replicas keep up to date.
func (c *Conversation) save(s *session) {
	if c.shared == nil || s.unread {
		return
	}
	c.shared.Save(SessionRecord{Key: s.key, Ctx: c.identityOf(s.ctx), Gen: c.identityOf(s.gen),
		CtxHeld: s.ctxHeld, CtxMark: s.ctxMark, GenHeld: s.genHeld, End: s.endHash, EndDepth: s.endDepth,
		TailLen: s.promptLen - s.endDepth*c.cfg.TokensPerBlock, TailHash: s.tailHash})
}

// idOf returns the ID of the pool's worker with the given identity, "" when
// there is none.
func (c *Conversation) idOf(identity string) string {
	if ep := c.pool.ByIdentity(identity); ep != nil && identity != "" {
		return ep.ID
	}
	return ""
}

// identityOf returns the identity of the pool's worker id ("" when gone).
func (c *Conversation) identityOf(id string) string {
	if ep := c.pool.Get(id); ep != nil {
		return ep.Identity()
	}
	return ""
}

// placeLegs chooses each leg: the pinned worker when it is available and not
// overloaded, else the least-loaded one. A leg that had to be picked again
// is re-pinned; a spill leaves the pin (and its cache) in place. (Moving
// the pin with a ctx spill was measured: +0.001 hit ratio on the Mooncake
// trace, nothing on the routing benchmark; and with several replicas, a
// spill that only stale shared state caused would then move the session
// for good.)
//
// turnedOver is the worker forgetTurnedOver unpinned the ctx leg from: a
// leg placed elsewhere is a re-pin and an affinity break (turnover); placed
// there again, it is the sticky turn it was.
func (c *Conversation) placeLegs(s *session, ch *choice, req *Request, ctxCands, genCands []*Endpoint, turnedOver string) {
	promptLen := len(req.Tokens)
	held := fullBlocks(min(s.ctxHeld, promptLen), c.cfg.TokensPerBlock)
	stillHeld := fullBlocks(int(c.expectedHeld(s, held)), c.cfg.TokensPerBlock)
	uncached := int64(promptLen - stillHeld)
	ctx, ctxWhy := c.leg(s.ctx, ctxCands, req.ExcludeCtx, "ctx", &c.ctxTurn, func(pinned, alt *Endpoint) bool {
		return c.prefillBacklogged(pinned, alt, uncached, int64(promptLen))
	})
	gen, genWhy := c.leg(s.gen, otherThan(genCands, ctx), req.ExcludeGen, "gen", &c.genTurn, func(pinned, _ *Endpoint) bool {
		return c.occupied(pinned, otherThan(genCands, pinned))
	})
	if turnedOver != "" && ctx.ID != turnedOver {
		c.stats.addBreak(reasonTurnover)
		ctxWhy = DecisionRepin
	}
	ctxWhy, genWhy = lostLeg(ctxWhy, s.ctxLost), lostLeg(genWhy, s.genLost)
	s.ctxLost, s.genLost = false, false
	ch.ctx, ch.gen = ctx, gen
	ch.decision = combine(ch.decision, ctxWhy, genWhy)
	if s.ctx != "" && ctxWhy == "" {
		ch.ctxCached, ch.ctxExpectedHeld = held, stillHeld
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

// forgetTurnedOver unpins the ctx leg of a session whose ctx worker has
// computed more than a cache's worth of tokens (kv_blocks_per_worker
// blocks) since the session's last turn there: least recently used, its
// prefix is presumed gone, and the leg is placed afresh by load instead of
// waiting behind the worker's backlog for a cache it no longer has. It
// returns the worker the leg was unpinned from ("" when it stays).
func (c *Conversation) forgetTurnedOver(s *session) string {
	if !c.cacheTurnedOver(s) {
		return ""
	}
	from := s.ctx
	c.table.pin(s, "", s.gen)
	s.ctxHeld = 0
	return from
}

// cacheTurnedOver reports whether more than a cache's worth of tokens were
// touched on s's ctx worker since it prefilled s's last turn
// (ctxcache.go).
func (c *Conversation) cacheTurnedOver(s *session) bool {
	if s.ctx == "" || s.ctxHeld <= 0 {
		return false
	}
	since, capacity := c.ctxCache(s)
	return since > capacity
}

// expectedHeld is how many of held tokens, which s's ctx worker held after
// s's last turn there, it is expected to hold still (survival).
// Spill decisions and the ctx lease weigh this, so a session whose worker
// has churned through most of its cache neither waits behind that worker's
// backlog for a prefix it has likely lost nor hides the full prefill it
// will likely cost there. The session still reports (and the metrics
// compare) all it held.
func (c *Conversation) expectedHeld(s *session, held int) int64 {
	since, capacity := c.ctxCache(s)
	return int64(float64(held) * survival(since, capacity, held))
}

// clock reads ctx worker id's cache clock (0 for a worker not in the pool).
func (c *Conversation) clock(id string) int64 {
	if ep := c.pool.Get(id); ep != nil {
		return ep.CacheClock()
	}
	return 0
}

// ctxCache returns how many tokens were touched on s's ctx worker since
// s's last context phase there (never less than 0), and the worker's KV
// cache in tokens (Config.cacheTokens).
func (c *Conversation) ctxCache(s *session) (since, capacity int64) {
	ep := c.pool.Get(s.ctx)
	if ep != nil {
		since = max(ep.CacheClock()-s.ctxMark, 0)
	}
	return since, c.cfg.cacheTokens(ep)
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

// prefillBacklogged compares the prefill work a spill would save with the
// work it would add: on the pinned ctx worker, its backlog plus the
// request's uncached tokens; on the alternative, its backlog plus the whole
// prompt (it holds none of it), plus the cached tokens once more, since
// recomputing them delays every request queued behind the alternative. The
// request spills when the pinned worker is worse by more than that and
// spill_margin_tokens.
func (c *Conversation) prefillBacklogged(pinned, alt *Endpoint, uncached, prompt int64) bool {
	return pinned.Load()+uncached > alt.Load()+prompt+(prompt-uncached)+c.cfg.SpillMarginTokens
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

// prefilled books a context phase that ran on ctxID for key's request of
// promptTokens, when it ends (Pair.ContextDone): the worker's cache clock
// advances by what it computed and found cached (ctxcache.go), and when
// ctxID is the session's pinned worker (not a spill target), the prompt
// is what it holds for the session, touched now. reportedCached is what
// the worker reported cached; when it reported none (not every engine
// does), what the router expected it to hold, expectedCached.
func (c *Conversation) prefilled(key, ctxID string, promptTokens, expectedCached, reportedCached int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bookPrefill(key, ctxID, promptTokens, expectedCached, reportedCached)
}

// bookPrefill is prefilled under c.mu.
func (c *Conversation) bookPrefill(key, ctxID string, promptTokens, expectedCached, reportedCached int) {
	cached := reportedCached
	if cached <= 0 { // none reported (or none cached): what the router expected there
		cached = expectedCached
	}
	cached = min(cached, promptTokens)
	ep := c.pool.Get(ctxID)
	if ep == nil { // removed meanwhile: its sessions were unpinned
		return
	}
	ep.TouchCache(touched(promptTokens-cached, cached))
	if s := c.table.byKey[key]; s != nil && s.ctx == ctxID {
		s.ctxHeld, s.ctxMark = promptTokens, ep.CacheClock()
	}
}

// done records the end of a turn: the context phase is booked if
// ContextDone did not book it (prefilled), and a generation phase that ran
// on the pinned gen worker (not a spill target) leaves the prompt and reply
// there. The session's idle time starts now.
func (c *Conversation) done(key, ctxID, genID string, promptTokens, expectedCached int, o Outcome, ctxBooked bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if o.CtxRan && !ctxBooked {
		c.bookPrefill(key, ctxID, promptTokens, expectedCached, o.ReportedCached)
	}
	s := c.table.byKey[key]
	if s == nil {
		return
	}
	s.inflight = max(s.inflight-1, 0)
	c.table.touch(s, c.now())
	if o.GenRan && s.gen == genID {
		s.genHeld = int(SaturatingAdd(promptTokens, o.OutputTokens)) // a worker's count is not trusted
	}
	c.save(s)
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
