package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/orchestrator/protocol/adapters"
	"github.com/duet-serve/duet/orchestrator/queue"
	"github.com/duet-serve/duet/orchestrator/tenant"
	"github.com/duet-serve/duet/router"
	"github.com/duet-serve/duet/tokenizer"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Options are an Orchestrator's dependencies. Nil Now and Rand default to
// time.Now and math/rand/v2's Uint64.
type Options struct {
	Config    Config
	Router    *router.Router
	Tokenizer *tokenizer.Tokenizer
	Log       *zap.Logger
	// AccessLog gets one unsampled line per request; nil uses Log.
	AccessLog *zap.Logger
	Registry  prometheus.Registerer
	Now       func() time.Time
	Rand      func() uint64
	// Queue, when set, admits requests before routing (see orchestrator/queue).
	Queue *queue.Queue
	// Tracer, when set, traces every request (see trace.go); nil: off.
	Tracer trace.Tracer
	// Aliased, when set, sends a request that names the model by another of
	// Config.Models (an alias) to the workers as Config.Models[0], the name
	// they serve.
	Aliased bool
	// Tenants, when set, identifies each request's tenant (tenancy.go);
	// Limits enforces their limits (nil: tenants have none).
	Tenants *tenant.Set
	Limits  *tenant.Limiter
}

// Orchestrator runs the request pipeline.
type Orchestrator struct {
	cfg     Config
	lens    modelLens // cfg's context lengths, parsed once
	adapter protocol.Adapter
	router  *router.Router
	tok     *tokenizer.Tokenizer
	up      *upstream
	metrics *metrics
	log     *zap.Logger
	access  *zap.Logger
	now     func() time.Time
	tracer  trace.Tracer // nil: tracing off
	rand    func() uint64
	queue   *queue.Queue    // nil: no admission queue
	aliased bool            // Options.Aliased
	tenants *tenant.Set     // nil: no tenants
	limits  *tenant.Limiter // nil: no tenant limits
	// drainWait bounds the read of a worker's body after its [DONE]
	// (relay.drain); tests lengthen it.
	drainWait time.Duration
	// background joins the SGLang prefill legs, which run beside the
	// request that started them.
	background sync.WaitGroup
}

// New validates the configuration and builds an Orchestrator.
func New(o Options) (*Orchestrator, error) {
	if err := o.Config.Validate(); err != nil {
		return nil, fmt.Errorf("orchestrator: %w", err)
	}
	adapter, err := adapters.ByName(o.Config.Protocol)
	if err != nil {
		return nil, err
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Rand == nil {
		o.Rand = rand.Uint64
	}
	if o.AccessLog == nil {
		o.AccessLog = o.Log
	}
	up := newUpstream(o.Config)
	m, err := newMetrics(o.Registry, o.Router, up)
	if err != nil {
		return nil, err
	}
	pool := o.Router.Pool()
	pool.OnMembershipChange(func() { up.keep(pool.All()) })
	return &Orchestrator{cfg: o.Config, lens: o.Config.modelLens(), adapter: adapter, router: o.Router, tok: o.Tokenizer, up: up,
		metrics: m, log: o.Log, access: o.AccessLog, now: o.Now, rand: o.Rand, queue: o.Queue, tracer: o.Tracer,
		tenants: o.Tenants, limits: o.Limits, aliased: o.Aliased,
		drainWait: defaultDrainWait}, nil
}

// Close waits for background work (SGLang prefill legs, each bounded by
// context_timeout) to end. Call it after the frontend stopped.
func (o *Orchestrator) Close() { o.background.Wait() }

// Config returns the configuration in use.
func (o *Orchestrator) Config() Config { return o.cfg }

// Router returns the router in use.
func (o *Orchestrator) Router() *router.Router { return o.router }

// Tokenizer returns which tokenizer and chat template count the prompts.
func (o *Orchestrator) Tokenizer() tokenizer.Info { return o.tok.Info() }

// Handle serves one request: validation, admission, routing, both phases,
// retries. ctx is the client's: when it ends (the client left) every
// upstream call of the request is cancelled and the request ends with
// status 499. Handle never returns nil. A streaming Response must be
// relayed or closed.
func (o *Orchestrator) Handle(ctx context.Context, in Incoming) *Response {
	tr := o.startTrace(in)
	req, err := o.parse(in)
	if err == nil {
		req.Class, err = o.priorityClass(in, req.Tenant)
	}
	if err != nil {
		f := &flight{o: o, ctx: ctx, trace: tr, req: &Request{Endpoint: in.Endpoint, ID: in.RequestID, Received: in.Received}}
		return f.fail(err)
	}
	f := &flight{o: o, ctx: ctx, trace: tr, req: req, session: req.SessionKey}
	admission := f.trace.child(spanAdmission, trace.SpanKindInternal)
	err = o.admit(f, in)
	endSpan(admission, err)
	if err != nil {
		return f.fail(err)
	}
	defer func() {
		if p := recover(); p != nil { // refund and record everything, then let the HTTP edge answer 500
			f.end(http.StatusInternalServerError, fmt.Errorf("panic: %v", p))
			panic(p)
		}
	}()
	resp, err := o.serve(f, nil)
	if err != nil {
		return f.fail(err)
	}
	return resp
}

// serve routes and runs attempts until one succeeds, the failure is not
// retryable, the client left, or retries run out. excludeGen, when not
// nil, holds gen workers no attempt may use (it is added to).
func (o *Orchestrator) serve(f *flight, excludeGen map[string]bool) (*Response, error) {
	req := f.req
	rr := &router.Request{Adapter: req.Adapter, SessionKey: req.SessionKey, ParentSession: req.ParentSession, RequestID: req.ID, Tokens: req.Tokens, Hashes: req.Hashes,
		MaxTokens: req.MaxTokens, ExcludeGen: excludeGen}
	var last *workerError
	handleRetried := false // a gen 4xx to a handle gets one fresh context phase
	refuser := ""          // the gen worker that refused it, avoided unless no other is left
	for attempt := 0; attempt <= o.cfg.MaxRetries; attempt++ {
		routing := f.trace.routeSpan(attempt)
		pair, err := o.router.Route(rr)
		if err != nil && refuser != "" { // the only gen worker left: it may take a fresh handle
			delete(rr.ExcludeGen, refuser)
			refuser = ""
			pair, err = o.router.Route(rr)
		}
		endRoute(routing, pair, err)
		if err != nil {
			if last != nil {
				return nil, last.clientError()
			}
			return nil, &Error{Status: http.StatusServiceUnavailable, Message: err.Error(), Err: err}
		}
		f.startAttempt(pair)
		if pair.Session != "" && rr.SessionKey == "" {
			rr.SessionKey = pair.Session // a retry continues the session routing found or minted
			f.slot.SetSession(pair.Session)
		}
		o.metrics.decisions.WithLabelValues(pair.Decision.String()).Inc()
		resp, err := o.attempt(f, rr)
		if err == nil {
			return resp, nil // resp owns the flight now
		}
		f.abandonAttempt()
		if f.ctx.Err() != nil {
			return nil, errClientLeft
		}
		var we *workerError
		if !errors.As(err, &we) {
			return nil, err
		}
		o.log.Warn("worker failed", zap.String("request_id", req.ID), zap.String("phase", we.phase),
			zap.String("worker", we.worker), zap.Int("attempt", attempt), zap.Error(we))
		if !we.retryable() || (we.refusedHandle() && handleRetried) {
			return nil, we.clientError() // a second refusal is about the request, not the handle
		}
		handleRetried = handleRetried || we.refusedHandle()
		last = we
		o.metrics.retries.WithLabelValues(we.phase).Inc()
		// A gen worker's refusal of a handle gets a fresh context phase,
		// on another gen worker when there is one: TensorRT-LLM answers a
		// failed KV transfer with the same 400 as a spent handle.
		switch {
		case we.phase == phaseContext:
			rr.ExcludeCtx = excluding(rr.ExcludeCtx, we.worker)
		case we.afterHandle && !rr.ExcludeGen[we.worker]:
			refuser = we.worker
			fallthrough
		default:
			rr.ExcludeGen = excluding(rr.ExcludeGen, we.worker)
		}
	}
	return nil, last.clientError()
}

// excluding adds worker to an exclusion set, allocating it on the first
// retry (most requests never need one).
func excluding(set map[string]bool, worker string) map[string]bool {
	if set == nil {
		set = map[string]bool{}
	}
	set[worker] = true
	return set
}

// newInput builds the adapter input of one attempt: a fresh request id and
// bootstrap room. The conversation id is the router's session (which may
// have been found by prefix or minted).
func (o *Orchestrator) newInput(f *flight) protocol.Input {
	ctxWorker := f.pair.Ctx.Endpoint()
	id := protocol.MinRequestID + o.rand()%(protocol.MaxRequestID-protocol.MinRequestID)
	f.workerRequestID = id
	return protocol.Input{
		Endpoint:       f.req.Endpoint,
		Body:           f.req.Body,
		RequestID:      id,
		ConversationID: f.session,
		CtxWorker:      protocol.WorkerAddr{Host: ctxWorker.Host, BootstrapPort: ctxWorker.BootstrapPort},
		Room:           o.rand() % (protocol.MaxRoom + 1),
		PromptTokenIDs: f.req.PromptIDs,
	}
}
