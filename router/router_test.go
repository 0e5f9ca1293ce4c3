package router

import (
	"errors"
	"sync"
	"testing"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/stretchr/testify/require"
)

func fleet(nCtx, nGen int) *Pool {
	p := NewPool()
	var ms []Member
	for i := 0; i < nCtx; i++ {
		ms = append(ms, Member{ID: "ctx-" + string(rune('0'+i)), URL: "http://c" + string(rune('0'+i)), Role: disagg.RoleContext, Healthy: true})
	}
	for i := 0; i < nGen; i++ {
		ms = append(ms, Member{ID: "gen-" + string(rune('0'+i)), URL: "http://g" + string(rune('0'+i)), Role: disagg.RoleGeneration, Healthy: true})
	}
	p.Sync(ms)
	return p
}

func TestRoundRobinCycles(t *testing.T) {
	r, err := newRouter(fleet(3, 1), PolicyRoundRobin)
	require.NoError(t, err)
	seen := map[string]int{}
	for i := 0; i < 30; i++ {
		pair, err := r.Route(&Request{Tokens: make([]int, 10)})
		require.NoError(t, err)
		seen[pair.Ctx.Endpoint().ID]++
		pair.End(Outcome{})
	}
	require.Equal(t, map[string]int{"ctx-0": 10, "ctx-1": 10, "ctx-2": 10}, seen)
}

func TestLeastLoadPicksLightestAndRotatesTies(t *testing.T) {
	p := fleet(3, 1)
	r, err := newRouter(p, PolicyLeastLoad)
	require.NoError(t, err)
	heavy := p.Get("ctx-0").Acquire(1000)
	defer heavy.Release()
	seen := map[string]int{}
	for i := 0; i < 20; i++ {
		pair, err := r.Route(&Request{Tokens: make([]int, 10)})
		require.NoError(t, err)
		seen[pair.Ctx.Endpoint().ID]++
		pair.End(Outcome{})
	}
	require.Zero(t, seen["ctx-0"], "the loaded worker is avoided")
	require.Equal(t, 10, seen["ctx-1"], "ties rotate, not first in slice order")
	require.Equal(t, 10, seen["ctx-2"])
}

func TestLeastLoadChargesTokensAtRouteTime(t *testing.T) {
	p := fleet(2, 2)
	r, _ := newRouter(p, PolicyLeastLoad)
	a, _ := r.Route(&Request{Tokens: make([]int, 500), MaxTokens: 100})
	b, _ := r.Route(&Request{Tokens: make([]int, 10), MaxTokens: 10})
	require.NotEqual(t, a.Ctx.Endpoint().ID, b.Ctx.Endpoint().ID, "the second request sees the first one's charge")
	require.Equal(t, int64(600), a.Gen.Tokens())
	a.End(Outcome{})
	b.End(Outcome{})
	for _, ep := range p.All() {
		require.Zero(t, ep.Load())
	}
}

func TestRouteNoWorkerAndExclusions(t *testing.T) {
	r, _ := newRouter(fleet(1, 1), PolicyRoundRobin)
	_, err := r.Route(&Request{ExcludeCtx: map[string]bool{"ctx-0": true}})
	require.True(t, errors.Is(err, ErrNoWorker))
	var nw *NoWorkerError
	require.ErrorAs(t, err, &nw)
	require.Equal(t, disagg.RoleContext, nw.Role)

	r, _ = newRouter(fleet(1, 0), PolicyRoundRobin)
	_, err = r.Route(&Request{})
	require.ErrorAs(t, err, &nw)
	require.Equal(t, disagg.RoleGeneration, nw.Role)
}

func TestMixedWorkersNeverServeBothLegsWhenAnotherExists(t *testing.T) {
	p := NewPool()
	p.Sync([]Member{
		{ID: "m0", URL: "http://a", Role: disagg.RoleMixed, Healthy: true},
		{ID: "m1", URL: "http://b", Role: disagg.RoleMixed, Healthy: true},
	})
	r, _ := newRouter(p, PolicyRoundRobin)
	for i := 0; i < 10; i++ {
		pair, err := r.Route(&Request{})
		require.NoError(t, err)
		require.False(t, pair.Same())
		pair.End(Outcome{})
	}
	p.Sync([]Member{{ID: "m0", URL: "http://a", Role: disagg.RoleMixed, Healthy: true}})
	pair, err := r.Route(&Request{})
	require.NoError(t, err)
	require.True(t, pair.Same(), "a single mixed worker serves both phases")
	pair.End(Outcome{})
}

func TestUnknownPolicy(t *testing.T) {
	_, err := newRouter(NewPool(), "random")
	require.EqualError(t, err, `policy: unknown policy "random" (valid: conversation, round-robin, least-load, consistent-hash, kv-aware)`)
}

// newRouter builds a router with default settings and the named policy.
func newRouter(p *Pool, policy string) (*Router, error) {
	cfg := Defaults()
	cfg.Policy = policy
	return New(p, cfg, nil)
}

func TestConcurrentRoutingReturnsLoadToZero(t *testing.T) {
	p := fleet(4, 4)
	r, _ := newRouter(p, PolicyLeastLoad)
	var wg sync.WaitGroup
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				pair, err := r.Route(&Request{Tokens: make([]int, i), MaxTokens: 5})
				if err == nil {
					pair.End(Outcome{})
					pair.End(Outcome{})
				}
			}
		}()
	}
	wg.Wait()
	for _, ep := range p.All() {
		require.Zero(t, ep.Load(), ep.ID)
		require.Zero(t, ep.InFlight(), ep.ID)
	}
}
