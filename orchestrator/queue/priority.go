package queue

import "time"

// Priority classes. Each request belongs to one of the configured classes
// (Ticket.Class). Within a key, every waiter of a higher class is admitted
// before any of a lower one, so a lower class never delays a higher one in
// the queue; it can only hold slots it was admitted to earlier. A class's
// max_share below 1 limits that too: a request of the class is admitted
// only while the key's occupied slots are below that share of its
// capacity, so the rest is headroom a higher-class request finds free.
//
// Under overload the lowest class is shed first, with ErrShed (the client
// should get 429 and retry after RetryAfter):
//   - a waiter whose predicted wait exceeds what is left of its class's
//     max_wait is shed at once rather than at its deadline. The prediction
//     is the waiters that will be admitted before it, times the key's mean
//     slot holding time, over the capacity its class may use (max_share of
//     the key's); a higher-class arrival moves
//     every lower waiter back, so it is the lower waiters that cross their
//     bound. No prediction is made before the key's first release or while
//     it has no capacity (requests then wait for workers to come back).
//   - when max_queue_length requests wait and one more arrives, the newest
//     waiter of the lowest class below the newcomer's is shed to make room;
//     with none below, the newcomer is rejected (ErrQueueFull).

// withinShareLocked reports whether k may admit a request of class p: its
// occupied slots are below the class's max_share of capacity.
func (q *Queue) withinShareLocked(k *keyState, p, capacity int) bool {
	share := q.cfg.classShare(p)
	return share >= 1 || float64(k.admitted+len(k.holds)) < share*float64(capacity)
}

// shedLowerLocked makes room for newcomer w in a full queue by shedding the
// newest waiter of the lowest class below w's; false when there is none.
func (q *Queue) shedLowerLocked(k *keyState, w *waiter, now time.Time) bool {
	for p := len(k.bands) - 1; p > w.priority; p-- {
		if victim := k.newest(p); victim != nil {
			q.shedLocked(k, victim, now)
			return true
		}
	}
	return false
}

// shedLateLocked sheds, lowest class first and newest first within a
// class, every waiter whose predicted wait exceeds what is left of its
// class's max_wait.
func (q *Queue) shedLateLocked(k *keyState, now time.Time) {
	if k.meanHold <= 0 {
		return
	}
	capacity := q.capacityLocked(k.key, now)
	for p := len(k.bands) - 1; p >= 0; p-- {
		usable := int64(q.cfg.classShare(p) * float64(capacity))
		if usable <= 0 {
			continue
		}
		budget := q.cfg.classMaxWait(p)
		for {
			w := k.newest(p)
			if w == nil {
				break
			}
			predicted := time.Duration(int64(k.ahead(p)) * int64(k.meanHold) / usable)
			if predicted <= budget-now.Sub(w.enqueued) {
				break
			}
			q.shedLocked(k, w, now)
		}
	}
}

// shedLocked rejects waiting w with ErrShed.
func (q *Queue) shedLocked(k *keyState, w *waiter, now time.Time) {
	q.turnAwayLocked(k, w, ErrShed, reasonShed, now)
}
