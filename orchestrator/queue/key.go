package queue

import (
	"container/list"
	"time"
)

// Turn classes within a priority class, as in duet_queue_depth{class}.
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
	stateExpired               // max_wait passed or shed; w.err is the rejection
	stateCancelled             // the caller's context ended first
)

// waiter is one blocked Acquire. Its fields are guarded by Queue.mu, except
// done, which is closed (once, under the mutex) when the state leaves
// stateWaiting by admission or expiry.
type waiter struct {
	ticket   Ticket
	priority int    // index into the configured classes, 0 highest
	class    string // classBoosted or classNormal
	bucket   string // fairness bucket within the normal class
	seq      uint64 // arrival order
	enqueued time.Time
	elem     *list.Element
	state    waiterState
	done     chan struct{}
	slot     *Slot
	err      error
	stop     func() bool // stops the max_wait timer
}

// hold is a slot kept for a session's next turn (grace_period).
type hold struct {
	stop func() bool // stops the expiry timer
}

// band is the waiters of one priority class: boosted turns first (FIFO),
// then the normal ones by fairness bucket.
type band struct {
	boosted *list.List // of *waiter
	normal  map[string]*list.List
	nNormal int
}

func newBand() *band { return &band{boosted: list.New(), normal: map[string]*list.List{}} }

func (b *band) waiting() int { return b.boosted.Len() + b.nNormal }

// keyState is one key's queue and accounting. Guarded by Queue.mu.
type keyState struct {
	key      string
	admitted int              // slots granted and not released
	holds    map[string]*hold // grace holds by session; each occupies a slot
	bands    []*band          // by priority, highest first
	meanHold time.Duration    // moving average of admitted-to-released time

	grants, releases uint64 // lifetime counts, for invariants in tests
}

func newKeyState(key string, classes int) *keyState {
	k := &keyState{key: key, holds: map[string]*hold{}, bands: make([]*band, classes)}
	for i := range k.bands {
		k.bands[i] = newBand()
	}
	return k
}

// waiting returns the number of waiters.
func (k *keyState) waiting() int {
	n := 0
	for _, b := range k.bands {
		n += b.waiting()
	}
	return n
}

// push appends w to its band, class and fairness bucket.
func (k *keyState) push(w *waiter) {
	b := k.bands[w.priority]
	if w.class == classBoosted {
		w.elem = b.boosted.PushBack(w)
		return
	}
	l := b.normal[w.bucket]
	if l == nil {
		l = list.New()
		b.normal[w.bucket] = l
	}
	w.elem = l.PushBack(w)
	b.nNormal++
}

// remove takes w out of its list; w must be queued.
func (k *keyState) remove(w *waiter) {
	b := k.bands[w.priority]
	if w.class == classBoosted {
		b.boosted.Remove(w.elem)
	} else {
		l := b.normal[w.bucket]
		l.Remove(w.elem)
		if l.Len() == 0 {
			delete(b.normal, w.bucket)
		}
		b.nNormal--
	}
	w.elem = nil
}

// next returns the waiter to admit next, or nil: the highest priority
// class that has waiters; within it the boosted turns in arrival order,
// then the normal bucket whose usage is lowest (ties and the single bucket
// of fairness: none go by arrival order).
func (k *keyState) next(usage func(bucket string) float64) *waiter {
	for _, b := range k.bands {
		if w := b.next(usage); w != nil {
			return w
		}
	}
	return nil
}

func (b *band) next(usage func(bucket string) float64) *waiter {
	if e := b.boosted.Front(); e != nil {
		return e.Value.(*waiter)
	}
	var best *waiter
	var bestUsage float64
	for bucket, l := range b.normal {
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

// newest returns the waiter of priority class p a shed takes first, or
// nil: the most recent normal turn (it has waited least and would be
// admitted among the last), else the most recent boosted one.
func (k *keyState) newest(p int) *waiter {
	b := k.bands[p]
	var last *waiter
	for _, l := range b.normal {
		if w := l.Back().Value.(*waiter); last == nil || w.seq > last.seq {
			last = w
		}
	}
	if last == nil {
		if e := b.boosted.Back(); e != nil {
			last = e.Value.(*waiter)
		}
	}
	return last
}

// ahead counts the waiters admitted before a newcomer of priority class p:
// every waiter of class p or higher.
func (k *keyState) ahead(p int) int {
	n := 0
	for _, b := range k.bands[:p+1] {
		n += b.waiting()
	}
	return n
}

// observeHold folds one slot's holding time into the moving average.
func (k *keyState) observeHold(d time.Duration) {
	if k.meanHold == 0 {
		k.meanHold = d
		return
	}
	k.meanHold = (7*k.meanHold + d) / 8
}
