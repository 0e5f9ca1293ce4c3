package loadgen

import (
	"context"
	"sort"
	"sync"
	"time"
)

// fakeClock is a manual clock, like orchestrator/queue's: time moves only in
// Next, which fires the due timers synchronously, on the caller's
// goroutine, in deadline order (arming order among equal deadlines).
type fakeClock struct {
	start time.Time

	mu     sync.Mutex // guards the fields below
	now    time.Time
	armed  int // timers armed so far, for the order of equal deadlines
	timers []*fakeTimer
}

type fakeTimer struct {
	at   time.Time
	seq  int
	f    func()
	done bool // fired or stopped
}

func newFakeClock() *fakeClock {
	t0 := time.Unix(1_700_000_000, 0)
	return &fakeClock{start: t0, now: t0}
}

// Now returns the clock's time.
func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Elapsed returns the time elapsed on the clock since it started.
func (c *fakeClock) Elapsed() time.Duration { return c.Now().Sub(c.start) }

// AfterFunc arms a timer that calls f once the clock reaches now + d; stop
// disarms it and reports whether it had not fired.
func (c *fakeClock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), seq: c.armed, f: f}
	c.armed++
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if t.done {
			return false
		}
		t.done = true
		return true
	}
}

// Sleep waits d on the clock; it returns ctx's error if ctx ends first.
func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	fired := make(chan struct{})
	stop := c.AfterFunc(d, func() { close(fired) })
	select {
	case <-fired:
		return nil
	case <-ctx.Done():
		stop()
		return ctx.Err()
	}
}

// Next moves the clock to the earliest armed timer and fires every timer
// due then. It returns false, leaving the clock alone, when none is armed.
func (c *fakeClock) Next() bool {
	c.mu.Lock()
	live := c.timers[:0]
	for _, t := range c.timers {
		if !t.done {
			live = append(live, t)
		}
	}
	c.timers = live
	if len(live) == 0 {
		c.mu.Unlock()
		return false
	}
	sort.SliceStable(live, func(i, j int) bool {
		if !live[i].at.Equal(live[j].at) {
			return live[i].at.Before(live[j].at)
		}
		return live[i].seq < live[j].seq
	})
	if live[0].at.After(c.now) {
		c.now = live[0].at
	}
	var due []*fakeTimer
	for _, t := range live {
		if t.at.After(c.now) {
			break
		}
		t.done = true
		due = append(due, t)
	}
	c.mu.Unlock()
	for _, t := range due {
		t.f()
	}
	return true
}
