package loadgen

import (
	"math/rand/v2"
	"time"
)

// arrivals draws the gaps between request-rate arrivals from a seeded
// source: 1/rate apart (constant) or exponentially distributed with mean
// 1/rate (poisson). It is not safe for concurrent use.
type arrivals struct {
	rng     *rand.Rand
	rate    float64 // arrivals per second, > 0
	poisson bool
}

func newArrivals(rate float64, pattern string, seed uint64) *arrivals {
	return &arrivals{rng: rand.New(rand.NewPCG(seed, 4)), rate: rate, poisson: pattern == ArrivalPoisson}
}

// gap returns the time from one arrival to the next.
func (a *arrivals) gap() time.Duration {
	g := 1 / a.rate
	if a.poisson {
		g = a.rng.ExpFloat64() / a.rate
	}
	return time.Duration(g * float64(time.Second))
}

// maxCatchUp is how far behind schedule the rate dispatcher may fall before
// it re-anchors to now instead of sending a burst (aiperf's default).
const maxCatchUp = 10 * time.Millisecond

// nextArrival returns the arrival gap after the one scheduled at prev,
// given that it is now now: re-anchored to now when that is more than
// maxCatchUp in the past.
func nextArrival(prev, now time.Time, gap time.Duration) time.Time {
	next := prev.Add(gap)
	if next.Before(now.Add(-maxCatchUp)) {
		return now
	}
	return next
}
