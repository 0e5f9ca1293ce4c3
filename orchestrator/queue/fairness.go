package queue

import (
	"math"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// maxUsers bounds the users whose usage fairness remembers; the least
// recently charged is forgotten first (its usage has decayed the most).
const maxUsers = 100000

// usageTable is each user's recent token usage, decaying exponentially with
// a half-life. Decay scales every user alike, so it never reorders users;
// only charges do. Not goroutine-safe: the Queue's mutex guards it.
type usageTable struct {
	halfLife time.Duration
	lru      *simplelru.LRU[string, usage]
}

type usage struct {
	tokens float64 // at the time below
	at     time.Time
}

func newUsageTable(halfLife time.Duration) *usageTable {
	return &usageTable{halfLife: halfLife, lru: newLRU[usage](maxUsers)}
}

// value returns user's decayed usage at now (0 for an unknown user).
func (u *usageTable) value(user string, now time.Time) float64 {
	e, ok := u.lru.Peek(user)
	if !ok {
		return 0
	}
	age := now.Sub(e.at)
	if age <= 0 {
		return e.tokens
	}
	return e.tokens * math.Exp2(-float64(age)/float64(u.halfLife))
}

// charge adds tokens (at least 1, so that requests count too) to user's
// usage at now.
func (u *usageTable) charge(user string, tokens int, now time.Time) {
	u.lru.Add(user, usage{tokens: u.value(user, now) + float64(max(tokens, 1)), at: now})
}
