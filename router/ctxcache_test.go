package router

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCtxCachesCountComputedAndInFlightTokens(t *testing.T) {
	m := ctxCaches{}
	m.routed("ctx-0", 300)
	m.routed("ctx-0", 200)
	require.Equal(t, int64(500), m["ctx-0"].inFlight)
	m.finished("ctx-0", 300, 100)
	require.Equal(t, int64(200), m["ctx-0"].inFlight)
	require.Equal(t, int64(100), m.clock("ctx-0"))
	m.finished("ctx-0", 200, 0)
	require.Zero(t, m["ctx-0"].inFlight)
	require.Zero(t, m.clock("ctx-9"), "a worker never seen")
}

// The in-flight peak fades by 1/kvPeakFade per request routed, and never
// falls below what is in flight.
func TestCtxCachesInFlightPeakFades(t *testing.T) {
	m := ctxCaches{}
	m.routed("ctx-0", 12800)
	m.finished("ctx-0", 12800, 12800)
	require.Equal(t, int64(12800), m["ctx-0"].peak, "finishing does not lower the peak")
	m.routed("ctx-0", 10)
	require.Equal(t, int64(12800-12800/kvPeakFade), m["ctx-0"].peak)
	m.routed("ctx-0", 10) // 20 in flight
	for range 2000 {
		m.routed("ctx-0", 10)
		m.finished("ctx-0", 10, 10)
	}
	require.Equal(t, int64(20), m["ctx-0"].inFlight)
	require.Equal(t, int64(30), m["ctx-0"].peak, "faded to the most in flight since: 20 and the one routed")
}

func TestCtxCachesSurvival(t *testing.T) {
	m := ctxCaches{}
	require.Equal(t, 1.0, m.survival("ctx-0", 0, 1000), "a worker never seen")
	m.routed("ctx-0", 200) // peak 200
	m.finished("ctx-0", 200, 200)
	for _, tc := range []struct {
		since int64
		want  float64
	}{
		{0, 1}, {800, 1}, // what the peak leaves free is never exceeded
		{900, 0.5}, {1000, 0}, {5000, 0},
	} {
		require.InDelta(t, tc.want, m.survival("ctx-0", 200-tc.since, 1000), 1e-9, "since %d", tc.since)
	}
	m.routed("ctx-0", 4000) // in flight alone, more than the cache holds
	require.InDelta(t, 0.25, m.survival("ctx-0", m.clock("ctx-0"), 1000), 1e-9)
}

// A removed worker's model goes once nothing routed to it is in flight;
// until then its requests' ends are booked where they began, also when a
// worker comes back under the same ID.
func TestCtxCachesKeepDropsRemovedWorkers(t *testing.T) {
	m := ctxCaches{}
	m.routed("ctx-0", 5)
	m.routed("ctx-1", 7)
	m.finished("ctx-0", 5, 5)
	m.keep(map[string]bool{})
	require.NotContains(t, m, "ctx-0")
	require.Contains(t, m, "ctx-1", "7 tokens still in flight")
	m.routed("ctx-1", 3) // back under the same ID
	m.finished("ctx-1", 7, 0)
	m.finished("ctx-1", 3, 0)
	require.Zero(t, m["ctx-1"].inFlight)
	m.keep(map[string]bool{})
	require.Empty(t, m)
}
