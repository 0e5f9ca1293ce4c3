package queue

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/router"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a manual clock: timers fire only in Advance, synchronously,
// on the caller's goroutine, in deadline order.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at   time.Time
	f    func()
	done bool // fired or stopped
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), f: f}
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

// Advance moves the clock by d and runs the timers that came due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	for _, t := range c.timers {
		if !t.done && !t.at.After(c.now) {
			t.done = true
			due = append(due, t)
		}
	}
	c.mu.Unlock()
	sort.SliceStable(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		t.f()
	}
}

// pending returns the number of timers neither fired nor stopped.
func (c *fakeClock) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.done {
			n++
		}
	}
	return n
}

// genPool returns a pool of n healthy gen workers gen-0..gen-(n-1); urls,
// when given, are their base URLs.
func genPool(n int, urls ...string) *router.Pool {
	p := router.NewPool()
	p.Sync(genMembers(n, urls...))
	return p
}

func genMembers(n int, urls ...string) []router.Member {
	ms := []router.Member{{ID: "ctx-0", URL: "http://127.0.0.1:1", Role: disagg.RoleContext, Healthy: true}}
	for i := range n {
		u := fmt.Sprintf("http://127.0.0.1:%d", 10+i)
		if i < len(urls) {
			u = urls[i]
		}
		ms = append(ms, router.Member{ID: fmt.Sprintf("gen-%d", i), URL: u, Role: disagg.RoleGeneration, Healthy: true})
	}
	return ms
}

// testConfig is an enabled config with 1 slot per worker.
func testConfig() Config {
	c := Defaults()
	c.Enabled = true
	c.InflightPerWorker = 1
	return c
}

type harness struct {
	q     *Queue
	clock *fakeClock
	reg   *prometheus.Registry
}

// newHarness builds a queue on a fake clock with its own registry.
func newHarness(t *testing.T, cfg Config, pool *router.Pool, opts Options) *harness {
	t.Helper()
	h := &harness{clock: newFakeClock(), reg: prometheus.NewRegistry()}
	opts.Now, opts.AfterFunc, opts.Registry = h.clock.Now, h.clock.AfterFunc, h.reg
	q, err := New(cfg, pool, opts)
	require.NoError(t, err)
	h.q = q
	return h
}

// mustAcquire acquires and fails the test unless t is admitted at once.
func (h *harness) mustAcquire(t *testing.T, tk Ticket) *Slot {
	t.Helper()
	s, err := h.q.Acquire(context.Background(), tk)
	require.NoError(t, err)
	require.NotNil(t, s)
	return s
}

type result struct {
	name string
	slot *Slot
	err  error
}

// acquireAsync starts Acquire on its own goroutine, waits until the queue
// holds it (so that arrival order is the call order), and returns where the
// outcome will be sent. The goroutine is joined through out.
func (h *harness) acquireAsync(t *testing.T, ctx context.Context, name string, tk Ticket, out chan<- result) {
	t.Helper()
	before := h.waiting(tk.Key)
	go func() {
		s, err := h.q.Acquire(ctx, tk)
		out <- result{name, s, err}
	}()
	require.Eventually(t, func() bool { return h.waiting(tk.Key) == before+1 }, 5*time.Second, time.Millisecond,
		"%s never queued", name)
}

func (h *harness) waiting(key string) int {
	st := h.q.Stats(key)
	return st.Boosted + st.Normal
}

// recv returns the next outcome or fails after a generous timeout (a
// machine busy with other tests can hold a goroutine back for seconds).
func recv(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no admission")
		return result{}
	}
}

// metricValue returns a counter's or gauge's value, or a histogram's sample
// count, for the series with exactly these labels (0 when absent).
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			if fmt.Sprint(got) != fmt.Sprint(labels) {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

// counts returns key's lifetime grants and releases.
func (h *harness) counts(key string) (grants, releases uint64) {
	h.q.mu.Lock()
	defer h.q.mu.Unlock()
	k := h.q.keys[key]
	return k.grants, k.releases
}
