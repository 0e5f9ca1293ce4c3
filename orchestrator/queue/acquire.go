package queue

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Ticket describes a request asking for admission.
type Ticket struct {
	// Key names the queue the request waits in: its model and worker pool.
	// It is a metric label, so keys must be few.
	Key string
	// Session is the request's conversation key ("" for none: never
	// boosted, no grace hold).
	Session string
	// User is whom fairness: user charges ("" is one shared anonymous
	// user); see Config.User.
	User string
	// Tokens is the request's size for fairness, e.g. prompt plus expected
	// output tokens (values below 1 count as 1).
	Tokens int
	// Class is the request's priority class ("" for default_class); an
	// unknown class is an error (check it with Config.HasClass first).
	Class string
}

// Acquire admits t and returns its slot, which the caller must Release on
// every path. It admits at once when t's key has a free slot and nobody of
// higher priority waits, and when a grace hold is kept for t.Session;
// otherwise it blocks until Release or capacity growth admits t. It returns:
//   - a *RejectError wrapping ErrQueueFull at once when max_queue_length
//     requests of the key are already waiting;
//   - a *RejectError wrapping ErrWaitTimeout after its class's max_wait;
//   - a *RejectError wrapping ErrShed, at once or while waiting, when its
//     predicted wait exceeds its class's max_wait, or when the queue is
//     full and a request of a higher class arrives (priority.go);
//   - ctx.Err() when ctx ends first (nothing is held then, even if an
//     admission raced with the cancellation).
//
// A key with no available worker has no capacity: its requests wait,
// bounded by max_wait, for one to come back. A disabled Queue returns a
// no-op slot at once. Safe for concurrent use.
func (q *Queue) Acquire(ctx context.Context, t Ticket) (*Slot, error) {
	if !q.cfg.Enabled {
		return &Slot{}, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	priority, ok := q.priorities[t.Class]
	if !ok {
		return nil, fmt.Errorf("queue: unknown priority class %q (valid: %s)", t.Class, strings.Join(q.cfg.ClassNames(), ", "))
	}
	w, slot, err := q.enqueue(t, priority)
	if w == nil {
		return slot, err
	}
	select {
	case <-w.done:
	case <-ctx.Done():
	}
	w.stop()
	return q.settle(ctx, w)
}

// enqueue admits t at once (slot), rejects it (err), or queues it (w).
func (q *Queue) enqueue(t Ticket, priority int) (w *waiter, slot *Slot, err error) {
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	k := q.keyLocked(t.Key)
	class := classNormal
	if q.boost.boosted(t.Session, now) {
		class = classBoosted
		q.metrics.boosted.WithLabelValues(k.key).Inc()
	}
	if h := k.holds[t.Session]; t.Session != "" && h != nil {
		h.stop()
		delete(k.holds, t.Session)
		slot = q.grantLocked(k, t, priority, class, 0, now)
		q.syncGaugesLocked(k)
		return nil, slot, nil
	}
	q.seq++
	w = &waiter{ticket: t, priority: priority, class: class, seq: q.seq, enqueued: now, done: make(chan struct{})}
	if q.usage != nil {
		w.bucket = t.User
	}
	k.push(w)
	q.admitLocked(k, now)
	if w.state == stateAdmitted {
		return nil, w.slot, nil
	}
	if k.waiting() > q.cfg.MaxQueueLength && !q.shedLowerLocked(k, w, now) {
		k.remove(w)
		q.syncGaugesLocked(k)
		return nil, nil, q.rejectLocked(k, w, ErrQueueFull, reasonQueueFull, now)
	}
	q.shedLateLocked(k, now)
	if w.state == stateExpired {
		return nil, nil, w.err
	}
	w.stop = q.afterFunc(q.cfg.classMaxWait(priority), func() { q.expire(w) })
	return w, nil, nil
}

// expire rejects w if it is still waiting (max_wait passed).
func (q *Queue) expire(w *waiter) {
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.state != stateWaiting {
		return
	}
	q.turnAwayLocked(q.keys[w.ticket.Key], w, ErrWaitTimeout, reasonMaxWait, now)
}

// turnAwayLocked takes waiting w out of k and rejects it.
func (q *Queue) turnAwayLocked(k *keyState, w *waiter, err error, reason string, now time.Time) {
	k.remove(w)
	w.state = stateExpired
	w.err = q.rejectLocked(k, w, err, reason, now)
	q.syncGaugesLocked(k)
	close(w.done)
}

// settle ends a blocked Acquire by w's state: the one transition out of
// stateWaiting decided who owns the outcome.
func (q *Queue) settle(ctx context.Context, w *waiter) (*Slot, error) {
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	k := q.keys[w.ticket.Key]
	switch w.state {
	case stateAdmitted:
		if err := ctx.Err(); err != nil {
			// Admitted as the client went away: this call owns the slot,
			// so it gives it back and the caller holds nothing.
			q.metrics.cancelled.WithLabelValues(k.key).Inc()
			q.releaseLocked(w.slot, false, now)
			return nil, err
		}
		return w.slot, nil
	case stateExpired:
		return nil, w.err
	default:
		k.remove(w)
		w.state = stateCancelled
		q.metrics.cancelled.WithLabelValues(k.key).Inc()
		q.syncGaugesLocked(k)
		return nil, ctx.Err()
	}
}
