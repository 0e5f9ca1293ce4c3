package orchestrator

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"

	"github.com/duet-serve/duet/proto/openai"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// Migration: when a gen worker fails after the client got the first event
// of a stream (the connection breaks, the stream ends without a finish
// reason, the worker sends an error event or a failure finish reason, or it
// stalls past stream_idle_timeout), duet asks another gen worker for the
// rest of the answer and goes on writing the same client stream. The
// continuation's prompt is the original prompt followed by the text the
// client already has (continue.go), so the new worker continues the answer
// where it stopped; it is routed and run like any attempt (the prompt's
// KV is reused where the router finds it, and the context phase runs
// remotely or on the gen worker by the same rule as for a new request).
// The continuation's events are rewritten to the first leg's id and
// created time, its deltas lose their role, and its usage counts the whole
// answer: the original prompt, and the tokens of both legs.

// Why a generation failed, the reason label of duet_migrations_total.
const (
	failDied       = "died"        // the stream broke or ended without a finish reason
	failStalled    = "stalled"     // nothing for stream_idle_timeout
	failErrorEvent = "error_event" // the worker sent an error event
	failAborted    = "aborted"     // a failure finish reason (abort, error)
	failGarbled    = "garbled"     // an event that is not a JSON object
	failWorkerDown = "worker_down" // found down (health check, drain with migrate) while streaming
)

// Outcomes of a failed generation, besides the refusal reasons of
// continuation (the outcome label of duet_migrations_total).
const (
	outcomeMigrated = "migrated"
	outcomeFailed   = "failed" // no worker could continue it
	outcomeLimit    = "limit"  // max_migrations reached
	outcomeOff      = "off"    // max_migrations is 0
)

// errWorkerEvent marks a worker's error event that was not relayed
// because the answer may still be migrated.
var errWorkerEvent = errors.New("generation worker error event")

// answer is what a relayed stream has given the client, kept so that
// another worker can continue it.
type answer struct {
	// id and created are the first event's, read when the answer is first
	// continued: every later event carries them.
	id      string
	created int64
	// text is the output text the client got.
	text []byte
	// blocked says why the answer cannot be continued by text ("tool_calls",
	// "reasoning"); "" when it can.
	blocked string
	// promptTokens and cachedTokens are the first leg's, which every usage
	// the client gets reports; sentTokens is what text counts, set when a
	// continuation starts (0 before): a continuation leg's completion
	// tokens come on top.
	promptTokens, cachedTokens, sentTokens int
	migrations                             int
	// failedGen are the gen workers this answer failed on.
	failedGen map[string]bool
}

// add records one event the client gets, read into c (before any rewrite:
// c is valid until the chunkReader's next read).
func (a *answer) add(c chunk) {
	switch {
	case c.toolCalls:
		a.blocked = "tool_calls"
	case c.reasoning:
		a.blocked = "reasoning"
	}
	a.text = append(a.text, c.text...)
}

// continued reports whether a continuation leg is being relayed.
func (a *answer) continued() bool { return a != nil && a.migrations > 0 }

// newAnswer starts tracking a stream's answer when it may be migrated.
func (rl *relay) newAnswer() {
	f := rl.f
	if f.o.cfg.MaxMigrations == 0 || !f.req.Stream {
		return
	}
	a := &rl.ans
	a.promptTokens = len(f.req.Tokens)
	if rl.ctx != nil && rl.ctx.PromptTokens > 0 {
		a.promptTokens, a.cachedTokens = rl.ctx.PromptTokens, rl.ctx.CachedTokens
	}
	rl.answer = a
}

// migrate continues the answer on another gen worker after the current
// leg failed with cause (why: one of the fail* reasons). It returns true
// when the relay goes on with a new leg, whose first event is already
// written; false when the stream must fail as before (the failed leg is
// then still the relay's, unless it was closed).
func (rl *relay) migrate(w *bufio.Writer, why string, cause error) bool {
	f, a := rl.f, rl.answer
	if rl.finished || f.ctx.Err() != nil {
		return false
	}
	if st := rl.leg.st; st != nil && st.foundDown() {
		why = failWorkerDown
	}
	o := f.o
	if a == nil { // max_migrations 0: counted, never tried
		o.metrics.migrations.WithLabelValues(why, outcomeOff).Inc()
		return false
	}
	cont, refused := rl.plan()
	if cont == nil {
		o.metrics.migrations.WithLabelValues(why, refused).Inc()
		o.log.Warn("generation failed mid-stream, not migrated", zap.String("request_id", f.req.ID),
			zap.String("worker", f.route.Gen), zap.String("failure", why), zap.String("refused", refused), zap.Error(cause))
		return false
	}
	from := f.route.Gen
	f.trace.endStream(cause)
	span := f.trace.child(spanMigration, trace.SpanKindInternal, attribute.String("duet.failure", why),
		attribute.String("duet.from_worker", from), attribute.Int("duet.sent_tokens", a.sentTokens))
	next, err := rl.continueOn(cont, from)
	endSpan(span, err)
	if err != nil {
		o.metrics.migrations.WithLabelValues(why, outcomeFailed).Inc()
		o.log.Warn("generation failed mid-stream, migration failed", zap.String("request_id", f.req.ID),
			zap.String("worker", from), zap.String("failure", why), zap.NamedError("cause", cause), zap.Error(err))
		return false
	}
	o.metrics.migrations.WithLabelValues(why, outcomeMigrated).Inc()
	o.log.Info("generation migrated", zap.String("request_id", f.req.ID), zap.String("from", from),
		zap.String("to", f.route.Gen), zap.String("failure", why), zap.Int("sent_tokens", a.sentTokens), zap.NamedError("cause", cause))
	if f.req.ReportMigrations {
		report, _ := json.Marshal(migrationReport{From: from, To: f.route.Gen, Failure: why, SentTokens: a.sentTokens})
		_ = openai.WriteComment(w, "duet-migration "+string(report))
	}
	return rl.adopt(w, next)
}

// plan returns the request that continues the answer, or nil and why it
// is not continued.
func (rl *relay) plan() (*Request, string) {
	f, a := rl.f, rl.answer
	switch {
	case a.blocked != "":
		return nil, a.blocked
	case a.migrations >= f.o.cfg.MaxMigrations:
		return nil, outcomeLimit
	}
	a.sentTokens = f.o.tok.Count(string(a.text))
	cont, refused := f.o.continuation(f.req, a.text, a.sentTokens)
	if cont != nil && a.migrations == 0 {
		a.id, a.created = firstEventIDs(rl.first.data)
	}
	return cont, refused
}

// migrationReport is the SSE comment a client that sent
// X-Duet-Report-Migrations gets for each migration of its stream.
type migrationReport struct {
	From       string `json:"from"`
	To         string `json:"to"`
	Failure    string `json:"failure"`
	SentTokens int    `json:"sent_tokens"`
}

// firstEventIDs reads the id and created time of a stream's first event.
func firstEventIDs(data []byte) (string, int64) {
	var ids struct {
		ID      string `json:"id"`
		Created int64  `json:"created"`
	}
	_ = json.Unmarshal(data, &ids) // it was read as a JSON object before; a missing id stays ""
	return ids.ID, ids.Created
}

// continueOn runs cont, the continuation of the flight's request, on a
// pair whose gen worker is not one the answer failed on, after closing the
// failed leg. It returns the new attempt's response.
func (rl *relay) continueOn(cont *Request, failed string) (*Response, error) {
	f, a := rl.f, rl.answer
	rl.leg.close()
	f.abandonAttempt()
	if a.failedGen == nil {
		a.failedGen = map[string]bool{}
	}
	a.failedGen[failed] = true
	a.migrations++
	f.migrations++
	orig, ttft := f.req, f.ttft
	f.req = cont
	resp, err := f.o.serve(f, a.failedGen)
	f.req, f.ttft = orig, ttft // the client's request; its first token came on the first leg
	return resp, err
}

// adopt makes next's stream the relay's and writes its first event. A
// continuation that ends at its context phase comes as events duet built.
func (rl *relay) adopt(w *bufio.Writer, next *Response) bool {
	if next.relay == nil {
		rl.leg = eventsLeg(next.events)
		return true
	}
	first := next.relay.first.data
	rl.leg = next.relay.leg
	putChunkReader(next.relay.chunks)
	if err := rl.forward(w, first); err != nil {
		return false
	}
	return rl.flushUnlessPending(w) == nil
}

// eventsLeg is a leg whose events are already known: events, [DONE], then
// the end of the body.
func eventsLeg(events [][]byte) *leg {
	l := &leg{events: make(chan sseEvent, len(events)+2), stop: make(chan struct{})}
	for _, e := range events {
		l.events <- sseEvent{data: e}
	}
	l.events <- sseEvent{data: []byte("[DONE]")}
	l.events <- sseEvent{err: io.EOF}
	return l
}

// migrationFailure says which fail* reason a forward error is.
func migrationFailure(err error) string {
	switch {
	case errors.Is(err, errWorkerEvent):
		return failErrorEvent
	case errors.Is(err, errFailureFinish):
		return failAborted
	default:
		return failGarbled
	}
}
