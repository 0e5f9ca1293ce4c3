package workers

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// prober performs health checks: GET <url><health_path>, healthy on 200.
// It keeps no idle connections, so it leaves no goroutines behind and a
// restarted worker is never probed over a stale connection.
type prober struct {
	client *http.Client
}

func newProber(timeout time.Duration) *prober {
	return &prober{client: &http.Client{
		Timeout:   timeout,
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
	}}
}

// check probes url once; nil means healthy.
func (p *prober) check(ctx context.Context, url string) error {
	body, err := p.fetch(ctx, url)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	return body.Close()
}

// get fetches url and returns its 200 body, of at most limit bytes.
func (p *prober) get(ctx context.Context, url string, limit int64) ([]byte, error) {
	body, err := p.fetch(ctx, url)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, limit+1))
	if err == nil && int64(len(b)) > limit {
		err = fmt.Errorf("GET %s: body longer than %d bytes", url, limit)
	}
	return b, err
}

// fetch GETs url; a status other than 200 is an error. The caller closes
// the body.
func (p *prober) fetch(ctx context.Context, url string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return resp.Body, nil
}

// healthLoop runs checkHealth every HealthInterval until ctx is done. It is
// a goroutine owned by the fleet and joined by Stop.
func (f *Fleet) healthLoop(ctx context.Context) {
	defer f.wg.Done()
	t := time.NewTicker(f.cfg.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f.checkHealth(ctx)
		}
	}
}

// checkHealth runs one round of health checks, in parallel, over the
// workers being watched: managed workers that passed their start-up check
// and whose process still runs, and external workers (listed in urls or
// added by AddWorker), each at its pool's health_path. A success reads
// what the worker's engine has not reported yet (missingReportsLocked) and
// marks a down worker up; UnhealthyThreshold failures in a row mark an up
// worker down and ask its supervisor to restart it. Results for a process
// that was replaced meanwhile, and rounds cut short by ctx, are discarded.
func (f *Fleet) checkHealth(ctx context.Context) {
	type target struct {
		w    *worker
		gen  int
		want reportSet // the reports to read after a passing check
	}
	type result struct {
		err     error
		reports readResult
	}
	var targets []target
	f.mu.Lock()
	for _, w := range f.workers {
		if w.probing {
			targets = append(targets, target{w, w.gen, f.missingReportsLocked(w)})
		}
	}
	f.mu.Unlock()
	results := make([]result, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[i]
			r.err = f.probe.check(ctx, t.w.spec.URL+t.w.spec.HealthPath) // spec is immutable
			if r.err == nil {
				r.reports = f.readReports(ctx, &t.w.spec, t.want)
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, t := range targets {
		if t.w.gen != t.gen || !t.w.probing {
			continue
		}
		r := results[i]
		if r.err == nil {
			f.recordReportsLocked(t.w, t.want, r.reports)
		}
		f.applyProbeLocked(t.w, r.err)
	}
}

// applyProbeLocked records one health check result; f.mu is held.
func (f *Fleet) applyProbeLocked(w *worker, err error) {
	if err == nil {
		w.fails = 0
		if w.state != StateUp {
			f.setStateLocked(w, StateUp, "")
		}
		return
	}
	w.fails++
	msg := fmt.Sprintf("health check failed %d times in a row: %v", w.fails, err)
	switch {
	case w.state == StateUp && w.fails >= f.cfg.UnhealthyThreshold:
		w.resetReportsLocked() // read again when it is back: it may come back as another process
		f.setStateLocked(w, StateDown, msg)
		if !w.spec.External {
			select {
			case w.unhealthy <- w.gen:
			default:
			}
		}
	case w.state != StateUp:
		w.lastErr = msg
	}
}
