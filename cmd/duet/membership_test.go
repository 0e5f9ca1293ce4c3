package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/orchestrator"
	"github.com/duet-serve/duet/orchestrator/frontend"
	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/router"
	"github.com/duet-serve/duet/workers"
)

// pathRecorder is a pre-launched worker that answers 200 and records the
// paths it was asked for.
type pathRecorder struct {
	*httptest.Server
	mu    sync.Mutex // guards paths
	paths []string
}

func newPathRecorder(t *testing.T) *pathRecorder {
	r := &pathRecorder{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.paths = append(r.paths, req.URL.Path)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *pathRecorder) asked(path string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.paths {
		if p != path {
			return false
		}
	}
	return len(r.paths) > 0
}

// adminOverFleet wires a started fleet of pre-launched workers (ctx-0,
// gen-0; health_path /ready) to a pool and an admin as runServe does.
func adminOverFleet(t *testing.T, protocol string) (admin, *router.Pool) {
	t.Helper()
	cfg := workers.Defaults()
	cfg.RunDir = t.TempDir()
	cfg.HealthInterval = 20 * time.Millisecond
	cfg.Context.URLs, cfg.Context.HealthPath = []string{newPathRecorder(t).URL}, "/ready"
	cfg.Generation.URLs, cfg.Generation.HealthPath = []string{newPathRecorder(t).URL}, "/ready"
	fleet, err := workers.New(cfg, workers.Options{})
	require.NoError(t, err)
	require.NoError(t, fleet.Start(context.Background()))
	ps := &poolSync{fleet: fleet, pool: router.NewPool(), protocol: protocol}
	ctx, cancel := context.WithCancel(context.Background())
	done := syncPool(ctx, ps)
	t.Cleanup(func() {
		cancel()
		<-done
		require.NoError(t, fleet.Stop(context.Background()))
	})
	return admin{fleet: fleet, sync: ps}, ps.pool
}

// The admin API changes the fleet, and the pool follows at once: added
// workers are health-checked by the fleet with the pool's health_path.
func TestAdminChangesFleetAndPool(t *testing.T) {
	a, pool := adminOverFleet(t, "trtllm")
	srv := newPathRecorder(t)

	require.NoError(t, a.AddWorker(router.Member{ID: "gen-x", URL: srv.URL, Role: disagg.RoleGeneration}))
	ep := pool.Get("gen-x")
	require.NotNil(t, ep, "in the pool when AddWorker returns")
	require.Eventually(t, ep.Healthy, 10*time.Second, 10*time.Millisecond, "healthy after a passing check")
	require.True(t, srv.asked("/ready"), "checked at the pool's health_path only")

	downs := pool.Get("gen-x").Downs()
	require.NoError(t, a.SetDraining("gen-x", true, false))
	require.True(t, pool.Get("gen-x").Draining())
	require.Equal(t, downs, pool.Get("gen-x").Downs(), "a plain drain lets the calls in flight finish")
	require.NoError(t, a.SetDraining("gen-x", true, true))
	require.Equal(t, downs+1, pool.Get("gen-x").Downs(), "a drain with migrate ends them")
	require.ErrorIs(t, a.SetDraining("nobody", true, false), frontend.ErrNotFound)

	require.ErrorIs(t, a.AddWorker(router.Member{ID: "gen-0", URL: srv.URL, Role: disagg.RoleGeneration}), frontend.ErrConflict)
	require.NoError(t, a.RemoveWorker("gen-x"))
	require.Nil(t, pool.Get("gen-x"), "out of the pool when RemoveWorker returns")
	require.ErrorIs(t, a.RemoveWorker("gen-x"), frontend.ErrNotFound)

	require.NoError(t, a.RemoveWorker("ctx-0"))
	require.Nil(t, pool.Get("ctx-0"))
	require.ErrorIs(t, a.AddWorker(router.Member{ID: "ctx-0", URL: srv.URL, Role: disagg.RoleContext}), frontend.ErrConflict,
		"a removed fleet worker keeps its id")
	time.Sleep(100 * time.Millisecond) // health rounds and their syncs go on
	require.Nil(t, pool.Get("ctx-0"), "a removed worker stays out of the pool")

	var oerr *orchestrator.Error
	require.ErrorAs(t, a.AddWorker(router.Member{ID: "w", URL: "http://", Role: disagg.RoleGeneration}), &oerr)
	require.Equal(t, http.StatusBadRequest, oerr.Status)
}

func TestAdminBootstrapPortUnderSGLang(t *testing.T) {
	a, pool := adminOverFleet(t, "sglang")
	require.NoError(t, a.AddWorker(router.Member{ID: "ctx-x", URL: newPathRecorder(t).URL, Role: disagg.RoleContext, BootstrapPort: 8998}))
	require.Equal(t, 8998, pool.Get("ctx-x").BootstrapPort)
}
