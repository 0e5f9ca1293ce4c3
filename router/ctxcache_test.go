package router

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The clock counts computed tokens, and cached ones at 1/ctxCachedShare;
// requests in flight are counted apart.
func TestCtxCachesClockAndInFlight(t *testing.T) {
	m := ctxCaches{}
	m.routed("ctx-0", 300)
	m.routed("ctx-0", 200)
	require.Equal(t, int64(500), m["ctx-0"].inFlight)
	m.prefilled("ctx-0", 100, 200)
	require.Equal(t, int64(100+200/ctxCachedShare), m.clock("ctx-0"))
	m.finished("ctx-0", 300)
	require.Equal(t, int64(200), m["ctx-0"].inFlight)
	m.finished("ctx-0", 200)
	require.Zero(t, m["ctx-0"].inFlight)
	require.Equal(t, int64(100+200/ctxCachedShare), m.clock("ctx-0"), "the end of a request does not move the clock")
	require.Zero(t, m.clock("ctx-9"), "a worker never seen")
}

func TestCtxCachesSurvival(t *testing.T) {
	m := ctxCaches{}
	require.Equal(t, 1.0, m.survival("ctx-0", 0, 1000, 200), "a worker never seen")
	m.prefilled("ctx-0", 5000, 0)
	for _, tc := range []struct {
		since int64
		want  float64
	}{
		{0, 1}, {800, 1}, // room for the 200 tokens still
		{900, 0.5}, {1000, 0}, {4000, 0},
	} {
		require.InDelta(t, tc.want, m.survival("ctx-0", 5000-tc.since, 1000, 200), 1e-9, "since %d", tc.since)
	}
	require.Equal(t, 0.5, m.survival("ctx-0", 5000, 1000, 2000), "a prefix larger than the cache: what it holds")
}

// A removed worker's model goes once nothing routed to it is in flight;
// until then its requests are booked where they began, also when a worker
// comes back under the same ID.
func TestCtxCachesKeepDropsRemovedWorkers(t *testing.T) {
	m := ctxCaches{}
	m.routed("ctx-0", 5)
	m.routed("ctx-1", 7)
	m.finished("ctx-0", 5)
	m.keep(map[string]bool{})
	require.NotContains(t, m, "ctx-0")
	require.Contains(t, m, "ctx-1", "7 tokens still in flight")
	m.routed("ctx-1", 3) // back under the same ID
	m.finished("ctx-1", 7)
	m.finished("ctx-1", 3)
	require.Zero(t, m["ctx-1"].inFlight)
	m.keep(map[string]bool{})
	require.Empty(t, m)
}
