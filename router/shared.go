package router

import (
	"errors"

	"github.com/cespare/xxhash/v2"
)

// SharedState is the session state several duet replicas share, so that
// consecutive turns of one conversation routed through different replicas
// weigh the same pins (router/redisstore keeps it on Redis). The cost
// model calls it outside its locks. Every call is bounded by the
// implementation's deadline, and an error only means "route with local
// state": the store is never a way for a request to fail.
type SharedState interface {
	// Find returns the session keyed key, in one round trip; ok is false
	// when the store has none. It returns ErrStoreDown at once, without a
	// call, while the store is known to be down (the replicas then place
	// sessions by rendezvous hashing); any other error is a call that
	// failed once (the request is routed on this replica's state).
	Find(key string) (rec SessionRecord, ok bool, err error)
	// Ended records what a request's end tells the other replicas, in one
	// write: its session's pins, and the blocks its workers now hold (so
	// that their cache index estimates follow every replica's traffic).
	// Without Wait it may return before the store has it; with Wait (a
	// session whose pins changed: its next turn, through any replica, must
	// find them) it returns once the store has it or its deadline passed.
	// It drops it while the store is down.
	Ended(t Turn)
	// OnLearned registers fn to be told what the other replicas learned
	// (their Learned calls), from one goroutine, in order. Register before
	// the first Find; fn must not block.
	OnLearned(fn func(identities []string, hashes []uint64))
}

// ErrStoreDown is what SharedState.Find returns while the store is known to
// be unreachable (it recovers on its own).
var ErrStoreDown = errors.New("shared state store is down")

// Turn is what one request's end tells the other replicas.
type Turn struct {
	// Session is the session's record to save; nil: none.
	Session *SessionRecord
	// Forget is the key of a session whose client ended it, to delete;
	// "": none.
	Forget string
	// Workers are the identities of the workers that now hold Blocks (the
	// request's ctx and gen workers); none: nothing learned.
	Workers []string
	Blocks  []uint64
	// Wait asks Ended to return once the store has the turn.
	Wait bool
}

// SessionRecord is one session as the replicas share it: the workers its
// last turn ran on, named by their stable identity (Endpoint.Identity),
// which every replica gives the same worker.
type SessionRecord struct {
	Key      string
	Ctx, Gen string // pinned worker identities; "" when the leg is not pinned
}

// rendezvous picks the candidate with the highest hash of (key, identity):
// with the store down, every replica places a session the same way without
// talking to the others.
func rendezvous(key string, cands []*Endpoint) *Endpoint {
	var best *Endpoint
	var bestScore uint64
	for _, ep := range cands {
		d := xxhash.New()
		_, _ = d.WriteString(key)
		_, _ = d.WriteString("\x00")
		_, _ = d.WriteString(ep.Identity())
		if score := d.Sum64(); best == nil || score > bestScore {
			best, bestScore = ep, score
		}
	}
	return best
}
