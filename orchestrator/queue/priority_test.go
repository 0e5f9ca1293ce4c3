package queue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestHigherClassesGoFirst(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, testConfig(), genPool(1), Options{})
	h.mustAcquire(t, Ticket{Key: "m", Session: "s"}).Release(true) // s is boosted from now on
	blocker := h.mustAcquire(t, Ticket{Key: "m"})
	out := make(chan result, 8)
	h.acquireAsync(t, ctx, "low", Ticket{Key: "m", Class: "low"}, out)
	h.acquireAsync(t, ctx, "normal", Ticket{Key: "m"}, out)
	h.acquireAsync(t, ctx, "low boosted", Ticket{Key: "m", Session: "s", Class: "low"}, out)
	h.acquireAsync(t, ctx, "high", Ticket{Key: "m", Class: "high"}, out)
	h.acquireAsync(t, ctx, "normal 2", Ticket{Key: "m", Class: "normal"}, out)
	require.Equal(t, 2.0, metricValue(t, h.reg, "duet_queue_depth", map[string]string{"key": "m", "class": "normal", "priority": "normal"}))
	require.Equal(t, 1.0, metricValue(t, h.reg, "duet_queue_depth", map[string]string{"key": "m", "class": "boosted", "priority": "low"}))
	require.Equal(t, []string{"high", "normal", "normal 2", "low boosted", "low"}, drainOrder(t, blocker, 5, out),
		"a class before the next; boosted turns first within a class")
	require.Equal(t, 1.0, metricValue(t, h.reg, "duet_queue_admitted_total", map[string]string{"key": "m", "class": "normal", "priority": "high"}))
}

func TestUnknownClassIsAnError(t *testing.T) {
	h := newHarness(t, testConfig(), genPool(1), Options{})
	_, err := h.q.Acquire(context.Background(), Ticket{Key: "m", Class: "urgent"})
	require.ErrorContains(t, err, `unknown priority class "urgent" (valid: high, normal, low)`)
	require.Equal(t, Stats{Capacity: 1}, h.q.Stats("m"), "nothing held")
}

// A full queue makes room for a higher class by shedding the newest
// waiter of the lowest class below it; a newcomer with nobody below it is
// turned away.
func TestFullQueueShedsTheLowestClass(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig()
	cfg.MaxQueueLength = 2
	h := newHarness(t, cfg, genPool(1), Options{})
	blocker := h.mustAcquire(t, Ticket{Key: "m"})
	out := make(chan result, 8)
	h.acquireAsync(t, ctx, "low 1", Ticket{Key: "m", Class: "low"}, out)
	h.acquireAsync(t, ctx, "normal", Ticket{Key: "m"}, out)
	go func() {
		s, err := h.q.Acquire(ctx, Ticket{Key: "m", Class: "high"})
		out <- result{"high", s, err}
	}()
	shed := recv(t, out)
	require.Equal(t, "low 1", shed.name)
	var rej *RejectError
	require.ErrorAs(t, shed.err, &rej)
	require.ErrorIs(t, shed.err, ErrShed)
	require.Equal(t, "low", rej.Class)
	require.Positive(t, rej.RetryAfter())
	require.Eventually(t, func() bool { return h.waiting("m") == 2 }, 5*time.Second, time.Millisecond)

	_, err := h.q.Acquire(ctx, Ticket{Key: "m", Class: "low"})
	require.ErrorIs(t, err, ErrQueueFull, "nobody below a low request")
	require.Equal(t, 1.0, metricValue(t, h.reg, "duet_queue_rejected_total", map[string]string{"key": "m", "reason": "shed", "priority": "low"}))
	require.Equal(t, 1.0, metricValue(t, h.reg, "duet_queue_rejected_total", map[string]string{"key": "m", "reason": "queue_full", "priority": "low"}))
	require.Equal(t, []string{"high", "normal"}, drainOrder(t, blocker, 2, out))
}

// A request that would wait past its class's max_wait is shed at once,
// and a higher-class arrival pushes a lower waiter past its bound.
func TestPredictedWaitSheds(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig()
	cfg.Classes = []Class{{Name: "high"}, {Name: "normal"}, {Name: "low", MaxWait: 15 * time.Second}}
	h := newHarness(t, cfg, genPool(1), Options{})
	s := h.mustAcquire(t, Ticket{Key: "m"})
	h.clock.Advance(10 * time.Second) // slots are held 10 s
	s.Release(false)

	blocker := h.mustAcquire(t, Ticket{Key: "m"})
	out := make(chan result, 8)
	h.acquireAsync(t, ctx, "low", Ticket{Key: "m", Class: "low"}, out) // predicted 10 s of 15
	go func() {                                                        // predicted 10 s of 30
		s, err := h.q.Acquire(ctx, Ticket{Key: "m"})
		out <- result{"normal", s, err}
	}()
	shed := recv(t, out)
	require.Equal(t, "low", shed.name, "now 20 s ahead of it")
	require.ErrorIs(t, shed.err, ErrShed)

	_, err := h.q.Acquire(ctx, Ticket{Key: "m", Class: "low"})
	require.ErrorIs(t, err, ErrShed, "shed on arrival")
	var rej *RejectError
	require.True(t, errors.As(err, &rej))
	require.Equal(t, 20*time.Second, rej.RetryAfter(), "two slot holds ahead")
	require.Equal(t, []string{"normal"}, drainOrder(t, blocker, 1, out))
}

func TestClassMaxWait(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig()
	cfg.Classes = []Class{{Name: "high"}, {Name: "normal"}, {Name: "low", MaxWait: 2 * time.Second}}
	h := newHarness(t, cfg, genPool(1), Options{})
	blocker := h.mustAcquire(t, Ticket{Key: "m"})
	out := make(chan result, 4)
	h.acquireAsync(t, ctx, "low", Ticket{Key: "m", Class: "low"}, out)
	h.acquireAsync(t, ctx, "normal", Ticket{Key: "m"}, out)
	h.clock.Advance(2 * time.Second)
	r := recv(t, out)
	require.Equal(t, "low", r.name)
	require.ErrorIs(t, r.err, ErrWaitTimeout)
	require.Equal(t, []string{"normal"}, drainOrder(t, blocker, 1, out))
}

// A class with max_share below 1 leaves the rest of the capacity to the
// higher classes: their requests find a free slot at once.
func TestMaxShareKeepsHeadroom(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig()
	cfg.Classes = []Class{{Name: "high"}, {Name: "normal", MaxShare: 0.75}, {Name: "low", MaxShare: 0.5}}
	h := newHarness(t, cfg, genPool(4), Options{})
	low1 := h.mustAcquire(t, Ticket{Key: "m", Class: "low"})
	h.mustAcquire(t, Ticket{Key: "m", Class: "low"})
	out := make(chan result, 4)
	h.acquireAsync(t, ctx, "low 3", Ticket{Key: "m", Class: "low"}, out) // 2 of 4 occupied: low's share is full
	h.mustAcquire(t, Ticket{Key: "m"})                                   // normal: 2 < 3
	h.acquireAsync(t, ctx, "normal 2", Ticket{Key: "m"}, out)            // 3 of 4: normal's share is full
	high := h.mustAcquire(t, Ticket{Key: "m", Class: "high"})            // the last slot
	require.Equal(t, 2, h.waiting("m"))
	low1.Release(false)
	require.Equal(t, 2, h.waiting("m"), "3 occupied: at normal's share")
	high.Release(false) // 2 occupied: normal 2 goes, low 3 stays
	r := recv(t, out)
	require.Equal(t, "normal 2", r.name)
	require.NoError(t, r.err)
	require.Equal(t, 1, h.waiting("m"), "low 3 waits: 3 occupied, above its share")
	r.slot.Release(false)
	require.Equal(t, 1, h.waiting("m"), "2 occupied: still at its share")
	h.clock.Advance(cfg.MaxWait)
	require.ErrorIs(t, recv(t, out).err, ErrWaitTimeout)
}
