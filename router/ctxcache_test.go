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
	m.finished("ctx-0", 900, 0) // more than booked (a count from before a restart of the model)
	require.Zero(t, m["ctx-0"].inFlight)
	m.finished("ctx-9", 100, 100) // removed meanwhile: nothing comes back
	require.NotContains(t, m, "ctx-9")
	require.Zero(t, m.clock("ctx-9"))
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
	for range 2000 {
		m.routed("ctx-0", 10)
		m.finished("ctx-0", 10, 10)
	}
	require.Equal(t, int64(10), m["ctx-0"].inFlight)
	require.Less(t, m["ctx-0"].peak, int64(300))
	require.GreaterOrEqual(t, m["ctx-0"].peak, int64(20))
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

func TestCtxCachesKeepDropsRemovedWorkers(t *testing.T) {
	m := ctxCaches{}
	m.routed("ctx-0", 1)
	m.routed("ctx-1", 1)
	m.keep(map[string]bool{"ctx-1": true})
	require.NotContains(t, m, "ctx-0")
	require.Contains(t, m, "ctx-1")
}
