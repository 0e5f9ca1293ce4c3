package orchestrator

import (
	"encoding/json"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/trace"
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

// attempt runs one try of f on its current pair. On success the returned
// Response owns f; on error the caller abandons the attempt.
func (o *Orchestrator) attempt(f *flight, rr *router.Request) (*Response, error) {
	req, pair := f.req, f.pair
	in := o.newInput(f)
	if pair.Same() || o.prefillLocally(req, pair) {
		f.prefillOver() // no context phase: the gen worker prefills
		f.route.Shape = ShapeLocal
		return o.generate(f, protocol.Request{Body: localBody(req)}, nil)
	}
	if o.adapter.Concurrent() {
		return o.concurrent(f, in)
	}
	c, err := o.contextPhase(f, in)
	f.prefillOver() // prefill is over, whatever happened
	if err != nil {
		return nil, err
	}
	if c.Finished {
		return o.finishedAtContext(f, c)
	}
	genReq, err := o.adapter.GenerationRequest(in, c)
	if err != nil {
		return nil, err
	}
	resp, err := o.generate(f, genReq, &c)
	if o.unsentHandle(err) {
		return o.regenerate(f, rr, genReq, &c, err)
	}
	return resp, err
}

// localBody is the body of a generation the gen worker prefills itself:
// the client's, with the prompt as token ids when the request has them.
func localBody(req *Request) []byte {
	if req.PromptIDs == nil {
		return req.Body
	}
	var body map[string]json.RawMessage
	if json.Unmarshal(req.Body, &body) != nil {
		return req.Body // parsed before: cannot happen
	}
	key := "prompt_token_ids"
	if req.Endpoint == protocol.EndpointCompletions {
		key = "prompt"
	}
	body[key] = req.PromptIDs
	b, err := json.Marshal(body)
	if err != nil {
		return req.Body
	}
	return b
}

// prefillLocally is cache-aware conditional disaggregation: the context
// phase is skipped when the gen worker is expected to hold all but at most
// max_local_prefill_tokens of the prompt (a short new prompt, or a
// continuation whose context the gen worker kept from the last turn).
func (o *Orchestrator) prefillLocally(req *Request, pair *router.Pair) bool {
	return o.cfg.MaxLocalPrefillTokens > 0 && len(req.Tokens)-pair.GenCached <= o.cfg.MaxLocalPrefillTokens
}

// unsentHandle reports a generation call that carried a KV handle and
// failed before its worker could read it (no connection), on a protocol
// whose handle any gen worker may redeem: another gen worker can pull the
// same KV without a second prefill.
func (o *Orchestrator) unsentHandle(err error) bool {
	var we *workerError
	return errors.As(err, &we) && we.phase == phaseGeneration && errors.Is(we.err, errUnsent) && o.adapter.PortableHandle()
}

// regenerate retries the generation phase alone, with the same handle, on
// other gen workers after failed could not reach its worker. It stops at
// the first call that reached a worker, or when retries or workers run out.
func (o *Orchestrator) regenerate(f *flight, rr *router.Request, genReq protocol.Request, c *protocol.Context, failed error) (*Response, error) {
	err := failed
	for try := 0; try < o.cfg.MaxRetries && o.unsentHandle(err) && f.ctx.Err() == nil; try++ {
		var we *workerError
		errors.As(err, &we)
		rr.ExcludeGen = excluding(rr.ExcludeGen, we.worker)
		if o.router.RerouteGen(f.pair, rr.ExcludeGen) != nil {
			return nil, failed
		}
		o.metrics.retries.WithLabelValues(phaseGeneration + "-only").Inc()
		o.log.Warn("generation worker unreachable: same handle, another gen worker", zap.String("request_id", f.req.ID),
			zap.String("worker", we.worker), zap.String("next", f.pair.Gen.Endpoint().ID))
		f.route.Gen = f.pair.Gen.Endpoint().ID
		var resp *Response
		resp, err = o.generate(f, genReq, c)
		if err == nil {
			return resp, nil
		}
	}
	return nil, err
}

// contextPhase sends the context-only request and parses the handle.
func (o *Orchestrator) contextPhase(f *flight, in protocol.Input) (protocol.Context, error) {
	r, err := o.adapter.ContextRequest(in)
	if err != nil {
		return protocol.Context{}, err
	}
	ep := f.pair.Ctx.Endpoint()
	span := f.trace.workerSpan(spanContext, ep.ID)
	f.trace.propagate(&r, span)
	c, err := o.contextCall(f, in, r)
	endContext(span, err, c.CachedTokens)
	return c, err
}

// contextCall makes the context-only call and reads its answer.
func (o *Orchestrator) contextCall(f *flight, in protocol.Input, r protocol.Request) (protocol.Context, error) {
	ep, req := f.pair.Ctx.Endpoint(), f.req
	start := o.now()
	rep, err := o.up.post(f.ctx, ep, req.Endpoint.Path(), r, req.ID, start.Add(o.cfg.ContextTimeout))
	o.observe(ep, rep.status, err)
	f.ctxDur = o.now().Sub(start)
	o.metrics.phaseCtx.Observe(f.ctxDur.Seconds())
	if err != nil {
		return protocol.Context{}, callFailed(phaseContext, ep, err)
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
	f.cachedTokens, f.ctxRan = c.CachedTokens, true
	if c.CachedReported {
		f.ctxCached = c.CachedTokens
	}
	if c.CachedReported && f.pair.CtxCached > 0 {
		o.metrics.cacheError.Observe(float64(f.pair.CtxCached - c.CachedTokens))
	}
	return c, nil
}

// concurrent sends both legs at once (SGLang): the ctx leg runs in the
// background and ends the pair's context phase itself (the ctx lease is
// held until then; the router learns the prompt is cached there when the
// leg succeeded); it is cancelled with the request.
func (o *Orchestrator) concurrent(f *flight, in protocol.Input) (*Response, error) {
	ctxReq, err := o.adapter.ContextRequest(in)
	if err != nil {
		return nil, err
	}
	genReq, err := o.adapter.GenerationRequest(in, protocol.Context{})
	if err != nil {
		return nil, err
	}
	pair := f.pair
	pair.DetachContext() // the background leg alone ends the context phase
	ctx, id, path := f.ctx, f.req.ID, f.req.Endpoint.Path()
	ep := pair.Ctx.Endpoint()
	span := f.trace.workerSpan(spanContext, ep.ID) // may end after the request's span
	f.trace.propagate(&ctxReq, span)
	o.background.Add(1)
	go func() {
		defer o.background.Done()
		rep, err := o.up.post(ctx, ep, path, ctxReq, id, o.now().Add(o.cfg.ContextTimeout))
		o.observe(ep, rep.status, err)
		if err == nil && rep.status != http.StatusOK {
			err = fmt.Errorf("status %d", rep.status)
		}
		pair.ContextDone(err == nil, -1) // SGLang's prefill answer reports no cached tokens duet reads
		endSpan(span, err)
		if err != nil && !errors.Is(err, errCancelled) {
			o.log.Warn("sglang prefill leg failed", zap.String("request_id", id), zap.String("worker", ep.ID),
				zap.Int("status", rep.status), zap.Error(err))
		}
	}()
	return o.generate(f, genReq, nil)
}

// generate runs the generation phase. c is the context phase's result, nil
// when there was none.
func (o *Orchestrator) generate(f *flight, r protocol.Request, c *protocol.Context) (*Response, error) {
	span := f.trace.workerSpan(spanFirstEvent, f.pair.Gen.Endpoint().ID)
	f.trace.propagate(&r, span)
	resp, err := o.generateCall(f, r, c, span)
	if err != nil {
		endSpan(span, err)
	}
	return resp, err
}

// generateCall makes the generation call; span (the first event's) ends
// when the answer or the first event arrives.
func (o *Orchestrator) generateCall(f *flight, r protocol.Request, c *protocol.Context, span trace.Span) (*Response, error) {
	ep, req := f.pair.Gen.Endpoint(), f.req
	start := o.now()
	if !req.Stream {
		rep, err := o.up.post(f.ctx, ep, req.Endpoint.Path(), r, req.ID, start.Add(o.cfg.StreamTotalTimeout))
		o.observe(ep, rep.status, err)
		if err != nil {
			return nil, callFailed(phaseGeneration, ep, err)
		}
		if rep.status != http.StatusOK {
			return nil, &workerError{phase: phaseGeneration, worker: ep.ID, status: rep.status, body: rep.body, afterHandle: c != nil}
		}
		body, u, err := completeResponse(rep.body, c)
		if err != nil {
			return nil, &workerError{phase: phaseGeneration, worker: ep.ID, err: err}
		}
		f.genDur = o.now().Sub(start)
		f.cachedTokens, f.outputTokens, f.genRan = u.CachedTokens(), u.CompletionTokens, true
		f.ttft = f.sinceStart()
		endSpan(span, nil)
		f.end(http.StatusOK, nil)
		return &Response{Status: http.StatusOK, Body: body, Route: f.route}, nil
	}
	firstBy := start.Add(o.cfg.FirstEventTimeout) // one budget for headers and first event
	st, err := o.up.openStream(f.ctx, ep, req.Endpoint.Path(), r, req.ID, firstBy, start.Add(o.cfg.StreamTotalTimeout+streamSlack))
	if st != nil {
		o.observe(ep, st.status, nil)
	} else {
		o.observe(ep, 0, err)
	}
	if err != nil {
		return nil, callFailed(phaseGeneration, ep, err)
	}
	if st.status != http.StatusOK {
		return nil, &workerError{phase: phaseGeneration, worker: ep.ID, status: st.status, body: st.readError(), afterHandle: c != nil}
	}
	rl := newRelay(f, st, c, o.streamLimits(), start)
	if err := rl.awaitFirst(firstBy); err != nil {
		rl.abort()
		return nil, callFailed(phaseGeneration, ep, err)
	}
	f.trace.streamStarted(span)
	return &Response{Status: http.StatusOK, Route: f.route, relay: rl}, nil
}
