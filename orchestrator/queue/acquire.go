package queue

import (
	"context"
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
}

// Acquire admits t and returns its slot, which the caller must Release on
// every path. It admits at once when t's key has a free slot and nobody of
// higher priority waits, and when a grace hold is kept for t.Session;
// otherwise it blocks until Release or capacity growth admits t. It returns:
//   - a *RejectError wrapping ErrQueueFull at once when max_queue_length
//     requests of the key are already waiting;
//   - a *RejectError wrapping ErrWaitTimeout after max_wait;
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
	w, slot, err := q.enqueue(t)
	if w == nil {
		return slot, err
	}
	stop := q.afterFunc(q.cfg.MaxWait, func() { q.expire(w) })
	select {
	case <-w.done:
	case <-ctx.Done():
	}
	stop()
	return q.settle(ctx, w)
}

// enqueue admits t at once (slot), rejects it (err), or queues it (w).
func (q *Queue) enqueue(t Ticket) (w *waiter, slot *Slot, err error) {
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
		slot = q.grantLocked(k, t, class, 0, now)
		q.syncGaugesLocked(k)
		return nil, slot, nil
	}
	q.seq++
	w = &waiter{ticket: t, class: class, seq: q.seq, enqueued: now, done: make(chan struct{})}
	if q.usage != nil {
		w.bucket = t.User
	}
	k.push(w)
	q.admitLocked(k, now)
	switch {
	case w.state == stateAdmitted:
		return nil, w.slot, nil
	case k.waiting() > q.cfg.MaxQueueLength:
		k.remove(w)
		q.syncGaugesLocked(k)
		return nil, nil, q.rejectLocked(k, ErrQueueFull, reasonQueueFull, 0, now)
	}
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
	k := q.keys[w.ticket.Key]
	k.remove(w)
	w.state = stateExpired
	w.err = q.rejectLocked(k, ErrWaitTimeout, reasonMaxWait, now.Sub(w.enqueued), now)
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
