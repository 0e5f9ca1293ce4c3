package router

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/tokenizer"
	"github.com/stretchr/testify/require"
)

// clock is a settable fake clock.
type clock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func convRouter(t testing.TB, p *Pool, mutate func(*Config)) (*Router, *clock) {
	cfg := Defaults()
	cfg.TokensPerBlock = 4
	if mutate != nil {
		mutate(&cfg)
	}
	clk := &clock{t: time.Unix(1000, 0)}
	r, err := New(p, cfg, clk.now)
	require.NoError(t, err)
	return r, clk
}

// tokens returns n distinct tokens starting at start.
func tokens(start, n int) []int { return seq(n, start) }

func seq(n, start int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = start + i
	}
	return out
}

func req(key string, toks []int) *Request {
	return &Request{SessionKey: key, Tokens: toks, Hashes: tokenizer.BlockHashes(toks, 4), MaxTokens: 8}
}

func route(t testing.TB, r *Router, rq *Request) *Pair {
	t.Helper()
	p, err := r.Route(rq)
	require.NoError(t, err)
	p.Release()
	p.Done(Outcome{CtxRan: true, GenRan: true, OutputTokens: 8, ReportedCached: -1})
	return p
}

func legs(p *Pair) string { return p.Ctx.Endpoint().ID + "/" + p.Gen.Endpoint().ID }

func TestConversationPinsSessionsToPairs(t *testing.T) {
	r, _ := convRouter(t, fleet(3, 3), nil)
	first := route(t, r, req("a", tokens(0, 20)))
	require.Equal(t, DecisionNew, first.Decision)
	for i := 0; i < 10; i++ {
		p := route(t, r, req("a", tokens(0, 20+i)))
		require.Equal(t, DecisionSticky, p.Decision)
		require.Equal(t, legs(first), legs(p))
	}
}

func TestConversationPlacesNewSessionsEvenly(t *testing.T) {
	for _, n := range []int{2, 3} { // 2 pins the regression of one counter shared by both legs
		r, _ := convRouter(t, fleet(n, n), nil)
		for i := 0; i < 6*n; i++ {
			route(t, r, req(fmt.Sprint("s", i), tokens(i*100, 10)))
		}
		for w, count := range r.SessionsPerWorker() {
			require.Equal(t, 6, count, "worker %s of %d: ties rotate", w, n)
		}
		require.Len(t, r.SessionsPerWorker(), 2*n)
	}
}

func TestConversationPlacesByTokenWeightedLoad(t *testing.T) {
	p := fleet(2, 2)
	r, _ := convRouter(t, p, nil)
	busy := p.Get("ctx-0").Acquire(5000)
	defer busy.Release()
	for i := 0; i < 5; i++ {
		require.Equal(t, "ctx-1", route(t, r, req(fmt.Sprint("n", i), tokens(i*50, 10))).Ctx.Endpoint().ID)
	}
}

func TestConversationRepinsOnlyTheUnavailableLeg(t *testing.T) {
	p := fleet(2, 2)
	r, _ := convRouter(t, p, nil)
	first := route(t, r, req("a", tokens(0, 20)))
	ctxID, genID := first.Ctx.Endpoint().ID, first.Gen.Endpoint().ID
	p.Get(ctxID).healthy.Store(false)
	second := route(t, r, req("a", tokens(0, 24)))
	require.Equal(t, DecisionRepin, second.Decision)
	require.NotEqual(t, ctxID, second.Ctx.Endpoint().ID)
	require.Equal(t, genID, second.Gen.Endpoint().ID, "the gen leg keeps its cache")
	p.Get(ctxID).healthy.Store(true)
	third := route(t, r, req("a", tokens(0, 28)))
	require.Equal(t, DecisionSticky, third.Decision)
	require.Equal(t, second.Ctx.Endpoint().ID, third.Ctx.Endpoint().ID, "stays on the new pin")
}

func TestConversationWorkerRemovalMovesOnlyItsSessions(t *testing.T) {
	p := fleet(2, 2)
	r, _ := convRouter(t, p, nil)
	pins := map[string]string{}
	for i := 0; i < 8; i++ {
		pr := route(t, r, req(fmt.Sprint("s", i), tokens(i*100, 10)))
		pins[fmt.Sprint("s", i)] = legs(pr)
	}
	var ms []Member
	for _, ep := range p.All() {
		if ep.ID != "gen-1" {
			ms = append(ms, Member{ID: ep.ID, URL: ep.URL, Role: ep.Role, Healthy: true})
		}
	}
	p.Sync(ms)
	require.Equal(t, uint64(4), breakCount(r, reasonWorkerGone))
	for key, before := range pins {
		after := route(t, r, req(key, tokens(0, 12)))
		require.Equal(t, before[:5], legs(after)[:5], "ctx leg of %s kept", key)
		require.Equal(t, "gen-0", after.Gen.Endpoint().ID)
	}
}

func breakCount(r *Router, reason string) uint64 {
	for _, c := range r.Stats().Breaks() {
		if c.Reason == reason {
			return c.Value
		}
	}
	return 0
}

func TestConversationSessionTTLAndLRU(t *testing.T) {
	r, clk := convRouter(t, fleet(2, 2), func(c *Config) { c.MaxSessions = 2; c.SessionTTL = time.Minute })
	route(t, r, req("a", tokens(0, 10)))
	clk.advance(30 * time.Second)
	require.Equal(t, DecisionSticky, route(t, r, req("a", tokens(0, 12))).Decision, "within the TTL")
	clk.advance(2 * time.Minute)
	require.Equal(t, DecisionNew, route(t, r, req("a", tokens(0, 14))).Decision, "idle past the TTL")
	require.Equal(t, uint64(1), breakCount(r, reasonTTL))

	route(t, r, req("b", tokens(100, 10)))
	route(t, r, req("a", tokens(0, 16))) // a is now the most recent
	route(t, r, req("c", tokens(200, 10)))
	require.Equal(t, uint64(1), breakCount(r, reasonLRU), "b evicted by the bound")
	require.Equal(t, DecisionSticky, route(t, r, req("a", tokens(0, 18))).Decision)
	require.Equal(t, DecisionNew, route(t, r, req("b", tokens(100, 12))).Decision)
	require.Equal(t, 2, r.Sessions())
}

func TestConversationImplicitContinuation(t *testing.T) {
	system := tokens(10_000, 40) // 10 blocks shared by every conversation
	turn := func(user int, n int) []int { return tokens(user*1000, n) }
	cases := []struct {
		name     string
		newTurn  int // tokens of the new user turn
		wantKeep bool
	}{
		{"short new turn", 3, true},
		{"long new turn", 500, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := convRouter(t, fleet(3, 3), nil)
			prompt1 := append(append([]int{}, system...), turn(1, 13)...)
			first := route(t, r, req("", prompt1))
			require.True(t, first.Minted)
			require.Equal(t, DecisionNew, first.Decision)
			// Another conversation with the same system prompt exists.
			route(t, r, req("", append(append([]int{}, system...), turn(2, 13)...)))
			// Turn 2: earlier prompt + reply + new turn, no id.
			prompt2 := append(append(append([]int{}, prompt1...), turn(3, 7)...), turn(4, tc.newTurn)...)
			second := route(t, r, req("", prompt2))
			require.Equal(t, DecisionImplicit, second.Decision)
			require.Equal(t, first.Session, second.Session)
			require.Equal(t, legs(first), legs(second))
			require.False(t, second.Minted)
		})
	}
}

func TestConversationSharedSystemPromptDoesNotMatch(t *testing.T) {
	r, _ := convRouter(t, fleet(3, 3), nil)
	system := tokens(10_000, 40)
	a := route(t, r, req("", append(append([]int{}, system...), tokens(1000, 9)...)))
	c := route(t, r, req("", append(append([]int{}, system...), tokens(3000, 30)...)))
	require.Equal(t, DecisionNew, c.Decision, "sharing only the system prompt is not a continuation")
	require.NotEqual(t, a.Session, c.Session)

	// Two sessions whose whole first turn is identical: a third request that
	// extends it belongs to neither.
	same := append(append([]int{}, system...), tokens(5000, 8)...)
	x := route(t, r, req("x", same))
	y := route(t, r, req("y", same))
	d := route(t, r, req("", append(append([]int{}, same...), tokens(6000, 20)...)))
	require.Equal(t, DecisionBranch, d.Decision, "an exact prefix shared by several sessions continues neither")
	require.NotContains(t, []string{x.Session, y.Session}, d.Session)
	require.Equal(t, legs(y), legs(d), "placed where that prefix is cached")
}

func TestConversationHashSkipCount(t *testing.T) {
	r, _ := convRouter(t, fleet(2, 2), func(c *Config) { c.HashSkipCount = 3 })
	first := route(t, r, req("", tokens(0, 8))) // 2 full blocks: within the skipped prefix
	second := route(t, r, req("", tokens(0, 30)))
	require.Equal(t, DecisionNew, second.Decision)
	require.NotEqual(t, first.Session, second.Session)
	third := route(t, r, req("", tokens(0, 60))) // continues second (7 blocks > 3)
	require.Equal(t, DecisionImplicit, third.Decision)
	require.Equal(t, second.Session, third.Session)
}

func TestConversationSpillsFromOverloadedWorker(t *testing.T) {
	p := fleet(2, 2)
	r, _ := convRouter(t, p, func(c *Config) { c.SpillMarginTokens = 100 })
	first := route(t, r, req("a", tokens(0, 10)))
	pinned := first.Ctx.Endpoint()
	hog := pinned.Acquire(50) // a small backlog: staying is cheaper than recomputing elsewhere
	require.Equal(t, DecisionSticky, route(t, r, req("a", tokens(0, 12))).Decision)
	hog.Release()
	hog = pinned.Acquire(10_000)
	spilled := route(t, r, req("a", tokens(0, 12)))
	require.Equal(t, "spill:ctx-overload", spilled.Decision)
	require.NotEqual(t, pinned.ID, spilled.Ctx.Endpoint().ID)
	require.Equal(t, []Count{{"ctx-overload", 1}}, r.Stats().Spills())
	hog.Release()
	back := route(t, r, req("a", tokens(0, 14)))
	require.Equal(t, DecisionSticky, back.Decision)
	require.Equal(t, pinned.ID, back.Ctx.Endpoint().ID, "a spill leaves the pin in place")
}

func TestConversationGenLegSpillsOnOccupancy(t *testing.T) {
	p := fleet(2, 2)
	r, _ := convRouter(t, p, func(c *Config) { c.SpillMinTokens = 100 })
	first := route(t, r, req("a", tokens(0, 10)))
	hog := first.Gen.Endpoint().Acquire(10_000)
	defer hog.Release()
	spilled := route(t, r, req("a", tokens(0, 12)))
	require.Equal(t, "spill:gen-overload", spilled.Decision)
	require.Equal(t, first.Ctx.Endpoint().ID, spilled.Ctx.Endpoint().ID, "the ctx leg stays home")
}

// TestConversationLearnsOnlyPhasesThatRan pins review finding 2: a spilled
// or skipped phase must not make the router believe the pinned worker holds
// the prompt.
func TestConversationLearnsOnlyPhasesThatRan(t *testing.T) {
	p := fleet(2, 2)
	r, _ := convRouter(t, p, func(c *Config) { c.SpillMarginTokens = 0 })
	first, err := r.Route(req("a", tokens(0, 40)))
	require.NoError(t, err)
	first.Release()
	first.Done(Outcome{GenRan: true, OutputTokens: 5, ReportedCached: -1}) // no context phase (+local)
	second, err := r.Route(req("a", tokens(0, 60)))
	require.NoError(t, err)
	require.Zero(t, second.CtxCached, "the ctx worker never prefilled the last turn")
	require.Equal(t, 44, second.GenCached, "45 tokens held, 44 in full blocks of 4")
	second.Release()

	hog := second.Ctx.Endpoint().Acquire(10_000) // force a ctx spill
	spilled, err := r.Route(req("a", tokens(0, 80)))
	require.NoError(t, err)
	require.Equal(t, "spill:ctx-overload", spilled.Decision)
	spilled.Release()
	spilled.Done(Outcome{CtxRan: true, GenRan: true, OutputTokens: 5, ReportedCached: 0})
	hog.Release()
	home, err := r.Route(req("a", tokens(0, 90)))
	require.NoError(t, err)
	require.Zero(t, home.CtxCached, "the spill target prefilled, not the pinned worker")
	home.Release()
}

func TestConversationRetryKeepsTheSession(t *testing.T) {
	p := fleet(2, 2)
	r, _ := convRouter(t, p, nil)
	rq := req("", tokens(0, 40))
	first, err := r.Route(rq)
	require.NoError(t, err)
	first.Release()
	first.Done(Outcome{})
	rq.SessionKey = first.Session // what the orchestrator does before a retry
	rq.ExcludeCtx = map[string]bool{first.Ctx.Endpoint().ID: true}
	retry, err := r.Route(rq)
	require.NoError(t, err)
	retry.Release()
	require.Equal(t, first.Session, retry.Session)
	require.Equal(t, DecisionRepin, retry.Decision)
	require.Equal(t, first.Gen.Endpoint().ID, retry.Gen.Endpoint().ID)
	require.Equal(t, uint64(1), breakCount(r, reasonRetry))
	require.Equal(t, 1, r.Sessions())
}

func TestPoolSyncKeepsFirstOfRepeatedIDs(t *testing.T) {
	p := NewPool()
	p.Sync([]Member{{ID: "a", URL: "http://1", Role: disagg.RoleContext, Healthy: true}, {ID: "a", URL: "http://2", Role: disagg.RoleContext, Healthy: true}})
	require.Len(t, p.All(), 1)
	require.Equal(t, "http://1", p.Get("a").URL)
}

func TestConversationSpillingOff(t *testing.T) {
	p := fleet(2, 2)
	r, _ := convRouter(t, p, func(c *Config) { c.SpillLoadFactor = 0 })
	first := route(t, r, req("a", tokens(0, 10)))
	hog := first.Ctx.Endpoint().Acquire(1_000_000)
	defer hog.Release()
	require.Equal(t, DecisionSticky, route(t, r, req("a", tokens(0, 12))).Decision)
}

func TestConversationExpectsCachedTokensOnStickyTurns(t *testing.T) {
	r, _ := convRouter(t, fleet(2, 2), nil)
	first, err := r.Route(req("a", tokens(0, 40)))
	require.NoError(t, err)
	require.Zero(t, first.CtxCached)
	require.Equal(t, int64(40), first.Ctx.Tokens(), "a new session charges its whole prompt")
	first.Release()
	first.Done(Outcome{CtxRan: true, GenRan: true, OutputTokens: 10, ReportedCached: 0})
	second, err := r.Route(req("a", tokens(0, 60)))
	require.NoError(t, err)
	require.Equal(t, 40, second.CtxCached)
	require.Equal(t, 48, second.GenCached, "prompt + output of the last turn (50), in full blocks of 4")
	require.Equal(t, int64(20), second.Ctx.Tokens(), "ctx load counts only uncached tokens")
	second.Release()
	second.Done(Outcome{CtxRan: true, GenRan: true, OutputTokens: 10, ReportedCached: 3}) // the worker had lost the prefix
	require.Equal(t, uint64(1), breakCount(r, reasonEvicted))
}

func TestConversationLeasesUnderConcurrency(t *testing.T) {
	p := fleet(4, 4)
	r, _ := convRouter(t, p, func(c *Config) { c.MaxSessions = 50 })
	var wg sync.WaitGroup
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				key := fmt.Sprint("s", (g*7+i)%80)
				if i%5 == 0 {
					key = ""
				}
				pr, err := r.Route(req(key, tokens(g*10_000, 8+i)))
				if err != nil {
					continue
				}
				pr.Release()
				pr.Done(Outcome{CtxRan: i%3 != 0, GenRan: i%3 != 0, OutputTokens: 5, ReportedCached: 2})
			}
		}(g)
	}
	wg.Wait()
	for _, ep := range p.All() {
		require.Zero(t, ep.Load(), ep.ID)
		require.Zero(t, ep.InFlight(), ep.ID)
	}
	require.LessOrEqual(t, r.Sessions(), 50)
}

func TestHashRingMovesAboutOneNth(t *testing.T) {
	before, err := newRouter(fleet(8, 8), PolicyConsistentHash)
	require.NoError(t, err)
	after, _ := newRouter(fleet(9, 9), PolicyConsistentHash)
	replica, _ := newRouter(fleet(8, 8), PolicyConsistentHash)
	ringBefore := before.picker.(*HashRing)
	ringAfter := after.picker.(*HashRing)
	ringReplica := replica.picker.(*HashRing)
	moved, n := 0, 10_000
	for i := 0; i < n; i++ {
		key := fmt.Sprint("session-", i)
		a, b := ringBefore.owner(disagg.RoleContext, key), ringAfter.owner(disagg.RoleContext, key)
		require.Equal(t, a, ringReplica.owner(disagg.RoleContext, key), "replicas agree")
		if a != b {
			moved++
			require.Equal(t, "ctx-8", b, "keys only move to the new worker")
		}
	}
	frac := float64(moved) / float64(n)
	require.InDelta(t, 1.0/9, frac, 0.04, "moved %.3f of sessions", frac)
}

func TestHashRingFallbackWalk(t *testing.T) {
	p := fleet(4, 4)
	r, _ := newRouter(p, PolicyConsistentHash)
	first := route(t, r, &Request{SessionKey: "k", Tokens: tokens(0, 5)})
	require.Equal(t, DecisionHash, first.Decision)
	again := route(t, r, &Request{SessionKey: "k", Tokens: tokens(0, 5)})
	require.Equal(t, legs(first), legs(again))
	p.Get(first.Ctx.Endpoint().ID).healthy.Store(false)
	fell := route(t, r, &Request{SessionKey: "k", Tokens: tokens(0, 5)})
	require.Equal(t, DecisionFallback, fell.Decision)
	require.NotEqual(t, first.Ctx.Endpoint().ID, fell.Ctx.Endpoint().ID)
	require.Equal(t, first.Gen.Endpoint().ID, fell.Gen.Endpoint().ID)
	// Without a key, the request id is hashed.
	byID := route(t, r, &Request{RequestID: "req-1", Tokens: tokens(0, 5)})
	require.Equal(t, legs(byID), legs(route(t, r, &Request{RequestID: "req-1", Tokens: tokens(0, 5)})))
}

func TestKVAwarePrefersTheWorkerHoldingThePrefix(t *testing.T) {
	p := fleet(3, 3)
	r, _ := newRouter(p, PolicyKVAware)
	r.cfg.TokensPerBlock = 4
	shared := tokens(0, 400)
	first := route(t, r, &Request{Tokens: shared, Hashes: tokenizer.BlockHashes(shared, 32)})
	longer := append(append([]int{}, shared...), tokens(9000, 50)...)
	second := route(t, r, &Request{Tokens: longer, Hashes: tokenizer.BlockHashes(longer, 32)})
	require.Equal(t, first.Ctx.Endpoint().ID, second.Ctx.Endpoint().ID)
	require.Positive(t, second.CtxCached)
	// Enough load outweighs the cached prefix.
	hog := p.Get(first.Ctx.Endpoint().ID).Acquire(1_000_000)
	defer hog.Release()
	third := route(t, r, &Request{Tokens: longer, Hashes: tokenizer.BlockHashes(longer, 32)})
	require.NotEqual(t, first.Ctx.Endpoint().ID, third.Ctx.Endpoint().ID)
}

// Regression (issue 11): kv-aware remembered the blocks of a request that
// failed; it learns only from the phases that ran.
func TestKVAwareLearnsOnlyFromPhasesThatRan(t *testing.T) {
	p := fleet(3, 3)
	r, _ := newRouter(p, PolicyKVAware)
	r.cfg.TokensPerBlock = 4
	prompt := tokens(0, 400)
	rq := func() *Request { return &Request{Tokens: prompt, Hashes: tokenizer.BlockHashes(prompt, 32)} }
	failed, err := r.Route(rq())
	require.NoError(t, err)
	failed.Release()
	failed.Done(Outcome{ReportedCached: -1}) // the attempt failed
	next, err := r.Route(rq())
	require.NoError(t, err)
	next.Release()
	require.Zero(t, next.CtxCached, "a failed request left nothing in any cache")
	next.Done(Outcome{CtxRan: true, GenRan: true, ReportedCached: 0})
	again := route(t, r, rq())
	require.Equal(t, next.Ctx.Endpoint().ID, again.Ctx.Endpoint().ID)
	require.Positive(t, again.CtxCached)
}

func TestConfigValidateNamesKeys(t *testing.T) {
	cases := []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.TokensPerBlock = 0 }, "tokens_per_block: must be >= 1, got 0"},
		{func(c *Config) { c.SpillLoadFactor = 0.5 }, "spill_load_factor: must be 0 (off) or >= 1, got 0.5"},
		{func(c *Config) { c.SpillMarginTokens = -1 }, "spill_margin_tokens: must be >= 0, got -1"},
		{func(c *Config) { c.SessionTTL = 0 }, "session_ttl: must be > 0, got 0s"},
		{func(c *Config) { c.VirtualNodes = 0 }, "virtual_nodes: must be >= 1, got 0"},
	}
	for _, tc := range cases {
		cfg := Defaults()
		tc.mutate(&cfg)
		require.EqualError(t, cfg.Validate(), tc.want)
	}
	require.NoError(t, Defaults().Validate())
}

// Regression (issue 11): the expected-cached count included the partial
// last block, which engines never cache or report.
func TestConversationExpectsFullBlocksOnly(t *testing.T) {
	r, _ := convRouter(t, fleet(2, 2), nil) // 4 tokens per block
	first, err := r.Route(req("a", tokens(0, 42)))
	require.NoError(t, err)
	first.Release()
	first.Done(Outcome{CtxRan: true, GenRan: true, OutputTokens: 1, ReportedCached: 0})
	second, err := r.Route(req("a", tokens(0, 60)))
	require.NoError(t, err)
	second.Release()
	require.Equal(t, 40, second.CtxCached, "42 prefilled tokens are 10 full blocks")
	require.Equal(t, 40, second.GenCached, "43 held tokens are 10 full blocks")
	require.Equal(t, int64(20), second.Ctx.Tokens(), "the ctx lease charges the partial block too")
}

// Regression (issue 11): a session whose own request ran longer than
// session_ttl expired in flight; the TTL counts from the end of the last
// request.
func TestConversationSessionDoesNotExpireInFlight(t *testing.T) {
	r, clk := convRouter(t, fleet(2, 2), func(c *Config) { c.SessionTTL = time.Minute })
	long, err := r.Route(req("a", tokens(0, 8)))
	require.NoError(t, err)
	clk.advance(10 * time.Minute) // the request is still running
	route(t, r, req("b", tokens(100, 8)))
	require.Equal(t, 2, r.Sessions(), "a session with a request in flight never expires")
	long.Release()
	long.Done(Outcome{CtxRan: true, GenRan: true})
	clk.advance(50 * time.Second) // idle for less than the TTL since its request ended
	require.Equal(t, DecisionSticky, route(t, r, req("a", tokens(0, 12))).Decision)
	clk.advance(2 * time.Minute)
	require.Equal(t, DecisionNew, route(t, r, req("a", tokens(0, 16))).Decision, "idle past the TTL: expired")
}

// Regression (issue 11): a pinned worker removed through the admin API was
// re-picked, but the turn was labelled sticky instead of repin.
func TestConversationRemovedWorkerIsARepin(t *testing.T) {
	p := fleet(2, 2)
	r, _ := convRouter(t, p, nil)
	first := route(t, r, req("a", tokens(0, 8)))
	gone := first.Gen.Endpoint().ID
	var keep []Member
	for _, ep := range p.All() {
		if ep.ID != gone {
			keep = append(keep, Member{ID: ep.ID, URL: ep.URL, Role: ep.Role, Healthy: true})
		}
	}
	p.Sync(keep)
	second := route(t, r, req("a", tokens(0, 12)))
	require.Equal(t, DecisionRepin, second.Decision)
	require.NotEqual(t, gone, second.Gen.Endpoint().ID)
	require.Equal(t, first.Ctx.Endpoint().ID, second.Ctx.Endpoint().ID, "the ctx leg keeps its pin")
	require.Equal(t, DecisionSticky, route(t, r, req("a", tokens(0, 16))).Decision, "the re-pin is reported once")
}
