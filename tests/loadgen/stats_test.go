package loadgen

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPercentileLinearInterpolation(t *testing.T) {
	// numpy.percentile([1, 2, 3, 4, 10], p) with the default (linear)
	// method: rank = p/100 * (n-1).
	sorted := []float64{1, 2, 3, 4, 10}
	cases := []struct {
		p, want float64
	}{
		{0, 1}, {1, 1.04}, {5, 1.2}, {10, 1.4}, {25, 2}, {50, 3}, {75, 4}, {90, 7.6}, {95, 8.8}, {99, 9.76}, {100, 10},
	}
	for _, tc := range cases {
		require.InDelta(t, tc.want, Percentile(sorted, tc.p), 1e-9, "p%v", tc.p)
	}
	require.Equal(t, 7.0, Percentile([]float64{7}, 99), "one sample")
	require.True(t, math.IsNaN(Percentile(nil, 50)))
}

func TestSummarizeHandComputed(t *testing.T) {
	xs := []float64{1, 8, 3, 5, 4, 4, 6, 5} // sorted: 1 3 4 4 5 5 6 8, mean 36/8
	s := Summarize(xs)
	require.Equal(t, 8, s.Count)
	require.InDelta(t, 4.5, s.Avg, 1e-12)
	// deviations from 4.5: 3.5 1.5 .5 .5 .5 .5 1.5 3.5 -> squares 12.25 2.25 .25 .25 .25 .25 2.25 12.25 = 30 / 8
	require.InDelta(t, math.Sqrt(30.0/8), s.Std, 1e-12)
	require.Equal(t, 1.0, s.Min)
	require.Equal(t, 8.0, s.Max)
	// rank 0.07 -> 1 + 0.07*(3-1); rank 3.5 -> 4.5; rank 6.93 -> 6 + 0.93*2
	require.InDelta(t, 1.14, s.P1, 1e-9)
	require.InDelta(t, 4.5, s.P50, 1e-9)
	require.InDelta(t, 7.86, s.P99, 1e-9)
	require.InDelta(t, 3.75, s.P25, 1e-9) // rank 1.75 -> 3 + .75*1
	require.Equal(t, []float64{1, 8, 3, 5, 4, 4, 6, 5}, xs, "input untouched")
	require.Equal(t, Stats{}, Summarize(nil))

	for _, name := range StatNames {
		_, ok := s.Get(name)
		require.True(t, ok, name)
	}
	v, _ := s.Get("p25")
	require.Equal(t, s.P25, v)
}

func TestRecordMetricsAsAiperfDefines(t *testing.T) {
	ms := func(v float64) time.Duration { return time.Duration(v * 1e6) }
	r := Record{Phase: PhaseProfiling, Streaming: true, ContentChunks: 10, HasUsage: true, CompletionTokens: 11,
		PromptTokens: 100, ClientPromptTokens: 99}
	r.FirstContent, r.SecondContent, r.LastContent = ms(50), ms(60), ms(250)
	ttft, ok := r.TTFT()
	require.True(t, ok)
	require.Equal(t, 50.0, float64(ttft)/1e6)
	ttst, _ := r.TTST()
	require.Equal(t, 10.0, float64(ttst)/1e6)
	lat, _ := r.Latency()
	require.Equal(t, 250.0, float64(lat)/1e6)
	itl, ok := r.ITL()
	require.True(t, ok)
	require.InDelta(t, 20e6, itl, 1e-6, "(250-50)/(11-1) ms, with output tokens from usage")
	tps, _ := r.TokensPerSecPerUser()
	require.InDelta(t, 50.0, tps, 1e-9)
	require.Equal(t, 100, r.InputTokens(), "server prompt tokens win")

	r.CompletionTokens = 1
	_, ok = r.ITL()
	require.False(t, ok, "one output token has no ITL")
	r.Err = &ErrorDetails{Type: ErrTruncated}
	_, ok = r.TTFT()
	require.False(t, ok, "failed requests have no metrics")
}
