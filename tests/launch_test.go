package tests

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// launchConfig is a fleet of sim workers for duet launch.
func launchConfig(t *testing.T, nCtx, nGen int) string {
	ctxBase, genBase := freePortRun(t, nCtx), freePortRun(t, nGen)
	return writeFile(t, "fleet.yaml", fmt.Sprintf(`
fleet:
  run_dir: %s
  health_interval: 200ms
  shutdown_grace: 3s
  context: {engine: sim, count: %d, base_port: %d, args: ["--time-scale", "0.02"]}
  generation: {engine: sim, count: %d, base_port: %d, args: ["--time-scale", "0.02"]}
`, t.TempDir(), nCtx, ctxBase, nGen, genBase))
}

// workerTable waits for duet launch's table and returns name → pid.
func workerTable(t *testing.T, p *process, n int) map[string]int {
	t.Helper()
	pids := map[string]int{}
	require.Eventually(t, func() bool {
		if p.exited() {
			t.Fatalf("duet launch exited:\n%s", tail(p.output(), 40))
		}
		for _, line := range strings.Split(p.output(), "\n") {
			f := strings.Fields(line)
			if len(f) == 6 && (strings.HasPrefix(f[0], "ctx-") || strings.HasPrefix(f[0], "gen-")) {
				pid, err := strconv.Atoi(f[4])
				if err == nil {
					pids[f[0]] = pid
				}
			}
		}
		return len(pids) == n
	}, 90*time.Second, 100*time.Millisecond)
	return pids
}

func TestLaunchSIGTERMLeavesNoChild(t *testing.T) {
	p := startDuet(t, "launch", "--config", launchConfig(t, 2, 2))
	pids := workerTable(t, p, 4)
	for name, pid := range pids {
		require.True(t, pidAlive(pid), "%s running", name)
	}
	require.Contains(t, p.output(), "up")
	p.stop(t, syscall.SIGTERM, 20*time.Second)
	for name, pid := range pids {
		require.Eventually(t, func() bool { return !pidAlive(pid) }, 5*time.Second, 50*time.Millisecond, "%s (pid %d) left behind", name, pid)
	}
}

func TestLaunchKilledWorkerIsRestarted(t *testing.T) {
	p := startDuet(t, "launch", "--config", launchConfig(t, 1, 1))
	pids := workerTable(t, p, 2)
	require.NoError(t, syscall.Kill(pids["gen-0"], syscall.SIGKILL))
	require.Eventually(t, func() bool {
		return strings.Contains(p.output(), "gen-0") && strings.Count(p.output(), "restart") > 0
	}, 20*time.Second, 100*time.Millisecond, "restart logged:\n%s", tail(p.output(), 20))
	p.stop(t, syscall.SIGTERM, 20*time.Second)
}

func TestLaunchFailingWorkerReportsLogTail(t *testing.T) {
	base := freePortRun(t, 2)
	cfg := writeFile(t, "bad.yaml", fmt.Sprintf(`
fleet:
  run_dir: %s
  context:
    engine: command
    count: 1
    base_port: %d
    command: ["sh", "-c", "echo worker-boom-marker; sleep 30"]
    start_timeout: 2s
  generation: {engine: sim, count: 1, base_port: %d, args: ["--time-scale", "0.02"]}
`, t.TempDir(), base, base+1))
	p := startDuet(t, "launch", "--config", cfg)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatal("launch did not fail")
	}
	require.NotZero(t, p.cmd.ProcessState.ExitCode())
	require.Contains(t, p.output(), "worker-boom-marker", "the error carries the worker's log tail")
}

func TestLaunchDryRunAndTRTLLMConfig(t *testing.T) {
	cfg := launchConfig(t, 1, 1)
	out, err := runDuet(t, "launch", "--config", cfg, "--dry-run")
	require.NoError(t, err, out)
	require.Contains(t, out, "sim --role context")
	require.Contains(t, out, "sim --role generation")

	emit := t.TempDir() + "/disagg_config.yaml"
	p := startDuet(t, "launch", "--config", cfg, "--emit-trtllm-config", emit)
	workerTable(t, p, 2)
	require.Eventually(t, func() bool { _, err := os.Stat(emit); return err == nil }, 10*time.Second, 50*time.Millisecond)
	b, err := os.ReadFile(emit)
	require.NoError(t, err)
	require.Contains(t, string(b), "context_servers")
	require.Contains(t, string(b), "generation_servers")
	p.stop(t, syscall.SIGTERM, 20*time.Second)
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"fleet:\n  contxt: {count: 1}\n", "unknown key fleet.contxt"},
		{"router: {policy: random}\n", "router.policy"},
		{"fleet:\n  context: {engine: tgi}\n", "fleet.context.engine"},
		{"sim: {block_size: 0}\n", "sim.block_size"},
	}
	for _, tc := range cases {
		out, err := runDuet(t, "launch", "--dry-run", "--config", writeFile(t, "c.yaml", tc.yaml))
		require.Error(t, err)
		require.Contains(t, out, tc.want)
	}
}

func runDuet(t *testing.T, args ...string) (string, error) {
	t.Helper()
	p := startDuet(t, args...)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("duet %v did not finish", args)
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		return p.output(), fmt.Errorf("exit code %d", code)
	}
	return p.output(), nil
}
