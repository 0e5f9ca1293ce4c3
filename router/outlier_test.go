package router

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPassiveHealthEjectsAndReadmits(t *testing.T) {
	p := fleet(1, 2)
	r, clk := convRouter(t, p, func(c *Config) {
		c.Policy = PolicyRoundRobin
		c.EjectBackoff, c.EjectMaxBackoff, c.EjectAfter5xx = time.Second, 3*time.Second, 3
	})
	dead, other := p.Get("gen-0"), p.Get("gen-1")
	routesTo := func(n int) map[string]int {
		seen := map[string]int{}
		for i := 0; i < n; i++ {
			seen[route(t, r, req("", tokens(0, 4))).Gen.Endpoint().ID]++
		}
		return seen
	}

	require.Equal(t, time.Second, r.ReportFailure(dead, FailureConnect), "a connect error ejects at once")
	require.Equal(t, map[string]int{"gen-1": 4}, routesTo(4), "an ejected worker gets no requests")
	clk.advance(time.Second)
	require.Equal(t, 1, routesTo(4)["gen-0"], "after the backoff one request probes it (half-open)")
	require.Zero(t, routesTo(4)["gen-0"], "no second probe while the first is out")
	r.ReportInconclusive(dead)
	require.Equal(t, 1, routesTo(4)["gen-0"], "a probe that said nothing (cancelled, timed out) lets another go")
	clk.advance(3 * time.Second)
	require.Equal(t, 1, routesTo(4)["gen-0"], "a probe never reported on expires after eject_max_backoff")
	require.Equal(t, 2*time.Second, r.ReportFailure(dead, FailureConnect), "failing again doubles the backoff")
	clk.advance(2 * time.Second)
	require.Equal(t, 3*time.Second, r.ReportFailure(dead, FailureConnect), "capped at eject_max_backoff")
	clk.advance(3 * time.Second)
	r.ReportSuccess(dead)
	require.Equal(t, 2, routesTo(4)["gen-0"], "a successful probe puts it back in routing")
	require.Equal(t, time.Second, r.ReportFailure(dead, FailureConnect), "a success resets the backoff")
	require.Equal(t, int64(4), dead.Ejections())
	clk.advance(time.Second)

	for i := 0; i < 2; i++ {
		require.Zero(t, r.ReportFailure(other, FailureServer), "5xx answers eject only in a burst")
	}
	r.ReportSuccess(other)
	require.Zero(t, r.ReportFailure(other, FailureServer), "a success in between restarts the count")
	require.Zero(t, r.ReportFailure(other, FailureServer))
	require.Equal(t, time.Second, r.ReportFailure(other, FailureServer), "the third 5xx in a row ejects")

	r.ReportFailure(dead, FailureConnect)
	require.Len(t, routesTo(2), 2, "when every gen worker is ejected, all of them stay candidates")
}

// Regression (issue 12, found by the soak suite's SIGKILLed workers): each
// of the calls one crash cut doubled the ejection again, so a dozen
// requests failing within milliseconds kept the restarted, healthy worker
// out of routing for eject_max_backoff.
func TestPassiveHealthFailuresOfOneIncidentEjectOnce(t *testing.T) {
	p := fleet(1, 2)
	r, clk := convRouter(t, p, func(c *Config) {
		c.EjectBackoff, c.EjectMaxBackoff, c.EjectAfter5xx = time.Second, 30*time.Second, 1
	})
	dead := p.Get("gen-0")
	require.Equal(t, time.Second, r.ReportFailure(dead, FailureConnect))
	for i := 0; i < 12; i++ {
		require.Zero(t, r.ReportFailure(dead, FailureConnect), "call %d was in flight when the worker was ejected", i)
		require.Zero(t, r.ReportFailure(dead, FailureServer))
	}
	require.Equal(t, int64(1), dead.Ejections())
	clk.advance(time.Second)
	require.Equal(t, 2*time.Second, r.ReportFailure(dead, FailureConnect), "a failed probe after the backoff doubles it")
}

func TestPassiveHealthConfigNamesKeys(t *testing.T) {
	for _, tc := range []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.EjectBackoff = 0 }, "eject_backoff: must be > 0, got 0s"},
		{func(c *Config) { c.EjectMaxBackoff = time.Millisecond }, "eject_max_backoff: must be >= eject_backoff (1s), got 1ms"},
		{func(c *Config) { c.EjectAfter5xx = 0 }, "eject_after_5xx: must be >= 1, got 0"},
	} {
		cfg := Defaults()
		tc.mutate(&cfg)
		require.EqualError(t, cfg.Validate(), tc.want)
	}
}

func TestRerouteGenMovesOnlyTheGenerationLease(t *testing.T) {
	p := fleet(1, 3)
	r, _ := convRouter(t, p, func(c *Config) { c.Policy = PolicyRoundRobin })
	pair, err := r.Route(req("", tokens(0, 40)))
	require.NoError(t, err)
	pair.ContextDone(true, -1)
	failed, held := pair.Gen.Endpoint(), pair.Gen.Tokens()
	require.NoError(t, r.RerouteGen(pair, map[string]bool{failed.ID: true}))
	moved := pair.Gen.Endpoint()
	require.NotEqual(t, failed, moved)
	require.Zero(t, failed.Load(), "the unreachable worker's lease is refunded")
	require.Equal(t, held, moved.Load(), "the new worker carries what the old one did")
	require.Equal(t, "ctx-0", pair.Ctx.Endpoint().ID, "the ctx leg stays: its KV is what the handle names")

	r.ReportFailure(moved, FailureConnect)
	require.NoError(t, r.RerouteGen(pair, map[string]bool{failed.ID: true, moved.ID: true}))
	require.Error(t, r.RerouteGen(pair, map[string]bool{"gen-0": true, "gen-1": true, "gen-2": true}), "no gen worker left")
	pair.End(Outcome{})
	for _, ep := range p.All() {
		require.Zero(t, ep.Load(), ep.ID)
	}
}

func TestSaturatingAddNeverOverflows(t *testing.T) {
	require.Equal(t, int64(30), SaturatingAdd(10, 20))
	require.Equal(t, int64(10), SaturatingAdd(10, -5), "a negative term counts as 0")
	require.Equal(t, int64(maxLeaseTokens), SaturatingAdd(1<<62, 1<<62))
	require.Equal(t, int64(maxLeaseTokens), SaturatingAdd(int(^uint(0)>>1), int(^uint(0)>>1)))
}
