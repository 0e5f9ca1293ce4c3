package queue

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/duet-serve/duet/router"
	"github.com/stretchr/testify/require"
)

// fakeWorker serves a vLLM-like /metrics whose waiting gauge the test sets;
// status != 200 makes the scrape fail. It records how often it was scraped.
type fakeWorker struct {
	srv *httptest.Server

	mu      sync.Mutex
	waiting int
	status  int
	scrapes int
}

func newFakeWorker(t *testing.T) *fakeWorker {
	w := &fakeWorker{status: http.StatusOK}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if r.URL.Path != "/metrics" || r.Method != http.MethodGet {
			http.NotFound(rw, r)
			return
		}
		w.scrapes++
		rw.WriteHeader(w.status)
		fmt.Fprintf(rw, "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"+
			"# TYPE vllm:num_requests_waiting gauge\n"+
			"vllm:num_requests_running{model_name=\"m\"} 7\n"+
			"vllm:num_requests_waiting{model_name=\"m\"} %d\n", w.waiting)
	}))
	t.Cleanup(w.srv.Close)
	return w
}

func (w *fakeWorker) set(waiting, status int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.waiting, w.status = waiting, status
}

func (w *fakeWorker) scraped() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.scrapes
}

func scrapeHarness(t *testing.T, n int) (*harness, []*fakeWorker) {
	var ws []*fakeWorker
	var urls []string
	for range n {
		w := newFakeWorker(t)
		ws = append(ws, w)
		urls = append(urls, w.srv.URL)
	}
	cfg := testConfig()
	cfg.RespectWorkerQueue = true
	cfg.ScrapeInterval = time.Second
	cfg.MetricsStaleness = 5 * time.Second
	client := &http.Client{}
	t.Cleanup(client.CloseIdleConnections)
	return newHarness(t, cfg, genPool(n, urls...), Options{HTTPClient: client}), ws
}

func TestWorkerQueueAndStaleness(t *testing.T) {
	ctx := context.Background()
	h, ws := scrapeHarness(t, 2)
	require.Equal(t, 2, h.q.Stats("m").Capacity, "never scraped: unknown counts as room")

	ws[0].set(3, http.StatusOK)
	h.q.round(ctx)
	require.Equal(t, 1, ws[0].scraped())
	require.Equal(t, 1, h.q.Stats("m").Capacity, "gen-0 has a queue of its own")
	a := h.mustAcquire(t, Ticket{Key: "m"})
	out := make(chan result, 1)
	h.acquireAsync(t, ctx, "w", Ticket{Key: "m"}, out)

	// gen-0's scrapes now fail: its last sample ages but is trusted until
	// metrics_staleness, then ignored (never trusted forever).
	ws[0].set(3, http.StatusInternalServerError)
	h.clock.Advance(3 * time.Second)
	h.q.round(ctx)
	require.Equal(t, Stats{Normal: 1, Admitted: 1, Capacity: 1}, h.q.Stats("m"))
	h.clock.Advance(3 * time.Second)
	h.q.round(ctx) // sample is 6s old > 5s
	require.Equal(t, Stats{Admitted: 2, Capacity: 2}, h.q.Stats("m"))
	r := recv(t, out)
	require.NoError(t, r.err)
	require.GreaterOrEqual(t, metricValue(t, h.reg, "duet_queue_scrape_errors_total", map[string]string{"worker": "gen-0"}), 2.0)
	a.Release(false)
	r.slot.Release(false)
}

func TestStaleSampleIgnoredWithoutScrape(t *testing.T) {
	h, ws := scrapeHarness(t, 1)
	ws[0].set(1, http.StatusOK)
	h.q.round(context.Background())
	require.Equal(t, 0, h.q.Stats("m").Capacity)
	// Run stopped (no more rounds): staleness is judged at admission time.
	h.clock.Advance(6 * time.Second)
	h.mustAcquire(t, Ticket{Key: "m"}).Release(false)
}

func TestWorkerQueuesDrainingAdmitInOneRound(t *testing.T) {
	ctx := context.Background()
	h, ws := scrapeHarness(t, 3)
	for _, w := range ws {
		w.set(2, http.StatusOK)
	}
	h.q.round(ctx)
	out := make(chan result, 4)
	for _, n := range []string{"a", "b", "c", "d"} {
		h.acquireAsync(t, ctx, n, Ticket{Key: "m"}, out)
	}
	for _, w := range ws {
		w.set(0, http.StatusOK)
	}
	h.q.round(ctx)
	require.Equal(t, Stats{Normal: 1, Admitted: 3, Capacity: 3}, h.q.Stats("m"))
	var slots []*Slot
	for range 3 {
		r := recv(t, out)
		require.NoError(t, r.err)
		slots = append(slots, r.slot)
	}
	slots[0].Release(false)
	r := recv(t, out)
	require.NoError(t, r.err)
	for _, s := range append(slots[1:], r.slot) {
		s.Release(false)
	}
}

func TestScrapeDropsGoneWorkers(t *testing.T) {
	h, ws := scrapeHarness(t, 2)
	ws[1].set(4, http.StatusOK)
	h.q.round(context.Background())
	require.Len(t, h.q.samples, 2)
	h.q.pool.Get("gen-1").SetDraining(true)
	h.q.round(context.Background())
	require.Len(t, h.q.samples, 1)
}

func TestRunLoop(t *testing.T) {
	cfg := testConfig()
	cfg.ScrapeInterval = 5 * time.Millisecond
	pool := genPool(0)
	q, err := New(cfg, pool, Options{}) // real clock: Run's ticker is real
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		q.Run(ctx)
	}()
	out := make(chan result, 1)
	go func() {
		s, err := q.Acquire(context.Background(), Ticket{Key: "m"})
		out <- result{"w", s, err}
	}()
	require.Eventually(t, func() bool { return q.Stats("m").Normal == 1 }, 5*time.Second, time.Millisecond)
	pool.Sync(genMembers(1)) // nobody calls Recheck: Run's backstop admits
	r := recv(t, out)
	require.NoError(t, r.err)
	r.slot.Release(false)
	cancel()
	<-done
}

func TestScrapeErrorsOfARemovedWorkerAreForgotten(t *testing.T) {
	ctx := context.Background()
	h, ws := scrapeHarness(t, 2)
	ws[0].set(3, http.StatusInternalServerError)
	h.q.round(ctx)
	gen0 := map[string]string{"worker": "gen-0"}
	require.Equal(t, 1.0, metricValue(t, h.reg, "duet_queue_scrape_errors_total", gen0))
	var rest []router.Member
	for _, ep := range h.q.pool.All() {
		if ep.ID != "gen-0" {
			rest = append(rest, router.Member{ID: ep.ID, URL: ep.URL, Role: ep.Role, Healthy: true})
		}
	}
	h.q.pool.Sync(rest)
	h.q.round(ctx)
	mfs, err := h.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				require.False(t, l.GetName() == "worker" && l.GetValue() == "gen-0", "%s still has a gen-0 series", mf.GetName())
			}
		}
	}
}
