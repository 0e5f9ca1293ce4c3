package router

import "github.com/duet-serve/duet/tokenizer"

// prefixIndex finds the session a prompt continues. Block hashes are
// chained, so one hash names a whole path from the root of a block trie.
// The index keeps two entries per session:
//   - its endpoint: the hash of the last full block of its previous prompt
//     (rootEnd for a prompt shorter than a block) and below it the partial
//     block after it, by length and hash. A prompt that holds the entire
//     previous prompt and more continues the session exactly.
//   - its anchor: the hash of the shallowest block a continuation must
//     reach, slack full blocks before the last (and never within the blocks
//     the session's first prompt shared with other sessions: forkDepth; a
//     session whose first prompt shared none has no anchor), with the
//     hashes of the blocks after it. A prompt that reaches the
//     anchor continues the session, holding its blocks up to where the
//     two part: a chat template that re-rendered the end of the previous
//     turn, a trace whose partial last block is not repeated.
//
// Memory per session is a few map entries and slack+1 hashes, whatever its
// length; a lookup costs one map probe per block of the prompt plus, where
// an endpoint matches, one small hash per distinct tail length (at most
// tokens_per_block), however many sessions share the endpoint. Not
// goroutine-safe.
type prefixIndex struct {
	blockSize int
	minDepth  int // hash_skip_count: a match must cover more blocks than this
	slack     int // continuation_slack_blocks
	// blocks holds what is recorded at a block: the endpoints and anchors
	// there. One map, so that a lookup probes each block once.
	blocks map[uint64]*indexBlock
	// tails maps (endpoint, tail length, tail hash) to the sessions whose
	// previous prompt is exactly that.
	tails map[tailKey]*sessionSet
}

// indexBlock is what the index records at one block hash.
type indexBlock struct {
	// lengths lists the tail lengths recorded behind this block as an
	// endpoint and how many sessions have each (at most tokens_per_block
	// entries).
	lengths []lengthCount
	// anchored holds the sessions anchored at this block (nil: none).
	anchored *sessionSet
}

// rootEnd is the endpoint of prompts shorter than one block.
const rootEnd = 0

type lengthCount struct{ n, count int }

type tailKey struct {
	end uint64
	n   int
	h   uint64
}

func newPrefixIndex(blockSize, skip, slack int) *prefixIndex {
	return &prefixIndex{blockSize: blockSize, minDepth: skip, slack: slack, blocks: map[uint64]*indexBlock{},
		tails: map[tailKey]*sessionSet{}}
}

// block returns the entry of block h, making it when it is missing.
func (x *prefixIndex) block(h uint64) *indexBlock {
	b := x.blocks[h]
	if b == nil {
		b = &indexBlock{}
		x.blocks[h] = b
	}
	return b
}

// dropIfEmpty deletes block h's entry once nothing is recorded there.
func (x *prefixIndex) dropIfEmpty(h uint64, b *indexBlock) {
	if len(b.lengths) == 0 && b.anchored == nil {
		delete(x.blocks, h)
	}
}

// record makes tokens (with their chained block hashes) the session's
// previous prompt. Its anchor is slack blocks before its last full block,
// but beyond the session's forkDepth and the skipped blocks; a session
// whose prompt does not reach that far has none. Nor has a session whose
// first prompt shared no block with an earlier one (forkDepth 0): the first
// conversation seen with a system prompt cannot tell the prompt from its
// own first message, so a new conversation with a similar first message
// would look like its continuation; only its whole previous prompt
// continues it.
func (x *prefixIndex) record(s *session, tokens []int, hashes []uint64) {
	end := uint64(rootEnd)
	if len(hashes) > 0 {
		end = hashes[len(hashes)-1]
	}
	tail := tokens[len(hashes)*x.blockSize:]
	x.put(s, end, len(hashes), len(tail), tokenizer.HashTokens(tail))
	if depth := max(len(hashes)-x.slack, s.forkDepth+1, x.minDepth+1); s.forkDepth > 0 && depth <= len(hashes) {
		s.anchor = append(s.anchor[:0], hashes[depth-1:]...)
		s.anchorDepth = depth
		b := x.block(s.anchor[0])
		b.anchored = addTo(b.anchored, s)
	}
}

// addTo adds s to set, making the set when it is nil.
func addTo(set *sessionSet, s *session) *sessionSet {
	if set == nil {
		set = &sessionSet{}
	}
	set.add(s)
	return set
}

// put makes the session's previous prompt the one that ends after depth
// full blocks (the last one's chained hash is end) and tailLen more tokens
// whose hash is tailHash.
func (x *prefixIndex) put(s *session, end uint64, depth, tailLen int, tailHash uint64) {
	x.forget(s)
	s.endHash, s.endDepth, s.tailHash = end, depth, tailHash
	s.promptLen = depth*x.blockSize + tailLen
	key := tailKey{end, tailLen, tailHash}
	x.tails[key] = addTo(x.tails[key], s)
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
	if len(s.anchor) > 0 {
		h := s.anchor[0]
		b := x.blocks[h]
		if b.anchored.remove(s) == 0 {
			b.anchored = nil
			x.dropIfEmpty(h, b)
		}
		s.anchor, s.anchorDepth = s.anchor[:0], 0
	}
}

// countLength counts delta more sessions whose previous prompt ends n
// tokens after block end.
func (x *prefixIndex) countLength(end uint64, n, delta int) {
	b := x.block(end)
	for i := range b.lengths {
		if b.lengths[i].n == n {
			b.lengths[i].count += delta
			if b.lengths[i].count == 0 {
				b.lengths[i] = b.lengths[len(b.lengths)-1]
				b.lengths = b.lengths[:len(b.lengths)-1]
				x.dropIfEmpty(end, b)
			}
			return
		}
	}
	b.lengths = append(b.lengths, lengthCount{n, delta})
}

// match returns the session the prompt continues and how many of the
// prompt's tokens it shares with that session's previous prompt: at the
// deepest block where any session matches, the one whose whole previous
// prompt is a strict prefix of tokens (sharing all of it), else the one
// anchored there that shares the most blocks. It returns nil when none
// matches or when several sessions match equally well (a common system
// prompt with an identical first turn: not a continuation of any one of
// them).
func (x *prefixIndex) match(tokens []int, hashes []uint64) (*session, int) {
	for depth := len(hashes); depth > x.minDepth; depth-- { // minDepth >= 0: a prompt shorter than a block matches nothing here
		end := hashes[depth-1]
		b := x.blocks[end]
		if b == nil {
			continue
		}
		if s, found := x.matchAt(b, end, tokens, depth*x.blockSize); found {
			if s == nil {
				return nil, 0
			}
			return s, s.promptLen
		}
		if s, blocks, found := matchAnchor(b, hashes, depth); found {
			if s == nil {
				return nil, 0
			}
			return s, blocks * x.blockSize
		}
	}
	return nil, 0
}

// matchAnchor looks among the sessions anchored at the prompt's block depth
// (b is that block's entry) for the one whose previous prompt the prompt
// follows furthest, and returns it with the number of blocks they share.
// found is true when a session is anchored there, with s nil if two share
// equally many.
func matchAnchor(b *indexBlock, hashes []uint64, depth int) (s *session, blocks int, found bool) {
	set := b.anchored
	if set == nil {
		return nil, 0, false
	}
	ambiguous := false
	set.each(func(a *session) {
		if a.anchorDepth != depth {
			return
		}
		n := depth
		for n < len(hashes) && n-depth+1 < len(a.anchor) && hashes[n] == a.anchor[n-depth+1] {
			n++
		}
		switch {
		case n > blocks:
			s, blocks, ambiguous = a, n, false
		case n == blocks:
			ambiguous = true
		}
	})
	switch {
	case s == nil:
		return nil, 0, false
	case ambiguous:
		return nil, 0, true
	}
	return s, blocks, true
}

// matchAt looks for the longest recorded tail behind end (b is its entry)
// that tokens continue after offset. found is true when a tail matched,
// with s nil if it is ambiguous.
func (x *prefixIndex) matchAt(b *indexBlock, end uint64, tokens []int, offset int) (s *session, found bool) {
	best := -1
	var bestSet *sessionSet
	for _, lc := range b.lengths {
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

// each calls f with every member.
func (s *sessionSet) each(f func(*session)) {
	for _, x := range s.few {
		f(x)
	}
	for x := range s.many {
		f(x)
	}
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
