package router

import (
	"fmt"
	"sync"
	"testing"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/stretchr/testify/require"
)

func members(healthy ...bool) []Member {
	out := []Member{
		{ID: "ctx-0", URL: "http://a:1", Role: disagg.RoleContext, Healthy: true},
		{ID: "gen-0", URL: "http://a:2", Role: disagg.RoleGeneration, Healthy: true},
		{ID: "mix-0", URL: "http://a:3", Role: disagg.RoleMixed, Healthy: true},
	}
	for i, h := range healthy {
		out[i].Healthy = h
	}
	return out
}

func ids(eps []*Endpoint) []string {
	var out []string
	for _, e := range eps {
		out = append(out, e.ID)
	}
	return out
}

func TestPoolSyncKeepsIdentityAndLoad(t *testing.T) {
	p := NewPool()
	changes := 0
	p.OnMembershipChange(func() { changes++ })
	require.True(t, p.Sync(members()))
	lease := p.Get("ctx-0").Acquire(100)

	require.False(t, p.Sync(members(false)), "a health change is not a membership change")
	require.Equal(t, 1, changes)
	ep := p.Get("ctx-0")
	require.Same(t, lease.Endpoint(), ep)
	require.False(t, ep.Healthy())
	require.Equal(t, int64(100), ep.Load())
	lease.Release()
	require.Zero(t, ep.Load())
}

func TestPoolSyncReplacesChangedURL(t *testing.T) {
	p := NewPool()
	p.Sync(members())
	old := p.Get("gen-0")
	m := members()
	m[1].URL = "http://b:2"
	require.True(t, p.Sync(m))
	require.NotSame(t, old, p.Get("gen-0"))
	require.Equal(t, uint64(2), p.Version())
}

func TestPoolAvailableByPhase(t *testing.T) {
	p := NewPool()
	p.Sync(members())
	require.Equal(t, []string{"ctx-0", "mix-0"}, ids(p.Available(disagg.RoleContext)))
	require.Equal(t, []string{"gen-0", "mix-0"}, ids(p.Available(disagg.RoleGeneration)))
	p.Get("mix-0").SetDraining(true)
	require.Equal(t, []string{"ctx-0"}, ids(p.Available(disagg.RoleContext)))
	p.Sync(members(false))
	require.Empty(t, p.Available(disagg.RoleContext))
}

func TestPoolRemove(t *testing.T) {
	p := NewPool()
	p.Sync(members())
	require.True(t, p.Sync(members()[:1]))
	require.Nil(t, p.Get("gen-0"))
	require.Len(t, p.All(), 1)
}

func TestLeaseReleasedExactlyOnce(t *testing.T) {
	ep := NewEndpoint("w", "http://w", disagg.RoleMixed)
	var wg sync.WaitGroup
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := ep.Acquire(10)
			var inner sync.WaitGroup
			for j := 0; j < 4; j++ { // concurrent double releases
				inner.Add(1)
				go func() { defer inner.Done(); l.Release() }()
			}
			inner.Wait()
		}()
	}
	wg.Wait()
	require.Zero(t, ep.Load())
	require.Zero(t, ep.InFlight())
	var nilLease *Lease
	nilLease.Release()
	require.Zero(t, ep.Acquire(-5).Tokens(), "negative charges count as zero")
}

func TestEndpointHostParsedOnce(t *testing.T) {
	require.Equal(t, "10.0.0.7", NewEndpoint("w", "http://10.0.0.7:8100", disagg.RoleContext).Host)
	require.Equal(t, "", NewEndpoint("w", "::bad", disagg.RoleContext).Host)
}

// The fleet's context length is the smallest the available workers
// reported, whatever their role; a worker that reported none, is down or
// drains does not count.
func TestPoolMaxModelLen(t *testing.T) {
	p := NewPool()
	p.Sync(members())
	require.Zero(t, p.MaxModelLen(), "none reported")

	m := members()
	m[0].MaxModelLen, m[1].MaxModelLen = 8192, 4096
	p.Sync(m)
	require.Equal(t, 4096, p.MaxModelLen(), "the gen worker's, the smaller")
	require.Equal(t, 4096, p.Get("gen-0").MaxModelLen())
	require.Zero(t, p.Get("mix-0").MaxModelLen())

	p.Get("gen-0").SetDraining(true)
	require.Equal(t, 8192, p.MaxModelLen(), "a draining worker takes no new request")
	p.Get("gen-0").SetDraining(false)
	m[1].Healthy = false
	p.Sync(m)
	require.Equal(t, 8192, p.MaxModelLen(), "a down worker takes no request")
	m[0].MaxModelLen = 0 // its process was replaced: not read yet
	p.Sync(m)
	require.Zero(t, p.MaxModelLen())
}

// BenchmarkPoolMaxModelLen is the per-request cost of the workers' context
// length over a fleet of 64 workers.
func BenchmarkPoolMaxModelLen(b *testing.B) {
	p := NewPool()
	var ms []Member
	for i := range 64 {
		ms = append(ms, Member{ID: fmt.Sprintf("w-%02d", i), URL: fmt.Sprintf("http://w:%d", i), Role: disagg.RoleMixed,
			Healthy: true, MaxModelLen: 4096 + i})
	}
	p.Sync(ms)
	b.ReportAllocs()
	for b.Loop() {
		if p.MaxModelLen() != 4096 {
			b.Fatal("wrong length")
		}
	}
}
