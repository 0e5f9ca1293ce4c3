package workers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestFleetRestartsKilledWorker(t *testing.T) {
	cfg := testConfig(t, 2, nil, 2, nil)
	cfg.HealthInterval = time.Second
	f := newTestFleet(t, cfg)
	require.NoError(t, f.Start(context.Background()))
	defer stopFleet(t, f)

	before := f.Snapshot()
	victim := byName(before, "gen-1")
	killed := time.Now()
	require.NoError(t, syscall.Kill(victim.PID, syscall.SIGKILL))

	waitFor(t, f, cfg.HealthInterval, "gen-1 down within one health interval", func(ws []Worker) bool {
		return byName(ws, "gen-1").State != StateUp
	})
	t.Logf("gen-1 marked down %s after SIGKILL", time.Since(killed))

	after := waitFor(t, f, 20*time.Second, "gen-1 back up", func(ws []Worker) bool {
		w := byName(ws, "gen-1")
		return w.State == StateUp && w.Restarts == 1
	})
	back := byName(after, "gen-1")
	require.NotEqual(t, victim.PID, back.PID)
	require.Contains(t, back.LastError, "signal: killed")
	for _, name := range []string{"ctx-0", "ctx-1", "gen-0"} {
		require.Equal(t, byName(before, name), byName(after, name), "%s must be untouched", name)
	}
	log, err := os.ReadFile(filepath.Join(cfg.RunDir, "gen-1.log"))
	require.NoError(t, err)
	require.Equal(t, 2, strings.Count(string(log), "--- duet: starting gen-1"), "the restart appends to the log")
}

func TestFleetRestartsUnhealthyWorker(t *testing.T) {
	cfg := testConfig(t, 1, []string{"--unhealthy-after", "700ms"}, 0, nil)
	f := newTestFleet(t, cfg)
	require.NoError(t, f.Start(context.Background()))
	defer stopFleet(t, f)
	first := f.Snapshot()[0]

	waitFor(t, f, 10*time.Second, "ctx-0 marked down by health checks", func(ws []Worker) bool {
		return ws[0].State == StateDown && strings.Contains(ws[0].LastError, "health check failed 2 times in a row")
	})
	back := waitFor(t, f, 10*time.Second, "ctx-0 restarted", func(ws []Worker) bool {
		return ws[0].State == StateUp && ws[0].Restarts == 1
	})[0]
	require.NotEqual(t, first.PID, back.PID)
	require.False(t, alive(first.PID), "the unhealthy process was stopped")
}

func TestFleetUnhealthyWithoutRestartRecovers(t *testing.T) {
	// Restarts disabled: an unhealthy worker is marked down but left
	// running, and marked up again when its health check passes.
	healthFile := filepath.Join(t.TempDir(), "healthy")
	require.NoError(t, os.WriteFile(healthFile, nil, 0o644))
	cfg := testConfig(t, 1, []string{"--health-file", healthFile}, 0, nil)
	cfg.HealthInterval = time.Hour // rounds are run by hand
	cfg.Context.Restart = RestartPolicy{}
	core, logs := observer.New(zap.InfoLevel)
	f, err := New(cfg, Options{Logger: zap.New(core)})
	require.NoError(t, err)
	require.NoError(t, f.Start(context.Background()))
	defer stopFleet(t, f)
	pid := f.Snapshot()[0].PID

	require.NoError(t, os.Remove(healthFile))
	f.checkHealth(context.Background())
	require.Equal(t, StateUp, f.Snapshot()[0].State, "one failure is below the threshold")
	f.checkHealth(context.Background())
	w := f.Snapshot()[0]
	require.Equal(t, StateDown, w.State)
	require.Contains(t, w.LastError, "503 Service Unavailable")

	require.Eventually(t, func() bool { return logs.FilterMessage("unhealthy worker left running").Len() == 1 },
		10*time.Second, 5*time.Millisecond, "the supervisor decided")
	require.Equal(t, pid, f.Snapshot()[0].PID)
	require.True(t, alive(pid))
	require.NoError(t, os.WriteFile(healthFile, nil, 0o644))
	f.checkHealth(context.Background())
	require.Equal(t, StateUp, f.Snapshot()[0].State)
	require.Equal(t, 0, f.Snapshot()[0].Restarts)
}

func TestFleetRestartLimit(t *testing.T) {
	cfg := testConfig(t, 1, []string{"--exit-after", "500ms"}, 0, nil)
	cfg.Context.Restart.Attempts = 1
	f := newTestFleet(t, cfg)
	require.NoError(t, f.Start(context.Background()))
	defer stopFleet(t, f)

	w := waitFor(t, f, 15*time.Second, "ctx-0 failed", func(ws []Worker) bool {
		return ws[0].State == StateFailed
	})[0]
	require.Equal(t, 1, w.Restarts)
	require.Zero(t, w.PID)
	require.Contains(t, w.LastError, "exited: exit status 3; restart limit reached: 1 restarts within 1m0s")
}

func TestFleetExternalWorkers(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "/ready", r.URL.Path)
		if !healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	dead := "http://127.0.0.1:" + freePorts(t, 1)[0]

	cfg := Defaults()
	cfg.RunDir = t.TempDir()
	cfg.HealthInterval = time.Hour // rounds are run by hand
	cfg.UnhealthyThreshold = 2
	cfg.Context.Count, cfg.Context.URLs, cfg.Context.HealthPath = 0, []string{srv.URL}, "/ready"
	cfg.Generation.Count, cfg.Generation.URLs, cfg.Generation.HealthPath = 0, []string{dead}, "/ready"
	f := newTestFleet(t, cfg)
	require.NoError(t, f.Start(context.Background()))
	defer stopFleet(t, f)

	snap := f.Snapshot()
	require.True(t, snap[0].External)
	require.Equal(t, StateUp, snap[0].State)
	require.Zero(t, snap[0].PID)
	require.Equal(t, StateDown, snap[1].State)
	require.Contains(t, snap[1].LastError, "connection refused")

	healthy.Store(false)
	f.checkHealth(context.Background())
	require.Equal(t, StateUp, f.Snapshot()[0].State)
	f.checkHealth(context.Background())
	require.Equal(t, StateDown, f.Snapshot()[0].State)
	healthy.Store(true)
	f.checkHealth(context.Background())
	require.Equal(t, StateUp, f.Snapshot()[0].State)
	require.Equal(t, StateDown, f.Snapshot()[1].State)
}
