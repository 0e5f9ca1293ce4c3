package router

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/duet-serve/duet/proto/disagg"
)

// Request is what routing knows about one request attempt.
type Request struct {
	// SessionKey is the conversation id, "" when none.
	SessionKey string
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

// Pair is a routing decision: a ctx and a gen worker, each with the lease
// that charges it. Ctx and Gen are the same endpoint only when one mixed
// worker must serve both phases (the caller then sends one aggregated
// request).
type Pair struct {
	Ctx, Gen *Lease
	// Decision names how the pair was chosen (see the Decision constants
	// and the policy names), for headers and metrics.
	Decision string
	// Session is the request's session key after routing: the client's,
	// the one a prefix match found, or a minted one (Minted). "" when the
	// policy keeps no sessions and the request had none.
	Session string
	Minted  bool
	// CtxCached and GenCached are the prompt tokens the router expects the
	// ctx and gen workers to hold already (0 when it has no reason to): for
	// a sticky turn, all the pinned worker held after the session's last
	// turn (the ctx lease is charged net of the part the router expects to
	// have survived since: Pair.Ctx.Tokens()).
	CtxCached, GenCached int

	promptTokens int
	hashes       []uint64
	// ctxBooked is set once ContextDone told the policy of the context
	// phase (the request's owner calls ContextDone and Done in turn).
	ctxBooked    bool
	ctxID, genID string
	router       *Router
}

// Release refunds both leases; safe to call more than once.
func (p *Pair) Release() {
	if p == nil {
		return
	}
	p.Ctx.Release()
	p.Gen.Release()
}

// DetachCtx hands the ctx lease to a caller that will release it on its
// own (a context leg running in the background); Release then refunds only
// the gen lease.
func (p *Pair) DetachCtx() *Lease {
	l := p.Ctx
	stub := &Lease{ep: l.ep}
	stub.released.Store(true) // refunds nothing: l is the live lease
	p.Ctx = stub
	return l
}

// Same reports whether both phases landed on one worker.
func (p *Pair) Same() bool { return p.Ctx.Endpoint() == p.Gen.Endpoint() }

// Outcome is how a routed request ended, as far as the router cares.
type Outcome struct {
	// CtxRan is true when the context phase completed on the pair's ctx
	// worker (which now holds the prompt); GenRan when the generation phase
	// completed on its gen worker (which now holds prompt and output).
	CtxRan, GenRan bool
	// OutputTokens is what the gen worker produced.
	OutputTokens int
	// ReportedCached is the cached_tokens the ctx worker reported, -1
	// when there was no context phase.
	ReportedCached int
}

// Done tells the router how the request ended. It feeds session state,
// kv-aware's cache estimate (only with the phases that ran: a failed
// request teaches nothing) and affinity telemetry; call it exactly once per
// Pair (a conversation's session does not expire while a Pair of it is
// not Done, and its ctx worker's cache model counts the request's KV in
// flight until then).
func (p *Pair) Done(o Outcome) {
	if p == nil {
		return
	}
	if kv := p.router.kv; kv != nil {
		kv.done(p.ctxID, p.genID, p.hashes, o)
	}
	if p.router.conv == nil || p.Session == "" {
		return
	}
	if o.CtxRan && o.ReportedCached >= 0 && p.CtxCached > 0 && o.ReportedCached < p.CtxCached/2 {
		p.router.stats.addBreak(reasonEvicted) // the pinned worker had lost most of the prefix
	}
	p.router.conv.done(p.Session, p.ctxID, p.genID, p.promptTokens, p.CtxCached, o, p.ctxBooked)
}

// ContextDone ends the request's context phase: it refunds the ctx lease
// and, when the phase ran on the ctx worker (ran), tells the policy now
// what the worker computed there, the prompt less reportedCached (< 0:
// none reported), rather than when the request ends: the worker's cache
// changed now, and requests routed meanwhile should know. Call it once the
// context phase is over, whatever happened (or when there was none); Done
// then books nothing more for it. Without it (a leg detached with
// DetachCtx), Done books the context phase.
func (p *Pair) ContextDone(ran bool, reportedCached int) {
	if p == nil {
		return
	}
	p.Ctx.Release()
	if !ran || p.ctxBooked {
		return
	}
	p.ctxBooked = true
	if p.router.conv != nil && p.Session != "" {
		p.router.conv.prefilled(p.Session, p.ctxID, p.promptTokens, p.CtxCached, reportedCached)
	}
}

// Router picks (ctx, gen) pairs from a Pool with the configured policy.
type Router struct {
	pool   *Pool
	cfg    Config
	picker picker
	conv   *Conversation // set when the policy is conversation
	kv     *KVAware      // set when the policy is kv-aware
	stats  *Stats
	now    func() time.Time
	// rerouted breaks least-load ties of RerouteGen.
	rerouted atomic.Uint64
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
	case PolicyConversation:
		r.conv = newConversation(cfg, now, r.stats, pool)
		r.picker = r.conv
		pool.OnMembershipChange(func() { r.conv.workersChanged(r.memberIDs()) })
	case PolicyRoundRobin:
		r.picker = &phasePicker{name: cfg.Policy, ctx: &RoundRobin{}, gen: &RoundRobin{}}
	case PolicyLeastLoad:
		r.picker = &phasePicker{name: cfg.Policy, ctx: &LeastLoad{}, gen: &LeastLoad{}}
	case PolicyConsistentHash:
		r.picker = newHashRing(pool, cfg.VirtualNodes, cfg.Fallback)
	case PolicyKVAware:
		r.kv = newKVAware(cfg, pool)
		r.picker = r.kv
	}
	return r, nil
}

// ShareState makes the conversation policy share its sessions with other
// duet replicas through s (other policies keep no sessions; load is shared
// through Endpoint.SetRemoteLoad). Call it before the first Route.
func (r *Router) ShareState(s SharedState) {
	if r.conv != nil {
		r.conv.shared = s
	}
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
	if r.conv == nil {
		return map[string]int{}
	}
	return r.conv.sessionsPerWorker()
}

// Sessions is the number of live sessions.
func (r *Router) Sessions() int {
	if r.conv == nil {
		return 0
	}
	return r.conv.sessions()
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
	ctxCands, probes := r.routable(filter(r.pool.Available(disagg.RoleContext), req.ExcludeCtx), now, nil)
	genCands, probes := r.routable(filter(r.pool.Available(disagg.RoleGeneration), req.ExcludeGen), now, probes)
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
		ctxID:        ch.ctx.ID,
		genID:        ch.gen.ID,
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
// moved: its next turn finds the failed worker ejected and re-pins.
func (r *Router) RerouteGen(p *Pair, exclude map[string]bool) error {
	cands, probes := r.routable(filter(r.pool.Available(disagg.RoleGeneration), exclude), r.now(), nil)
	if len(cands) == 0 {
		return &NoWorkerError{Role: disagg.RoleGeneration}
	}
	gen := leastLoaded(otherThan(cands, p.Ctx.Endpoint()), r.rerouted.Add(1))
	unclaimProbes(probes, nil, gen)
	tokens := p.Gen.Tokens()
	p.Gen.Release()
	p.Gen, p.genID, p.GenCached = gen.Acquire(tokens), gen.ID, 0
	return nil
}
