package router

import (
	"errors"
	"testing"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/stretchr/testify/require"
)

func adapterFleet() *Pool {
	p := NewPool()
	p.Sync([]Member{
		{ID: "ctx-0", URL: "http://c0", Role: disagg.RoleContext, Healthy: true, Adapters: []string{"sql", "chat"}},
		{ID: "ctx-1", URL: "http://c1", Role: disagg.RoleContext, Healthy: true},
		{ID: "gen-0", URL: "http://g0", Role: disagg.RoleGeneration, Healthy: true, Adapters: []string{"chat", "sql", "sql"}},
		{ID: "gen-1", URL: "http://g1", Role: disagg.RoleGeneration, Healthy: true, Adapters: []string{"chat"}},
	})
	return p
}

func TestRequestsForAnAdapterGoWhereItIsServed(t *testing.T) {
	pool := adapterFleet()
	require.Equal(t, []string{"chat", "sql"}, pool.Adapters())
	require.Equal(t, []string{"chat", "sql"}, pool.Get("gen-0").Adapters(), "sorted, once each")
	require.True(t, pool.HasAdapter("sql"))
	require.False(t, pool.HasAdapter("code"))
	for _, policy := range []string{PolicyConversation, PolicyKVAware, PolicyRoundRobin, PolicyLeastLoad, PolicyConsistentHash} {
		cfg := Defaults()
		cfg.Policy = policy
		r, err := New(pool, cfg, nil)
		require.NoError(t, err)
		for i := range 6 {
			rq := request("", seq(100, i*1000))
			rq.Adapter = "sql"
			p, err := r.Route(rq)
			require.NoError(t, err, policy)
			require.Equal(t, "ctx-0", p.Ctx.Endpoint().ID, policy)
			require.Equal(t, "gen-0", p.Gen.Endpoint().ID, policy)
			require.ErrorIs(t, r.RerouteGen(p, map[string]bool{"gen-0": true}), ErrNoWorker, "gen-1 does not serve sql")
			p.End(Outcome{})
		}
		rq := request("", seq(100, 0))
		rq.Adapter = "code"
		_, err = r.Route(rq)
		var nw *NoWorkerError
		require.True(t, errors.As(err, &nw), policy)
	}
}

func TestAdaptersChangeWithTheWorkersReport(t *testing.T) {
	pool := adapterFleet()
	ep := pool.Get("gen-1")
	pool.Sync([]Member{
		{ID: "ctx-0", URL: "http://c0", Role: disagg.RoleContext, Healthy: true},
		{ID: "gen-1", URL: "http://g1", Role: disagg.RoleGeneration, Healthy: true, Adapters: []string{"code"}},
	})
	require.Same(t, ep, pool.Get("gen-1"), "the same endpoint: its load and cache are kept")
	require.Equal(t, []string{"code"}, pool.Adapters())
}
