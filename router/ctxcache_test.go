package router

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The clock counts computed tokens, and cached ones at 1/ctxCachedShare.
func TestTouchedCountsCachedTokensAtAShare(t *testing.T) {
	require.Equal(t, int64(100+200/ctxCachedShare), touched(100, 200))
	require.Zero(t, touched(0, 0))
}

func TestSurvival(t *testing.T) {
	for _, tc := range []struct {
		since int64
		want  float64
	}{
		{0, 1}, {800, 1}, // room for the 200 tokens still
		{900, 0.5}, {1000, 0}, {4000, 0},
	} {
		require.InDelta(t, tc.want, survival(tc.since, 1000, 200), 1e-9, "since %d", tc.since)
	}
	require.Equal(t, 0.5, survival(0, 1000, 2000), "a prefix larger than the cache: what it holds")
	require.Equal(t, 1.0, survival(0, 1000, 0), "nothing held")
}
