package queue

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/duet-serve/duet/router"
	"go.uber.org/zap"
)

// maxScrapeBytes bounds how much of a worker's /metrics is read.
const maxScrapeBytes = 16 << 20

// sample is one worker's scraped waiting-queue gauge and when it was read.
type sample struct {
	waiting float64
	at      time.Time
}

// busyLocked reports whether ep's engine has requests waiting according to
// a fresh sample. No sample or a stale one means unknown: not busy.
func (q *Queue) busyLocked(ep *router.Endpoint, now time.Time) bool {
	s, ok := q.samples[ep]
	return ok && now.Sub(s.at) <= q.cfg.MetricsStaleness && s.waiting > 0
}

// scrape reads the waiting-queue gauge of every available worker of the
// gating role, concurrently, each bounded by scrape_interval, and stores
// the successes. A failed scrape keeps the previous sample, which goes stale
// and is then ignored. Samples of workers no longer available are dropped.
func (q *Queue) scrape(ctx context.Context) {
	eps := q.pool.Available(q.role)
	got := make([]*sample, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Go(func() {
			v, err := q.fetch(ctx, ep)
			if err != nil {
				if ctx.Err() != nil {
					return // shutting down, not a worker failure
				}
				q.metrics.scrapeErrors.WithLabelValues(ep.ID).Inc()
				q.log.Debug("queue: scrape failed", zap.String("worker", ep.ID), zap.Error(err))
				return
			}
			got[i] = &sample{waiting: v, at: q.now()}
		})
	}
	wg.Wait()
	q.mu.Lock()
	defer q.mu.Unlock()
	live := make(map[*router.Endpoint]bool, len(eps))
	for i, ep := range eps {
		live[ep] = true
		if got[i] != nil {
			q.samples[ep] = *got[i]
		}
	}
	for ep := range q.samples {
		if !live[ep] {
			delete(q.samples, ep)
		}
	}
	q.forgetRemovedLocked(eps, got)
}

// forgetRemovedLocked notes the workers of eps whose scrape failed (got
// has no sample for them) and drops the scrape-error series of the
// workers no longer in the pool, so that a fleet that churns through
// workers does not grow the metric without bound. q.mu must be held.
func (q *Queue) forgetRemovedLocked(eps []*router.Endpoint, got []*sample) {
	for i, ep := range eps {
		if got[i] == nil {
			q.scrapeFailed[ep.ID] = true
		}
	}
	for id := range q.scrapeFailed {
		if q.pool.Get(id) == nil {
			q.metrics.scrapeErrors.DeleteLabelValues(id)
			delete(q.scrapeFailed, id)
		}
	}
}

// fetch GETs ep's /metrics and returns the waiting gauge.
func (q *Queue) fetch(ctx context.Context, ep *router.Endpoint) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, q.cfg.ScrapeInterval)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(ep.URL, "/")+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := q.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return 0, fmt.Errorf("GET %s/metrics: status %d", ep.URL, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxScrapeBytes))
	if err != nil {
		return 0, fmt.Errorf("GET %s/metrics: %w", ep.URL, err)
	}
	return gaugeValue(string(body), q.cfg.WaitingMetric)
}
