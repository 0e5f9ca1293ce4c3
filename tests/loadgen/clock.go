package loadgen

import "time"

// runClock is a run's time source. Its schedules, stop conditions and the
// times in its records all read it, so a test can run a whole benchmark on
// a fake clock. Build it with newRunClock.
type runClock struct {
	now       func() time.Time
	afterFunc func(d time.Duration, f func()) (stop func() bool)
}

// newRunClock returns a clock reading now and arming timers with afterFunc;
// nil means the real one (time.Now, time.AfterFunc).
func newRunClock(now func() time.Time, afterFunc func(time.Duration, func()) func() bool) runClock {
	if now == nil {
		now = time.Now
	}
	if afterFunc == nil {
		afterFunc = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	return runClock{now: now, afterFunc: afterFunc}
}

// until returns how long it is until t.
func (c runClock) until(t time.Time) time.Duration { return t.Sub(c.now()) }

// after returns a channel closed once d has passed (already closed when
// d <= 0) and a stop function that disarms the timer; call stop when done
// waiting.
func (c runClock) after(d time.Duration) (fired <-chan struct{}, stop func() bool) {
	ch := make(chan struct{})
	if d <= 0 {
		close(ch)
		return ch, func() bool { return false }
	}
	return ch, c.afterFunc(d, func() { close(ch) })
}
