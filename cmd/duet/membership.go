package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/duet-serve/duet/orchestrator"
	"github.com/duet-serve/duet/orchestrator/frontend"
	"github.com/duet-serve/duet/router"
	"github.com/duet-serve/duet/router/redisstore"
	"github.com/duet-serve/duet/workers"
)

// poolSync copies the fleet's membership into the router's pool: the fleet
// is the one source of which workers exist and are healthy.
type poolSync struct {
	fleet    *workers.Fleet
	pool     *router.Pool
	protocol string

	// mu makes snapshot-then-Sync one step, so that an older snapshot never
	// overwrites a newer one.
	mu sync.Mutex
}

// sync makes the pool equal to a fleet snapshot taken now. It is safe for
// concurrent use.
func (s *poolSync) sync() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pool.Sync(members(s.fleet.Snapshot(), s.protocol))
}

// admin is the admin API over the fleet: adding and removing workers
// changes the fleet (which health-checks added workers like any other);
// draining is routing state, set on the pool's endpoints. With a shared
// store every change is also published, and the other replicas apply it.
type admin struct {
	fleet  *workers.Fleet
	sync   *poolSync
	shared *redisstore.Store // nil with local state
}

var _ frontend.Admin = admin{}

// AddWorker adds a pre-launched worker to the fleet. It starts unhealthy
// and takes traffic once a health check passes. With a shared store that
// cannot take the change, the worker is not added.
func (a admin) AddWorker(m router.Member) error {
	err := a.fleet.AddWorker(workers.ExternalWorker{Name: m.ID, URL: m.URL, Role: m.Role, BootstrapPort: m.BootstrapPort})
	if err == nil {
		if err = a.publish(redisstore.WorkerChange{Op: redisstore.OpAdd, ID: m.ID, URL: m.URL, Role: m.Role, BootstrapPort: m.BootstrapPort}); err != nil {
			_ = a.fleet.RemoveWorker(m.ID) // an added worker is forgotten: nothing changed
		}
	}
	return a.synced(err)
}

// RemoveWorker takes a worker out of routing (a fleet worker keeps running;
// requests in flight finish).
func (a admin) RemoveWorker(id string) error {
	ep := a.sync.pool.Get(id)
	if ep != nil {
		if err := a.publish(redisstore.WorkerChange{Op: redisstore.OpRemove, ID: id, URL: ep.URL, Role: ep.Role}); err != nil {
			return err
		}
	}
	return a.synced(a.fleet.RemoveWorker(id))
}

// SetDraining stops (or resumes) sending new work to a worker; with
// migrate, the worker's calls in flight give up so that their streams
// continue elsewhere.
func (a admin) SetDraining(id string, draining, migrate bool) error {
	ep := a.sync.pool.Get(id)
	if ep == nil {
		return fmt.Errorf("%w: worker %q", frontend.ErrNotFound, id)
	}
	op := redisstore.OpUndrain
	if draining {
		op = redisstore.OpDrain
	}
	if err := a.publish(redisstore.WorkerChange{Op: op, ID: id, URL: ep.URL, Role: ep.Role, Migrate: migrate}); err != nil {
		return err
	}
	ep.SetDraining(draining)
	if migrate {
		ep.MarkDown()
	}
	return nil
}

// publish shares a change with the other replicas (nothing with local
// state). A store that cannot take it fails the admin call with 503.
func (a admin) publish(c redisstore.WorkerChange) error {
	if a.shared == nil {
		return nil
	}
	if err := a.shared.PublishWorker(context.Background(), c); err != nil {
		return &orchestrator.Error{Status: http.StatusServiceUnavailable, Message: "admin change not made: " + err.Error()}
	}
	return nil
}

// synced brings the pool up to date after a successful change, so the
// change is visible to routing when the admin call returns, and maps the
// fleet's errors to the frontend's.
func (a admin) synced(err error) error {
	var oe *orchestrator.Error
	switch {
	case err == nil:
		a.sync.sync()
		return nil
	case errors.As(err, &oe):
		return err
	case errors.Is(err, workers.ErrWorkerExists):
		return fmt.Errorf("%w: %w", frontend.ErrConflict, err)
	case errors.Is(err, workers.ErrUnknownWorker):
		return fmt.Errorf("%w: %w", frontend.ErrNotFound, err)
	case errors.Is(err, workers.ErrInvalidWorker):
		return &orchestrator.Error{Status: http.StatusBadRequest, Message: err.Error()}
	}
	return err
}
