package queue

import (
	"context"
	"testing"

	"github.com/duet-serve/duet/router"
	"github.com/stretchr/testify/require"
)

func TestImmediateAdmission(t *testing.T) {
	cfg := testConfig()
	cfg.InflightPerWorker = 4
	h := newHarness(t, cfg, genPool(2), Options{})
	// Run is not started and the fake clock never advances: admission can
	// only come from Acquire itself, and it starts no timer.
	for range 8 {
		s := h.mustAcquire(t, Ticket{Key: "m"})
		defer s.Release(false)
	}
	require.Equal(t, 0, h.clock.pending(), "an idle admission must not arm a timer")
	require.Equal(t, Stats{Admitted: 8, Capacity: 8}, h.q.Stats("m"))
	require.Equal(t, 8.0, metricValue(t, h.reg, "duet_queue_wait_seconds", map[string]string{"class": "normal", "priority": "normal"}))
	require.Equal(t, 8.0, metricValue(t, h.reg, "duet_queue_inflight", map[string]string{"key": "m"}))
}

func TestReleaseAdmitsWithoutPolling(t *testing.T) {
	h := newHarness(t, testConfig(), genPool(1), Options{})
	first := h.mustAcquire(t, Ticket{Key: "m"})
	out := make(chan result, 1)
	h.acquireAsync(t, context.Background(), "w", Ticket{Key: "m"}, out)
	first.Release(false) // admits under the same lock, no tick involved
	require.Equal(t, Stats{Admitted: 1, Capacity: 1}, h.q.Stats("m"))
	r := recv(t, out)
	require.NoError(t, r.err)
	r.slot.Release(false)
}

func TestBurstAdmissionFillsFreeSlotsInOnePass(t *testing.T) {
	cfg := testConfig()
	cfg.InflightPerWorker = 2
	pool := genPool(1)
	h := newHarness(t, cfg, pool, Options{})
	held := []*Slot{h.mustAcquire(t, Ticket{Key: "m"}), h.mustAcquire(t, Ticket{Key: "m"})}
	out := make(chan result, 6)
	for _, n := range []string{"w1", "w2", "w3", "w4", "w5", "w6"} {
		h.acquireAsync(t, context.Background(), n, Ticket{Key: "m"}, out)
	}
	// Two more workers join: 4 free slots appear outside the queue's view.
	pool.Sync(genMembers(3))
	h.q.Recheck()
	require.Equal(t, Stats{Normal: 2, Admitted: 6, Capacity: 6}, h.q.Stats("m"), "one pass admits all 4")
	var admitted []string
	for range 4 {
		r := recv(t, out)
		require.NoError(t, r.err)
		admitted = append(admitted, r.name)
		held = append(held, r.slot)
	}
	require.ElementsMatch(t, []string{"w1", "w2", "w3", "w4"}, admitted, "FIFO: the first four")
	// Releasing three slots at once (before anyone waits on them) admits
	// the remaining two.
	for _, s := range held[:3] {
		s.Release(false)
	}
	require.Equal(t, Stats{Admitted: 5, Capacity: 6}, h.q.Stats("m"))
	for range 2 {
		r := recv(t, out)
		require.NoError(t, r.err)
		held = append(held, r.slot)
	}
	for _, s := range held {
		s.Release(false)
	}
	require.Equal(t, Stats{Capacity: 6}, h.q.Stats("m"))
}

func TestPerKeyIsolation(t *testing.T) {
	t.Run("shared pool, separate accounting", func(t *testing.T) {
		h := newHarness(t, testConfig(), genPool(1), Options{})
		a := h.mustAcquire(t, Ticket{Key: "model-a"})
		out := make(chan result, 1)
		h.acquireAsync(t, context.Background(), "a2", Ticket{Key: "model-a"}, out)
		b := h.mustAcquire(t, Ticket{Key: "model-b"}) // a's backlog does not hold b
		b.Release(true)
		require.Equal(t, Stats{Normal: 1, Admitted: 1, Capacity: 1}, h.q.Stats("model-a"), "b's release must not admit a's waiter")
		a.Release(false)
		r := recv(t, out)
		require.NoError(t, r.err)
		r.slot.Release(false)
	})
	t.Run("own workers per key", func(t *testing.T) {
		pool := genPool(2)
		workers := func(key string) []*router.Endpoint {
			id := map[string]string{"a": "gen-0", "b": "gen-1"}[key]
			if ep := pool.Get(id); ep != nil && ep.Available() {
				return []*router.Endpoint{ep}
			}
			return nil
		}
		h := newHarness(t, testConfig(), pool, Options{Workers: workers})
		a := h.mustAcquire(t, Ticket{Key: "a"})
		out := make(chan result, 1)
		h.acquireAsync(t, context.Background(), "a2", Ticket{Key: "a"}, out)
		pool.Get("gen-1").SetDraining(true) // b loses its only worker
		outB := make(chan result, 1)
		h.acquireAsync(t, context.Background(), "b1", Ticket{Key: "b"}, outB)
		require.Equal(t, 1, h.q.Stats("a").Capacity)
		a.Release(false)
		r := recv(t, out)
		require.NoError(t, r.err)
		require.Equal(t, Stats{Normal: 1}, h.q.Stats("b"), "a's release must not admit b's waiter")
		pool.Get("gen-1").SetDraining(false)
		h.q.Recheck()
		rb := recv(t, outB)
		require.NoError(t, rb.err)
		r.slot.Release(false)
		rb.slot.Release(false)
	})
}

func TestDisabledQueueAdmitsEverything(t *testing.T) {
	q, err := New(Defaults(), nil, Options{})
	require.NoError(t, err)
	for range 3 {
		s, err := q.Acquire(context.Background(), Ticket{Key: "m"})
		require.NoError(t, err)
		s.SetSession("x")
		s.Release(true)
		s.Release(true)
	}
	q.Run(context.Background()) // returns at once
	q.Recheck()
	require.Equal(t, Stats{}, q.Stats("m"))
}

func TestNewRejectsBadSetup(t *testing.T) {
	cfg := testConfig()
	_, err := New(cfg, nil, Options{})
	require.EqualError(t, err, "queue: no worker pool")
	cfg.Fairness = "x"
	_, err = New(cfg, genPool(1), Options{})
	require.EqualError(t, err, `queue: fairness: unknown mode "x" (valid: none, user, tenant)`)
	_, err = New(testConfig(), genPool(1), Options{Role: "decode"})
	require.ErrorContains(t, err, `queue: options: unknown role "decode"`)
}
