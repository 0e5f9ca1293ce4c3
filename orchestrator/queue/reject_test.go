package queue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestMaxQueueLength(t *testing.T) {
	cfg := testConfig()
	cfg.MaxQueueLength = 2
	h := newHarness(t, cfg, genPool(1), Options{})
	first := h.mustAcquire(t, Ticket{Key: "m"})
	out := make(chan result, 2)
	h.acquireAsync(t, context.Background(), "w1", Ticket{Key: "m"}, out)
	h.acquireAsync(t, context.Background(), "w2", Ticket{Key: "m"}, out)

	// The third waiter is turned away at once, on the caller's goroutine.
	s, err := h.q.Acquire(context.Background(), Ticket{Key: "m", Session: "boosted-or-not"})
	require.Nil(t, s)
	require.ErrorIs(t, err, ErrQueueFull)
	var rej *RejectError
	require.ErrorAs(t, err, &rej)
	require.Equal(t, "m", rej.Key)
	require.Equal(t, 2, rej.Waiting)
	// No release yet: 1s per round of capacity 1, position 3.
	require.Equal(t, 3*time.Second, rej.RetryAfter())
	require.Equal(t, 1.0, metricValue(t, h.reg, "duet_queue_rejected_total", map[string]string{"key": "m", "reason": "queue_full", "priority": "normal"}))
	require.Equal(t, Stats{Normal: 2, Admitted: 1, Capacity: 1}, h.q.Stats("m"))

	first.Release(false)
	r := recv(t, out)
	r.slot.Release(false)
	r = recv(t, out)
	r.slot.Release(false)
}

func TestMaxQueueLengthZeroNeverWaits(t *testing.T) {
	cfg := testConfig()
	cfg.MaxQueueLength = 0
	h := newHarness(t, cfg, genPool(1), Options{})
	s := h.mustAcquire(t, Ticket{Key: "m"})
	_, err := h.q.Acquire(context.Background(), Ticket{Key: "m"})
	require.ErrorIs(t, err, ErrQueueFull)
	s.Release(false)
	h.mustAcquire(t, Ticket{Key: "m"}).Release(false)
}

func TestMaxWait(t *testing.T) {
	cfg := testConfig()
	cfg.MaxWait = 10 * time.Second
	h := newHarness(t, cfg, genPool(1), Options{})
	first := h.mustAcquire(t, Ticket{Key: "m"})
	h.clock.Advance(4 * time.Second)
	first.Release(false) // slots are held 4s on average from now on
	first = h.mustAcquire(t, Ticket{Key: "m"})
	out := make(chan result, 2)
	h.acquireAsync(t, context.Background(), "w1", Ticket{Key: "m"}, out)
	h.acquireAsync(t, context.Background(), "w2", Ticket{Key: "m"}, out)

	h.clock.Advance(9 * time.Second)
	require.Equal(t, 2, h.waiting("m"), "not before max_wait")
	h.clock.Advance(time.Second)
	for range 2 {
		r := recv(t, out)
		require.Nil(t, r.slot)
		require.ErrorIs(t, r.err, ErrWaitTimeout)
		var rej *RejectError
		require.ErrorAs(t, r.err, &rej)
		require.Equal(t, 10*time.Second, rej.Waited)
		// w1 expires first with w2 still behind it (position 2: 8s), then
		// w2 alone (position 1: 4s).
		want := map[string]time.Duration{"w1": 8 * time.Second, "w2": 4 * time.Second}[r.name]
		require.Equal(t, want, rej.RetryAfter(), r.name)
	}
	require.Equal(t, 2.0, metricValue(t, h.reg, "duet_queue_rejected_total", map[string]string{"key": "m", "reason": "max_wait", "priority": "normal"}))
	require.Equal(t, Stats{Admitted: 1, Capacity: 1}, h.q.Stats("m"))
	first.Release(false)
	require.Equal(t, 0, h.clock.pending(), "no timer outlives its Acquire")
}

func TestRetryAfterIsBoundedByMaxWait(t *testing.T) {
	cfg := testConfig()
	cfg.MaxWait = 1500 * time.Millisecond
	cfg.MaxQueueLength = 0
	h := newHarness(t, cfg, genPool(1), Options{})
	s := h.mustAcquire(t, Ticket{Key: "m"})
	h.clock.Advance(time.Minute)
	s.Release(false)
	s = h.mustAcquire(t, Ticket{Key: "m"})
	_, err := h.q.Acquire(context.Background(), Ticket{Key: "m"})
	var rej *RejectError
	require.True(t, errors.As(err, &rej))
	require.Equal(t, 2*time.Second, rej.RetryAfter(), "max_wait rounded up to whole seconds")
	s.Release(false)
}

func TestCancelledWhileWaiting(t *testing.T) {
	h := newHarness(t, testConfig(), genPool(1), Options{})
	first := h.mustAcquire(t, Ticket{Key: "m"})
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan result, 1)
	h.acquireAsync(t, ctx, "w", Ticket{Key: "m"}, out)
	cancel()
	r := recv(t, out)
	require.ErrorIs(t, r.err, context.Canceled)
	require.Nil(t, r.slot)
	require.Equal(t, Stats{Admitted: 1, Capacity: 1}, h.q.Stats("m"))
	require.Equal(t, 1.0, metricValue(t, h.reg, "duet_queue_cancelled_total", map[string]string{"key": "m"}))
	first.Release(false)

	_, err := h.q.Acquire(ctx, Ticket{Key: "m"}) // already gone: not queued, not admitted
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, Stats{Capacity: 1}, h.q.Stats("m"))
}

// TestAdmittedAsClientLeaves pins the hand-off: a waiter admitted by a
// release at the moment its context ends owns the slot and gives it back,
// so the slot is neither leaked nor counted twice.
func TestAdmittedAsClientLeaves(t *testing.T) {
	h := newHarness(t, testConfig(), genPool(1), Options{})
	first := h.mustAcquire(t, Ticket{Key: "m"})
	w, slot, err := h.q.enqueue(Ticket{Key: "m"}, 1)
	require.NoError(t, err)
	require.Nil(t, slot)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	first.Release(false) // admits w: its done channel is closed...
	<-w.done
	s, err := h.q.settle(ctx, w) // ...while Acquire saw ctx.Done
	require.Nil(t, s)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, Stats{Capacity: 1}, h.q.Stats("m"))
	grants, releases := h.counts("m")
	require.Equal(t, uint64(2), grants)
	require.Equal(t, grants, releases)
	w.slot.Release(true) // a stray second release is a no-op
	grants, releases = h.counts("m")
	require.Equal(t, grants, releases)
	h.mustAcquire(t, Ticket{Key: "m"}).Release(false)
}
