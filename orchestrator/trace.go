package orchestrator

import (
	"net/http"
	"strconv"
	"time"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/orchestrator/queue"
	"github.com/duet-serve/duet/router"
	"go.uber.org/zap"
)

// trace collects what the access log and the metrics say about a request.
type trace struct {
	id           string
	endpoint     protocol.Endpoint
	start        time.Time
	session      string
	ctxWorker    string
	genWorker    string
	decision     string
	attempts     int
	promptTokens int
	cachedTokens int
	ctxDur       time.Duration
	ttft         time.Duration
	events       int
	bytes        int
	outputTokens int
	ctxRan       bool // the context phase of the current attempt completed
	genRan       bool // its generation phase completed
	status       int
	err          error
	// pair is the routing decision of the attempt that answered; nil when
	// none did. mintedSession says its session id was made up by duet.
	pair          *router.Pair
	mintedSession bool
	// slot is the admission slot, released after the leases; nil without
	// a queue (Release on nil is a no-op).
	slot *queue.Slot
}

// startAttempt resets what one attempt measures and records its pair.
func (t *trace) startAttempt(pair *router.Pair) {
	t.attempts++
	t.ctxWorker, t.genWorker, t.decision = pair.Ctx.Endpoint().ID, pair.Gen.Endpoint().ID, pair.Decision
	t.pair, t.session = pair, pair.Session
	t.mintedSession = t.mintedSession || pair.Minted
	t.ctxRan, t.genRan, t.cachedTokens, t.outputTokens, t.ctxDur, t.ttft = false, false, 0, 0, 0, 0
}

func (t *trace) route() Route {
	r := Route{Ctx: t.ctxWorker, Gen: t.genWorker, Decision: t.decision}
	if t.mintedSession {
		r.MintedSession = t.session
	}
	return r
}

// finish records a finished request: metrics and one access log line.
func (o *Orchestrator) finish(t *trace) {
	if t.pair != nil {
		ok := t.status == http.StatusOK
		reported := -1
		if t.ctxRan {
			reported = t.cachedTokens
		}
		t.pair.Done(router.Outcome{CtxRan: t.ctxRan, GenRan: ok && t.genRan, OutputTokens: t.outputTokens, ReportedCached: reported})
		t.pair = nil
	}
	t.slot.Release(t.status == http.StatusOK)
	total := o.now().Sub(t.start)
	ep := t.endpoint.String()
	o.metrics.requests.WithLabelValues(ep, strconv.Itoa(t.status)).Inc()
	o.metrics.duration.WithLabelValues(ep).Observe(total.Seconds())
	if t.ttft > 0 {
		o.metrics.ttft.WithLabelValues(ep).Observe(t.ttft.Seconds())
	}
	o.metrics.events.Add(float64(t.events))
	o.metrics.bytes.Add(float64(t.bytes))
	fields := []zap.Field{
		zap.String("request_id", t.id), zap.String("endpoint", ep), zap.Int("status", t.status),
		zap.String("session", t.session), zap.String("ctx", t.ctxWorker), zap.String("gen", t.genWorker),
		zap.String("decision", t.decision), zap.Int("attempts", t.attempts),
		zap.Int("prompt_tokens", t.promptTokens), zap.Int("cached_tokens", t.cachedTokens), zap.Int("output_tokens", t.outputTokens),
		zap.Duration("ctx_time", t.ctxDur), zap.Duration("ttft", t.ttft), zap.Duration("total", total),
	}
	if t.err != nil {
		fields = append(fields, zap.NamedError("error", t.err))
	}
	o.access.Info("request", fields...)
}
