package queue

import (
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// boostTable remembers when each session's last turn completed, bounded by
// an LRU (oldest completion forgotten first) and a TTL. Not goroutine-safe:
// the Queue's mutex guards it.
type boostTable struct {
	ttl time.Duration // 0: boosting off
	lru *simplelru.LRU[string, time.Time]
}

func newBoostTable(ttl time.Duration, max int) *boostTable {
	return &boostTable{ttl: ttl, lru: newLRU[time.Time](max)}
}

// boosted reports whether session completed a turn within the TTL before
// now. The empty session is never boosted.
func (b *boostTable) boosted(session string, now time.Time) bool {
	if b.ttl <= 0 || session == "" {
		return false
	}
	at, ok := b.lru.Peek(session)
	if !ok {
		return false
	}
	if now.Sub(at) > b.ttl {
		b.lru.Remove(session)
		return false
	}
	return true
}

// completed records that session completed a turn at now, and forgets
// expired completions (the LRU's order is completion order).
func (b *boostTable) completed(session string, now time.Time) {
	if b.ttl <= 0 || session == "" {
		return
	}
	b.lru.Add(session, now)
	for {
		key, at, ok := b.lru.GetOldest()
		if !ok || now.Sub(at) <= b.ttl {
			return
		}
		b.lru.Remove(key)
	}
}
