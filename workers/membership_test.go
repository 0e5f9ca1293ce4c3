package workers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/proto/disagg"
)

// healthServer is a pre-launched worker: it records the paths it is asked
// for and answers 200 while healthy, 503 otherwise.
type healthServer struct {
	*httptest.Server
	healthy atomic.Bool

	// mu guards paths.
	mu    sync.Mutex
	paths []string
}

func newHealthServer(t *testing.T) *healthServer {
	h := &healthServer{}
	h.healthy.Store(true)
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.paths = append(h.paths, r.URL.Path)
		h.mu.Unlock()
		if !h.healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *healthServer) requested() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.paths...)
}

// externalFleet starts a fleet whose pools are one pre-launched worker
// each (ctx-0, gen-0), health-checked at /live (context) and /ready
// (generation), marked down after 3 failures. Health rounds run only when a
// test calls checkHealth, unless it sets a shorter interval.
func externalFleet(t *testing.T, interval time.Duration) *Fleet {
	t.Helper()
	cfg := Defaults()
	cfg.RunDir = t.TempDir()
	cfg.HealthInterval = interval
	cfg.UnhealthyThreshold = 3
	cfg.Context.Count, cfg.Context.URLs, cfg.Context.HealthPath = 0, []string{newHealthServer(t).URL}, "/live"
	cfg.Generation.Count, cfg.Generation.URLs, cfg.Generation.HealthPath = 0, []string{newHealthServer(t).URL}, "/ready"
	f := newTestFleet(t, cfg)
	require.NoError(t, f.Start(context.Background()))
	t.Cleanup(func() { stopFleet(t, f) })
	return f
}

// Regression (issue 11): a worker added through the admin API was checked
// by a second prober in cmd that marked it down on its first failed check
// and always asked for /health, whatever the pool's health_path and
// unhealthy_threshold said.
func TestAddedWorkerFollowsPoolHealthRules(t *testing.T) {
	f := externalFleet(t, time.Hour)
	srv := newHealthServer(t)
	ch, unsubscribe := f.Subscribe()
	defer unsubscribe()

	require.NoError(t, f.AddWorker(ExternalWorker{Name: "gen-x", URL: srv.URL + "/", Role: disagg.RoleGeneration}))
	select {
	case <-ch:
	default:
		t.Fatal("no change notification for an added worker")
	}
	snap := f.Snapshot()
	require.Len(t, snap, 3)
	added := snap[2]
	require.Equal(t, "gen-x", added.Name, "added workers come after the plan's")
	require.Equal(t, srv.URL, added.URL, "the trailing slash is dropped")
	require.True(t, added.External)
	require.Equal(t, StateDown, added.State, "an added worker starts unhealthy")
	require.False(t, added.Healthy())

	f.checkHealth(context.Background())
	require.Equal(t, StateUp, byName(f.Snapshot(), "gen-x").State, "one passing check brings it up")
	require.Equal(t, []string{"/ready"}, srv.requested(), "the generation pool's health_path")

	srv.healthy.Store(false)
	for i := 1; i < 3; i++ {
		f.checkHealth(context.Background())
		require.Equal(t, StateUp, byName(f.Snapshot(), "gen-x").State, "%d failures are below unhealthy_threshold 3", i)
	}
	f.checkHealth(context.Background())
	w := byName(f.Snapshot(), "gen-x")
	require.Equal(t, StateDown, w.State)
	require.Contains(t, w.LastError, "health check failed 3 times in a row")
	require.Contains(t, w.LastError, "503 Service Unavailable")

	srv.healthy.Store(true)
	f.checkHealth(context.Background())
	require.Equal(t, StateUp, byName(f.Snapshot(), "gen-x").State)
}

func TestAddedWorkerUsesItsRolesPool(t *testing.T) {
	f := externalFleet(t, time.Hour)
	ctx, mixed := newHealthServer(t), newHealthServer(t)
	require.NoError(t, f.AddWorker(ExternalWorker{Name: "ctx-x", URL: ctx.URL, Role: disagg.RoleContext, BootstrapPort: 8998}))
	require.NoError(t, f.AddWorker(ExternalWorker{Name: "mixed-x", URL: mixed.URL, Role: disagg.RoleMixed}))
	f.checkHealth(context.Background())
	require.Equal(t, []string{"/live"}, ctx.requested())
	require.Equal(t, []string{"/live"}, mixed.requested(), "a mixed worker follows the context pool")
	w := byName(f.Snapshot(), "ctx-x")
	require.Equal(t, 8998, w.SidePort, "the bootstrap port is the side port")
	require.True(t, w.Healthy())
}

func TestAddedWorkerComesUpThroughHealthLoop(t *testing.T) {
	f := externalFleet(t, 20*time.Millisecond)
	srv := newHealthServer(t)
	var wg sync.WaitGroup
	for _, name := range []string{"gen-x", "gen-y", "gen-z"} { // concurrent with the loop and each other
		wg.Add(1)
		go func() {
			defer wg.Done()
			require.NoError(t, f.AddWorker(ExternalWorker{Name: name, URL: srv.URL, Role: disagg.RoleGeneration}))
		}()
	}
	wg.Wait()
	require.NoError(t, f.RemoveWorker("gen-y"))
	waitFor(t, f, 10*time.Second, "added workers up", func(ws []Worker) bool {
		return len(ws) == 4 && byName(ws, "gen-x").Healthy() && byName(ws, "gen-z").Healthy()
	})
}

func TestRemoveAndReAddWorker(t *testing.T) {
	f := externalFleet(t, time.Hour)
	srv := newHealthServer(t)
	x := ExternalWorker{Name: "gen-x", URL: srv.URL, Role: disagg.RoleGeneration}
	require.NoError(t, f.AddWorker(x))
	f.checkHealth(context.Background())
	require.True(t, byName(f.Snapshot(), "gen-x").Healthy())

	ch, unsubscribe := f.Subscribe()
	defer unsubscribe()
	require.NoError(t, f.RemoveWorker("gen-x"))
	select {
	case <-ch:
	default:
		t.Fatal("no change notification for a removed worker")
	}
	require.Len(t, f.Snapshot(), 2, "an added worker is forgotten")
	require.ErrorIs(t, f.RemoveWorker("gen-x"), ErrUnknownWorker)
	require.ErrorIs(t, f.RemoveWorker("nobody"), ErrUnknownWorker)
	f.checkHealth(context.Background())
	require.Len(t, srv.requested(), 1, "a removed worker is not probed")

	require.NoError(t, f.AddWorker(x), "the name is free again")
	w := byName(f.Snapshot(), "gen-x")
	require.Equal(t, StateDown, w.State, "a re-added worker starts unhealthy again")
	require.Empty(t, w.LastError)
	f.checkHealth(context.Background())
	require.True(t, byName(f.Snapshot(), "gen-x").Healthy())
}

// A removed worker of the plan leaves the membership but keeps running and
// being supervised (as the admin API promised before the move); its name
// stays taken.
func TestRemovePlanWorkerKeepsItRunning(t *testing.T) {
	cfg := testConfig(t, 1, nil, 1, nil)
	cfg.HealthInterval = time.Hour // rounds are run by hand
	f := newTestFleet(t, cfg)
	require.NoError(t, f.Start(context.Background()))
	defer stopFleet(t, f)
	pid := byName(f.Snapshot(), "gen-0").PID

	require.NoError(t, f.RemoveWorker("gen-0"))
	w := byName(f.Snapshot(), "gen-0")
	require.True(t, w.Removed)
	require.Equal(t, StateUp, w.State, "still supervised and up")
	require.False(t, w.Healthy(), "but takes no traffic")
	require.Equal(t, pid, w.PID)
	require.True(t, alive(pid))
	f.checkHealth(context.Background())
	require.Equal(t, StateUp, byName(f.Snapshot(), "gen-0").State)

	require.ErrorIs(t, f.RemoveWorker("gen-0"), ErrUnknownWorker, "already removed")
	require.ErrorIs(t, f.AddWorker(ExternalWorker{Name: "gen-0", URL: "http://127.0.0.1:1", Role: disagg.RoleGeneration}), ErrWorkerExists)
	require.True(t, byName(f.Snapshot(), "ctx-0").Healthy(), "ctx-0 untouched")
}

func TestAddWorkerErrors(t *testing.T) {
	f := externalFleet(t, time.Hour)
	require.NoError(t, f.AddWorker(ExternalWorker{Name: "gen-x", URL: "http://127.0.0.1:1", Role: disagg.RoleGeneration}))
	require.NoError(t, f.RemoveWorker("ctx-0"))
	gen := disagg.RoleGeneration
	cases := []struct {
		name string
		w    ExternalWorker
		want error
	}{
		{"plan worker", ExternalWorker{Name: "gen-0", URL: "http://h:1", Role: gen}, ErrWorkerExists},
		{"removed plan worker", ExternalWorker{Name: "ctx-0", URL: "http://h:1", Role: disagg.RoleContext}, ErrWorkerExists},
		{"added worker", ExternalWorker{Name: "gen-x", URL: "http://h:2", Role: gen}, ErrWorkerExists},
		{"empty name", ExternalWorker{URL: "http://h:1", Role: gen}, ErrInvalidWorker},
		{"slash in name", ExternalWorker{Name: "a/b", URL: "http://h:1", Role: gen}, ErrInvalidWorker},
		{"unknown role", ExternalWorker{Name: "w", URL: "http://h:1", Role: "decode"}, ErrInvalidWorker},
		{"not http", ExternalWorker{Name: "w", URL: "ftp://h:1", Role: gen}, ErrInvalidWorker},
		{"no host", ExternalWorker{Name: "w", URL: "http://", Role: gen}, ErrInvalidWorker},
		{"bootstrap port out of range", ExternalWorker{Name: "w", URL: "http://h:1", Role: disagg.RoleContext, BootstrapPort: 70000}, ErrInvalidWorker},
		{"bootstrap port on a generation worker", ExternalWorker{Name: "w", URL: "http://h:1", Role: gen, BootstrapPort: 8998}, ErrInvalidWorker},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := f.Snapshot()
			err := f.AddWorker(c.w)
			require.ErrorIs(t, err, c.want)
			require.Equal(t, before, f.Snapshot(), "a refused add changes nothing")
		})
	}
}

func TestMembershipNeedsARunningFleet(t *testing.T) {
	cfg := testConfig(t, 1, nil, 0, nil)
	f := newTestFleet(t, cfg)
	x := ExternalWorker{Name: "gen-x", URL: "http://127.0.0.1:1", Role: disagg.RoleGeneration}
	require.ErrorIs(t, f.AddWorker(x), ErrNotRunning, "before Start")
	require.ErrorIs(t, f.RemoveWorker("ctx-0"), ErrNotRunning, "before Start")
	require.NoError(t, f.Start(context.Background()))
	stopFleet(t, f)
	require.ErrorIs(t, f.AddWorker(x), ErrNotRunning, "after Stop")
	require.ErrorIs(t, f.RemoveWorker("ctx-0"), ErrNotRunning, "after Stop")
}
