package workers

import (
	"errors"
	"fmt"
	"github.com/duet-serve/duet/workers/discovery"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/duet-serve/duet/proto/disagg"
)

// Errors AddWorker and RemoveWorker wrap, for callers to classify.
var (
	// ErrWorkerExists: the name is taken by a worker of the fleet, including
	// a removed fleet worker (it keeps its name).
	ErrWorkerExists = errors.New("worker exists")
	// ErrUnknownWorker: no worker of that name is in the fleet's
	// membership (never was, or was removed).
	ErrUnknownWorker = errors.New("unknown worker")
	// ErrInvalidWorker: the ExternalWorker is malformed (name, URL, role or
	// bootstrap port).
	ErrInvalidWorker = errors.New("invalid worker")
	// ErrNotRunning: the fleet has not started successfully yet, or was
	// stopped.
	ErrNotRunning = errors.New("fleet not running")
)

// ExternalWorker is a pre-launched worker added to a running fleet by
// AddWorker, like one listed in a pool's urls.
type ExternalWorker struct {
	// Name identifies the worker; non-empty, without '/' or whitespace, and
	// unique in the fleet.
	Name string
	// URL is the base URL, http:// or https:// with a host; a trailing '/'
	// is dropped.
	URL string
	// Role is context, generation or mixed. The worker follows the rules of
	// the pool of its role (health_path; a mixed worker those of the
	// context pool).
	Role disagg.Role
	// BootstrapPort is an SGLang prefill worker's bootstrap port, reported
	// as the worker's SidePort; 0 means unknown. Only a worker that serves
	// context has one.
	BootstrapPort int
}

// AddWorker adds a pre-launched worker to the running fleet. It is an
// external worker: it starts down, is checked by the fleet's health loop
// with its pool's health_path, is marked up by the first check that passes
// and down again after unhealthy_threshold failures in a row, like every
// worker. It appears at the end of Snapshot and subscribers are notified.
// Errors wrap ErrInvalidWorker, ErrWorkerExists or ErrNotRunning. It may be
// called between a successful Start and Stop.
func (f *Fleet) AddWorker(x ExternalWorker) error {
	spec, err := f.externalSpec(x)
	if err != nil {
		return fmt.Errorf("adding worker %q: %w", x.Name, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.runningLocked() {
		return fmt.Errorf("adding worker %q: %w", x.Name, ErrNotRunning)
	}
	if i := f.findLocked(x.Name); i >= 0 {
		if f.workers[i].removed {
			return fmt.Errorf("adding worker %q: %w (removed from routing; a fleet worker keeps its name)", x.Name, ErrWorkerExists)
		}
		return fmt.Errorf("adding worker %q: %w", x.Name, ErrWorkerExists)
	}
	w := &worker{spec: spec, added: true, unhealthy: make(chan int, 1), state: StateDown, since: f.now(), probing: true}
	f.workers = append(f.workers, w)
	f.log.Info("worker added", zap.String("worker", spec.Name), zap.String("role", string(spec.Role)), zap.String("url", spec.URL))
	f.subs.notify()
	return nil
}

// RemoveWorker takes a worker out of the fleet's membership. A worker added
// by AddWorker is forgotten (its name may be added again). A worker of the
// plan stays in Snapshot with Removed set and keeps running, supervised as
// before; its name stays taken. Subscribers are notified. Errors wrap
// ErrUnknownWorker (also for a worker already removed) or ErrNotRunning. It
// may be called between a successful Start and Stop.
func (f *Fleet) RemoveWorker(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.runningLocked() {
		return fmt.Errorf("removing worker %q: %w", name, ErrNotRunning)
	}
	i := f.findLocked(name)
	if i < 0 || f.workers[i].removed {
		return fmt.Errorf("removing worker %q: %w", name, ErrUnknownWorker)
	}
	w := f.workers[i]
	if w.added {
		w.probing = false // a health round under way drops its result
		f.workers = slices.Delete(f.workers, i, i+1)
	} else {
		w.removed = true
	}
	f.log.Info("worker removed", zap.String("worker", name), zap.String("role", string(w.spec.Role)), zap.Bool("added", w.added))
	f.subs.notify()
	return nil
}

// runningLocked reports whether Start succeeded and Stop was not called;
// f.mu is held.
func (f *Fleet) runningLocked() bool { return f.cancel != nil && !f.stopped }

// findLocked returns the index of the worker called name, or -1; f.mu is
// held.
func (f *Fleet) findLocked(name string) int {
	return slices.IndexFunc(f.workers, func(w *worker) bool { return w.spec.Name == name })
}

// externalSpec validates x and returns its spec under the rules of its
// role's pool.
func (f *Fleet) externalSpec(x ExternalWorker) (WorkerSpec, error) {
	base := strings.TrimRight(x.URL, "/")
	w := discovery.Worker{ID: x.Name, URL: base, Role: x.Role, BootstrapPort: x.BootstrapPort}
	if err := w.Validate(); err != nil { // the same rules as every membership source
		return WorkerSpec{}, fmt.Errorf("%w: %w", ErrInvalidWorker, err)
	}
	u, _ := url.Parse(base)
	p := f.cfg.Context
	if !x.Role.ServesContext() {
		p = f.cfg.Generation
	}
	port, _ := strconv.Atoi(u.Port()) // 0: the scheme's default
	return WorkerSpec{
		Name:       x.Name,
		Role:       x.Role,
		Engine:     p.Engine,
		External:   true,
		Port:       port,
		URL:        base,
		SidePort:   x.BootstrapPort,
		HealthPath: p.HealthPath,
		Restart:    p.Restart,
	}, nil
}
