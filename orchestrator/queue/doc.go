// Package queue is duet's admission queue: it sits in front of routing and
// lets a request through when the workers that will serve it have room,
// follow-up turns of recently finished conversations first.
//
// A Queue keeps one independent queue per key (the caller's model + worker
// pool): the capacity of a key is inflight_per_worker for each available
// worker of the gating role (normally generation) minus the requests the key
// has admitted and not released, so one key's backpressure never holds
// another key's requests. With respect_worker_queue, a worker whose freshly
// scraped waiting-queue gauge (vllm:num_requests_waiting) is above zero adds
// no capacity; a gauge older than metrics_staleness is ignored.
//
// Order: every request has a priority class (queue.classes, highest
// first); a key admits all waiters of a higher class before any of a lower
// one, and sheds the lowest class first under overload (priority.go).
// Within a class, requests of a session whose previous turn completed
// within session_boost_ttl are "boosted" and go first; the rest are
// "normal". Boosted turns are FIFO; with fairness: user the normal ones go
// to the user with the least recent (exponentially decaying) token usage
// first, else FIFO. With grace_period, a slot freed by a completed turn is
// held for that session's next turn for a short while.
//
// Admission is event-driven: Acquire admits at once when the key has room,
// and every Release admits as many waiting requests as there are free slots,
// in one pass. Run's periodic round (scrape, then an admission pass over
// every key) is only a backstop for capacity that grows outside the queue's
// view (a worker added or recovered, a worker queue draining).
//
// Concurrency: a Queue is safe for concurrent use. One mutex (Queue.mu)
// guards all queue state: keys, waiters, slots, boost and usage tables, and
// scraped samples; it is never held across I/O or while blocking. Acquire
// blocks on the caller's goroutine. The hand-off between an admission and a
// waiter that gives up (context done, max_wait) is decided under the mutex by
// the waiter's state, so exactly one side owns the slot: an admission that
// races with a cancellation is released by Acquire before it returns.
//
// Goroutines: Run is the only loop; its owner starts it and stops it by
// cancelling its context, and Run returns after its last round. A round
// starts one goroutine per scraped worker and joins them before returning.
// max_wait and grace_period use Options.AfterFunc timers whose callbacks take
// the mutex briefly and return; a max_wait timer is stopped when its Acquire
// returns, and a grace timer is stopped when its held slot is claimed.
package queue
