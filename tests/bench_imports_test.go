package tests

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLoadgenImports keeps the load generator a black-box client: it talks
// HTTP to duet and never links the server's packages.
func TestLoadgenImports(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, "./tests/loadgen")
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	allowed := []string{module + "/proto/", module + "/tokenizer"}
	for _, imp := range strings.Fields(string(out)) {
		if !strings.Contains(strings.Split(imp, "/")[0], ".") {
			continue // standard library
		}
		ok := false
		for _, a := range allowed {
			ok = ok || strings.HasPrefix(imp, a)
		}
		require.True(t, ok, "tests/loadgen imports %s (allowed: the standard library, proto/..., tokenizer)", imp)
	}
	deps := exec.Command("go", "list", "-deps", "./tests/loadgen")
	deps.Dir = ".."
	out, err = deps.CombinedOutput()
	require.NoError(t, err, string(out))
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range []string{module + "/orchestrator", module + "/router", module + "/workers"} {
			require.False(t, dep == f || strings.HasPrefix(dep, f+"/"), "tests/loadgen depends on %s", dep)
		}
	}
}

// TestReplayImports keeps duet replay on the router and the simulator's
// model: it runs the router duet serve runs, never the server around it.
func TestReplayImports(t *testing.T) {
	deps := exec.Command("go", "list", "-deps", "./tests/replay")
	deps.Dir = ".."
	out, err := deps.CombinedOutput()
	require.NoError(t, err, string(out))
	for _, dep := range strings.Fields(string(out)) {
		if dep == module+"/workers/sim/model" {
			continue
		}
		for _, f := range []string{module + "/orchestrator", module + "/workers", module + "/cmd", module + "/router/redisstore"} {
			require.False(t, dep == f || strings.HasPrefix(dep, f+"/"), "tests/replay depends on %s", dep)
		}
	}
}
