package orchestrator

import (
	"errors"
	"net/http"
	"time"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/router"
	"go.uber.org/zap"
)

const (
	phaseContext    = "context"
	phaseGeneration = "generation"
)

// streamSlack lets duet's own total-time limit fire (a clean 504 error
// event) before the upstream connection's deadline cuts the body.
const streamSlack = 5 * time.Second

// attempt runs one try of a request on pair. On success the returned
// Response owns the pair; on error the caller releases it.
func (o *Orchestrator) attempt(req *Request, pair *router.Pair, t *trace) (*Response, error) {
	in := o.newInput(req, pair)
	if pair.Same() || o.prefillLocally(req, pair) {
		pair.Ctx.Release() // no context phase: the gen worker prefills
		t.decision += "+local"
		return o.generate(req, pair, protocol.Request{Body: req.Body}, nil, t)
	}
	if o.adapter.Concurrent() {
		return o.concurrent(req, pair, in, t)
	}
	c, err := o.contextPhase(req, pair.Ctx.Endpoint(), in, t)
	pair.Ctx.Release() // prefill is over, whatever happened
	if err != nil {
		return nil, err
	}
	if c.Finished {
		pair.Gen.Release()
		return o.finishedAtContext(req, c, t)
	}
	genReq, err := o.adapter.GenerationRequest(in, c)
	if err != nil {
		return nil, err
	}
	return o.generate(req, pair, genReq, &c, t)
}

// prefillLocally is cache-aware conditional disaggregation: the context
// phase is skipped when the gen worker is expected to hold all but at most
// max_local_prefill_tokens of the prompt (a short new prompt, or a
// continuation whose context the gen worker kept from the last turn).
func (o *Orchestrator) prefillLocally(req *Request, pair *router.Pair) bool {
	return o.cfg.MaxLocalPrefillTokens > 0 && len(req.Tokens)-pair.GenCached <= o.cfg.MaxLocalPrefillTokens
}

// contextPhase sends the context-only request and parses the handle.
func (o *Orchestrator) contextPhase(req *Request, ep *router.Endpoint, in protocol.Input, t *trace) (protocol.Context, error) {
	r, err := o.adapter.ContextRequest(in)
	if err != nil {
		return protocol.Context{}, err
	}
	start := o.now()
	rep, err := o.up.post(ep.URL, req.Endpoint.Path(), r, req.ID, start.Add(o.cfg.ContextTimeout))
	o.observe(ep, rep.status, err)
	t.ctxDur = o.now().Sub(start)
	o.metrics.phase.WithLabelValues(phaseContext).Observe(t.ctxDur.Seconds())
	if err != nil {
		return protocol.Context{}, &workerError{phase: phaseContext, worker: ep.ID, timeout: errors.Is(err, errTimeout), err: err}
	}
	if rep.status != http.StatusOK {
		return protocol.Context{}, &workerError{phase: phaseContext, worker: ep.ID, status: rep.status, body: rep.body}
	}
	// From here the ctx worker prefilled and pins the KV until the gen
	// worker pulls it; a gen 4xx now is about the handle, not the client.
	c, err := o.adapter.ParseContextResponse(in, rep.body)
	if errors.Is(err, protocol.ErrBadContextResponse) {
		return protocol.Context{}, &workerError{phase: phaseContext, worker: ep.ID, err: err}
	}
	if err != nil {
		return protocol.Context{}, err
	}
	t.cachedTokens, t.ctxRan = c.CachedTokens, true
	if pair := t.pair; pair != nil && pair.CtxCached > 0 {
		o.metrics.cacheError.Observe(float64(pair.CtxCached - c.CachedTokens))
	}
	return c, nil
}

// concurrent sends both legs at once (SGLang): the ctx leg is drained in the
// background and its lease released when it ends.
func (o *Orchestrator) concurrent(req *Request, pair *router.Pair, in protocol.Input, t *trace) (*Response, error) {
	ctxReq, err := o.adapter.ContextRequest(in)
	if err != nil {
		return nil, err
	}
	genReq, err := o.adapter.GenerationRequest(in, protocol.Context{})
	if err != nil {
		return nil, err
	}
	ctxLease := pair.DetachCtx() // the background leg alone refunds it
	o.background.Add(1)
	go func() {
		defer o.background.Done()
		defer ctxLease.Release()
		ep := ctxLease.Endpoint()
		rep, err := o.up.post(ep.URL, req.Endpoint.Path(), ctxReq, req.ID, o.now().Add(o.cfg.ContextTimeout))
		o.observe(ep, rep.status, err)
		if err != nil || rep.status != http.StatusOK {
			o.log.Warn("sglang prefill leg failed", zap.String("request_id", req.ID), zap.String("worker", ep.ID),
				zap.Int("status", rep.status), zap.Error(err))
		}
	}()
	return o.generate(req, pair, genReq, nil, t)
}

// generate runs the generation phase. c is the context phase's result, nil
// when there was none.
func (o *Orchestrator) generate(req *Request, pair *router.Pair, r protocol.Request, c *protocol.Context, t *trace) (*Response, error) {
	ep := pair.Gen.Endpoint()
	start := o.now()
	handle := c != nil // a KV handle from a context phase rides on this request
	if !req.Stream {
		rep, err := o.up.post(ep.URL, req.Endpoint.Path(), r, req.ID, start.Add(o.cfg.StreamTotalTimeout))
		o.observe(ep, rep.status, err)
		if err != nil {
			return nil, &workerError{phase: phaseGeneration, worker: ep.ID, timeout: errors.Is(err, errTimeout), err: err}
		}
		if rep.status != http.StatusOK {
			return nil, &workerError{phase: phaseGeneration, worker: ep.ID, status: rep.status, body: rep.body, afterHandle: handle}
		}
		body, u, err := completeResponse(rep.body, c)
		if err != nil {
			return nil, &workerError{phase: phaseGeneration, worker: ep.ID, err: err}
		}
		o.metrics.phase.WithLabelValues(phaseGeneration).Observe(o.now().Sub(start).Seconds())
		pair.Release()
		t.status, t.cachedTokens, t.outputTokens, t.genRan = http.StatusOK, u.CachedTokens(), u.CompletionTokens, true
		t.ttft = o.now().Sub(t.start)
		o.finish(t)
		return &Response{Status: http.StatusOK, Body: body, Route: t.route()}, nil
	}
	firstBy := start.Add(o.cfg.FirstEventTimeout) // one budget for headers and first event
	st, err := o.up.openStream(ep.URL, req.Endpoint.Path(), r, req.ID, firstBy, start.Add(o.cfg.StreamTotalTimeout+streamSlack))
	if st != nil {
		o.observe(ep, st.status, nil)
	} else {
		o.observe(ep, 0, err)
	}
	if err != nil {
		return nil, &workerError{phase: phaseGeneration, worker: ep.ID, timeout: errors.Is(err, errTimeout), err: err}
	}
	if st.status != http.StatusOK {
		return nil, &workerError{phase: phaseGeneration, worker: ep.ID, status: st.status, body: st.readError(), afterHandle: handle}
	}
	rl := newRelay(o, req, pair, st, c, t, start)
	if err := rl.awaitFirst(firstBy); err != nil {
		rl.abort()
		return nil, &workerError{phase: phaseGeneration, worker: ep.ID, timeout: errors.Is(err, errTimeout), err: err}
	}
	return &Response{Status: http.StatusOK, Route: t.route(), relay: rl}, nil
}
