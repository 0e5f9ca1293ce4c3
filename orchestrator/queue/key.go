package queue

import (
	"container/list"
	"time"
)

// Priority classes, as in duet_queue_depth{class}.
const (
	classBoosted = "boosted"
	classNormal  = "normal"
)

// waiter states. Every transition happens under Queue.mu; the one that
// leaves stateWaiting decides who owns the outcome.
type waiterState int

const (
	stateWaiting   waiterState = iota
	stateAdmitted              // w.slot belongs to the Acquire call
	stateExpired               // max_wait passed; w.err is the rejection
	stateCancelled             // the caller's context ended first
)

// waiter is one blocked Acquire. Its fields are guarded by Queue.mu, except
// done, which is closed (once, under the mutex) when the state leaves
// stateWaiting by admission or expiry.
type waiter struct {
	ticket   Ticket
	class    string
	bucket   string // fairness bucket within the normal class
	seq      uint64 // arrival order
	enqueued time.Time
	elem     *list.Element
	state    waiterState
	done     chan struct{}
	slot     *Slot
	err      error
}

// hold is a slot kept for a session's next turn (grace_period).
type hold struct {
	stop func() bool // stops the expiry timer
}

// keyState is one key's queue and accounting. Guarded by Queue.mu.
type keyState struct {
	key      string
	admitted int              // slots granted and not released
	holds    map[string]*hold // grace holds by session; each occupies a slot
	boosted  *list.List       // of *waiter, FIFO
	normal   map[string]*list.List
	nNormal  int
	meanHold time.Duration // moving average of admitted-to-released time

	grants, releases uint64 // lifetime counts, for invariants in tests
}

func newKeyState(key string) *keyState {
	return &keyState{key: key, holds: map[string]*hold{}, boosted: list.New(), normal: map[string]*list.List{}}
}

// waiting returns the number of waiters.
func (k *keyState) waiting() int { return k.boosted.Len() + k.nNormal }

// push appends w to its class (and fairness bucket).
func (k *keyState) push(w *waiter) {
	if w.class == classBoosted {
		w.elem = k.boosted.PushBack(w)
		return
	}
	l := k.normal[w.bucket]
	if l == nil {
		l = list.New()
		k.normal[w.bucket] = l
	}
	w.elem = l.PushBack(w)
	k.nNormal++
}

// remove takes w out of its list; w must be queued.
func (k *keyState) remove(w *waiter) {
	if w.class == classBoosted {
		k.boosted.Remove(w.elem)
	} else {
		l := k.normal[w.bucket]
		l.Remove(w.elem)
		if l.Len() == 0 {
			delete(k.normal, w.bucket)
		}
		k.nNormal--
	}
	w.elem = nil
}

// next returns the waiter to admit next, or nil: the boosted class first in
// arrival order; then the normal bucket whose usage is lowest (ties and the
// single bucket of fairness: none go by arrival order).
func (k *keyState) next(usage func(bucket string) float64) *waiter {
	if e := k.boosted.Front(); e != nil {
		return e.Value.(*waiter)
	}
	var best *waiter
	var bestUsage float64
	for bucket, l := range k.normal {
		w := l.Front().Value.(*waiter)
		u := 0.0
		if usage != nil {
			u = usage(bucket)
		}
		if best == nil || u < bestUsage || (u == bestUsage && w.seq < best.seq) {
			best, bestUsage = w, u
		}
	}
	return best
}

// observeHold folds one slot's holding time into the moving average.
func (k *keyState) observeHold(d time.Duration) {
	if k.meanHold == 0 {
		k.meanHold = d
		return
	}
	k.meanHold = (7*k.meanHold + d) / 8
}
