package queue

import "time"

// Slot is one admitted request's share of its key's capacity. It is
// released exactly once: the first Release counts, later calls are no-ops.
type Slot struct {
	q *Queue // nil for the no-op slot of a disabled queue
	k *keyState

	// Guarded by Queue.mu.
	session    string
	admittedAt time.Time
	released   bool
}

// SetSession records the session the request turned out to belong to, when
// routing found or minted one the Ticket did not carry, so that completing
// it boosts (and holds a slot for) that session. "" keeps the current one.
// Safe for concurrent use; a nil or no-op slot ignores it.
func (s *Slot) SetSession(session string) {
	if s == nil || s.q == nil || session == "" {
		return
	}
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	s.session = session
}

// Release gives the slot back and admits waiting requests into the freed
// capacity at once. completed reports that the turn finished successfully:
// its session is then boosted for session_boost_ttl and, with grace_period,
// the slot is held for the session's next turn instead of being freed.
//
// Call Release(true) when the answer completed, and defer Release(false)
// right after Acquire so that failures, client cancellations and panics
// release too: only the first call counts. Safe for concurrent use; a nil
// slot is a no-op.
func (s *Slot) Release(completed bool) {
	if s == nil || s.q == nil {
		return
	}
	q := s.q
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.releaseLocked(s, completed, now)
}

// releaseLocked releases s once; see Release.
func (q *Queue) releaseLocked(s *Slot, completed bool, now time.Time) {
	if s.released {
		return
	}
	s.released = true
	k := s.k
	k.admitted--
	k.releases++
	k.observeHold(now.Sub(s.admittedAt))
	if completed && s.session != "" {
		q.boost.completed(s.session, now)
		if q.cfg.GracePeriod > 0 && k.holds[s.session] == nil {
			q.holdLocked(k, s.session)
		}
	}
	q.admitLocked(k, now)
}

// holdLocked keeps one of k's slots for session's next turn for
// grace_period; the slot is freed when the period ends unclaimed.
func (q *Queue) holdLocked(k *keyState, session string) {
	h := &hold{}
	k.holds[session] = h
	h.stop = q.afterFunc(q.cfg.GracePeriod, func() { q.endHold(k, session, h) })
}

// endHold frees h's slot if the session did not claim it.
func (q *Queue) endHold(k *keyState, session string, h *hold) {
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	if k.holds[session] != h {
		return
	}
	delete(k.holds, session)
	q.admitLocked(k, now)
}
