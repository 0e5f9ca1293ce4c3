package orchestrator

import (
	"bufio"
	"net/http"
	"time"

	"github.com/duet-serve/duet/proto/openai"
)

// Shape is how the phases of the attempt that answered ran.
type Shape uint8

// Shapes of an answered attempt.
const (
	// ShapeDisaggregated: a context phase on the ctx worker, then the
	// generation phase on the gen worker (or both at once, SGLang).
	ShapeDisaggregated Shape = iota
	// ShapeLocal: no context phase; the gen worker prefilled.
	ShapeLocal
	// ShapeCtxFinished: the ctx worker finished the request at its first
	// token; there was no generation phase.
	ShapeCtxFinished
)

var shapeSuffix = [...]string{ShapeDisaggregated: "", ShapeLocal: "+local", ShapeCtxFinished: "+ctx-finished"}

// Route says which workers served a request and how, for headers and logs.
type Route struct {
	Ctx, Gen string
	// Decision is the router's: sticky, implicit, fork, branch, new,
	// repin, spill:<reason>, hash, fallback, or the policy's name.
	Decision string
	Shape    Shape
	// MintedSession is the session id duet made up for a request that had
	// none; the client gets it in X-Session-ID to keep affinity.
	MintedSession string
}

// Header renders the route for X-Duet-Route: the router's decision and,
// when there was no disaggregated pair of phases, "+local" or
// "+ctx-finished".
func (r Route) Header() string { return r.Decision + shapeSuffix[r.Shape] }

// Response is the outcome of Handle: either a complete body (Body, with
// Status) or a stream to relay. A streaming Response must be finished with
// exactly one call to Relay or Close; both end its request.
type Response struct {
	Status int
	Body   []byte
	Route  Route
	// RetryAfter, when > 0, asks the client to retry after that long.
	RetryAfter time.Duration

	relay  *relay   // a live stream from a gen worker
	events [][]byte // a stream duet produced itself (finished at context)
	flight *flight  // the request of a stream duet produced itself
}

// Streaming reports whether the body is an SSE stream to Relay.
func (r *Response) Streaming() bool { return r.relay != nil || r.events != nil }

// Relay writes the SSE stream to w, flushing whenever no further event is
// waiting (events that arrived together leave in one write), until the
// stream ends, fails (an error event then [DONE] is written), or the
// client is gone (the upstream call is cancelled). It ends the request.
func (r *Response) Relay(w *bufio.Writer) {
	if r.relay != nil {
		r.relay.run(w)
		return
	}
	status, err := statusClientClosed, error(errClientGone)
	defer func() { r.flight.end(status, err) }()
	for _, e := range r.events {
		if openai.WriteEvent(w, e) != nil {
			return
		}
	}
	if openai.WriteDone(w) == nil && w.Flush() == nil {
		status, err = http.StatusOK, nil
	}
}

// Close ends a streaming Response that will not be relayed: the client is
// gone.
func (r *Response) Close() {
	if r.relay != nil {
		r.relay.abort()
		r.relay.finish(statusClientClosed, errClientGone)
		return
	}
	r.flight.end(statusClientClosed, errClientGone)
}
