package workers

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// freePorts returns n distinct ports that were free a moment ago.
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	var ports []string
	var ls []net.Listener
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ls = append(ls, l)
		ports = append(ports, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// testConfig is a fleet of fake workers: nctx context workers started with
// ctxArgs and ngen generation workers started with genArgs.
func testConfig(t *testing.T, nctx int, ctxArgs []string, ngen int, genArgs []string) Config {
	cfg := Defaults()
	cfg.RunDir = t.TempDir()
	cfg.HealthInterval = 100 * time.Millisecond
	cfg.HealthTimeout = time.Second
	cfg.UnhealthyThreshold = 2
	cfg.ShutdownGrace = 5 * time.Second
	ports := freePorts(t, nctx+ngen)
	cfg.Context = fakePool(nctx, ports[:nctx], ctxArgs...)
	cfg.Generation = fakePool(ngen, ports[nctx:], genArgs...)
	return cfg
}

func newTestFleet(t *testing.T, cfg Config) *Fleet {
	t.Helper()
	f, err := New(cfg, Options{Logger: zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))})
	require.NoError(t, err)
	return f
}

// stopFleet stops f and checks that no process is left behind.
func stopFleet(t *testing.T, f *Fleet) {
	t.Helper()
	var pids []int
	for _, w := range f.Snapshot() {
		if w.PID != 0 {
			pids = append(pids, w.PID)
		}
	}
	require.NoError(t, f.Stop(context.Background()))
	for _, pid := range pids {
		require.False(t, alive(pid), "worker pid %d still running after Stop", pid)
	}
	require.Empty(t, childPIDs(t), "child processes left after Stop")
	for _, w := range f.Snapshot() {
		require.Equal(t, StateStopped, w.State, w.Name)
		require.Zero(t, w.PID, w.Name)
	}
}

// alive reports whether pid is a live process (zombies count as dead: an
// orphan killed by Pdeathsig may wait for a reaper that never comes).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] != "Z"
}

// childPIDs lists the live child processes of the test process.
func childPIDs(t *testing.T) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	self := strconv.Itoa(os.Getpid())
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == self {
			out = append(out, pid)
		}
	}
	return out
}

// waitFor waits until cond holds for a snapshot of f, re-checking on every
// change notification, and returns that snapshot.
func waitFor(t *testing.T, f *Fleet, timeout time.Duration, what string, cond func([]Worker) bool) []Worker {
	t.Helper()
	ch, cancel := f.Subscribe()
	defer cancel()
	deadline := time.After(timeout)
	for {
		snap := f.Snapshot()
		if cond(snap) {
			return snap
		}
		select {
		case <-ch:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("timed out after %s waiting for %s; workers: %+v", timeout, what, f.Snapshot())
		}
	}
}

func byName(ws []Worker, name string) Worker {
	for _, w := range ws {
		if w.Name == name {
			return w
		}
	}
	return Worker{}
}
