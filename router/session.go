package router

import (
	"container/list"
	"time"
)

// session is one conversation as the cost model keeps it: the workers its
// last turn ran on (its pins, a prior the cost model weighs). Its owner
// (CostModel) guards it.
type session struct {
	key      string
	ctx, gen string // pinned worker IDs; "" when the leg is not pinned
	lastUsed time.Time
	elem     *list.Element
}

// Affinity break and eviction reasons.
const (
	reasonTTL         = "ttl"
	reasonLRU         = "lru"
	reasonWorkerGone  = "worker_gone" // the worker was removed from the pool
	reasonUnavailable = "unavailable" // the worker is unhealthy or draining
	reasonRetry       = "retry"       // a retry excluded the worker after it failed
	reasonMoved       = "moved"       // another ctx worker was cheaper by more than the pin's weight
	reasonSpill       = "spill"       // the pinned gen worker was loaded past spill_load_factor
	reasonStoreDown   = "store_down"  // the shared store was down: the session went where rendezvous hashing puts it
	reasonEnded       = "ended"       // the client ended the session (X-Session-End)
)

// sessionTable is an LRU of sessions bounded by max, with an idle TTL and a
// reverse index worker → sessions. Not goroutine-safe.
type sessionTable struct {
	max      int
	ttl      time.Duration
	byKey    map[string]*session
	lru      *list.List // front: most recently used
	byWorker map[string]map[*session]struct{}
	onEvict  func(reason string)
}

func newSessionTable(max int, ttl time.Duration, onEvict func(reason string)) *sessionTable {
	return &sessionTable{max: max, ttl: ttl, byKey: map[string]*session{}, lru: list.New(),
		byWorker: map[string]map[*session]struct{}{}, onEvict: onEvict}
}

// get returns the live session for key, or nil; an expired one is evicted.
func (t *sessionTable) get(key string, now time.Time) *session {
	s := t.byKey[key]
	if s == nil {
		return nil
	}
	if now.Sub(s.lastUsed) > t.ttl {
		t.remove(s, reasonTTL)
		return nil
	}
	return s
}

// put pins key's session to ctx and gen, adding it when new (evicting
// expired sessions and, beyond max, the least recently used one), and
// marks it used now.
func (t *sessionTable) put(key, ctx, gen string, now time.Time) {
	s := t.get(key, now)
	if s == nil {
		t.expire(now)
		for len(t.byKey) >= t.max {
			t.remove(t.lru.Back().Value.(*session), reasonLRU)
		}
		s = &session{key: key}
		s.elem = t.lru.PushFront(s)
		t.byKey[key] = s
	}
	t.pin(s, ctx, gen)
	s.lastUsed = now
	t.lru.MoveToFront(s.elem)
}

// expire evicts idle sessions; they sit at the back of the LRU list.
func (t *sessionTable) expire(now time.Time) {
	for e := t.lru.Back(); e != nil; e = t.lru.Back() {
		s := e.Value.(*session)
		if now.Sub(s.lastUsed) <= t.ttl {
			return
		}
		t.remove(s, reasonTTL)
	}
}

func (t *sessionTable) remove(s *session, reason string) {
	t.unindex(s, s.ctx)
	t.unindex(s, s.gen)
	t.lru.Remove(s.elem)
	delete(t.byKey, s.key)
	if t.onEvict != nil {
		t.onEvict(reason)
	}
}

// pin sets the session's workers and keeps the reverse index in step.
func (t *sessionTable) pin(s *session, ctx, gen string) {
	if s.ctx != ctx {
		t.unindex(s, s.ctx)
		s.ctx = ctx
	}
	if s.gen != gen {
		t.unindex(s, s.gen)
		s.gen = gen
	}
	t.index(s, ctx)
	t.index(s, gen)
}

func (t *sessionTable) index(s *session, worker string) {
	if worker == "" {
		return
	}
	m := t.byWorker[worker]
	if m == nil {
		m = map[*session]struct{}{}
		t.byWorker[worker] = m
	}
	m[s] = struct{}{}
}

func (t *sessionTable) unindex(s *session, worker string) {
	if m := t.byWorker[worker]; m != nil {
		delete(m, s)
		if len(m) == 0 {
			delete(t.byWorker, worker)
		}
	}
}

// workerGone drops a removed worker from the reverse index and returns how
// many sessions were pinned to it. Their pins stay: the next turn of each
// finds the worker gone and is a re-pin.
func (t *sessionTable) workerGone(worker string) int {
	n := len(t.byWorker[worker])
	delete(t.byWorker, worker)
	return n
}

// perWorker counts the sessions pinned to each worker.
func (t *sessionTable) perWorker() map[string]int {
	out := make(map[string]int, len(t.byWorker))
	for w, m := range t.byWorker {
		out[w] = len(m)
	}
	return out
}
