package orchestrator

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/duet-serve/duet/orchestrator/queue"
)

// admit waits for the admission queue to let the request through; without
// a queue it returns at once. The slot is released in finish, after the
// leases, on every path.
func (o *Orchestrator) admit(ctx context.Context, in Incoming, req *Request, t *trace) error {
	if o.queue == nil {
		return nil
	}
	ticket := queue.Ticket{
		Key:     req.Model,
		Session: req.SessionKey,
		User:    o.queue.Config().User(in.Header, req.User),
		Tokens:  len(req.Tokens) + req.MaxTokens,
	}
	slot, err := o.queue.Acquire(ctx, ticket)
	if err == nil {
		t.slot = slot
		return nil
	}
	var rej *queue.RejectError
	switch {
	case errors.As(err, &rej) && errors.Is(err, queue.ErrQueueFull):
		return &Error{Status: http.StatusTooManyRequests, Code: "queue_full",
			Message: "admission queue full: retry later", RetryAfter: rej.RetryAfter(), Err: err}
	case errors.As(err, &rej):
		return &Error{Status: http.StatusServiceUnavailable, Code: "queue_timeout",
			Message: "waited too long in the admission queue: retry later", RetryAfter: rej.RetryAfter(), Err: err}
	}
	// The only context that ends a wait is the server's: it is shutting down.
	return &Error{Status: http.StatusServiceUnavailable, Message: "server shutting down: retry later", RetryAfter: time.Second, Err: err}
}
