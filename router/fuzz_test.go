package router

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/tokenizer"
)

// prompts builds the prompts of a fuzzed scenario: each new prompt is a
// prefix of an earlier one (or empty) plus a few tokens from a small
// alphabet, so prompts share prefixes, repeat exactly and cross block
// boundaries the way conversations do.
type prompts struct{ known [][]int }

// next decodes a prompt from three bytes: which earlier prompt, where to
// cut it, and what to append.
func (p *prompts) next(which, cut, ext byte) []int {
	base := []int(nil)
	if len(p.known) > 0 {
		base = p.known[int(which)%len(p.known)]
	}
	n := int(cut) % (len(base) + 1)
	q := append(slices.Clone(base[:n]), make([]int, int(ext%8))...)
	for i := n; i < len(q); i++ {
		q[i] = int(ext>>3)%4 + i%3 // a few distinct tokens, repeating
	}
	if len(p.known) < 64 {
		p.known = append(p.known, q)
	}
	return q
}

// indexed is a session's previous prompt and fork depth, as a model of
// the prefix index holds them.
type indexed struct {
	prompt []int
	fork   int
}

// expectMatch is the index's contract written plainly: at the deepest
// block depth (beyond skip) where any session matches, either the sessions
// whose whole previous prompt ends in that block and is a strict prefix of
// q (the longest wins), or else the sessions anchored at that depth (slack
// full blocks before their last one, beyond their fork depth, which must
// not be 0, and skip)
// whose blocks q holds up to it (the one q follows furthest wins). It
// returns the session, the tokens q shares with its previous prompt, and
// false when none matches or several match equally well.
func expectMatch[K comparable](recorded map[K]indexed, q []int, blockSize, skip, slack int) (K, int, bool) {
	var none K
	for depth := len(q) / blockSize; depth >= 0 && depth > skip; depth-- {
		best, shared, count := none, -1, 0
		consider := func(k K, n int) {
			switch {
			case n > shared:
				best, shared, count = k, n, 1
			case n == shared:
				count++
			}
		}
		for k, e := range recorded {
			if p := e.prompt; len(p)/blockSize == depth && len(p) < len(q) && slices.Equal(p, q[:len(p)]) {
				consider(k, len(p))
			}
		}
		if count == 0 && depth > 0 {
			for k, e := range recorded {
				full := len(e.prompt) / blockSize
				anchor := max(full-slack, e.fork+1, skip+1)
				if e.fork > 0 && anchor == depth && anchor <= full && commonBlocks(e.prompt, q, blockSize) >= depth {
					consider(k, min(commonBlocks(e.prompt, q, blockSize), full)*blockSize)
				}
			}
		}
		if count > 0 {
			return best, shared, count == 1
		}
	}
	return none, 0, false
}

// commonBlocks counts the leading full blocks a and b share.
func commonBlocks(a, b []int, blockSize int) int {
	n := 0
	for (n+1)*blockSize <= min(len(a), len(b)) && slices.Equal(a[n*blockSize:(n+1)*blockSize], b[n*blockSize:(n+1)*blockSize]) {
		n++
	}
	return n
}

// FuzzPrefixIndex runs sequences of record, forget and match on a
// prefixIndex and checks every match against expectMatch, and the index's
// bookkeeping (per-endpoint tail lengths and session sets) against the
// sessions it holds, including sets of more than smallSet sessions.
func FuzzPrefixIndex(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 7, 0, 1, 0, 0, 7, 2, 0, 1, 9, 7}, uint8(1), uint8(0))
	f.Add([]byte{0, 0, 0, 0, 255, 2, 0, 0, 9, 200, 0, 1, 1, 3, 4, 1, 1, 0, 0, 0, 2, 0, 2, 9, 9}, uint8(3), uint8(1))
	same := []byte{0, 0, 0, 0, 6}
	for s := byte(1); s < 12; s++ {
		same = append(same, 0, s, 0, 255, 0) // eleven sessions with one prompt
	}
	f.Add(append(same, 2, 0, 0, 255, 6, 1, 3, 0, 0, 0, 2, 0, 0, 255, 6), uint8(2), uint8(0))
	f.Fuzz(func(t *testing.T, ops []byte, blockSize, skip uint8) {
		bs, minDepth, slack := 1+int(blockSize%6), int(skip%3), int(skip/3)%4
		x := newPrefixIndex(bs, minDepth, slack)
		sessions := make([]*session, 12)
		for i := range sessions {
			sessions[i] = &session{key: fmt.Sprint("s", i)}
		}
		recorded := map[*session]indexed{}
		var ps prompts
		for len(ops) >= 5 {
			op, s, which, cut, ext := ops[0], sessions[int(ops[1])%len(sessions)], ops[2], ops[3], ops[4]
			ops = ops[5:]
			switch op % 3 {
			case 0:
				q := ps.next(which, cut, ext)
				s.forkDepth = int(cut % 3)
				x.record(s, q, tokenizer.BlockHashes(q, bs))
				recorded[s] = indexed{q, s.forkDepth}
			case 1:
				x.forget(s)
				delete(recorded, s)
			case 2:
				q := ps.next(which, cut, ext)
				want, wantShared, ok := expectMatch(recorded, q, bs, minDepth, slack)
				got, shared := x.match(q, tokenizer.BlockHashes(q, bs))
				switch {
				case !ok && got != nil:
					t.Fatalf("matched %s (%v) for %v: no session matches alone", got.key, recorded[got], q)
				case ok && (got != want || shared != wantShared):
					t.Fatalf("want %s (%v) sharing %d for %v, got %s sharing %d", want.key, recorded[want], wantShared, q, keyOf(got), shared)
				}
			}
			requireIndexConsistent(t, x, recorded)
		}
	})
}

func keyOf(s *session) string {
	if s == nil {
		return "<nil>"
	}
	return s.key
}

// requireIndexConsistent checks that the index holds exactly the recorded
// sessions: each in the set of its prompt, lengths counting them, no empty
// entries left behind.
func requireIndexConsistent(t *testing.T, x *prefixIndex, recorded map[*session]indexed) {
	t.Helper()
	inSets, counted := 0, 0
	for key, set := range x.tails {
		n := len(set.few) + len(set.many)
		if n == 0 || (len(set.few) > 0 && set.many != nil) {
			t.Fatalf("set for %+v: %d few, %d many", key, len(set.few), len(set.many))
		}
		inSets += n
	}
	anchored := 0
	for h, b := range x.blocks {
		if len(b.lengths) == 0 && b.anchored == nil {
			t.Fatalf("empty entry left for block %d", h)
		}
		if b.anchored != nil {
			n := 0
			b.anchored.each(func(s *session) {
				if s.anchor[0] != h {
					t.Fatalf("session %s anchored at %d, found under %d", s.key, s.anchor[0], h)
				}
				n++
			})
			if n == 0 {
				t.Fatalf("empty anchor set left for block %d", h)
			}
			anchored += n
		}
		ls := b.lengths
		for _, lc := range ls {
			if lc.count <= 0 || lc.n >= x.blockSize {
				t.Fatalf("lengths of %d: %+v", h, ls)
			}
			counted += lc.count
		}
	}
	if inSets != len(recorded) || counted != len(recorded) {
		t.Fatalf("%d sessions recorded, %d in sets, %d counted", len(recorded), inSets, counted)
	}
	for s, e := range recorded {
		if !s.indexed || s.promptLen != len(e.prompt) {
			t.Fatalf("session %s: indexed %t, prompt %d, want %d", s.key, s.indexed, s.promptLen, len(e.prompt))
		}
		if len(s.anchor) > 0 {
			anchored--
		}
	}
	if anchored != 0 {
		t.Fatalf("%d anchors more than the recorded sessions have", anchored)
	}
}

// FuzzConversationRouting drives the conversation policy through
// Router.Route with and without session keys, a small session table (LRU
// eviction) and idle expiry, and checks each decision against a model: a
// keyed request stays on its session, a request without a key continues
// the live session expectMatch names (so a matched session's previous
// prompt really is a prefix of the request, but for its slack) or gets a
// new minted key, a new key whose prompt continues a live session forks
// it, a new session's fork depth is what earlier prompts shared with its
// first one, the table never exceeds max_sessions, and every lease is
// refunded.
func FuzzConversationRouting(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 9, 1, 0, 0, 255, 9, 0, 0, 1, 255, 9}, uint8(0), uint8(2))
	f.Add([]byte{1, 1, 0, 0, 200, 1, 2, 0, 0, 100, 0, 0, 0, 255, 30, 1, 1, 1, 255, 7, 2, 0, 0, 0, 0, 0, 0, 1, 255, 7}, uint8(1), uint8(1))
	f.Fuzz(func(t *testing.T, ops []byte, skip, maxSessions uint8) {
		pool := fleet(2, 2)
		r, clk := convRouter(t, pool, func(c *Config) {
			c.HashSkipCount = int(skip % 3)
			c.ContinuationSlackBlocks = int(skip/3) % 4
			c.MaxSessions = 1 + int(maxSessions%5)
		})
		cfg := r.cfg
		live := map[string]indexed{} // session key -> previous prompt
		// seen holds the blocks of every prompt routed. It is a block table
		// like the router's, so that a block another one overwrote in its
		// slot (the table forgets, by design) is forgotten by the model too.
		seen := newBlockTable(blockTableSlots(cfg.MaxSessions))
		const anyone, newcomer = 1, ^uint64(0)
		var lru []string // most recently used last
		touch := func(key string) {
			lru = append(slices.DeleteFunc(lru, func(k string) bool { return k == key }), key)
		}
		var ps prompts
		for len(ops) >= 5 {
			op, keyByte, which, cut, ext := ops[0], ops[1], ops[2], ops[3], ops[4]
			ops = ops[5:]
			if op%4 == 3 { // everything idles out
				clk.advance(cfg.SessionTTL + time.Second)
				clear(live)
				lru = nil
				continue
			}
			q := ps.next(which, cut, ext)
			key := ""
			if op%4 == 1 {
				key = fmt.Sprint("k", keyByte%4)
			}
			want, _, matched := expectMatch(live, q, cfg.TokensPerBlock, cfg.HashSkipCount, cfg.ContinuationSlackBlocks)
			_, existed := live[key]
			next := indexed{prompt: q, fork: live[key].fork}
			switch {
			case existed:
			case matched:
				next.fork = live[want].fork
			default:
				next.fork = seen.sharedDepth(tokenizer.BlockHashes(q, cfg.TokensPerBlock), newcomer)
			}
			seen.record(tokenizer.BlockHashes(q, cfg.TokensPerBlock), anyone)

			p, err := r.Route(&Request{SessionKey: key, RequestID: "r", Tokens: q,
				Hashes: tokenizer.BlockHashes(q, cfg.TokensPerBlock), MaxTokens: 4})
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case key != "" && (p.Session != key || p.Minted || (existed && p.Decision != DecisionSticky)):
				t.Fatalf("key %s (existed %t): session %s, minted %t, decision %s", key, existed, p.Session, p.Minted, p.Decision)
			case key != "" && !existed && matched != (p.Decision == DecisionFork):
				t.Fatalf("new key %s, prompt %v: continues %s (%t), decision %s", key, q, want, matched, p.Decision)
			case key == "" && matched && (p.Session != want || p.Minted):
				t.Fatalf("prompt %v: want %s (%v), got %s (minted %t)", q, want, live[want], p.Session, p.Minted)
			case key == "" && !matched && !p.Minted:
				t.Fatalf("prompt %v continued %s (%v) though no unique live session's prompt is a prefix", q, p.Session, live[p.Session])
			}
			if _, ok := live[p.Session]; !ok && len(live) >= cfg.MaxSessions {
				delete(live, lru[0]) // the least recently used goes
				lru = lru[1:]
			}
			live[p.Session] = next
			touch(p.Session)
			if op&16 != 0 { // the context phase's end told apart from the request's
				p.ContextDone(op&4 != 0, int(cut)-1)
			}
			p.Release()
			p.Done(Outcome{CtxRan: op&4 != 0, GenRan: op&8 != 0, OutputTokens: int(ext), ReportedCached: -1})
			if n := r.Sessions(); n != len(live) {
				t.Fatalf("%d sessions, model has %d", n, len(live))
			}
		}
		for _, ep := range pool.All() {
			require.Zero(t, ep.Load(), ep.ID)
			require.Zero(t, ep.InFlight(), ep.ID)
		}
	})
}
