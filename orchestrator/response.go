package orchestrator

import (
	"bufio"
	"time"

	"github.com/duet-serve/duet/proto/openai"
)

// Route says which workers served a request, for response headers.
type Route struct {
	Ctx, Gen, Decision string
	// MintedSession is the session id duet made up for a request that had
	// none; the client gets it in X-Session-ID to keep affinity.
	MintedSession string
}

// Response is the outcome of Handle: either a complete body (Body, with
// Status) or a stream to relay. A streaming Response must be finished with
// exactly one call to Relay or Close; both release its leases.
type Response struct {
	Status int
	Body   []byte
	Route  Route
	// RetryAfter, when > 0, asks the client to retry after that long.
	RetryAfter time.Duration

	relay  *relay   // a live stream from a gen worker
	events [][]byte // a stream duet produced itself (finished at context)
	done   func()   // records the synthetic stream when it is written
}

// Streaming reports whether the body is an SSE stream to Relay.
func (r *Response) Streaming() bool { return r.relay != nil || r.events != nil }

// Relay writes the SSE stream to w, flushing after every event, until the
// stream ends, fails (an error event then [DONE] is written), or a write
// fails because the client is gone (the upstream call is cancelled). It
// releases everything the request holds.
func (r *Response) Relay(w *bufio.Writer) {
	if r.relay != nil {
		r.relay.run(w)
		return
	}
	defer r.finishSynthetic()
	for _, e := range r.events {
		if openai.WriteEvent(w, e) != nil {
			return
		}
	}
	if openai.WriteDone(w) == nil {
		_ = w.Flush()
	}
}

// Close releases a streaming Response that will not be relayed.
func (r *Response) Close() {
	if r.relay != nil {
		r.relay.abort()
		r.relay.record(statusClientClosed, errClientGone)
		return
	}
	r.finishSynthetic()
}

func (r *Response) finishSynthetic() {
	if r.done != nil {
		r.done()
		r.done = nil
	}
}
