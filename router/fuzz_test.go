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

// expectMatch is the index's contract written plainly: among the sessions
// whose whole previous prompt is a strict prefix of q and covers more than
// skip full blocks, the one with the longest; nil when none, or when
// several share that longest prompt.
func expectMatch[K comparable](recorded map[K][]int, q []int, blockSize, skip int) (K, bool) {
	var best K
	bestLen, count := -1, 0
	for k, p := range recorded {
		if len(p) >= len(q) || len(p)/blockSize <= skip || !slices.Equal(p, q[:len(p)]) {
			continue
		}
		switch {
		case len(p) > bestLen:
			best, bestLen, count = k, len(p), 1
		case len(p) == bestLen:
			count++
		}
	}
	return best, count == 1
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
		bs, minDepth := 1+int(blockSize%6), int(skip%3)
		x := newPrefixIndex(bs, minDepth)
		sessions := make([]*session, 12)
		for i := range sessions {
			sessions[i] = &session{key: fmt.Sprint("s", i)}
		}
		recorded := map[*session][]int{}
		var ps prompts
		for len(ops) >= 5 {
			op, s, which, cut, ext := ops[0], sessions[int(ops[1])%len(sessions)], ops[2], ops[3], ops[4]
			ops = ops[5:]
			switch op % 3 {
			case 0:
				q := ps.next(which, cut, ext)
				x.record(s, q, tokenizer.BlockHashes(q, bs))
				recorded[s] = q
			case 1:
				x.forget(s)
				delete(recorded, s)
			case 2:
				q := ps.next(which, cut, ext)
				want, ok := expectMatch(recorded, q, bs, minDepth)
				got := x.match(q, tokenizer.BlockHashes(q, bs))
				switch {
				case !ok && got != nil:
					t.Fatalf("matched %s (%v) for %v: no unique recorded prompt is a prefix", got.key, recorded[got], q)
				case ok && got != want:
					t.Fatalf("want %s (%v) for %v, got %s", want.key, recorded[want], q, keyOf(got))
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
func requireIndexConsistent(t *testing.T, x *prefixIndex, recorded map[*session][]int) {
	t.Helper()
	inSets, counted := 0, 0
	for key, set := range x.tails {
		n := len(set.few) + len(set.many)
		if n == 0 || (len(set.few) > 0 && set.many != nil) {
			t.Fatalf("set for %+v: %d few, %d many", key, len(set.few), len(set.many))
		}
		inSets += n
	}
	for end, ls := range x.lengths {
		if len(ls) == 0 {
			t.Fatalf("empty lengths left for %d", end)
		}
		for _, lc := range ls {
			if lc.count <= 0 || lc.n >= x.blockSize {
				t.Fatalf("lengths of %d: %+v", end, ls)
			}
			counted += lc.count
		}
	}
	if inSets != len(recorded) || counted != len(recorded) {
		t.Fatalf("%d sessions recorded, %d in sets, %d counted", len(recorded), inSets, counted)
	}
	for s, p := range recorded {
		if !s.indexed || s.promptLen != len(p) {
			t.Fatalf("session %s: indexed %t, prompt %d, want %d", s.key, s.indexed, s.promptLen, len(p))
		}
	}
}

// FuzzConversationRouting drives the conversation policy through
// Router.Route with and without session keys, a small session table (LRU
// eviction) and idle expiry, and checks each decision against a model: a
// keyed request stays on its session, a request without a key continues
// the live session expectMatch names (so a matched session's previous
// prompt really is a prefix of the request) or gets a new minted key, the
// table never exceeds max_sessions, and every lease is refunded.
func FuzzConversationRouting(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 9, 1, 0, 0, 255, 9, 0, 0, 1, 255, 9}, uint8(0), uint8(2))
	f.Add([]byte{1, 1, 0, 0, 200, 1, 2, 0, 0, 100, 0, 0, 0, 255, 30, 1, 1, 1, 255, 7, 2, 0, 0, 0, 0, 0, 0, 1, 255, 7}, uint8(1), uint8(1))
	f.Fuzz(func(t *testing.T, ops []byte, skip, maxSessions uint8) {
		pool := fleet(2, 2)
		r, clk := convRouter(t, pool, func(c *Config) {
			c.HashSkipCount = int(skip % 3)
			c.MaxSessions = 1 + int(maxSessions%5)
		})
		cfg := r.cfg
		live := map[string][]int{} // session key -> previous prompt
		var lru []string           // most recently used last
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
			want, matched := expectMatch(live, q, cfg.TokensPerBlock, cfg.HashSkipCount)
			_, existed := live[key]

			p, err := r.Route(&Request{SessionKey: key, RequestID: "r", Tokens: q,
				Hashes: tokenizer.BlockHashes(q, cfg.TokensPerBlock), MaxTokens: 4})
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case key != "" && (p.Session != key || p.Minted || (existed && p.Decision != DecisionSticky)):
				t.Fatalf("key %s (existed %t): session %s, minted %t, decision %s", key, existed, p.Session, p.Minted, p.Decision)
			case key == "" && matched && (p.Session != want || p.Minted):
				t.Fatalf("prompt %v: want %s (%v), got %s (minted %t)", q, want, live[want], p.Session, p.Minted)
			case key == "" && !matched && !p.Minted:
				t.Fatalf("prompt %v continued %s (%v) though no unique live session's prompt is a prefix", q, p.Session, live[p.Session])
			}
			if _, ok := live[p.Session]; !ok && len(live) >= cfg.MaxSessions {
				delete(live, lru[0]) // the least recently used goes
				lru = lru[1:]
			}
			live[p.Session] = q
			touch(p.Session)
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
