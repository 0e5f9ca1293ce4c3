package orchestrator

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/duet-serve/duet/orchestrator/queue"
	"github.com/duet-serve/duet/orchestrator/tenant"
	"github.com/duet-serve/duet/router"
	"go.uber.org/zap"
)

// flight is one request from admission to its last byte, and the one owner
// of what it holds: the admission slot, the current attempt's pair with its
// leases, and the attempt count. It also collects what the access log and
// the metrics say about the request. It ends exactly once (end), which
// gives everything back, tells the router what ran, and records the
// request. A flight is used by one goroutine at a time: Handle's, then the
// relay's once a stream is handed over.
type flight struct {
	o     *Orchestrator
	ctx   context.Context // ends when the client leaves
	req   *Request
	trace flightTrace // its spans; the zero value when tracing is off

	slot  *queue.Slot   // nil without an admission queue
	grant *tenant.Grant // its tenant's limits; nil without
	pair  *router.Pair  // the current attempt's; nil between attempts
	route Route
	// session is the request's session after routing (the client's, one a
	// prefix match found, or one duet minted).
	session  string
	attempts int
	// migrations counts the times its generation moved to another gen
	// worker mid-stream (migrate.go).
	migrations int
	// workerRequestID is the id the last attempt's workers got
	// (TensorRT-LLM's disagg_request_id, vLLM's X-Request-Id), 0 before
	// any: the access log gives it beside the client's request id.
	workerRequestID uint64

	// What the current attempt measured.
	ctxRan bool // its context phase completed
	// ctxCached is the cached tokens its ctx worker reported, -1 when it
	// reported none.
	ctxCached    int
	genRan       bool // its generation phase completed
	cachedTokens int
	outputTokens int
	ctxDur       time.Duration
	genDur       time.Duration // a completed generation phase's
	ttft         time.Duration
	events       int
	bytes        int

	status int
	err    error
	ended  bool
}

// startAttempt makes pair the flight's current attempt.
func (f *flight) startAttempt(pair *router.Pair) {
	f.attempts++
	f.pair = pair
	minted := f.route.MintedSession // a retry keeps the session its first attempt minted
	if pair.Minted {
		minted = pair.Session
	}
	f.route = Route{Ctx: pair.Ctx.Endpoint().ID, Gen: pair.Gen.Endpoint().ID, Decision: pair.Decision.String(), MintedSession: minted}
	if pair.Session != "" {
		f.session = pair.Session
	}
	f.ctxRan, f.genRan, f.cachedTokens, f.outputTokens, f.ctxDur, f.genDur, f.ttft = false, false, 0, 0, 0, 0, 0
	f.ctxCached = -1
}

// prefillOver refunds the ctx lease and tells the router what the context
// phase left in the ctx worker's cache: the ctx worker is done with the
// request (or there was no context phase).
func (f *flight) prefillOver() { f.pair.ContextDone(f.ctxRan, f.ctxCached) }

// abandonAttempt gives back the current attempt's pair after it failed: the
// router learns only what its context phase left, if it ran.
func (f *flight) abandonAttempt() {
	f.pair.End(router.Outcome{})
	f.pair = nil
}

// end finishes the flight with status (err says why it failed): leases and
// slot go back, the router learns what ran, and the request is recorded.
// Only the first call counts.
func (f *flight) end(status int, err error) {
	if f.ended {
		return
	}
	f.ended, f.status, f.err = true, status, err
	ok := status == http.StatusOK
	if f.pair != nil {
		f.pair.End(router.Outcome{GenRan: ok && f.genRan, EndSession: f.req.EndSession})
		f.pair = nil
	}
	f.slot.Release(ok)
	f.grant.Done(f.outputTokens, f.attempts > 0)
	f.o.record(f)
	f.trace.end(status, err, f, f.now())
}

// fail ends the flight with err and returns the client's error response.
func (f *flight) fail(err error) *Response {
	e := AsError(err)
	f.end(e.Status, e)
	return &Response{Status: e.Status, Body: e.JSON(), Route: f.route, RetryAfter: e.RetryAfter}
}

// now reads the orchestrator's clock.
func (f *flight) now() time.Time { return f.o.now() }

// sinceStart is the time since the request arrived.
func (f *flight) sinceStart() time.Duration { return f.now().Sub(f.req.Received) }

// logPanic logs a panic recovered while serving the request.
func (f *flight) logPanic(where string, p any) {
	f.o.log.Error("panic in "+where, zap.String("request_id", f.req.ID), zap.Any("panic", p))
}

// record writes one ended request's metrics and access log line.
func (o *Orchestrator) record(f *flight) {
	total := f.sinceStart()
	ep := f.req.Endpoint.String()
	series := o.metrics.endpoint(f.req.Endpoint)
	if f.status == http.StatusOK {
		series.ok.Inc()
	} else {
		o.metrics.requests.WithLabelValues(ep, strconv.Itoa(f.status)).Inc()
	}
	series.duration.Observe(total.Seconds())
	if f.genDur > 0 {
		o.metrics.phaseGen.Observe(f.genDur.Seconds())
	}
	if f.ttft > 0 {
		series.ttft.Observe(f.ttft.Seconds())
		o.metrics.ttftByRoute(f.route.Decision).Observe(f.ttft.Seconds())
	}
	o.metrics.events.Add(float64(f.events))
	o.metrics.bytes.Add(float64(f.bytes))
	o.recordTenant(f)
	line := o.access.Check(zap.InfoLevel, "request")
	if line == nil { // access log off: build no fields
		return
	}
	fields := []zap.Field{
		zap.String("request_id", f.req.ID), zap.Uint64("worker_request_id", f.workerRequestID), zap.String("endpoint", ep), zap.Int("status", f.status),
		zap.String("session", f.session), zap.String("ctx", f.route.Ctx), zap.String("gen", f.route.Gen),
		zap.String("decision", f.route.Header()), zap.Int("attempts", f.attempts), zap.Int("migrations", f.migrations),
		zap.Int("prompt_tokens", len(f.req.Tokens)), zap.Int("cached_tokens", f.cachedTokens), zap.Int("output_tokens", f.outputTokens),
		zap.Duration("ctx_time", f.ctxDur), zap.Duration("ttft", f.ttft), zap.Duration("total", total),
	}
	if t := f.req.Tenant; t != nil {
		fields = append(fields, zap.String("tenant", t.Name))
	}
	if f.req.Class != "" {
		fields = append(fields, zap.String("class", f.req.Class))
	}
	if f.err != nil {
		fields = append(fields, zap.NamedError("error", f.err))
	}
	line.Write(fields...)
}

// recordTenant counts an ended request of a configured tenant.
func (o *Orchestrator) recordTenant(f *flight) {
	t := f.req.Tenant
	if t == nil {
		return
	}
	o.metrics.tenantRequests.WithLabelValues(t.Name, strconv.Itoa(f.status)).Inc()
	if f.status == http.StatusOK {
		o.metrics.tenantTokens.WithLabelValues(t.Name, "input").Add(float64(len(f.req.Tokens)))
		o.metrics.tenantTokens.WithLabelValues(t.Name, "output").Add(float64(f.outputTokens))
	}
}
