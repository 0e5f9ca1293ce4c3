package router

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/duet-serve/duet/router/kvindex"
)

// CostModel routes a request to the ctx worker where it costs least to
// serve, as the cache index sees each worker's cache:
//
//  1. For each available ctx worker w: cached(w) is the prompt's leading
//     blocks w holds (its KV events, else the estimate of what duet sent
//     there), at most the prompt less its last token, in tokens.
//  2. cost(w) = prompt − cached(w) + load_weight × backlog(w): the tokens w
//     must compute for this request plus the prefill tokens already
//     charged to it (every replica's leases).
//  3. The session's pinned ctx worker (the one its last turn ran on) costs
//     stickiness_tokens less: near-equal workers do not take turns.
//  4. The cheapest wins; ties rotate, never by slice order.
//  5. The gen leg goes to the session's pinned gen worker, else the gen
//     worker holding most of the prompt, else the least loaded, skipping a
//     worker whose load is past spill_load_factor × the others' mean (and
//     above spill_min_tokens); never the ctx worker when another exists.
//  6. A turn that succeeds pins its session to the pair it ran on.
//  7. A session with no pin whose request names a parent session (a
//     sub-agent's) weighs its parent's pinned ctx worker as its own in step
//     3, since that worker holds what the parent and its sub-agents share;
//     its gen leg goes to the least loaded gen worker, so that sub-agents
//     spread over the gen workers instead of piling onto the parent's.
//
// With sessions off (policy kv-aware) steps 3 and 6 do not apply and the
// gen leg is step 5 without a pin. With shared state, the store's pins win
// over this replica's.
type CostModel struct {
	cfg   Config
	stats *Stats
	now   func() time.Time
	pool  *Pool
	cache func(*Endpoint) *kvindex.Cache
	// shared is nil with local state; set before the first pick.
	shared SharedState
	// ctxTurn and genTurn rotate ties, one counter per leg.
	ctxTurn, genTurn atomic.Uint64

	// mu makes each decision and its charge one step (concurrent decisions
	// see each other's load) and guards sessions.
	mu       sync.Mutex
	sessions *sessionTable // nil: no sessions (kv-aware)
}

var _ picker = (*CostModel)(nil)

func newCostModel(cfg Config, stats *Stats, now func() time.Time, pool *Pool, cache func(*Endpoint) *kvindex.Cache, sessions bool) *CostModel {
	m := &CostModel{cfg: cfg, stats: stats, now: now, pool: pool, cache: cache}
	if sessions {
		m.sessions = newSessionTable(cfg.MaxSessions, cfg.SessionTTL, stats.addBreak)
	}
	return m
}

// pins are the workers a session's last turn ran on ("" when none).
type pins struct{ ctx, gen string }

func (m *CostModel) pick(req *Request, ctxCands, genCands []*Endpoint) choice {
	rec, found, down := m.find(req.SessionKey) // outside the lock: it may wait for the store
	parent := m.parentPins(req, found || down)
	m.mu.Lock()
	defer m.mu.Unlock()
	ch := choice{session: req.SessionKey}
	var p pins
	switch {
	case m.sessions == nil:
	case req.SessionKey == "":
		ch.session, ch.minted = mintSessionID(), true
	case down:
		ctx := rendezvous(req.SessionKey, ctxCands)
		p = pins{ctx.ID, rendezvous(req.SessionKey, otherThan(genCands, ctx)).ID}
	case found:
		p = pins{m.idOf(rec.Ctx), m.idOf(rec.Gen)}
	default:
		if s := m.sessions.get(req.SessionKey, m.now()); s != nil {
			p = pins{s.ctx, s.gen}
		}
	}
	if p == (pins{}) && parent.ctx != "" {
		m.placeCtx(&ch, req, ctxCands, parent.ctx, true)
		m.placeChildGen(&ch, otherThan(genCands, ch.ctx))
		return ch.charge(req)
	}
	m.placeCtx(&ch, req, ctxCands, p.ctx, false)
	m.placeGen(&ch, req, otherThan(genCands, ch.ctx), p.gen)
	ch.pinned = p
	return ch.charge(req)
}

// placeChildGen places a sub-agent's first gen leg: the least loaded
// worker not past the spill bound.
func (m *CostModel) placeChildGen(ch *choice, cands []*Endpoint) {
	turn := m.genTurn.Add(1)
	var open []*Endpoint
	for _, c := range cands {
		if !m.occupied(c, cands) {
			open = append(open, c)
		}
	}
	if len(open) == 0 {
		open = cands
	}
	ch.gen = leastLoaded(open, turn)
}

// parentPins returns the pins of req's parent session when req names one
// and its own session may have no pin (known is false: the store did not
// find it); the zero pins otherwise. Outside the cost model's lock: it may
// ask the store.
func (m *CostModel) parentPins(req *Request, known bool) pins {
	if req.ParentSession == "" || known || m.sessions == nil {
		return pins{}
	}
	if rec, found, _ := m.find(req.ParentSession); found {
		return pins{m.idOf(rec.Ctx), m.idOf(rec.Gen)}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.sessions.get(req.ParentSession, m.now()); s != nil {
		return pins{s.ctx, s.gen}
	}
	return pins{}
}

// find asks the shared store for the session keyed key. found is false
// with local state, without a key, and when the store has no record or
// could not answer (then a fallback is counted); down is true when the
// store is known to be down (sessions with a key are then pinned by
// rendezvous hashing, as on every replica).
func (m *CostModel) find(key string) (rec SessionRecord, found, down bool) {
	if m.shared == nil || m.sessions == nil || key == "" {
		return SessionRecord{}, false, false
	}
	rec, found, err := m.shared.Find(key)
	if err != nil {
		m.stats.addFallback()
		return SessionRecord{}, false, errors.Is(err, ErrStoreDown)
	}
	return rec, found, false
}

// maxRanked bounds the candidates whose costs one decision keeps for
// rotating ties (on the stack); beyond it, the first of the cheapest wins.
const maxRanked = 256

// placeCtx chooses the ctx worker of least cost (see CostModel) and says
// how it relates to the pinned one. parent says that pinned is the parent
// session's ctx worker, not the session's own: going elsewhere then breaks
// no affinity.
func (m *CostModel) placeCtx(ch *choice, req *Request, cands []*Endpoint, pinned string, parent bool) {
	prompt := len(req.Tokens)
	reusable := max(prompt-1, 0) / m.cfg.TokensPerBlock // engines recompute at least the last token
	var costs [maxRanked]float64
	var preds [maxRanked]kvindex.Prediction
	bestCost, ties, leastCached := 0.0, 0, prompt
	for i, ep := range cands {
		pred := m.cache(ep).Match(req.Hashes)
		cached := min(pred.Blocks(), reusable) * m.cfg.TokensPerBlock
		leastCached = min(leastCached, cached)
		cost := float64(prompt-cached) + m.cfg.LoadWeight*float64(ep.Load())
		if ep.ID == pinned {
			cost -= float64(m.cfg.StickinessTokens)
		}
		if i < maxRanked {
			costs[i], preds[i] = cost, pred
		}
		switch {
		case ch.ctx == nil || cost < bestCost:
			ch.ctx, ch.ctxPred, ch.ctxCached, bestCost, ties = ep, pred, cached, cost, 1
		case cost == bestCost:
			ties++
		}
	}
	if ties > 1 && len(cands) <= maxRanked { // rotate among the ties
		k := int(m.ctxTurn.Add(1) % uint64(ties))
		for i, ep := range cands {
			if costs[i] != bestCost {
				continue
			}
			if k == 0 {
				ch.ctx, ch.ctxPred, ch.ctxCached = ep, preds[i], min(preds[i].Blocks(), reusable)*m.cfg.TokensPerBlock
				break
			}
			k--
		}
	}
	ch.predicted = true
	switch {
	case parent && ch.ctx.ID == pinned:
		ch.decision = DecisionParent
	case (pinned == "" || parent) && ch.ctxCached > leastCached:
		ch.decision = DecisionCached
	case pinned == "" || parent:
		ch.decision = DecisionNew
	case ch.ctx.ID == pinned:
		ch.decision = DecisionSticky
	case find(cands, pinned) == nil:
		ch.decision = DecisionRepin
		m.stats.addBreak(unavailableReason(pinned, req.ExcludeCtx))
	default:
		ch.decision = DecisionMoved
		m.stats.addBreak(reasonMoved)
	}
}

// placeGen chooses the gen worker (see CostModel, step 5): cands exclude
// the ctx worker when they can. A sticky turn whose pinned gen worker is
// unavailable is a re-pin.
func (m *CostModel) placeGen(ch *choice, req *Request, cands []*Endpoint, pinned string) {
	ep := find(cands, pinned)
	if pinned != "" && ep == nil && ch.decision == DecisionSticky {
		ch.decision = DecisionRepin
		m.stats.addBreak(unavailableReason(pinned, req.ExcludeGen))
	}
	switch {
	case ep != nil && !m.occupied(ep, cands):
		ch.gen, ch.genCached = ep, m.genCached(ep, req)
		return
	case ep != nil:
		m.stats.addSpill("gen-overload")
		m.stats.addBreak(reasonSpill)
	}
	turn := int(m.genTurn.Add(1))
	for i := range cands {
		c := cands[(turn+i)%len(cands)]
		if m.occupied(c, cands) {
			continue
		}
		if cached := m.genCached(c, req); cached > ch.genCached {
			ch.gen, ch.genCached = c, cached
		}
	}
	if ch.gen == nil {
		ch.gen = leastLoaded(cands, uint64(turn))
	}
}

// genCached is the prompt's tokens gen worker ep holds, in full blocks: the
// KV it need not pull.
func (m *CostModel) genCached(ep *Endpoint, req *Request) int {
	return m.cache(ep).Match(req.Hashes).Blocks() * m.cfg.TokensPerBlock
}

// occupied reports whether gen worker ep's load (KV occupancy) is past the
// bound: above spill_min_tokens and above spill_load_factor times the mean
// of the other candidates' (never with spill_load_factor 0 or no others).
// cands may hold ep.
func (m *CostModel) occupied(ep *Endpoint, cands []*Endpoint) bool {
	if m.cfg.SpillLoadFactor == 0 {
		return false
	}
	load := ep.Load()
	if load <= m.cfg.SpillMinTokens {
		return false
	}
	var others, sum int64
	for _, c := range cands {
		if c != ep {
			others++
			sum += c.Load()
		}
	}
	return others > 0 && float64(load) > m.cfg.SpillLoadFactor*float64(sum)/float64(others)
}

// unavailableReason says why a pinned worker is not among the candidates:
// a retry excluded it, or it is unhealthy, draining or gone.
func unavailableReason(pinned string, excluded map[string]bool) string {
	if excluded[pinned] {
		return reasonRetry
	}
	return reasonUnavailable
}

// succeeded pins session key, pinned to was when its turn was routed, to
// the pair the turn ran on, and returns the record to share (nil without
// sessions) and whether the store must have it before the turn ends: a
// client's session whose pin changed, whose next turn may come through
// another replica at once (a minted id comes back later, if ever).
func (m *CostModel) succeeded(key string, minted bool, was pins, ctxID, genID string) (rec *SessionRecord, wait bool) {
	if m.sessions == nil || key == "" {
		return nil, false
	}
	m.mu.Lock()
	m.sessions.put(key, ctxID, genID, m.now())
	m.mu.Unlock()
	return &SessionRecord{Key: key, Ctx: m.identityOf(ctxID), Gen: m.identityOf(genID)}, !minted && was != pins{ctxID, genID}
}

// forget drops session key, which its client ended, and returns the key
// to delete from the shared store ("" without sessions or a key).
func (m *CostModel) forget(key string) string {
	if m.sessions == nil || key == "" {
		return ""
	}
	m.mu.Lock()
	if s := m.sessions.byKey[key]; s != nil {
		m.sessions.remove(s, reasonEnded)
	}
	m.mu.Unlock()
	return key
}

// idOf returns the ID of the pool's worker with the given identity, "" when
// there is none.
func (m *CostModel) idOf(identity string) string {
	if ep := m.pool.ByIdentity(identity); ep != nil && identity != "" {
		return ep.ID
	}
	return ""
}

// identityOf returns the identity of the pool's worker id ("" when gone).
func (m *CostModel) identityOf(id string) string {
	if ep := m.pool.Get(id); ep != nil {
		return ep.Identity()
	}
	return ""
}

// workersChanged unpins the legs that point at removed workers.
func (m *CostModel) workersChanged(present map[string]bool) {
	if m.sessions == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for w := range m.sessions.byWorker {
		if !present[w] {
			m.stats.addBreakN(reasonWorkerGone, m.sessions.workerGone(w))
		}
	}
}

// sessionsPerWorker counts pinned sessions by worker ID.
func (m *CostModel) sessionsPerWorker() map[string]int {
	if m.sessions == nil {
		return map[string]int{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sessions.perWorker()
}

// liveSessions is the number of live sessions.
func (m *CostModel) liveSessions() int {
	if m.sessions == nil {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sessions.expire(m.now())
	return len(m.sessions.byKey)
}

// mintSessionID makes a session id for a request that had none; it goes
// back to the client in X-Session-ID.
func mintSessionID() string { return fmt.Sprintf("duet-%016x", rand.Uint64()) }
