package queue

import (
	"time"
)

// keyLocked returns key's state, creating it. Keys are expected to be few
// (models × pools): their state is kept for the Queue's lifetime.
func (q *Queue) keyLocked(key string) *keyState {
	k := q.keys[key]
	if k == nil {
		k = newKeyState(key, len(q.cfg.Classes))
		q.keys[key] = k
	}
	return k
}

// capacityLocked returns the key's total capacity at now: inflight_per_worker
// for each of its available workers, except, with respect_worker_queue,
// workers whose fresh waiting gauge is above zero.
func (q *Queue) capacityLocked(key string, now time.Time) int {
	total := 0
	for _, ep := range q.workers(key) {
		if q.cfg.RespectWorkerQueue && q.busyLocked(ep, now) {
			continue
		}
		total += q.cfg.InflightPerWorker
	}
	return total
}

// admitLocked admits as many of k's waiters as it has free slots, in
// priority order, in one pass.
func (q *Queue) admitLocked(k *keyState, now time.Time) {
	capacity := q.capacityLocked(k.key, now)
	free := capacity - k.admitted - len(k.holds)
	for ; free > 0; free-- {
		w := k.next(q.bucketUsage(now))
		if w == nil || !q.withinShareLocked(k, w.priority, capacity) {
			break // every waiter after w is of w's class or lower: no larger share
		}
		k.remove(w)
		w.state = stateAdmitted
		w.slot = q.grantLocked(k, w.ticket, w.priority, w.class, now.Sub(w.enqueued), now)
		close(w.done)
	}
	q.syncGaugesLocked(k)
}

// bucketUsage returns the usage function of the normal class's fairness
// buckets, nil without fairness.
func (q *Queue) bucketUsage(now time.Time) func(string) float64 {
	if q.usage == nil {
		return nil
	}
	return func(user string) float64 { return q.usage.value(user, now) }
}

// grantLocked gives t a slot of k: accounting, fairness charge, metrics.
func (q *Queue) grantLocked(k *keyState, t Ticket, priority int, class string, waited time.Duration, now time.Time) *Slot {
	k.admitted++
	k.grants++
	if q.usage != nil {
		q.usage.charge(t.User, t.Tokens, now)
	}
	name := q.cfg.Classes[priority].Name
	q.metrics.admitted.WithLabelValues(k.key, class, name).Inc()
	q.metrics.wait.WithLabelValues(class, name).Observe(waited.Seconds())
	return &Slot{q: q, k: k, session: t.Session, admittedAt: now}
}

// rejectLocked builds the rejection of w (already out of k's queue), and
// counts it.
func (q *Queue) rejectLocked(k *keyState, w *waiter, err error, reason string, now time.Time) *RejectError {
	class := q.cfg.Classes[w.priority].Name
	q.metrics.rejected.WithLabelValues(k.key, reason, class).Inc()
	n := k.waiting()
	return &RejectError{Key: k.key, Class: class, Waiting: n, Waited: now.Sub(w.enqueued), err: err,
		retryAfter: q.retryAfterLocked(k, k.ahead(w.priority)+1, now)}
}

// retryAfterLocked estimates when a request at position (1-based) in k's
// queue would be admitted: the rounds of the key's capacity ahead of it
// times the recent mean slot holding time (1s before any release), rounded
// up to whole seconds within [1s, max(max_wait, 1s)].
func (q *Queue) retryAfterLocked(k *keyState, position int, now time.Time) time.Duration {
	capacity := max(q.capacityLocked(k.key, now), 1)
	hold := k.meanHold
	if hold <= 0 {
		hold = time.Second
	}
	rounds := (position + capacity - 1) / capacity
	est := min(time.Duration(rounds)*hold, max(q.cfg.MaxWait, time.Second))
	secs := (est + time.Second - 1) / time.Second
	return max(secs, 1) * time.Second
}

// syncGaugesLocked publishes k's depth and in-flight gauges.
func (q *Queue) syncGaugesLocked(k *keyState) {
	for i, b := range k.bands {
		name := q.cfg.Classes[i].Name
		q.metrics.depth.WithLabelValues(k.key, classBoosted, name).Set(float64(b.boosted.Len()))
		q.metrics.depth.WithLabelValues(k.key, classNormal, name).Set(float64(b.nNormal))
	}
	q.metrics.inflight.WithLabelValues(k.key).Set(float64(k.admitted))
	q.metrics.held.WithLabelValues(k.key).Set(float64(len(k.holds)))
}
