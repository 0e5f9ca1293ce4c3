package orchestrator

import (
	"context"
	"time"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/router"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Tracing: with Options.Tracer set, every request is one span,
// duet.request (a child of the client's W3C traceparent when it sends one),
// with children for its admission wait, each routing decision, the context
// phase, the generation phase up to its first event, and the stream after
// it. The context and generation requests carry the traceparent of their
// span, so engines that trace (vLLM, TensorRT-LLM) join the same trace.
// Without a tracer no span is made, and the client's own traceparent and
// tracestate, if any, pass through to the workers unchanged.

// Span names.
const (
	spanRequest    = "duet.request"
	spanAdmission  = "admission"
	spanRoute      = "route"
	spanContext    = "context"
	spanFirstEvent = "generation.first_event"
	spanStream     = "generation.stream"
	spanMigration  = "generation.migration"
)

// w3c reads and writes W3C traceparent / tracestate headers.
var w3c = propagation.TraceContext{}

// traceHeaders are the headers w3c reads (its Fields, allocated once).
var traceHeaders = w3c.Fields()

// headerCarrier reads an incoming request's headers.
type headerCarrier func(string) string

func (h headerCarrier) Get(key string) string { return h(key) }
func (h headerCarrier) Set(string, string)    {}
func (h headerCarrier) Keys() []string        { return nil }

// flightTrace is a traced request's spans; the zero value (tracing off) does
// nothing.
type flightTrace struct {
	tracer trace.Tracer
	ctx    context.Context // the request span's
	root   trace.Span
	stream trace.Span
	// passthrough are the client's trace headers, sent on unchanged when
	// tracing is off.
	passthrough []protocol.Header
}

// startTrace opens the request's span from its arrival.
func (o *Orchestrator) startTrace(in Incoming) flightTrace {
	if o.tracer == nil {
		return flightTrace{passthrough: clientTraceHeaders(in.Header)}
	}
	parent := context.Background()
	if in.Header != nil {
		parent = w3c.Extract(parent, headerCarrier(in.Header))
	}
	ctx, root := o.tracer.Start(parent, spanRequest, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(in.Received),
		trace.WithAttributes(attribute.String("duet.request_id", in.RequestID), attribute.String("duet.endpoint", in.Endpoint.String())))
	return flightTrace{tracer: o.tracer, ctx: ctx, root: root}
}

// child opens a child span of the request's; nil when tracing is off.
// Callers build attributes only when tracing is on (on), so that a request
// untraced allocates nothing for it.
func (t *flightTrace) child(name string, kind trace.SpanKind, attrs ...attribute.KeyValue) trace.Span {
	if t.tracer == nil {
		return nil
	}
	_, s := t.tracer.Start(t.ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
	return s
}

// on reports whether the request is traced.
func (t *flightTrace) on() bool { return t.tracer != nil }

// workerSpan opens the span of a call to a worker.
func (t *flightTrace) workerSpan(name, worker string) trace.Span {
	if !t.on() {
		return nil
	}
	return t.child(name, trace.SpanKindClient, attribute.String("duet.worker", worker))
}

// routeSpan opens the span of one routing decision.
func (t *flightTrace) routeSpan(attempt int) trace.Span {
	if !t.on() {
		return nil
	}
	return t.child(spanRoute, trace.SpanKindInternal, attribute.Int("duet.attempt", attempt))
}

// endRoute ends a routing span with the pair it chose.
func endRoute(s trace.Span, pair *router.Pair, err error) {
	if s == nil {
		return
	}
	if pair == nil {
		endSpan(s, err)
		return
	}
	endSpan(s, nil, attribute.String("duet.route", pair.Decision.String()), attribute.String("duet.ctx_worker", pair.Ctx.Endpoint().ID),
		attribute.String("duet.gen_worker", pair.Gen.Endpoint().ID))
}

// endContext ends the context phase's span.
func endContext(s trace.Span, err error, cached int) {
	if s == nil {
		return
	}
	endSpan(s, err, attribute.Int("duet.cached_tokens", cached))
}

// endSpan ends s (nil: tracing off), marking err.
func endSpan(s trace.Span, err error, attrs ...attribute.KeyValue) {
	if s == nil {
		return
	}
	s.SetAttributes(attrs...)
	if err != nil {
		s.RecordError(err)
		s.SetStatus(codes.Error, err.Error())
	}
	s.End()
}

// clientTraceHeaders returns the client's W3C trace headers (nil for none).
func clientTraceHeaders(header func(string) string) []protocol.Header {
	if header == nil {
		return nil
	}
	var out []protocol.Header
	for _, name := range traceHeaders {
		if v := header(name); v != "" {
			out = append(out, protocol.Header{Name: name, Value: v})
		}
	}
	return out
}

// propagate adds the trace headers of span s to a worker request's
// headers: s's traceparent, or without tracing the client's own.
func (t *flightTrace) propagate(r *protocol.Request, s trace.Span) {
	if s == nil {
		r.Headers = append(r.Headers, t.passthrough...)
		return
	}
	m := propagation.MapCarrier{}
	w3c.Inject(trace.ContextWithSpan(context.Background(), s), m)
	for k, v := range m {
		r.Headers = append(r.Headers, protocol.Header{Name: k, Value: v})
	}
}

// streamStarted ends the first-event span and opens the stream's.
func (t *flightTrace) streamStarted(first trace.Span) {
	if t.tracer == nil {
		return
	}
	endSpan(first, nil)
	t.stream = t.child(spanStream, trace.SpanKindInternal)
}

// endStream closes the stream span of a leg that failed (err) and whose
// answer moves to another worker.
func (t *flightTrace) endStream(err error) {
	if t.tracer == nil {
		return
	}
	endSpan(t.stream, err)
	t.stream = nil
}

// end closes the stream span (if any) and the request span with its status.
func (t *flightTrace) end(status int, err error, f *flight, at time.Time) {
	if t.tracer == nil {
		return
	}
	endSpan(t.stream, err, attribute.Int("duet.events", f.events))
	t.stream = nil
	t.root.SetAttributes(attribute.Int("http.response.status_code", status), attribute.String("duet.session", f.session),
		attribute.String("duet.route", f.route.Decision), attribute.String("duet.ctx_worker", f.route.Ctx),
		attribute.String("duet.gen_worker", f.route.Gen), attribute.Int("duet.prompt_tokens", len(f.req.Tokens)),
		attribute.Int("duet.cached_tokens", f.cachedTokens), attribute.Int("duet.output_tokens", f.outputTokens),
		attribute.Int("duet.attempts", f.attempts), attribute.Int("duet.migrations", f.migrations))
	if err != nil {
		t.root.RecordError(err)
		t.root.SetStatus(codes.Error, err.Error())
	}
	t.root.End(trace.WithTimestamp(at))
}
