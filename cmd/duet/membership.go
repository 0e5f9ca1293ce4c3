package main

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/duet-serve/duet/orchestrator/frontend"
	"github.com/duet-serve/duet/router"
)

// membership is what the router's pool holds: the fleet's workers, minus
// those an operator removed, plus those an operator added through the admin
// API (pre-launched workers duet health-checks itself).
type membership struct {
	pool   *router.Pool
	client *http.Client
	health string // health path of added workers

	// mu guards the fields below.
	mu      sync.Mutex
	fleet   []router.Member
	added   map[string]router.Member
	removed map[string]bool
}

var _ frontend.Admin = (*membership)(nil)

func newMembership(pool *router.Pool, healthPath string, timeout time.Duration) *membership {
	return &membership{pool: pool, health: healthPath, client: &http.Client{Timeout: timeout},
		added: map[string]router.Member{}, removed: map[string]bool{}}
}

// setFleet replaces the fleet's part of the membership.
func (m *membership) setFleet(ms []router.Member) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fleet = ms
	m.syncLocked()
}

func (m *membership) syncLocked() {
	var out []router.Member
	for _, f := range m.fleet {
		if !m.removed[f.ID] {
			out = append(out, f)
		}
	}
	for _, a := range m.added {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	m.pool.Sync(out)
}

// AddWorker adds a pre-launched worker. It starts unhealthy and takes
// traffic once a health check passes.
func (m *membership) AddWorker(w router.Member) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pool.Get(w.ID) != nil || m.inFleetLocked(w.ID) {
		return fmt.Errorf("%w: worker %q exists (a removed fleet worker keeps its id)", frontend.ErrConflict, w.ID)
	}
	w.Healthy = false
	m.added[w.ID] = w
	delete(m.removed, w.ID)
	m.syncLocked()
	return nil
}

func (m *membership) inFleetLocked(id string) bool {
	for _, f := range m.fleet {
		if f.ID == id {
			return true
		}
	}
	return false
}

// RemoveWorker takes a worker out of routing (a fleet worker keeps running;
// requests in flight finish).
func (m *membership) RemoveWorker(id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pool.Get(id) == nil {
		return fmt.Errorf("%w: worker %q", frontend.ErrNotFound, id)
	}
	if _, ok := m.added[id]; ok {
		delete(m.added, id)
	} else {
		m.removed[id] = true
	}
	m.syncLocked()
	return nil
}

// SetDraining stops (or resumes) sending new work to a worker.
func (m *membership) SetDraining(id string, draining bool) error {
	ep := m.pool.Get(id)
	if ep == nil {
		return fmt.Errorf("%w: worker %q", frontend.ErrNotFound, id)
	}
	ep.SetDraining(draining)
	return nil
}

// checkAdded runs one health round over the admin-added workers.
func (m *membership) checkAdded(ctx context.Context) {
	m.mu.Lock()
	targets := make([]router.Member, 0, len(m.added))
	for _, a := range m.added {
		targets = append(targets, a)
	}
	m.mu.Unlock()
	results := make(map[string]bool, len(targets))
	for _, w := range targets {
		results[w.ID] = m.probe(ctx, w.URL)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	changed := false
	for id, healthy := range results {
		if w, ok := m.added[id]; ok && w.Healthy != healthy {
			w.Healthy = healthy
			m.added[id] = w
			changed = true
		}
	}
	if changed {
		m.syncLocked()
	}
}

func (m *membership) probe(ctx context.Context, base string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+m.health, nil)
	if err != nil {
		return false
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// runHealth checks admin-added workers every interval until ctx is done;
// done is closed when it has returned.
func (m *membership) runHealth(ctx context.Context, interval time.Duration) (done <-chan struct{}) {
	d := make(chan struct{})
	go func() {
		defer close(d)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				m.checkAdded(ctx)
			}
		}
	}()
	return d
}
