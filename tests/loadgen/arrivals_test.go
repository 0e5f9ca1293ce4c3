package loadgen

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestArrivalsConstantGap(t *testing.T) {
	a := newArrivals(40, ArrivalConstant, 1)
	for range 5 {
		require.Equal(t, 25*time.Millisecond, a.gap())
	}
}

func TestArrivalsPoissonIsSeededExponential(t *testing.T) {
	draw := func(seed uint64, n int) []time.Duration {
		a := newArrivals(50, ArrivalPoisson, seed)
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = a.gap()
		}
		return out
	}
	require.Equal(t, draw(3, 100), draw(3, 100), "the same seed gives the same arrivals")
	require.NotEqual(t, draw(3, 100), draw(4, 100))

	// Seeded, so these figures are fixed: an exponential distribution with
	// mean 1/rate = 20 ms has a standard deviation equal to its mean.
	gaps := draw(3, 20000)
	var sum, sq float64
	for _, g := range gaps {
		sum += g.Seconds()
		sq += g.Seconds() * g.Seconds()
	}
	mean := sum / float64(len(gaps))
	std := math.Sqrt(sq/float64(len(gaps)) - mean*mean)
	require.InEpsilon(t, 0.020, mean, 0.03)
	require.InEpsilon(t, 0.020, std, 0.05)
}

func TestNextArrival(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	gap := 50 * time.Millisecond
	for _, tc := range []struct {
		name string
		now  time.Duration // since t0, when the arrival at t0 was granted
		want time.Duration // since t0
	}{
		{"on time: the next is a gap later", 0, 50 * time.Millisecond},
		{"late within the gap: stays on the schedule", 30 * time.Millisecond, 50 * time.Millisecond},
		{"behind by less than maxCatchUp: catches up", 55 * time.Millisecond, 50 * time.Millisecond},
		{"behind by exactly maxCatchUp: catches up", 60 * time.Millisecond, 50 * time.Millisecond},
		{"further behind: re-anchored to now, no burst", 61 * time.Millisecond, 61 * time.Millisecond},
		{"far behind", 5 * time.Second, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, nextArrival(t0, t0.Add(tc.now), gap).Sub(t0))
		})
	}
}
