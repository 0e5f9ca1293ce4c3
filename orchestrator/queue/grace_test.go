package queue

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func graceHarness(t *testing.T) *harness {
	cfg := testConfig()
	cfg.GracePeriod = 2 * time.Second
	return newHarness(t, cfg, genPool(1), Options{})
}

func TestGracePeriod(t *testing.T) {
	ctx := context.Background()
	t.Run("held slot goes to the session's next turn", func(t *testing.T) {
		h := graceHarness(t)
		turn := h.mustAcquire(t, Ticket{Key: "m", Session: "s"})
		out := make(chan result, 1)
		h.acquireAsync(t, ctx, "other", Ticket{Key: "m"}, out)
		turn.Release(true)
		require.Equal(t, Stats{Normal: 1, Held: 1, Capacity: 1}, h.q.Stats("m"), "the slot is held, not given to the waiter")
		require.Equal(t, 1.0, metricValue(t, h.reg, "duet_queue_grace_held", map[string]string{"key": "m"}))
		h.clock.Advance(time.Second)
		next := h.mustAcquire(t, Ticket{Key: "m", Session: "s"}) // claims the hold at once
		require.Equal(t, Stats{Normal: 1, Admitted: 1, Capacity: 1}, h.q.Stats("m"))
		h.clock.Advance(5 * time.Second) // the claimed hold's timer was stopped
		require.Equal(t, 1, h.waiting("m"))
		next.Release(false) // not completed: no hold, the waiter goes
		r := recv(t, out)
		require.NoError(t, r.err)
		r.slot.Release(false)
	})
	t.Run("unclaimed hold is freed when the period ends", func(t *testing.T) {
		h := graceHarness(t)
		turn := h.mustAcquire(t, Ticket{Key: "m", Session: "s"})
		out := make(chan result, 1)
		h.acquireAsync(t, ctx, "other", Ticket{Key: "m"}, out)
		turn.Release(true)
		h.clock.Advance(2 * time.Second)
		r := recv(t, out)
		require.NoError(t, r.err)
		require.Equal(t, Stats{Admitted: 1, Capacity: 1}, h.q.Stats("m"))
		r.slot.Release(false)
	})
	t.Run("no hold without a session or when off", func(t *testing.T) {
		h := graceHarness(t)
		h.mustAcquire(t, Ticket{Key: "m"}).Release(true)
		require.Equal(t, Stats{Capacity: 1}, h.q.Stats("m"))
		h2 := newHarness(t, testConfig(), genPool(1), Options{})
		h2.mustAcquire(t, Ticket{Key: "m", Session: "s"}).Release(true)
		require.Equal(t, Stats{Capacity: 1}, h2.q.Stats("m"))
	})
}
