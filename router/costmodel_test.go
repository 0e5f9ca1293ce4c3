package router

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/tokenizer"
)

var epoch = time.Unix(1_700_000_000, 0)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// costRouter returns a router with policy over a fleet of nCtx + nGen
// workers and a test clock.
func costRouter(t *testing.T, policy string, nCtx, nGen int, edit func(*Config)) (*Router, *clock) {
	t.Helper()
	cfg := Defaults()
	cfg.Policy = policy
	if edit != nil {
		edit(&cfg)
	}
	c := &clock{t: epoch}
	r, err := New(fleet(nCtx, nGen), cfg, c.now)
	require.NoError(t, err)
	return r, c
}

func request(key string, toks []int) *Request {
	return &Request{SessionKey: key, Tokens: toks, Hashes: tokenizer.BlockHashes(toks, 32), MaxTokens: 16}
}

func requireIdle(t *testing.T, r *Router) {
	t.Helper()
	for _, ep := range r.Pool().All() {
		require.Zero(t, ep.Load(), ep.ID)
		require.Zero(t, ep.InFlight(), ep.ID)
	}
}

func TestCostModelPlacesColdPromptsByBacklogAndRotatesTies(t *testing.T) {
	r, _ := costRouter(t, PolicyKVAware, 3, 2, nil)
	busy := r.Pool().Get("ctx-0").Acquire(5000)
	seen := map[string]int{}
	for i := range 20 {
		p, err := r.Route(request("", seq(100, i*1000)))
		require.NoError(t, err)
		require.Equal(t, DecisionNew, p.Decision)
		seen[p.Ctx.Endpoint().ID]++
		p.End(Outcome{})
	}
	require.Equal(t, map[string]int{"ctx-1": 10, "ctx-2": 10}, seen, "the backlogged worker is avoided; ties rotate")
	busy.Release()
	requireIdle(t, r)
}

func TestCostModelRoutesWhereThePrefixIsCached(t *testing.T) {
	r, _ := costRouter(t, PolicyKVAware, 4, 2, nil)
	doc := seq(4000, 0)
	first := route(t, r, request("", append(doc, 1, 2, 3)))
	for i := range 8 {
		p, err := r.Route(request("", append(append([]int{}, doc...), seq(50, 100_000+i*50)...)))
		require.NoError(t, err)
		require.Equal(t, first.Ctx.Endpoint(), p.Ctx.Endpoint(), "question %d over the same document", i)
		require.Equal(t, DecisionCached, p.Decision)
		require.Equal(t, 4000/32*32, p.CtxCached)
		require.Equal(t, int64(len(doc)+50-p.CtxCached), p.Ctx.Tokens(), "the ctx lease charges what must be computed")
		p.End(Outcome{})
	}
	requireIdle(t, r)
}

func TestCostModelLeavesACachedWorkerWhoseBacklogCostsMore(t *testing.T) {
	r, _ := costRouter(t, PolicyKVAware, 2, 2, func(c *Config) { c.LoadWeight = 1 }) // a queued token costs a computed one
	doc := seq(3200, 0)
	first := route(t, r, request("", append(doc, 1)))
	home := first.Ctx.Endpoint()
	backlog := home.Acquire(3000) // less than the 3200 cached tokens: stay
	p, _ := r.Route(request("", append(append([]int{}, doc...), 7, 8)))
	require.Equal(t, home, p.Ctx.Endpoint())
	p.End(Outcome{})
	more := home.Acquire(400) // 3400 queued now: computing it all elsewhere is cheaper
	p, _ = r.Route(request("", append(append([]int{}, doc...), 7, 8)))
	require.NotEqual(t, home, p.Ctx.Endpoint())
	p.End(Outcome{})
	backlog.Release()
	more.Release()
	requireIdle(t, r)
}

func TestCostModelSessionPinIsAPriorWithHysteresis(t *testing.T) {
	r, _ := costRouter(t, PolicyConversation, 2, 2, func(c *Config) { c.StickinessTokens, c.LoadWeight = 500, 1 })
	first := route(t, r, request("chat", seq(20, 0))) // shorter than a block: nothing cached anywhere
	home := first.Ctx.Endpoint()
	require.Equal(t, 1, r.Sessions())
	backlog := home.Acquire(400) // within the pin's weight
	p, _ := r.Route(request("chat", seq(25, 0)))
	require.Equal(t, home, p.Ctx.Endpoint())
	require.Equal(t, DecisionSticky, p.Decision)
	require.Equal(t, first.Gen.Endpoint(), p.Gen.Endpoint(), "the gen leg keeps the session's gen worker")
	p.End(Outcome{GenRan: true})
	more := home.Acquire(200) // 600 queued: past it
	p, _ = r.Route(request("chat", seq(25, 0)))
	require.NotEqual(t, home, p.Ctx.Endpoint())
	require.Equal(t, DecisionMoved, p.Decision)
	p.End(Outcome{GenRan: true})
	backlog.Release()
	more.Release()
	p, _ = r.Route(request("chat", seq(25, 0)))
	require.Equal(t, DecisionSticky, p.Decision, "the pin moved with the turn that ran elsewhere")
	require.NotEqual(t, home, p.Ctx.Endpoint())
	p.End(Outcome{})
	requireIdle(t, r)
}

// Regression: a request that failed at a worker created a session.
func TestCostModelFailedRequestCreatesNoSession(t *testing.T) {
	r, _ := costRouter(t, PolicyConversation, 2, 2, nil)
	p, err := r.Route(request("s1", seq(100, 0)))
	require.NoError(t, err)
	p.ContextDone(true, -1)
	p.End(Outcome{}) // the generation failed
	require.Zero(t, r.Sessions())
	p, _ = r.Route(request("", seq(100, 0)))
	require.True(t, p.Minted)
	p.End(Outcome{})
	require.Zero(t, r.Sessions(), "a minted session is kept only once its turn succeeded")
	requireIdle(t, r)
}

// Regression: a worker that came back under the same ID at a new URL (a new
// process, an empty cache) was believed warm.
func TestWorkerBackAtANewURLIsCold(t *testing.T) {
	r, _ := costRouter(t, PolicyConversation, 2, 2, nil)
	doc := seq(3200, 0)
	first := route(t, r, request("s1", append(doc, 1)))
	home := first.Ctx.Endpoint()
	var ms []Member
	for _, ep := range r.Pool().All() {
		url := ep.URL
		if ep == home {
			url += "-restarted"
		}
		ms = append(ms, Member{ID: ep.ID, URL: url, Role: ep.Role, Healthy: true})
	}
	r.Pool().Sync(ms)
	p, _ := r.Route(request("s1", append(doc, 1, 2)))
	require.Zero(t, p.CtxCached, "the worker at its new URL holds nothing")
	p.End(Outcome{})
	requireIdle(t, r)
}

// Regression: under SGLang's concurrent legs the router never learned that
// the context phase ran.
func TestDetachedContextPhaseTeachesTheIndex(t *testing.T) {
	r, _ := costRouter(t, PolicyConversation, 2, 2, nil)
	doc := seq(3200, 0)
	p, _ := r.Route(request("", append(doc, 1)))
	p.DetachContext()
	p.End(Outcome{GenRan: true}) // the decode answer may end before the prefill leg
	require.Equal(t, int64(len(doc)+1), p.Ctx.Endpoint().Load(), "the detached leg still holds the ctx lease")
	done := make(chan struct{})
	go func() { p.ContextDone(true, -1); close(done) }()
	<-done
	next, _ := r.Route(request("", append(doc, 1, 2)))
	require.Equal(t, p.Ctx.Endpoint(), next.Ctx.Endpoint())
	require.Equal(t, 3200, next.CtxCached)
	next.End(Outcome{})
	requireIdle(t, r)
}

func TestPairEventsRefundExactlyOnce(t *testing.T) {
	r, _ := costRouter(t, PolicyConversation, 2, 2, nil)
	p, _ := r.Route(request("", seq(500, 0)))
	p.ContextDone(true, -1)
	p.ContextDone(true, -1)
	require.Zero(t, p.Ctx.Endpoint().Load())
	p.End(Outcome{GenRan: true})
	p.End(Outcome{GenRan: true})
	requireIdle(t, r)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q, err := r.Route(request("", seq(300, 0)))
			if err != nil {
				return
			}
			go q.ContextDone(true, 0)
			q.End(Outcome{})
		}()
	}
	wg.Wait()
	require.Eventually(t, func() bool {
		for _, ep := range r.Pool().All() {
			if ep.Load() != 0 {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond)
}

func TestGenLegAvoidsAnOccupiedPinnedWorker(t *testing.T) {
	r, _ := costRouter(t, PolicyConversation, 1, 3, nil)
	first := route(t, r, request("chat", seq(100, 0)))
	gen := first.Gen.Endpoint()
	heavy := gen.Acquire(100_000)
	p, _ := r.Route(request("chat", seq(120, 0)))
	require.NotEqual(t, gen, p.Gen.Endpoint())
	p.End(Outcome{})
	heavy.Release()
	requireIdle(t, r)
}

func TestSessionsExpireAndForgetRemovedWorkers(t *testing.T) {
	r, c := costRouter(t, PolicyConversation, 2, 2, func(cfg *Config) { cfg.SessionTTL = time.Minute })
	route(t, r, request("a", seq(10, 0)))
	route(t, r, request("b", seq(10, 50)))
	require.Equal(t, 2, r.Sessions())
	c.add(2 * time.Minute)
	require.Zero(t, r.Sessions())
	p := route(t, r, request("a", seq(10, 0)))
	var ms []Member
	for _, ep := range r.Pool().All() {
		if ep != p.Ctx.Endpoint() {
			ms = append(ms, Member{ID: ep.ID, URL: ep.URL, Role: ep.Role, Healthy: true})
		}
	}
	r.Pool().Sync(ms)
	require.Zero(t, r.SessionsPerWorker()[p.Ctx.Endpoint().ID])
	next, _ := r.Route(request("a", seq(12, 0)))
	require.Equal(t, DecisionRepin, next.Decision)
	next.End(Outcome{})
}

func (c *clock) advance(d time.Duration) { c.add(d) }

// convRouter builds a router over p with 4-token blocks and a test clock.
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

func req(key string, toks []int) *Request {
	return &Request{SessionKey: key, Tokens: toks, Hashes: tokenizer.BlockHashes(toks, 4), MaxTokens: 8}
}

// route routes rq and ends it as a success.
func route(t testing.TB, r *Router, rq *Request) *Pair {
	t.Helper()
	p, err := r.Route(rq)
	require.NoError(t, err)
	p.ContextDone(true, -1)
	p.End(Outcome{GenRan: true})
	return p
}
