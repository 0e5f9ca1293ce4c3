package orchestrator

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/duet-serve/duet/orchestrator/queue"
	"github.com/duet-serve/duet/router"
)

// queueKey is the admission queue's key of a request for model: the
// served model's name, whichever of its names or adapters the request
// asked for (they share its workers), else model.
func (o *Orchestrator) queueKey(model string) string {
	if len(o.cfg.Models) > 0 {
		return o.cfg.Models[0]
	}
	return model
}

// admit waits for the admission queue to let f through; without a queue it
// returns at once. The wait ends early when the client leaves (499) or the
// server begins shutting down (503). The slot is f's until it ends.
func (o *Orchestrator) admit(f *flight, in Incoming) error {
	if err := o.chargeTenant(f); err != nil {
		return err
	}
	if o.queue == nil {
		return nil
	}
	ticket := queue.Ticket{
		Class:   f.req.Class,
		Key:     o.queueKey(f.req.Model),
		Session: f.req.SessionKey,
		User:    o.queue.Config().User(in.Header, f.req.User, f.req.TenantName()),
		Tokens:  int(router.SaturatingAdd(len(f.req.Tokens), f.req.MaxTokens)),
	}
	wait, cancel := context.WithCancel(f.ctx)
	defer cancel()
	if in.Stopping != nil {
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			select {
			case <-in.Stopping:
				cancel()
			case <-stop:
			}
		}()
	}
	slot, err := o.queue.Acquire(wait, ticket)
	if err == nil {
		f.slot = slot
		return nil
	}
	var rej *queue.RejectError
	switch {
	case errors.As(err, &rej) && errors.Is(err, queue.ErrShed):
		return &Error{Status: http.StatusTooManyRequests, Code: "shed",
			Message:    "overloaded: requests of class " + rej.Class + " are shed to keep higher classes within their wait; retry later",
			RetryAfter: rej.RetryAfter(), Err: err}
	case errors.As(err, &rej) && errors.Is(err, queue.ErrQueueFull):
		return &Error{Status: http.StatusTooManyRequests, Code: "queue_full",
			Message: "admission queue full: retry later", RetryAfter: rej.RetryAfter(), Err: err}
	case errors.As(err, &rej):
		return &Error{Status: http.StatusServiceUnavailable, Code: "queue_timeout",
			Message: "waited too long in the admission queue: retry later", RetryAfter: rej.RetryAfter(), Err: err}
	case f.ctx.Err() != nil:
		return errClientLeft
	}
	return &Error{Status: http.StatusServiceUnavailable, Message: "server shutting down: retry later", RetryAfter: time.Second, Err: err}
}
