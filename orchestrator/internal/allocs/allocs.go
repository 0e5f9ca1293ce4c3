// Package allocs measures what a call allocates, for tests that bound the
// cost of hostile inputs.
package allocs

import (
	"math"
	"runtime"
)

// MeasureFrom is the smallest input whose allocations By measures: below
// it the fixed allowance dominates, and measuring stops the world twice
// per input.
const MeasureFrom = 256

// By runs fn and returns the bytes it allocated, or 0 without measuring
// when size is under MeasureFrom. It reads a counter, not a clock, so a
// bound on it does not flake on a loaded machine. The counter is the
// process's: another test's goroutines can allocate while fn runs, and
// they only ever add, so fn runs three times and the least is kept.
func By(size int, fn func()) uint64 {
	if size < MeasureFrom {
		fn()
		return 0
	}
	least := uint64(math.MaxUint64)
	for range 3 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		fn()
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}
