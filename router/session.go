package router

import (
	"container/list"
	"time"
)

// session is one conversation's routing state. Its owner (Conversation)
// guards it.
type session struct {
	key      string
	id       uint64 // names the session in the block table; unique per table
	ctx, gen string // pinned worker IDs; "" means the leg must be picked again
	lastUsed time.Time
	elem     *list.Element

	// The previous prompt, for implicit matching: the chained hash of its
	// last full block, how many full blocks it has, a hash of the tokens
	// after them, and its length.
	endHash   uint64
	endDepth  int
	tailHash  uint64
	promptLen int
	indexed   bool // the prefix index holds the session
	// forkDepth is how many leading blocks of the session's first prompt
	// other sessions' prompts had gone through (a common system prompt):
	// the session's own content starts after them.
	forkDepth int
	// commonDepth is how much of that the session shares with prompts
	// beyond its own conversation: its forkDepth, or for a branch (or a
	// fork) the commonDepth of the session it started from, whose content
	// it shares.
	commonDepth int
	// anchor holds the chained hashes of the previous prompt's blocks from
	// the shallowest one a continuation must reach (depth anchorDepth) to
	// its last full block; empty when no continuation can leave anything
	// out (see prefixIndex.record).
	anchor      []uint64
	anchorDepth int

	ctxHeld int // tokens the ctx worker prefilled for this session last turn
	// ctxMark is the ctx worker's cache clock (Endpoint.CacheClock) when it
	// prefilled them.
	ctxMark int64
	genHeld int // tokens the gen worker held at the end of last turn

	// inflight counts the session's routed requests not yet Done: a session
	// never expires while one runs; its idle time counts from the end of
	// its last request.
	inflight int
	// ctxLost and genLost mark a leg whose worker was removed: the next
	// request re-picks it and is reported as a re-pin.
	ctxLost, genLost bool
	// unread is true when the shared store could not be read for the
	// session's last request: its state is not saved (see
	// Conversation.save).
	unread bool
}

// idle reports whether s has been idle longer than ttl at now.
func (s *session) idle(now time.Time, ttl time.Duration) bool {
	return s.inflight == 0 && now.Sub(s.lastUsed) > ttl
}

// Affinity break and eviction reasons.
const (
	reasonTTL         = "ttl"
	reasonLRU         = "lru"
	reasonWorkerGone  = "worker_gone" // the worker was removed from the pool
	reasonUnavailable = "unavailable" // the worker is unhealthy or draining
	reasonRetry       = "retry"       // a retry excluded the worker after it failed
	reasonEvicted     = "evicted"     // the worker had lost most of the expected prefix
	reasonSpill       = "spill"       // the worker was overloaded
	reasonStoreDown   = "store_down"  // the shared store was down: the session went where rendezvous hashing puts it
	reasonTurnover    = "turnover"    // the ctx worker computed more than a cache's worth since the session's last turn
)

// sessionTable is an LRU of sessions bounded by max, with an idle TTL, an
// index by session id (the block table names sessions by id) and a reverse
// index worker → sessions. Not goroutine-safe.
type sessionTable struct {
	max      int
	ttl      time.Duration
	byKey    map[string]*session
	byID     map[uint64]*session
	lru      *list.List // front: most recently used
	byWorker map[string]map[*session]struct{}
	onEvict  func(s *session, reason string)
	lastID   uint64 // the id of the newest session
}

func newSessionTable(max int, ttl time.Duration, onEvict func(*session, string)) *sessionTable {
	return &sessionTable{max: max, ttl: ttl, byKey: map[string]*session{}, byID: map[uint64]*session{}, lru: list.New(),
		byWorker: map[string]map[*session]struct{}{}, onEvict: onEvict}
}

// get returns the live session for key, or nil; an expired one is evicted.
func (t *sessionTable) get(key string, now time.Time) *session {
	s := t.byKey[key]
	if s == nil {
		return nil
	}
	if s.idle(now, t.ttl) {
		t.remove(s, reasonTTL)
		return nil
	}
	return s
}

// touch marks s used now.
func (t *sessionTable) touch(s *session, now time.Time) {
	s.lastUsed = now
	t.lru.MoveToFront(s.elem)
}

// add inserts a new session, evicting expired sessions and, beyond max, the
// least recently used one.
func (t *sessionTable) add(key string, now time.Time) *session {
	t.expire(now)
	for len(t.byKey) >= t.max {
		t.remove(t.lru.Back().Value.(*session), reasonLRU)
	}
	t.lastID++
	s := &session{key: key, id: t.lastID, lastUsed: now}
	s.elem = t.lru.PushFront(s)
	t.byKey[key] = s
	t.byID[s.id] = s
	return s
}

// expire evicts idle sessions; they sit at the back of the LRU list. A
// session with a request in flight is not idle: it moves to the front (its
// idle time restarts when the request ends anyway).
func (t *sessionTable) expire(now time.Time) {
	for e := t.lru.Back(); e != nil; e = t.lru.Back() {
		s := e.Value.(*session)
		if now.Sub(s.lastUsed) <= t.ttl {
			return
		}
		if s.inflight > 0 {
			t.touch(s, now)
			continue
		}
		t.remove(s, reasonTTL)
	}
}

func (t *sessionTable) remove(s *session, reason string) {
	t.unindex(s, s.ctx)
	t.unindex(s, s.gen)
	t.lru.Remove(s.elem)
	delete(t.byKey, s.key)
	delete(t.byID, s.id)
	if t.onEvict != nil {
		t.onEvict(s, reason)
	}
}

// pin sets the session's workers and keeps the reverse index in step.
func (t *sessionTable) pin(s *session, ctx, gen string) {
	if s.ctx != ctx {
		t.unindex(s, s.ctx)
		s.ctx = ctx
		t.index(s, ctx)
	}
	if s.gen != gen {
		t.unindex(s, s.gen)
		s.gen = gen
		t.index(s, gen)
	}
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

// workerGone clears the leg that points at a removed worker in each of its
// sessions (the other leg keeps its cache) and returns how many sessions
// lost a leg.
func (t *sessionTable) workerGone(worker string) int {
	m := t.byWorker[worker]
	for s := range m {
		if s.ctx == worker {
			s.ctx, s.ctxHeld, s.ctxLost = "", 0, true
		}
		if s.gen == worker {
			s.gen, s.genHeld, s.genLost = "", 0, true
		}
	}
	delete(t.byWorker, worker)
	return len(m)
}

// perWorker counts the sessions pinned to each worker.
func (t *sessionTable) perWorker() map[string]int {
	out := make(map[string]int, len(t.byWorker))
	for w, m := range t.byWorker {
		out[w] = len(m)
	}
	return out
}
