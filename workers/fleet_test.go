package workers

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
)

func TestFleetLaunchAllHealthy(t *testing.T) {
	cfg := testConfig(t, 2, []string{"--lines", "3"}, 2, []string{"--lines", "3"})
	f := newTestFleet(t, cfg)
	ch, unsubscribe := f.Subscribe()
	defer unsubscribe()
	require.NoError(t, f.Start(context.Background()))
	require.ErrorContains(t, f.Start(context.Background()), "already started")

	snap := f.Snapshot()
	require.Len(t, snap, 4)
	pids := map[int]bool{}
	for i, w := range snap {
		require.Equal(t, StateUp, w.State, w.Name)
		require.True(t, w.Healthy())
		require.NotZero(t, w.PID, w.Name)
		require.True(t, alive(w.PID))
		pids[w.PID] = true
		require.Equal(t, "http://127.0.0.1:"+strconv.Itoa(f.Plan().Workers[i].Port), w.URL)
	}
	require.Len(t, pids, 4)
	require.Equal(t, []string{"ctx-0", "ctx-1", "gen-0", "gen-1"}, []string{snap[0].Name, snap[1].Name, snap[2].Name, snap[3].Name})
	select {
	case <-ch:
	default:
		t.Fatal("no change notification during launch")
	}

	// The worker's output is in its log file.
	require.Eventually(t, func() bool {
		data, _ := os.ReadFile(filepath.Join(cfg.RunDir, "gen-1.log"))
		return strings.Contains(string(data), "gen-1 line 2")
	}, 5*time.Second, 20*time.Millisecond)

	// One health round with everyone healthy changes nothing.
	f.checkHealth(context.Background())
	require.Equal(t, snap, f.Snapshot())

	stopFleet(t, f)
	_, open := <-ch
	for open {
		_, open = <-ch
	}
	require.ErrorContains(t, f.Start(context.Background()), "fleet stopped")
}

func TestFleetStartFailureReportsLogTail(t *testing.T) {
	cfg := testConfig(t,
		1, []string{"--fail-health", "--lines", "30", "--message", "fake: cannot load model"},
		1, nil)
	cfg.Context.StartTimeout = time.Second
	f := newTestFleet(t, cfg)
	err := f.Start(context.Background())
	require.Error(t, err)
	msg := err.Error()
	t.Log(msg)

	var serr *StartError
	require.ErrorAs(t, err, &serr)
	require.Equal(t, "ctx-0", serr.Worker)
	require.Len(t, serr.Tail, tailLines)
	require.Contains(t, msg, "ctx-0: not healthy within 1s: GET http://127.0.0.1:")
	require.Contains(t, msg, "503 Service Unavailable")
	require.Contains(t, msg, "fake: cannot load model")
	require.Contains(t, msg, "ctx-0 line 29", "the tail has the last lines")
	require.NotContains(t, msg, "ctx-0 line 9\n", "the tail is bounded")
	require.NotContains(t, msg, "gen-0", "gen-0 was healthy")

	require.Empty(t, childPIDs(t), "a failed launch must stop what it started")
	for _, w := range f.Snapshot() {
		require.Equal(t, StateStopped, w.State)
	}
	require.NoError(t, f.Stop(context.Background()), "Stop after a failed Start does nothing")
}

func TestFleetStartFailsFast(t *testing.T) {
	// gen-0 dies at once; ctx-0 would take a minute to time out. The launch
	// fails on gen-0 without waiting for ctx-0.
	cfg := testConfig(t,
		1, []string{"--fail-health"},
		1, []string{"--exit-after", "0s", "--message", "fake: CUDA out of memory"})
	cfg.Context.StartTimeout = time.Minute
	f := newTestFleet(t, cfg)
	start := time.Now()
	err := f.Start(context.Background())
	require.Less(t, time.Since(start), 30*time.Second)
	require.Error(t, err)
	msg := err.Error()
	require.Contains(t, msg, "gen-0: exited during start-up (exit status 3); last 2 lines of ")
	require.Contains(t, msg, "fake: CUDA out of memory")
	require.NotContains(t, msg, "ctx-0", "the cancelled launch is not a cause")
	require.Empty(t, childPIDs(t))
}

func TestFleetStartCancelled(t *testing.T) {
	cfg := testConfig(t, 1, []string{"--fail-health"}, 0, nil)
	f := newTestFleet(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := f.Start(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Empty(t, childPIDs(t))
}

func TestFleetPortInUse(t *testing.T) {
	cfg := testConfig(t, 1, nil, 0, nil)
	l, err := net.Listen("tcp", "127.0.0.1:"+cfg.Context.Ports[0])
	require.NoError(t, err)
	defer l.Close()
	f := newTestFleet(t, cfg)
	require.ErrorContains(t, f.Start(context.Background()), "ctx-0: port "+cfg.Context.Ports[0]+" is not free")
	require.Empty(t, childPIDs(t))
}

func TestFleetStopKillsProcessGroup(t *testing.T) {
	// The worker ignores SIGTERM and has a child of its own: Stop waits the
	// grace period, then kills the whole group.
	cfg := testConfig(t, 1, []string{"--ignore-term", "--child-pid-file", "{run_dir}/{name}.child"}, 0, nil)
	cfg.ShutdownGrace = 300 * time.Millisecond
	f := newTestFleet(t, cfg)
	require.NoError(t, f.Start(context.Background()))
	data, err := os.ReadFile(filepath.Join(cfg.RunDir, "ctx-0.child"))
	require.NoError(t, err)
	child, err := strconv.Atoi(string(data))
	require.NoError(t, err)
	require.True(t, alive(child))

	start := time.Now()
	stopFleet(t, f)
	require.GreaterOrEqual(t, time.Since(start), cfg.ShutdownGrace, "SIGTERM was ignored: Stop waits the grace period")
	require.Eventually(t, func() bool { return !alive(child) }, 5*time.Second, 10*time.Millisecond, "grandchild %d survived", child)
}

func TestFleetStopCutShort(t *testing.T) {
	cfg := testConfig(t, 1, []string{"--ignore-term"}, 1, []string{"--ignore-term"})
	cfg.ShutdownGrace = time.Hour
	f := newTestFleet(t, cfg)
	require.NoError(t, f.Start(context.Background()))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := f.Stop(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Empty(t, childPIDs(t))
	require.NoError(t, f.Stop(context.Background()), "second Stop does nothing")
}

func TestFleetDebugLogsWorkerOutput(t *testing.T) {
	cfg := testConfig(t, 1, []string{"--lines", "2"}, 0, nil)
	var lines atomic.Int32
	logger := zaptest.NewLogger(t, zaptest.Level(zap.DebugLevel), zaptest.WrapOptions(zap.Hooks(func(e zapcore.Entry) error {
		if e.Message == "worker output" {
			lines.Add(1)
		}
		return nil
	})))
	f, err := New(cfg, Options{Logger: logger})
	require.NoError(t, err)
	require.NoError(t, f.Start(context.Background()))
	require.Eventually(t, func() bool { return lines.Load() >= 2 }, 5*time.Second, 10*time.Millisecond)
	stopFleet(t, f)
}

func TestFleetAutoRunDir(t *testing.T) {
	cfg := testConfig(t, 1, nil, 0, nil)
	cfg.RunDir = ""
	f := newTestFleet(t, cfg)
	dir := f.Plan().RunDir
	defer os.RemoveAll(dir)
	require.NotEqual(t, AutoRunDir, dir)
	require.DirExists(t, dir)
	require.Equal(t, filepath.Join(dir, "ctx-0.log"), f.Plan().Workers[0].LogPath)
	require.NoError(t, f.Stop(context.Background()), "Stop before Start")
	require.ErrorContains(t, f.Start(context.Background()), "fleet stopped")
}

func TestPdeathsigKillsWorkersOfKilledParent(t *testing.T) {
	parent := exec.Command(os.Args[0])
	parent.Env = append(os.Environ(), "DUET_FAKE=parent", "DUET_FAKE_PORT="+freePorts(t, 1)[0], "DUET_FAKE_DIR="+t.TempDir())
	out, err := parent.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, parent.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = parent.Process.Kill()
		_ = parent.Wait()
		t.Fatalf("fake parent: %v (%q)", err, line)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "pid ")))
	require.NoError(t, err, line)
	require.True(t, alive(pid))

	require.NoError(t, parent.Process.Kill()) // SIGKILL: no chance to clean up
	_ = parent.Wait()
	require.Eventually(t, func() bool { return !alive(pid) }, 5*time.Second, 10*time.Millisecond,
		"worker %d outlived its killed parent", pid)
}
