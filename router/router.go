package router

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/router/kvindex"
)

// Request is what routing knows about one request attempt.
type Request struct {
	// SessionKey is the conversation id, "" when none.
	SessionKey string
	// ParentSession is the session of the agent that started this one (a
	// sub-agent's), "" when none. A session with no pin of its own starts
	// on its parent's ctx worker, where their shared prefix is, and on the
	// least loaded gen worker (see CostModel).
	ParentSession string
	// RequestID keys consistent hashing when there is no session key.
	RequestID string
	// Tokens are the prompt's token ids; Hashes their chained block hashes
	// with the router's tokens_per_block (see Router.BlockSize).
	Tokens []int
	Hashes []uint64
	// MaxTokens is the output limit (the expected output when unknown).
	MaxTokens int
	// ExcludeCtx and ExcludeGen hold IDs of workers a retry must avoid.
	ExcludeCtx, ExcludeGen map[string]bool
	// Adapter is the LoRA adapter the request runs with ("" for the base
	// model): only workers that serve it are candidates, for both phases.
	Adapter string
}

// ErrNoWorker is returned (wrapped in *NoWorkerError) when no available
// worker can serve a phase.
var ErrNoWorker = errors.New("no available worker")

// NoWorkerError says which phase had no worker.
type NoWorkerError struct{ Role disagg.Role }

func (e *NoWorkerError) Error() string {
	return fmt.Sprintf("%v for the %s phase", ErrNoWorker, e.Role)
}

// Unwrap makes errors.Is(err, ErrNoWorker) true.
func (e *NoWorkerError) Unwrap() error { return ErrNoWorker }

// Pair is one routing attempt: a ctx and a gen worker, each with the lease
// that charges it, and the attempt's contract with the router. Ctx and Gen
// are the same endpoint only when one mixed worker must serve both phases
// (the caller then sends one aggregated request).
//
// Whatever shape the request takes (context then generation, SGLang's
// concurrent legs, a local prefill, a retry), its owner tells the router
// the same closed set of events, and the router learns only from them:
// ContextDone once the context phase is over (or there was none), RerouteGen
// when the generation moves to another worker, End once.
type Pair struct {
	Ctx, Gen *Lease
	// Decision says how the pair was chosen.
	Decision Decision
	// Session is the request's session key after routing: the client's or
	// a minted one (Minted). "" when the policy keeps no sessions and the
	// request had none.
	Session string
	Minted  bool
	// CtxCached and GenCached are the prompt tokens the router expects the
	// ctx and gen workers to hold already, in full blocks (the ctx lease
	// is charged the prompt less CtxCached).
	CtxCached, GenCached int

	router       *Router
	promptTokens int
	hashes       []uint64
	ctxPred      kvindex.Prediction
	pinned       pins   // the session's pins when the attempt was routed
	adapter      string // the LoRA adapter it runs with ("": the base model)

	// mu guards the flags below: the context phase may end on a goroutine
	// of its own (DetachContext).
	mu                      sync.Mutex
	ctxOver, detached, done bool
	// ctxUnshared is true when the context phase ran and the other
	// replicas were not told yet (End tells them with the gen worker's).
	ctxUnshared bool
}

// Same reports whether both phases landed on one worker.
func (p *Pair) Same() bool { return p.Ctx.Endpoint() == p.Gen.Endpoint() }

// DetachContext hands the context phase to a goroutine of its own (SGLang's
// concurrent prefill leg), which calls ContextDone when it is over; End
// then leaves the ctx lease to it.
func (p *Pair) DetachContext() {
	p.mu.Lock()
	p.detached = true
	p.mu.Unlock()
}

// ContextDone ends the context phase: it refunds the ctx lease and, when
// the phase ran to completion on the ctx worker (ran), the cache index
// learns that the worker holds the prompt, and the watchdog compares what
// the index expected with the cached tokens the engine reported
// (reportedCached; < 0: none reported). Only the first call counts; it is
// safe from any goroutine.
func (p *Pair) ContextDone(ran bool, reportedCached int) {
	p.mu.Lock()
	over, ended := p.ctxOver, p.done
	if !over {
		p.ctxOver, p.ctxUnshared = true, ran && !ended
	}
	p.mu.Unlock()
	if over {
		return
	}
	p.Ctx.Release()
	if !ran {
		return
	}
	p.router.learnContext(p.Ctx.Endpoint(), p.hashes, p.ctxPred, p.promptTokens, reportedCached)
	if ended { // a detached leg that ended after the request: tell the others now
		p.router.share(Turn{Blocks: p.hashes}, p.Ctx.Endpoint())
	}
}

// Outcome is how an attempt ended, as far as the router cares.
type Outcome struct {
	// GenRan is true when the generation phase completed on the pair's gen
	// worker: the request succeeded, and the worker holds its prompt.
	GenRan bool
	// EndSession is true when the client said its session is over: its pin
	// is forgotten at once, on every replica, instead of after session_ttl
	// (what the turn left in the workers' caches is still learned).
	EndSession bool
}

// End ends the attempt: both leases are refunded (the context phase ends
// as not run unless ContextDone or a detached leg ended it), and when the
// generation completed, the gen worker's index learns the prompt and the
// session is pinned to the pair. A failed attempt creates no session.
// Call it once per attempt; later calls do nothing.
func (p *Pair) End(o Outcome) {
	if p == nil {
		return
	}
	p.mu.Lock()
	done, detached := p.done, p.detached
	p.done = true
	p.mu.Unlock()
	if done {
		return
	}
	if !detached {
		p.ContextDone(false, -1)
	}
	p.Gen.Release()
	var learned []*Endpoint
	p.mu.Lock()
	if p.ctxUnshared {
		learned, p.ctxUnshared = append(learned, p.Ctx.Endpoint()), false
	}
	p.mu.Unlock()
	if o.GenRan && !p.Same() {
		p.router.Cache(p.Gen.Endpoint()).Sent(p.hashes)
		learned = append(learned, p.Gen.Endpoint())
	}
	t := Turn{Blocks: p.hashes}
	switch c := p.router.cost; {
	case c != nil && o.EndSession:
		t.Forget = c.forget(p.Session)
	case c != nil && o.GenRan:
		t.Session, t.Wait = c.succeeded(p.Session, p.Minted, p.pinned, p.Ctx.Endpoint().ID, p.Gen.Endpoint().ID)
	}
	p.router.share(t, learned...)
}

// Router picks (ctx, gen) pairs from a Pool with the configured policy and
// keeps each worker's cache index.
type Router struct {
	pool   *Pool
	cfg    Config
	picker picker
	cost   *CostModel // set for the conversation and kv-aware policies
	stats  *Stats
	now    func() time.Time
	// rerouted breaks least-load ties of RerouteGen.
	rerouted atomic.Uint64
	// onSignal is told when a worker's cache signal changes (nil: no one).
	onSignal func(ep *Endpoint, ch kvindex.Change)
	// shared tells the other replicas what this one's estimate learned
	// (nil: local state).
	shared SharedState
}

// New returns a router over pool. now may be nil (time.Now).
func New(pool *Pool, cfg Config, now func() time.Time) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	r := &Router{pool: pool, cfg: cfg, stats: newStats(), now: now}
	switch cfg.Policy {
	case PolicyConversation, PolicyKVAware:
		r.cost = newCostModel(cfg, r.stats, now, pool, r.Cache, cfg.Policy == PolicyConversation)
		r.picker = r.cost
		pool.OnMembershipChange(func() { r.cost.workersChanged(r.memberIDs()) })
	case PolicyRoundRobin:
		r.picker = &phasePicker{decision: DecisionRoundRobin, ctx: &RoundRobin{}, gen: &RoundRobin{}}
	case PolicyLeastLoad:
		r.picker = &phasePicker{decision: DecisionLeastLoad, ctx: &LeastLoad{}, gen: &LeastLoad{}}
	case PolicyConsistentHash:
		r.picker = newHashRing(pool, cfg.VirtualNodes, cfg.Fallback)
	}
	return r, nil
}

// ShareState makes the cost model share its sessions with other duet
// replicas through s (other policies keep no sessions; load is shared
// through Endpoint.SetRemoteLoad). Call it before the first Route.
func (r *Router) ShareState(s SharedState) {
	if r.cost != nil {
		r.cost.shared = s
	}
	r.shared = s
	s.OnLearned(r.learnedElsewhere)
}

// share tells the other replicas, with shared state, what a request's end
// changed: t's session, and that eps now hold t.Blocks (this replica's
// request left them there). One write.
func (r *Router) share(t Turn, eps ...*Endpoint) {
	if r.shared == nil {
		return
	}
	if len(t.Blocks) > 0 {
		for _, ep := range eps {
			t.Workers = append(t.Workers, ep.Identity())
		}
	}
	if t.Session == nil && t.Forget == "" && len(t.Workers) == 0 {
		return
	}
	r.shared.Ended(t)
}

// learnedElsewhere applies what another replica's request left on the
// workers with these identities.
func (r *Router) learnedElsewhere(identities []string, hashes []uint64) {
	for _, id := range identities {
		if ep := r.pool.ByIdentity(id); ep != nil {
			r.Cache(ep).Sent(hashes)
		}
	}
}

// OnSignalChange registers fn to be told when a worker's cache signal
// changes (the watchdog demoted or promoted its KV events), once per
// change. Call it before the first Route; fn must not block.
func (r *Router) OnSignalChange(fn func(ep *Endpoint, ch kvindex.Change)) { r.onSignal = fn }

// Cache returns what the router knows of ep's KV cache. A worker whose
// cache size changed (a restart) gets a new, empty one; a worker that
// comes back at another URL is another Endpoint, with its own.
func (r *Router) Cache(ep *Endpoint) *kvindex.Cache {
	want := r.cfg.cacheBlocks(ep)
	for {
		old := ep.cache.Load()
		if old != nil && old.Capacity() == want {
			return old
		}
		c := kvindex.NewCache(r.cfg.TokensPerBlock, want)
		if ep.cache.CompareAndSwap(old, c) {
			r.checkBlockSize(ep, c)
			return c
		}
	}
}

// checkBlockSize marks c, the cache of ep, as keyed by blocks of another
// size than the worker's when the worker reported one: its events are not
// used, and the router says so once.
func (r *Router) checkBlockSize(ep *Endpoint, c *kvindex.Cache) {
	if bs := ep.KVBlockSize(); bs > 0 && bs != r.cfg.TokensPerBlock {
		r.SignalChanged(ep, c.BlockSizeMismatch(bs))
	}
}

// SignalChanged tells the router's observer of a change of ep's cache
// signal that happened outside routing (an event stream lost).
func (r *Router) SignalChanged(ep *Endpoint, ch kvindex.Change) {
	if (ch.Changed() || ch.Reason != "") && r.onSignal != nil {
		r.onSignal(ep, ch)
	}
}

// learnContext books a context phase that ran on ep: it now holds the
// prompt, and the watchdog checks what the index expected of it.
func (r *Router) learnContext(ep *Endpoint, hashes []uint64, pred kvindex.Prediction, promptTokens, reported int) {
	c := r.Cache(ep)
	r.SignalChanged(ep, c.Observe(pred, promptTokens, reported))
	c.Sent(hashes)
}

// Pool returns the router's pool.
func (r *Router) Pool() *Pool { return r.pool }

// Policy returns the policy name.
func (r *Router) Policy() string { return r.cfg.Policy }

// BlockSize is the tokens per block Request.Hashes must be computed with.
func (r *Router) BlockSize() int { return r.cfg.TokensPerBlock }

// Stats returns the routing counters.
func (r *Router) Stats() *Stats { return r.stats }

// CacheSize returns the KV cache, in tokens, the router assumes worker ep
// has, and where that figure comes from (CacheSizeConfig,
// CacheSizeReported or CacheSizeDefault).
func (r *Router) CacheSize(ep *Endpoint) (tokens int64, source string) { return r.cfg.cacheSize(ep) }

// SessionsPerWorker counts the sessions pinned to each worker (empty for
// policies without sessions).
func (r *Router) SessionsPerWorker() map[string]int {
	if r.cost == nil {
		return map[string]int{}
	}
	return r.cost.sessionsPerWorker()
}

// Sessions is the number of live sessions.
func (r *Router) Sessions() int {
	if r.cost == nil {
		return 0
	}
	return r.cost.liveSessions()
}

func (r *Router) memberIDs() map[string]bool {
	ids := map[string]bool{}
	for _, ep := range r.pool.All() {
		ids[ep.ID] = true
	}
	return ids
}

// Route picks a ctx worker and a different gen worker when possible and
// charges them, inside the picker's decision (pickers with state charge
// under their lock, so concurrent decisions see each other's load): the
// ctx lease with the prompt tokens it must prefill (those the policy does
// not expect it to hold), the gen lease with the tokens its sequence will
// hold (prompt + output limit).
func (r *Router) Route(req *Request) (*Pair, error) {
	now := r.now()
	ctxCands, probes := r.routable(serving(filter(r.pool.Available(disagg.RoleContext), req.ExcludeCtx), req.Adapter), now, nil)
	genCands, probes := r.routable(serving(filter(r.pool.Available(disagg.RoleGeneration), req.ExcludeGen), req.Adapter), now, probes)
	if len(ctxCands) == 0 || len(genCands) == 0 {
		unclaimProbes(probes, nil, nil)
		role := disagg.RoleContext
		if len(ctxCands) > 0 {
			role = disagg.RoleGeneration
		}
		return nil, &NoWorkerError{Role: role}
	}
	ch := r.picker.pick(req, ctxCands, genCands)
	unclaimProbes(probes, ch.ctx, ch.gen)
	if !ch.predicted {
		ch.ctxPred = r.Cache(ch.ctx).Match(req.Hashes) // for the watchdog, under every policy
	}
	return &Pair{
		Ctx:          ch.ctxLease,
		Gen:          ch.genLease,
		Decision:     ch.decision,
		Session:      ch.session,
		Minted:       ch.minted,
		CtxCached:    ch.ctxCached,
		GenCached:    ch.genCached,
		promptTokens: len(req.Tokens),
		hashes:       req.Hashes,
		ctxPred:      ch.ctxPred,
		pinned:       ch.pinned,
		adapter:      req.Adapter,
		router:       r,
	}, nil
}

// filter drops excluded workers.
func filter(eps []*Endpoint, exclude map[string]bool) []*Endpoint {
	if len(exclude) == 0 {
		return eps
	}
	out := eps[:0:0]
	for _, ep := range eps {
		if !exclude[ep.ID] {
			out = append(out, ep)
		}
	}
	return out
}

// RerouteGen moves p's generation leg to another gen worker, keeping its
// ctx leg: a generation request that never reached its worker (it could not
// be connected to) can go to another with the same KV handle, without a
// second prefill. The new worker is the least loaded available one outside
// exclude (and other than the ctx worker when possible); it is charged what
// the old gen lease held, which is refunded. The session's gen pin is not
// moved: the session is pinned when the attempt ends.
func (r *Router) RerouteGen(p *Pair, exclude map[string]bool) error {
	cands, probes := r.routable(serving(filter(r.pool.Available(disagg.RoleGeneration), exclude), p.adapter), r.now(), nil)
	if len(cands) == 0 {
		return &NoWorkerError{Role: disagg.RoleGeneration}
	}
	gen := leastLoaded(otherThan(cands, p.Ctx.Endpoint()), r.rerouted.Add(1))
	unclaimProbes(probes, nil, gen)
	tokens := p.Gen.Tokens()
	p.Gen.Release()
	p.Gen, p.GenCached = gen.Acquire(tokens), 0
	return nil
}
