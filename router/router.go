package router

import (
	"errors"
	"fmt"

	"github.com/duet-serve/duet/proto/disagg"
)

// Request is what routing knows about one request attempt.
type Request struct {
	// SessionKey is the conversation id, "" when none.
	SessionKey string
	// PromptTokens is the prompt length in tokens.
	PromptTokens int
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
	// Decision names how the pair was chosen, for headers and metrics.
	Decision string
}

// Release refunds both leases; safe to call more than once.
func (p *Pair) Release() {
	if p == nil {
		return
	}
	p.Ctx.Release()
	p.Gen.Release()
}

// Same reports whether both phases landed on one worker.
func (p *Pair) Same() bool { return p.Ctx.Endpoint() == p.Gen.Endpoint() }

// Router picks (ctx, gen) pairs from a Pool with one Policy instance per
// phase, so that the phases' rotation counters do not interfere.
type Router struct {
	pool      *Pool
	ctxPolicy Policy
	genPolicy Policy
	name      string
}

// New returns a router over pool using the named policy.
func New(pool *Pool, policyName string) (*Router, error) {
	ctxPolicy, err := NewPolicy(policyName)
	if err != nil {
		return nil, err
	}
	genPolicy, _ := NewPolicy(policyName)
	return &Router{pool: pool, ctxPolicy: ctxPolicy, genPolicy: genPolicy, name: policyName}, nil
}

// Pool returns the router's pool.
func (r *Router) Pool() *Pool { return r.pool }

// Route picks a ctx worker and a different gen worker when possible and
// charges them: the ctx lease with the prompt tokens to prefill, the gen
// lease with the tokens its sequence will hold (prompt + output limit).
func (r *Router) Route(req *Request) (*Pair, error) {
	ctxCands := filter(r.pool.Available(disagg.RoleContext), req.ExcludeCtx, "")
	if len(ctxCands) == 0 {
		return nil, &NoWorkerError{Role: disagg.RoleContext}
	}
	ctx := r.ctxPolicy.Select(ctxCands, req)
	genCands := filter(r.pool.Available(disagg.RoleGeneration), req.ExcludeGen, ctx.ID)
	if len(genCands) == 0 {
		genCands = filter(r.pool.Available(disagg.RoleGeneration), req.ExcludeGen, "")
	}
	if len(genCands) == 0 {
		return nil, &NoWorkerError{Role: disagg.RoleGeneration}
	}
	gen := r.genPolicy.Select(genCands, req)
	return &Pair{
		Ctx:      ctx.Acquire(int64(req.PromptTokens)),
		Gen:      gen.Acquire(int64(req.PromptTokens + req.MaxTokens)),
		Decision: r.name,
	}, nil
}

// filter drops excluded workers and the worker with ID avoid (the other
// leg's worker, so the two legs never share a worker that serves both).
func filter(eps []*Endpoint, exclude map[string]bool, avoid string) []*Endpoint {
	out := eps[:0:0]
	for _, ep := range eps {
		if !exclude[ep.ID] && ep.ID != avoid {
			out = append(out, ep)
		}
	}
	return out
}
