package loadgen

import (
	"math"
	"sort"
	"strconv"
)

// Percentiles are the percentiles aiperf reports.
var Percentiles = []float64{1, 5, 10, 25, 50, 75, 90, 95, 99}

// Stats summarizes a sample as aiperf does: mean, extremes, percentiles by
// linear interpolation between closest ranks (numpy's default) and the
// population standard deviation.
type Stats struct {
	Count                                     int
	Avg, Min, Max, Std, Sum                   float64
	P1, P5, P10, P25, P50, P75, P90, P95, P99 float64
}

// Summarize computes the statistics of xs; xs is not modified. An empty
// sample gives a zero Stats with Count 0.
func Summarize(xs []float64) Stats {
	if len(xs) == 0 {
		return Stats{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	mean := sum / float64(len(s))
	var sq float64
	for _, x := range s {
		sq += (x - mean) * (x - mean)
	}
	st := Stats{Count: len(s), Avg: mean, Min: s[0], Max: s[len(s)-1], Std: math.Sqrt(sq / float64(len(s))), Sum: sum}
	ps := []*float64{&st.P1, &st.P5, &st.P10, &st.P25, &st.P50, &st.P75, &st.P90, &st.P95, &st.P99}
	for i, p := range Percentiles {
		*ps[i] = Percentile(s, p)
	}
	return st
}

// Percentile returns the p-th percentile (0..100) of sorted by linear
// interpolation: the value at rank p/100 x (n-1).
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	rank := p / 100 * float64(len(sorted)-1)
	lo := int(math.Floor(rank))
	hi := int(math.Ceil(rank))
	return sorted[lo] + (sorted[hi]-sorted[lo])*(rank-float64(lo))
}

// Get returns a statistic by its export name (avg, min, max, std, count,
// sum, p1 ... p99).
func (s Stats) Get(name string) (float64, bool) {
	switch name {
	case "avg":
		return s.Avg, true
	case "min":
		return s.Min, true
	case "max":
		return s.Max, true
	case "std":
		return s.Std, true
	case "count":
		return float64(s.Count), true
	case "sum":
		return s.Sum, true
	}
	for i, p := range Percentiles {
		if name == "p"+strconv.Itoa(int(p)) {
			return []float64{s.P1, s.P5, s.P10, s.P25, s.P50, s.P75, s.P90, s.P95, s.P99}[i], true
		}
	}
	return 0, false
}

// StatNames are the statistics of a distribution metric in the order of
// aiperf 0.12's JsonMetricResult (count and sum follow, see metricJSON).
var StatNames = []string{"avg", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p99", "min", "max", "std"}

// CSVStatNames are the statistic columns of aiperf 0.12's CSV (STAT_KEYS).
var CSVStatNames = []string{"avg", "min", "max", "sum", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p99", "std"}
