package router

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/stretchr/testify/require"
)

// conn stands for the connection of a call in flight.
type conn struct{ closed atomic.Bool }

func (c *conn) Close() error {
	c.closed.Store(true)
	return nil
}

func TestMarkDownEndsTheCallsInFlight(t *testing.T) {
	ep := NewEndpoint("gen-0", "http://127.0.0.1:1", disagg.RoleGeneration)
	done, live := &conn{}, &conn{}
	ep.Watch(done)
	ep.Unwatch(done)
	downs := ep.Watch(live)
	ep.MarkDown()
	require.True(t, live.closed.Load())
	require.False(t, done.closed.Load(), "a call that ended is left alone")
	require.NotEqual(t, downs, ep.Downs(), "the call can tell why its connection closed")
	next := &conn{}
	require.Equal(t, ep.Downs(), ep.Watch(next))
	require.False(t, next.closed.Load(), "later calls are not ended")
}

func TestHealthCheckFailureMarksDown(t *testing.T) {
	p := NewPool()
	member := Member{ID: "gen-0", URL: "http://127.0.0.1:1", Role: disagg.RoleGeneration, Healthy: true}
	p.Sync([]Member{member})
	c := &conn{}
	p.Get("gen-0").Watch(c)
	p.Sync([]Member{member})
	require.False(t, c.closed.Load(), "still healthy")
	member.Healthy = false
	p.Sync([]Member{member})
	require.True(t, c.closed.Load(), "found down")
	again := &conn{}
	p.Get("gen-0").Watch(again)
	p.Sync([]Member{member})
	require.False(t, again.closed.Load(), "down already: nothing new in flight is ended")
}

func TestEjectionLeavesTheCallsInFlight(t *testing.T) {
	p := fleet(1, 1)
	r, _ := convRouter(t, p, nil)
	ep := p.Get("gen-0")
	c := &conn{}
	ep.Watch(c)
	require.Positive(t, r.ReportFailure(ep, FailureConnect))
	require.False(t, c.closed.Load())
}

// A half-open worker whose probe is out is not starved while the other
// worker of its role is down: it takes every request.
func TestHalfOpenWorkerTakesAllWhenTheOtherIsDown(t *testing.T) {
	p := fleet(2, 1)
	r, clk := convRouter(t, p, func(c *Config) {
		c.Policy = PolicyRoundRobin
		c.EjectBackoff, c.EjectMaxBackoff = time.Second, time.Minute
	})
	back := p.Get("ctx-1")
	require.Positive(t, r.ReportFailure(back, FailureConnect))
	clk.advance(time.Second) // half-open now
	probe, err := r.Route(req("", tokens(0, 4)))
	require.NoError(t, err)
	require.Equal(t, "ctx-1", probe.Ctx.Endpoint().ID, "round robin sends the probe")
	defer probe.End(Outcome{})

	var ms []Member
	for _, ep := range p.All() {
		ms = append(ms, Member{ID: ep.ID, URL: ep.URL, Role: ep.Role, Healthy: ep.ID != "ctx-0"})
	}
	p.Sync(ms) // ctx-0 hangs and its health check finds it down
	for i := 0; i < 4; i++ {
		require.Equal(t, "ctx-1", route(t, r, req("", tokens(i+1, 4))).Ctx.Endpoint().ID)
	}
}
