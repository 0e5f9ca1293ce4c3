package router

import (
	"testing"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/stretchr/testify/require"
)

func TestMarkDownEndsTheCallsInFlight(t *testing.T) {
	ep := NewEndpoint("gen-0", "http://127.0.0.1:1", disagg.RoleGeneration)
	before := ep.Down()
	require.Same(t, before, ep.Down(), "one context until the worker is found down")
	ep.MarkDown()
	require.Error(t, before.Err())
	require.NoError(t, ep.Down().Err(), "later calls watch a new one")
}

func TestHealthCheckFailureMarksDown(t *testing.T) {
	p := NewPool()
	member := Member{ID: "gen-0", URL: "http://127.0.0.1:1", Role: disagg.RoleGeneration, Healthy: true}
	p.Sync([]Member{member})
	down := p.Get("gen-0").Down()
	p.Sync([]Member{member})
	require.NoError(t, down.Err(), "still healthy")
	member.Healthy = false
	p.Sync([]Member{member})
	require.Error(t, down.Err(), "found down")
	again := p.Get("gen-0").Down()
	p.Sync([]Member{member})
	require.NoError(t, again.Err(), "down already: nothing new in flight is ended")
}

func TestEjectionLeavesTheCallsInFlight(t *testing.T) {
	p := fleet(1, 1)
	r, _ := convRouter(t, p, nil)
	ep := p.Get("gen-0")
	down := ep.Down()
	require.Positive(t, r.ReportFailure(ep, FailureConnect))
	require.NoError(t, down.Err())
}
