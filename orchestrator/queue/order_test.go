package queue

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// drainOrder releases blocker, then each admitted slot in turn (capacity 1,
// so every release admits exactly one waiter), and returns the admission
// order.
func drainOrder(t *testing.T, blocker *Slot, n int, out <-chan result) []string {
	t.Helper()
	var order []string
	blocker.Release(false)
	for range n {
		r := recv(t, out)
		require.NoError(t, r.err, r.name)
		order = append(order, r.name)
		r.slot.Release(false)
	}
	return order
}

func TestOrdering(t *testing.T) {
	ctx := context.Background()
	t.Run("boosted before normal, FIFO within class", func(t *testing.T) {
		h := newHarness(t, testConfig(), genPool(1), Options{})
		for _, s := range []string{"s1", "s2"} { // earlier turns complete: s1, s2 are boosted
			h.mustAcquire(t, Ticket{Key: "m", Session: s}).Release(true)
		}
		blocker := h.mustAcquire(t, Ticket{Key: "m"})
		out := make(chan result, 8)
		h.acquireAsync(t, ctx, "n1", Ticket{Key: "m", Session: "x"}, out)
		h.acquireAsync(t, ctx, "b1", Ticket{Key: "m", Session: "s1"}, out)
		h.acquireAsync(t, ctx, "n2", Ticket{Key: "m"}, out)
		h.acquireAsync(t, ctx, "b2", Ticket{Key: "m", Session: "s2"}, out)
		h.acquireAsync(t, ctx, "n3", Ticket{Key: "m", Session: "y"}, out)
		require.Equal(t, 2.0, metricValue(t, h.reg, "duet_queue_depth", map[string]string{"key": "m", "class": "boosted", "priority": "normal"}))
		require.Equal(t, 3.0, metricValue(t, h.reg, "duet_queue_depth", map[string]string{"key": "m", "class": "normal", "priority": "normal"}))
		require.Equal(t, []string{"b1", "b2", "n1", "n2", "n3"}, drainOrder(t, blocker, 5, out))
		require.Equal(t, 2.0, metricValue(t, h.reg, "duet_queue_boosted_total", map[string]string{"key": "m"}))
		require.Equal(t, 2.0, metricValue(t, h.reg, "duet_queue_admitted_total", map[string]string{"key": "m", "class": "boosted", "priority": "normal"}))
	})

	t.Run("boost expires after session_boost_ttl", func(t *testing.T) {
		cfg := testConfig()
		cfg.SessionBoostTTL = 10 * time.Second
		h := newHarness(t, cfg, genPool(1), Options{})
		h.mustAcquire(t, Ticket{Key: "m", Session: "old"}).Release(true)
		h.clock.Advance(11 * time.Second)
		h.mustAcquire(t, Ticket{Key: "m", Session: "fresh"}).Release(true)
		blocker := h.mustAcquire(t, Ticket{Key: "m"})
		out := make(chan result, 4)
		h.acquireAsync(t, ctx, "n1", Ticket{Key: "m"}, out)
		h.acquireAsync(t, ctx, "old", Ticket{Key: "m", Session: "old"}, out)
		h.acquireAsync(t, ctx, "fresh", Ticket{Key: "m", Session: "fresh"}, out)
		require.Equal(t, []string{"fresh", "n1", "old"}, drainOrder(t, blocker, 3, out))
	})

	t.Run("failed turn does not boost", func(t *testing.T) {
		h := newHarness(t, testConfig(), genPool(1), Options{})
		h.mustAcquire(t, Ticket{Key: "m", Session: "s"}).Release(false)
		blocker := h.mustAcquire(t, Ticket{Key: "m"})
		out := make(chan result, 2)
		h.acquireAsync(t, ctx, "n1", Ticket{Key: "m"}, out)
		h.acquireAsync(t, ctx, "s", Ticket{Key: "m", Session: "s"}, out)
		require.Equal(t, []string{"n1", "s"}, drainOrder(t, blocker, 2, out))
	})

	t.Run("SetSession boosts the session routing found", func(t *testing.T) {
		h := newHarness(t, testConfig(), genPool(1), Options{})
		s := h.mustAcquire(t, Ticket{Key: "m"})
		s.SetSession("minted")
		s.Release(true)
		blocker := h.mustAcquire(t, Ticket{Key: "m"})
		out := make(chan result, 2)
		h.acquireAsync(t, ctx, "n1", Ticket{Key: "m"}, out)
		h.acquireAsync(t, ctx, "minted", Ticket{Key: "m", Session: "minted"}, out)
		require.Equal(t, []string{"minted", "n1"}, drainOrder(t, blocker, 2, out))
	})
}

func TestFairness(t *testing.T) {
	ctx := context.Background()
	heavyFirst := func(t *testing.T, fairness string) []string {
		cfg := testConfig()
		cfg.Fairness = fairness
		h := newHarness(t, cfg, genPool(1), Options{})
		// The heavy user's earlier request is charged at admission.
		blocker := h.mustAcquire(t, Ticket{Key: "m", User: "heavy", Tokens: 5000})
		out := make(chan result, 8)
		h.acquireAsync(t, ctx, "h1", Ticket{Key: "m", User: "heavy", Tokens: 5000}, out)
		h.acquireAsync(t, ctx, "h2", Ticket{Key: "m", User: "heavy", Tokens: 5000}, out)
		h.acquireAsync(t, ctx, "h3", Ticket{Key: "m", User: "heavy", Tokens: 5000}, out)
		h.acquireAsync(t, ctx, "l1", Ticket{Key: "m", User: "light", Tokens: 100}, out)
		h.acquireAsync(t, ctx, "o1", Ticket{Key: "m", User: "other", Tokens: 100}, out)
		h.acquireAsync(t, ctx, "l2", Ticket{Key: "m", User: "light", Tokens: 100}, out)
		return drainOrder(t, blocker, 6, out)
	}
	t.Run("none is FIFO", func(t *testing.T) {
		require.Equal(t, []string{"h1", "h2", "h3", "l1", "o1", "l2"}, heavyFirst(t, FairnessNone))
	})
	t.Run("user serves least recent usage first", func(t *testing.T) {
		// light and other (usage 0) before heavy (5000); equal usage goes
		// by arrival; every admission charges its user.
		require.Equal(t, []string{"l1", "o1", "l2", "h1", "h2", "h3"}, heavyFirst(t, FairnessUser))
	})
	t.Run("boosted class ignores usage", func(t *testing.T) {
		cfg := testConfig()
		cfg.Fairness = FairnessUser
		h := newHarness(t, cfg, genPool(1), Options{})
		h.mustAcquire(t, Ticket{Key: "m", User: "heavy", Session: "s", Tokens: 5000}).Release(true)
		blocker := h.mustAcquire(t, Ticket{Key: "m"})
		out := make(chan result, 2)
		h.acquireAsync(t, ctx, "light", Ticket{Key: "m", User: "light"}, out)
		h.acquireAsync(t, ctx, "heavy-boosted", Ticket{Key: "m", User: "heavy", Session: "s"}, out)
		require.Equal(t, []string{"heavy-boosted", "light"}, drainOrder(t, blocker, 2, out))
	})
	t.Run("usage decays", func(t *testing.T) {
		cfg := testConfig()
		cfg.Fairness = FairnessUser
		cfg.FairnessHalfLife = 10 * time.Second
		h := newHarness(t, cfg, genPool(1), Options{})
		h.mustAcquire(t, Ticket{Key: "m", User: "a", Tokens: 1000}).Release(false)
		h.clock.Advance(100 * time.Second) // ten half-lives: a ≈ 0.98
		blocker := h.mustAcquire(t, Ticket{Key: "m", User: "b", Tokens: 10})
		out := make(chan result, 2)
		h.acquireAsync(t, ctx, "b", Ticket{Key: "m", User: "b"}, out)
		h.acquireAsync(t, ctx, "a", Ticket{Key: "m", User: "a"}, out)
		require.Equal(t, []string{"a", "b"}, drainOrder(t, blocker, 2, out))
	})
}
