package router

import (
	"errors"

	"github.com/cespare/xxhash/v2"
	"github.com/duet-serve/duet/tokenizer"
)

// SharedState is the conversation state several duet replicas share, so
// that consecutive turns of one conversation routed through different
// replicas find the same pair (router/redisstore keeps it on Redis). The
// conversation policy calls it outside its locks. Every call is bounded by
// the implementation's deadline, and an error only means "route with local
// state": the store is never a way for a request to fail.
type SharedState interface {
	// Find returns, in one round trip, the session keyed key or, when key is
	// "", the sessions whose previous prompt ends at one of ends (chained
	// block hashes, deepest first; see SessionRecord.End). It returns
	// ErrStoreDown at once, without a call, while the store is known to be
	// down (the replicas then place sessions by rendezvous hashing); any
	// other error is a call that failed once (the request is routed on this
	// replica's state).
	Find(key string, ends []uint64) ([]SessionRecord, error)
	// Save records a session's state. It may return before the store has
	// it, and drops it while the store is down.
	Save(rec SessionRecord)
}

// ErrStoreDown is what SharedState.Find returns while the store is known to
// be unreachable (it recovers on its own).
var ErrStoreDown = errors.New("shared state store is down")

// SessionRecord is one session as the replicas share it. Workers are named
// by their stable identity (Endpoint.Identity), which every replica gives
// the same worker.
type SessionRecord struct {
	Key      string
	Ctx, Gen string // pinned worker identities; "" when the leg is not pinned
	CtxHeld  int    // tokens the ctx worker prefilled for the session last turn
	// CtxMark is the ctx worker's cache clock (Endpoint.CacheClock) when
	// that turn's context phase ended; 0 when unknown (the clock has moved
	// by then).
	CtxMark int64
	GenHeld int // tokens the gen worker held at the end of last turn
	// The previous prompt, as the prefix index keeps it: the chained hash
	// of its last full block (0 when it is shorter than a block), its
	// number of full blocks, and the length and hash of the tokens after
	// them.
	End      uint64
	EndDepth int
	TailLen  int
	TailHash uint64
}

// maxSharedEnds bounds the block ends one Find sends: a continuation whose
// previous prompt is more than this many blocks shorter than the new one
// (32k tokens with 32-token blocks) is found only by the local index.
const maxSharedEnds = 1024

// sharedEnds lists the block ends a prompt with these chained hashes may
// continue from, deepest first, as prefixIndex.match probes them.
func sharedEnds(hashes []uint64, minDepth int) []uint64 {
	ends := make([]uint64, 0, min(len(hashes)+1, maxSharedEnds))
	for depth := len(hashes); depth > minDepth && len(ends) < maxSharedEnds; depth-- {
		ends = append(ends, hashes[depth-1])
	}
	if minDepth == 0 && len(ends) < maxSharedEnds {
		ends = append(ends, rootEnd)
	}
	return ends
}

// continuedRecord returns the record whose whole previous prompt is a
// strict prefix of tokens, preferring the deepest end and then the longest
// tail, as prefixIndex.match does; nil when none is, or when several
// sessions share the best match exactly (a common prefix, not one
// conversation).
func continuedRecord(recs []SessionRecord, tokens []int, hashes []uint64, blockSize int) *SessionRecord {
	var best *SessionRecord
	ambiguous := false
	for i := range recs {
		r := &recs[i]
		if !continues(r, tokens, hashes, blockSize) {
			continue
		}
		switch {
		case best == nil || r.EndDepth > best.EndDepth || (r.EndDepth == best.EndDepth && r.TailLen > best.TailLen):
			best, ambiguous = r, false
		case r.EndDepth == best.EndDepth && r.TailLen == best.TailLen && r.Key != best.Key:
			ambiguous = true
		}
	}
	if ambiguous {
		return nil
	}
	return best
}

// continues reports whether tokens hold r's whole previous prompt and more.
func continues(r *SessionRecord, tokens []int, hashes []uint64, blockSize int) bool {
	if r.EndDepth < 0 || r.EndDepth > len(hashes) || r.TailLen < 0 {
		return false
	}
	end := uint64(rootEnd)
	if r.EndDepth > 0 {
		end = hashes[r.EndDepth-1]
	}
	offset := r.EndDepth * blockSize
	if end != r.End || offset+r.TailLen >= len(tokens) {
		return false
	}
	return tokenizer.HashTokens(tokens[offset:offset+r.TailLen]) == r.TailHash
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
