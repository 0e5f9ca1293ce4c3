package router

import "github.com/duet-serve/duet/tokenizer"

// prefixIndex finds the session a prompt continues. Block hashes are
// chained, so one hash names a whole path from the root of a block trie:
// the index stores only each session's endpoint, the hash of the last full
// block of its previous prompt (rootEnd for a prompt shorter than a block),
// and below it the partial block after it, by length and hash. A prompt
// continues a session when it holds that session's entire previous prompt
// and more. Memory per session is a few map entries, whatever its length;
// a lookup costs one map probe per block of the prompt plus, where an
// endpoint matches, one small hash per distinct tail length (at most
// tokens_per_block), however many sessions share the endpoint. Not
// goroutine-safe.
type prefixIndex struct {
	blockSize int
	minDepth  int // hash_skip_count: a match must cover more blocks than this
	// lengths lists, per endpoint, the tail lengths recorded behind it and
	// how many sessions have each (at most tokens_per_block entries).
	lengths map[uint64][]lengthCount
	// tails maps (endpoint, tail length, tail hash) to the sessions whose
	// previous prompt is exactly that.
	tails map[tailKey]*sessionSet
}

// rootEnd is the endpoint of prompts shorter than one block.
const rootEnd = 0

type lengthCount struct{ n, count int }

type tailKey struct {
	end uint64
	n   int
	h   uint64
}

func newPrefixIndex(blockSize, skip int) *prefixIndex {
	return &prefixIndex{blockSize: blockSize, minDepth: skip, lengths: map[uint64][]lengthCount{}, tails: map[tailKey]*sessionSet{}}
}

// record makes tokens (with their chained block hashes) the session's
// previous prompt.
func (x *prefixIndex) record(s *session, tokens []int, hashes []uint64) {
	end := uint64(rootEnd)
	if len(hashes) > 0 {
		end = hashes[len(hashes)-1]
	}
	tail := tokens[len(hashes)*x.blockSize:]
	x.put(s, end, len(hashes), len(tail), tokenizer.HashTokens(tail))
}

// put makes the session's previous prompt the one that ends after depth
// full blocks (the last one's chained hash is end) and tailLen more tokens
// whose hash is tailHash.
func (x *prefixIndex) put(s *session, end uint64, depth, tailLen int, tailHash uint64) {
	x.forget(s)
	s.endHash, s.endDepth, s.tailHash = end, depth, tailHash
	s.promptLen = depth*x.blockSize + tailLen
	key := tailKey{end, tailLen, tailHash}
	set := x.tails[key]
	if set == nil {
		set = &sessionSet{}
		x.tails[key] = set
	}
	set.add(s)
	x.countLength(end, tailLen, +1)
	s.indexed = true
}

// forget removes the session from the index.
func (x *prefixIndex) forget(s *session) {
	if !s.indexed {
		return
	}
	s.indexed = false
	key := tailKey{s.endHash, s.promptLen - s.endDepth*x.blockSize, s.tailHash}
	if x.tails[key].remove(s) == 0 {
		delete(x.tails, key)
	}
	x.countLength(s.endHash, key.n, -1)
}

func (x *prefixIndex) countLength(end uint64, n, delta int) {
	ls := x.lengths[end]
	for i := range ls {
		if ls[i].n == n {
			ls[i].count += delta
			if ls[i].count == 0 {
				ls[i] = ls[len(ls)-1]
				ls = ls[:len(ls)-1]
			}
			x.setLengths(end, ls)
			return
		}
	}
	x.setLengths(end, append(ls, lengthCount{n, delta}))
}

func (x *prefixIndex) setLengths(end uint64, ls []lengthCount) {
	if len(ls) == 0 {
		delete(x.lengths, end)
		return
	}
	x.lengths[end] = ls
}

// match returns the session whose whole previous prompt is a strict prefix
// of tokens, preferring the longest. It returns nil when none matches or
// when several sessions share the longest matching prompt exactly (a common
// system prompt with an identical first turn: not a continuation of any one
// of them).
func (x *prefixIndex) match(tokens []int, hashes []uint64) *session {
	for depth := len(hashes); depth >= 0 && depth > x.minDepth; depth-- {
		end := uint64(rootEnd)
		if depth > 0 {
			end = hashes[depth-1]
		}
		if s, found := x.matchAt(end, tokens, depth*x.blockSize); found {
			return s
		}
	}
	return nil
}

// matchAt looks for the longest recorded tail behind end that tokens
// continue after offset. found is true when a tail matched, with s nil if it
// is ambiguous.
func (x *prefixIndex) matchAt(end uint64, tokens []int, offset int) (s *session, found bool) {
	best := -1
	var bestSet *sessionSet
	for _, lc := range x.lengths[end] {
		if lc.n <= best || offset+lc.n >= len(tokens) {
			continue
		}
		if set := x.tails[tailKey{end, lc.n, tokenizer.HashTokens(tokens[offset : offset+lc.n])}]; set != nil {
			best, bestSet = lc.n, set
		}
	}
	if bestSet == nil {
		return nil, false
	}
	return bestSet.only(), true
}

// sessionSet holds the sessions with one exact previous prompt: almost
// always one, so it is a slice up to smallSet members and a map beyond.
type sessionSet struct {
	few  []*session
	many map[*session]struct{}
}

const smallSet = 8

func (s *sessionSet) add(x *session) {
	if s.many != nil {
		s.many[x] = struct{}{}
		return
	}
	s.few = append(s.few, x)
	if len(s.few) > smallSet {
		s.many = make(map[*session]struct{}, len(s.few))
		for _, y := range s.few {
			s.many[y] = struct{}{}
		}
		s.few = nil
	}
}

// remove deletes x and returns how many sessions are left.
func (s *sessionSet) remove(x *session) int {
	if s.many != nil {
		delete(s.many, x)
		return len(s.many)
	}
	for i, y := range s.few {
		if y == x {
			s.few[i] = s.few[len(s.few)-1]
			s.few = s.few[:len(s.few)-1]
			break
		}
	}
	return len(s.few)
}

// only returns the single member, or nil when there are several. A set
// that grew into a map and shrank back to one member has it in the map.
func (s *sessionSet) only() *session {
	switch {
	case s.many == nil && len(s.few) == 1:
		return s.few[0]
	case len(s.many) == 1:
		for x := range s.many {
			return x
		}
	}
	return nil
}
