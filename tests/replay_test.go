package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// runReplay runs duet replay to the end and returns its combined output.
func runReplay(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(duetBin, append([]string{"replay"}, args...)...).CombinedOutput()
	return string(out), err
}

func TestReplaySyntheticPoliciesSideBySide(t *testing.T) {
	dir := t.TempDir()
	out, err := runReplay(t, "--num-sessions", "12", "--session-turns-mean", "4", "--session-turn-delay-mean", "500",
		"--shared-system-prompt-length", "300", "--user-context-prompt-length", "600", "--isl", "100", "--osl", "20",
		"--concurrency", "4", "--random-seed", "1", "--policy", "round-robin,conversation", "--num-ctx", "2", "--num-gen", "2",
		"--ctx-kv-blocks", "64,4096", "--artifact-dir", dir)
	require.NoError(t, err, out)
	for _, run := range []string{"round-robin-c2-g2-kv64", "round-robin-c2-g2-kv4096", "conversation-c2-g2-kv64", "conversation-c2-g2-kv4096"} {
		require.Contains(t, out, run)
		for _, f := range []string{"profile_export_aiperf.json", "profile_export_aiperf.csv", "profile_export.jsonl", "report.html"} {
			require.FileExists(t, filepath.Join(dir, run, f))
		}
	}
	require.Contains(t, out, "cache hit ratio")
	require.Contains(t, out, "oracle (pooled cache)")
	// The same workload replays to the same numbers.
	again, err := runReplay(t, "--num-sessions", "12", "--session-turns-mean", "4", "--session-turn-delay-mean", "500",
		"--shared-system-prompt-length", "300", "--user-context-prompt-length", "600", "--isl", "100", "--osl", "20",
		"--concurrency", "4", "--random-seed", "1", "--policy", "round-robin,conversation", "--num-ctx", "2", "--num-gen", "2",
		"--ctx-kv-blocks", "64,4096", "--artifact-dir", t.TempDir())
	require.NoError(t, err, again)
	require.Equal(t, tableOf(out), tableOf(again))
}

// tableOf is the output without the wall times and paths.
func tableOf(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "duet replay:") || strings.Contains(l, "wall") {
			continue
		}
		f := strings.Fields(l)
		if len(f) > 0 && strings.HasSuffix(f[len(f)-1], "ms") && strings.Contains(l, "c2-g2") {
			l = strings.Join(f[:len(f)-1], " ") // the row's wall time
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "\n")
}

func TestReplayMooncakeTrace(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "trace.jsonl")
	require.NoError(t, os.WriteFile(trace, []byte(`{"timestamp": 0, "input_length": 1500, "output_length": 20, "hash_ids": [0, 1, 2]}
{"timestamp": 1000, "input_length": 2000, "output_length": 20, "hash_ids": [0, 1, 2, 3]}
{"timestamp": 2000, "input_length": 700, "output_length": 20, "hash_ids": [0, 9]}
`), 0o644))
	out, err := runReplay(t, "--input-file", trace, "--custom-dataset-type", "mooncake_trace", "--policy", "kv-aware",
		"--num-ctx", "2", "--num-gen", "2", "--artifact-dir", t.TempDir())
	require.NoError(t, err, out)
	require.Contains(t, out, "kv-aware: 3 requests, 2s simulated")
}

func TestReplayBadInputNamesTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--num-sessions", "2", "--policy", "random"}, `--policy: unknown policy "random"`},
		{[]string{"--num-sessions", "2", "--num-ctx", "0"}, "--num-ctx"},
		{[]string{"--concurrency", "2"}, "--num-sessions"},
		{[]string{"--input-file", "/nonexistent", "--custom-dataset-type", "mooncake_trace"}, "/nonexistent"},
		{[]string{"--num-sessions", "2", "--serving-overhead", "-1s"}, "--serving-overhead"},
	} {
		out, err := runReplay(t, append(tc.args, "--artifact-dir", t.TempDir())...)
		require.Error(t, err, out)
		require.Contains(t, out, tc.want)
		require.NotContains(t, out, "panic")
	}
}
