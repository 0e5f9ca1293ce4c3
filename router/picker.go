package router

import "github.com/duet-serve/duet/router/kvindex"

// picker chooses both legs of a request. ctxCands and genCands are the
// available, non-excluded workers of each phase (non-empty, sorted by ID).
// Pickers that keep state are safe for concurrent use.
type picker interface {
	pick(req *Request, ctxCands, genCands []*Endpoint) choice
}

// choice is what a picker decided.
type choice struct {
	ctx, gen *Endpoint
	decision Decision
	// session is the session key the request now belongs to ("" when the
	// policy keeps none); minted is true when duet made it up.
	session string
	minted  bool
	// ctxCached and genCached are the prompt tokens the policy expects the
	// chosen ctx and gen workers to hold already; ctxPred is the ctx
	// worker's cache index prediction (the watchdog checks it).
	ctxCached, genCached int
	ctxPred              kvindex.Prediction
	predicted            bool // ctxPred is set (the cost model matched the prompt)
	// pinned are the session's pins when the request was routed.
	pinned pins
	// ctxLease and genLease charge the chosen workers (see charge).
	ctxLease, genLease *Lease
}

// charge takes the leases of a decided choice: the ctx lease with the
// prompt tokens the ctx worker must compute, the gen lease with the tokens
// the gen worker's sequence will hold. Pickers call it last, inside their
// lock when they have one.
func (ch *choice) charge(req *Request) choice {
	prompt := len(req.Tokens)
	ch.ctxLease = ch.ctx.Acquire(int64(prompt) - int64(ch.ctxCached))
	ch.genLease = ch.gen.Acquire(SaturatingAdd(prompt, req.MaxTokens))
	return *ch
}

// phasePicker picks each leg independently with a per-phase Policy.
type phasePicker struct {
	decision Decision
	ctx, gen Policy
}

func (p *phasePicker) pick(req *Request, ctxCands, genCands []*Endpoint) choice {
	ctx := p.ctx.Select(ctxCands, req)
	ch := choice{ctx: ctx, gen: p.gen.Select(otherThan(genCands, ctx), req), decision: p.decision}
	return ch.charge(req)
}

// otherThan drops ep from candidates unless it is the only one, so the two
// legs of a request use different workers whenever they can.
func otherThan(candidates []*Endpoint, ep *Endpoint) []*Endpoint {
	for i, c := range candidates {
		if c == ep && len(candidates) > 1 {
			out := make([]*Endpoint, 0, len(candidates)-1)
			out = append(out, candidates[:i]...)
			return append(out, candidates[i+1:]...)
		}
	}
	return candidates
}

// find returns the candidate with the given ID, or nil.
func find(candidates []*Endpoint, id string) *Endpoint {
	for _, c := range candidates {
		if c.ID == id {
			return c
		}
	}
	return nil
}

// maxLeaseTokens caps one lease, far below any sum of leases overflowing.
const maxLeaseTokens = 1 << 40

// SaturatingAdd is a + b as a token count: negative terms count as 0 and
// the sum is capped at 2^40, so that no request, however large its
// numbers, overflows the load arithmetic.
func SaturatingAdd(a, b int) int64 {
	x, y := min(max(int64(a), 0), maxLeaseTokens), min(max(int64(b), 0), maxLeaseTokens)
	return min(x+y, maxLeaseTokens)
}
