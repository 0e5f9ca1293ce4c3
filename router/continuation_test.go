package router

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/tokenizer"
)

// cat joins token slices into a new one.
func cat(parts ...[]int) []int {
	var out []int
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestContinuationMayLeaveOutTheEndOfThePreviousPrompt(t *testing.T) {
	system := tokens(10_000, 40) // 10 blocks of 4
	for _, tc := range []struct {
		name    string
		kept    int // tokens of the previous prompt (53: 13 full blocks and 1) the new one repeats
		want    string
		wantHit int
	}{
		{"the whole previous prompt", 53, DecisionImplicit, 53},
		{"all its full blocks, a re-rendered partial one", 52, DecisionImplicit, 52},
		{"all but one full block (slack 1)", 49, DecisionImplicit, 48},
		{"two full blocks short: a branch", 44, DecisionBranch, 44},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := convRouter(t, fleet(3, 3), nil)
			route(t, r, req("", cat(system, tokens(2000, 9)))) // another conversation with the system prompt
			prev := cat(system, tokens(1000, 13))
			first := route(t, r, req("", prev))
			require.Equal(t, DecisionNew, first.Decision)
			next := route(t, r, req("", cat(prev[:tc.kept], tokens(5000, 30))))
			require.Equal(t, tc.want, next.Decision)
			require.Equal(t, tc.want == DecisionImplicit, first.Session == next.Session, "a branch is a new session")
			require.Equal(t, legs(first), legs(next))
			require.Equal(t, tc.wantHit/4*4, next.CtxCached, "the pinned worker holds the shared full blocks")
		})
	}
}

// With a large slack, a conversation whose own first message is shorter
// than the slack would be "continued" by any other conversation with its
// system prompt: what it shared with earlier prompts (its fork depth) is
// not its own, and a continuation must reach beyond it.
func TestSharedSystemPromptIsNotAContinuationWithSlack(t *testing.T) {
	r, _ := convRouter(t, fleet(3, 3), func(c *Config) { c.ContinuationSlackBlocks = 8 })
	system := tokens(10_000, 40)
	route(t, r, req("", cat(system, tokens(2000, 60))))      // the first conversation with the system prompt
	a := route(t, r, req("", cat(system, tokens(1000, 13)))) // its own part: 3 blocks and 1, less than the slack
	c := route(t, r, req("", cat(system, tokens(3000, 30))))
	require.Equal(t, DecisionNew, c.Decision, "sharing only the system prompt is not a continuation")
	require.NotEqual(t, a.Session, c.Session)

	cont := route(t, r, req("", cat(system, tokens(1000, 12), tokens(4000, 40)))) // a's full blocks, then new text
	require.Equal(t, DecisionImplicit, cont.Decision)
	require.Equal(t, a.Session, cont.Session)
}

func TestNewIDContinuingAKnownSessionForksIt(t *testing.T) {
	r, _ := convRouter(t, fleet(3, 3), nil)
	system := tokens(10_000, 40)
	route(t, r, req("x", cat(system, tokens(5000, 40)))) // another conversation with the system prompt
	prev := cat(system, tokens(0, 40))
	a := route(t, r, req("a", prev))
	b := route(t, r, req("b", cat(prev[:78], tokens(900, 20))))
	require.Equal(t, DecisionFork, b.Decision)
	require.Equal(t, "b", b.Session)
	require.False(t, b.Minted)
	require.Equal(t, legs(a), legs(b), "the new session starts on the pair that holds the prefix")
	require.Equal(t, 76, b.CtxCached, "the shared full blocks")
	require.Equal(t, 3, r.Sessions())

	require.Equal(t, 76, b.GenCached, "the gen worker too holds only the shared part")
	again := route(t, r, req("a", cat(prev, tokens(0, 20))))
	require.Equal(t, DecisionSticky, again.Decision, "the forked session keeps its own state")
	require.Equal(t, 80, again.CtxCached)

	other := route(t, r, req("c", cat(system, tokens(7000, 40))))
	require.Equal(t, DecisionNew, other.Decision, "sharing the system prompt only")
}

// The first conversation seen with a system prompt has nothing to tell
// the prompt from its own first message: only its whole previous prompt
// continues it, so a new conversation whose first message starts alike is
// not taken for its continuation.
func TestTheFirstConversationOfAPromptNeedsItsWholePrompt(t *testing.T) {
	r, _ := convRouter(t, fleet(3, 3), func(c *Config) { c.ContinuationSlackBlocks = 4 })
	system := tokens(10_000, 40)
	first := route(t, r, req("", cat(system, tokens(1000, 14))))
	sibling := route(t, r, req("", cat(system, tokens(1000, 12), tokens(2000, 14)))) // same words, then others
	require.Equal(t, DecisionNew, sibling.Decision)
	require.NotEqual(t, first.Session, sibling.Session)
	cont := route(t, r, req("", cat(system, tokens(1000, 14), tokens(3000, 20))))
	require.Equal(t, DecisionImplicit, cont.Decision)
	require.Equal(t, first.Session, cont.Session)
}

// The router knows a worker's cache size from kv_blocks_per_worker, else
// from what the worker reported; a set kv_blocks_per_worker wins.
func TestTurnoverReplacesTheCtxLegOfAnEvictedSession(t *testing.T) {
	for name, size := range map[string]struct {
		configBlocks int
		reported     int64
	}{
		"configured":                 {configBlocks: 10},
		"reported":                   {reported: 40},
		"configured over a reported": {configBlocks: 10, reported: 4000},
	} {
		t.Run(name, func(t *testing.T) {
			p := fleet(2, 2)
			reportCacheSizes(p, size.reported)
			r, _ := convRouter(t, p, func(c *Config) { c.KVBlocksPerWorker = size.configBlocks }) // 40 tokens of cache
			testTurnover(t, r, p)
		})
	}
}

// reportCacheSizes makes every worker of p report a KV cache of tokens.
func reportCacheSizes(p *Pool, tokens int64) {
	var ms []Member
	for _, ep := range p.All() {
		ms = append(ms, Member{ID: ep.ID, URL: ep.URL, Role: ep.Role, Healthy: ep.Healthy(), KVCacheTokens: tokens})
	}
	p.Sync(ms)
}

func testTurnover(t *testing.T, r *Router, p *Pool) {
	a := route(t, r, req("a", tokens(0, 20)))
	home := a.Ctx.Endpoint()
	other := p.Get("ctx-0")
	if home == other {
		other = p.Get("ctx-1")
	}
	// Others' prompts computed on a's worker: while the other worker is busy,
	// least-load sends new sessions there.
	computeOnHome := func(key string) {
		hog := other.Acquire(1_000_000)
		defer hog.Release()
		pr := route(t, r, req(key, tokens(1000*len(key), 20)))
		require.Equal(t, home, pr.Ctx.Endpoint())
	}
	computeOnHome("b")
	computeOnHome("cc")
	stay := route(t, r, req("a", tokens(0, 24)))
	require.Equal(t, home, stay.Ctx.Endpoint(), "40 tokens computed since: within the cache")
	require.Equal(t, 20, stay.CtxCached)
	require.Zero(t, breakCount(r, reasonTurnover))

	computeOnHome("ddd")
	computeOnHome("eeee")
	computeOnHome("fffff") // 60 tokens since a's last turn: more than the cache holds
	hog := home.Acquire(100)
	moved := route(t, r, req("a", tokens(0, 28)))
	hog.Release()
	require.Equal(t, uint64(1), breakCount(r, reasonTurnover))
	require.Equal(t, other, moved.Ctx.Endpoint(), "placed by load: the prefix is presumed evicted")
	require.Zero(t, moved.CtxCached)
	require.Equal(t, DecisionRepin, moved.Decision)
	next := route(t, r, req("a", tokens(0, 30)))
	require.Equal(t, other, next.Ctx.Endpoint(), "and pinned there")
	require.Equal(t, DecisionSticky, next.Decision)
}

// A session placed afresh after a turnover that lands on the same worker is
// the sticky turn it was: no break, no re-pin.
func TestTurnoverOntoTheSameWorkerIsNoBreak(t *testing.T) {
	p := fleet(1, 2)
	r, _ := convRouter(t, p, func(c *Config) { c.KVBlocksPerWorker = 2 }) // 8 tokens of cache
	route(t, r, req("a", tokens(0, 20)))
	route(t, r, req("b", tokens(1000, 20)))
	again := route(t, r, req("a", tokens(0, 24)))
	require.Equal(t, DecisionSticky, again.Decision)
	require.Zero(t, again.CtxCached, "the prefix is presumed evicted")
	require.Zero(t, breakCount(r, reasonTurnover))
}

func TestSpillCountsTheRecomputedPrefix(t *testing.T) {
	for _, tc := range []struct {
		backlog int64
		spill   bool
	}{
		{60, false}, // 60+4 > 40 would spill if the 36 recomputed tokens were free
		{100, true}, // 100+4 > 40+36
	} {
		t.Run(fmt.Sprint(tc.backlog), func(t *testing.T) {
			r, _ := convRouter(t, fleet(2, 2), nil)
			first := route(t, r, req("a", tokens(0, 36)))
			hog := first.Ctx.Endpoint().Acquire(tc.backlog)
			defer hog.Release()
			next := route(t, r, req("a", tokens(0, 40)))
			require.Equal(t, tc.spill, next.Decision == "spill:ctx-overload", next.Decision)
		})
	}
}

func TestBlockTableSharedDepth(t *testing.T) {
	bt := newBlockTable(1 << 10)
	system := tokenizer.BlockHashes(tokens(0, 40), 4)
	a := tokenizer.BlockHashes(cat(tokens(0, 40), tokens(100, 12)), 4)
	b := tokenizer.BlockHashes(cat(tokens(0, 40), tokens(200, 12)), 4)
	require.Zero(t, bt.sharedDepth(a, 1))
	bt.record(a, 1)
	require.Zero(t, bt.sharedDepth(a, 1), "a session's own blocks are not shared")
	require.Equal(t, 13, bt.sharedDepth(a, 2))
	require.Equal(t, len(system), bt.sharedDepth(b, 2), "b shares the system prompt with a")
	bt.record(b, 2)
	require.Equal(t, len(system), bt.sharedDepth(a, 1), "and a shares it with b")
	require.Zero(t, bt.sharedDepth(tokenizer.BlockHashes(tokens(500, 40), 4), 3))
}

// A new conversation that shares more than the system prompt with a known
// one (another question over the same document, an edited turn) but does
// not continue it starts on that conversation's pair, where the shared part
// is cached: with or without an id of its own.
func TestNewSessionSharingAnotherOnesOwnContentBranchesOntoItsPair(t *testing.T) {
	system, doc := tokens(10_000, 40), tokens(20_000, 40)
	for _, key := range []string{"", "b"} {
		t.Run("key="+key, func(t *testing.T) {
			r, _ := convRouter(t, fleet(3, 3), nil)
			route(t, r, req("", cat(system, tokens(2000, 9)))) // the first conversation with the system prompt
			a := route(t, r, req("a", cat(system, doc, tokens(3000, 12))))
			b := route(t, r, req(key, cat(system, doc[:30], tokens(4000, 20))))
			require.Equal(t, DecisionBranch, b.Decision)
			require.NotEqual(t, a.Session, b.Session, "a branch is a session of its own")
			require.Equal(t, key == "", b.Minted)
			require.Equal(t, legs(a), legs(b))
			require.Equal(t, 68, b.CtxCached, "the system prompt and the shared full blocks of the document")
			require.Equal(t, 68, b.GenCached)

			again := route(t, r, req("a", cat(system, doc, tokens(3000, 16))))
			require.Equal(t, DecisionSticky, again.Decision, "a keeps its own state")
			require.Equal(t, 92, again.CtxCached)
		})
	}
}

// What a branch saves is weighed against the backlog of the worker that
// holds it, by the rule a sticky turn spills by; a session whose worker has
// turned over, or that is gone, is no reason to go there.
func TestBranchOnlyWhereTheSharedPrefixIsWorthIt(t *testing.T) {
	system, doc := tokens(10_000, 40), tokens(20_000, 40)
	setup := func(t *testing.T, mutate func(*Config)) (*Router, *Pair) {
		r, _ := convRouter(t, fleet(2, 2), mutate)
		route(t, r, req("", cat(system, tokens(2000, 9))))
		return r, route(t, r, req("a", cat(system, doc, tokens(3000, 12))))
	}
	branchOf := func(r *Router) *Pair { return route(t, r, req("", cat(system, doc[:30], tokens(4000, 20)))) }

	t.Run("backlog", func(t *testing.T) {
		for _, tc := range []struct {
			backlog int64
			want    string
		}{
			{100, DecisionBranch}, // 100 + 22 uncached <= 90 prompt + 68 recomputed
			{200, DecisionNew},
		} {
			r, a := setup(t, nil)
			hog := a.Ctx.Endpoint().Acquire(tc.backlog)
			b := branchOf(r)
			hog.Release()
			require.Equal(t, tc.want, b.Decision, "backlog %d", tc.backlog)
			require.Equal(t, tc.want == DecisionBranch, a.Ctx.Endpoint() == b.Ctx.Endpoint())
		}
	})
	t.Run("turned over", func(t *testing.T) {
		r, a := setup(t, func(c *Config) { c.KVBlocksPerWorker = 20 }) // 80 tokens
		other := otherThan(r.Pool().Available(disagg.RoleContext), a.Ctx.Endpoint())[0]
		hog := other.Acquire(1_000_000) // so that 90 other tokens are computed on a's worker
		filler := route(t, r, req("y", tokens(60_000, 90)))
		hog.Release()
		require.Equal(t, a.Ctx.Endpoint(), filler.Ctx.Endpoint())
		require.Equal(t, DecisionNew, branchOf(r).Decision, "a's prefix is presumed evicted")
	})
	t.Run("gone", func(t *testing.T) {
		r, _ := setup(t, func(c *Config) { c.MaxSessions = 2 })
		route(t, r, req("z", tokens(70_000, 20))) // evicts the least recently used: the first conversation
		route(t, r, req("w", tokens(80_000, 20))) // and then a
		require.Equal(t, DecisionNew, branchOf(r).Decision)
	})
}

func TestBlockTableWriter(t *testing.T) {
	bt := newBlockTable(1 << 10)
	a := tokenizer.BlockHashes(tokens(0, 40), 4)
	bt.record(a, 1)
	bt.record(a[:4], 2)
	require.Equal(t, uint64(2), bt.writer(a, 4), "the last session through a block")
	require.Equal(t, uint64(1), bt.writer(a, 10))
	require.Zero(t, bt.writer(a, 0))
	require.Zero(t, bt.writer(a, 11))
	require.Zero(t, bt.writer(tokenizer.BlockHashes(tokens(500, 8), 4), 2), "never routed")
}

// A sticky turn weighs how much of its prefix its ctx worker is expected to
// hold still: LRU keeps it while the tokens touched there since leave room
// for it.
func TestSpillWeighsThePrefixTheWorkerMayHaveEvicted(t *testing.T) {
	for _, tc := range []struct {
		name          string
		computedSince int
		spill         bool
	}{
		{"nothing since", 0, false},       // 60 + 4 uncached <= 44 + 40 recomputed
		{"half a cache since", 50, false}, // 50 more leave room for a's 40: all held still
		{"70 tokens since", 70, true},     // 30 of 40 held, in full blocks 28: 60 + 16 > 44 + 28
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := fleet(2, 2)
			r, _ := convRouter(t, p, func(c *Config) { c.KVBlocksPerWorker = 25 }) // 100 tokens
			home := route(t, r, req("a", tokens(0, 40))).Ctx.Endpoint()
			busy := otherThan(p.Available(disagg.RoleContext), home)[0].Acquire(1_000_000)
			if tc.computedSince > 0 {
				require.Equal(t, home, route(t, r, req("b", tokens(5000, tc.computedSince))).Ctx.Endpoint())
			}
			busy.Release()
			hog := home.Acquire(60)
			next := route(t, r, req("a", tokens(0, 44)))
			hog.Release()
			require.Equal(t, tc.spill, next.Decision == "spill:ctx-overload", next.Decision)
			require.Equal(t, tc.spill, next.Ctx.Endpoint() != home)
		})
	}
}

// A sticky turn charges its ctx worker the tokens it is expected to compute
// there: the prompt less what the worker is expected to hold still. It
// still reports all the worker held. The cache's clock moves when a context
// phase ends, and counts the cached tokens other requests touched at half.
func TestStickyTurnChargesWhatTheWorkerIsExpectedToCompute(t *testing.T) {
	p := fleet(2, 2)
	r, _ := convRouter(t, p, func(c *Config) { c.KVBlocksPerWorker = 25 }) // 100 tokens
	home := route(t, r, req("a", tokens(0, 40))).Ctx.Endpoint()
	busy := otherThan(p.Available(disagg.RoleContext), home)[0].Acquire(1_000_000)
	defer busy.Release()
	c, err := r.Route(req("c", cat(tokens(0, 20), tokens(9000, 10)))) // a new conversation on home
	require.NoError(t, err)
	require.Equal(t, home, c.Ctx.Endpoint())
	c.ContextDone(true, 20) // 10 computed, 20 cached: 20 touched; the request is still in flight
	require.Equal(t, home, route(t, r, req("b", tokens(5000, 50))).Ctx.Endpoint())

	next, err := r.Route(req("a", tokens(0, 44)))
	require.NoError(t, err)
	require.Equal(t, DecisionSticky, next.Decision)
	require.Equal(t, 40, next.CtxCached)
	require.Equal(t, int64(44-28), next.Ctx.Tokens(), "70 touched since: 30 of the 40 held still, 28 in full blocks")
	next.ContextDone(true, 40)
	again, err := r.Route(req("a", tokens(0, 48)))
	require.NoError(t, err)
	require.Equal(t, int64(48-44), again.Ctx.Tokens(), "nothing touched since its last context phase, though it has not ended")
	again.Release()
	again.Done(Outcome{CtxRan: true, ReportedCached: 44})
	next.Release()
	next.Done(Outcome{CtxRan: true, GenRan: true, ReportedCached: 40})
	c.Release()
	c.Done(Outcome{CtxRan: true, ReportedCached: 20})
	require.Equal(t, int64(40+20+50+4+20+4+22), home.CacheClock(), "each context phase booked once")
}

// Every later branch off the same document starts where it is cached, not
// only the first: a branch shares with the session it started from only
// that session's common prefix.
func TestBranchesOfBranchesStayWithTheDocument(t *testing.T) {
	r, _ := convRouter(t, fleet(3, 3), nil)
	system, doc := tokens(10_000, 40), tokens(20_000, 40)
	route(t, r, req("", cat(system, tokens(2000, 9))))
	a := route(t, r, req("", cat(system, doc, tokens(3000, 12))))
	for i := 1; i <= 3; i++ {
		b := route(t, r, req("", cat(system, doc, tokens(3000+1000*i, 12))))
		require.Equal(t, DecisionBranch, b.Decision, "question %d", i)
		require.Equal(t, legs(a), legs(b))
		require.Equal(t, 80, b.CtxCached)
	}
}

// A branch goes only to a ctx worker expected to hold the shared part, and
// takes the gen worker along only when it is available.
func TestBranchNeedsTheSharedPartCachedAndAnAvailableGen(t *testing.T) {
	system, doc := tokens(10_000, 40), tokens(20_000, 40)
	t.Run("parent still prefilling", func(t *testing.T) {
		r, _ := convRouter(t, fleet(3, 3), nil)
		route(t, r, req("", cat(system, tokens(2000, 9))))
		running, err := r.Route(req("a", cat(system, doc, tokens(3000, 12)))) // not done: nothing cached yet
		require.NoError(t, err)
		running.Release() // no backlog either: only the missing cache keeps the branch away
		defer running.Done(Outcome{ReportedCached: -1})
		require.Equal(t, DecisionNew, route(t, r, req("", cat(system, doc[:30], tokens(4000, 20)))).Decision)
	})
	t.Run("gen excluded", func(t *testing.T) {
		r, _ := convRouter(t, fleet(3, 3), nil)
		route(t, r, req("", cat(system, tokens(2000, 9))))
		a := route(t, r, req("a", cat(system, doc, tokens(3000, 12))))
		rq := req("", cat(system, doc[:30], tokens(4000, 20)))
		rq.ExcludeGen = map[string]bool{a.Gen.Endpoint().ID: true}
		b := route(t, r, rq)
		require.Equal(t, DecisionBranch, b.Decision)
		require.Equal(t, a.Ctx.Endpoint(), b.Ctx.Endpoint())
		require.NotEqual(t, a.Gen.Endpoint(), b.Gen.Endpoint())
		require.Zero(t, b.GenCached)
		require.Zero(t, breakCount(r, reasonUnavailable), "a gen worker a branch never had is no broken affinity")
	})
}
