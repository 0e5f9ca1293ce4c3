package tests

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/duet-serve/duet"

// redisClient is imported only by router/redisstore (and cmd, which wires it).
const redisClient = "github.com/redis/go-redis/v9"

// TestImportRules pins DESIGN.md's package edges. Two edges are allowed on
// purpose: orchestrator/frontend imports router, because the admin API adds
// router.Member values to the pool and /cluster_info reads the router's
// endpoints, and copying those types into the orchestrator would only
// duplicate them (the router is the frontend's dependency through the
// orchestrator anyway); and cmd imports tests/loadgen and tests/replay,
// the measurement tools behind `duet bench` and `duet replay`, which live
// in tests/ so that they import no serving code (checked below).
func TestImportRules(t *testing.T) {
	cases := []struct {
		pkg       string
		forbidden []string
		exact     []string // forbidden as these packages only, not their subpackages
	}{
		{"./tests/loadgen/...", []string{module + "/orchestrator", module + "/cmd", module + "/workers/discovery",
			"github.com/valyala/fasthttp", redisClient}, []string{module + "/workers", module + "/workers/sim"}},
		{"./tests/replay/...", []string{module + "/orchestrator", module + "/cmd", module + "/workers/discovery",
			"github.com/valyala/fasthttp", redisClient}, []string{module + "/workers", module + "/workers/sim"}},
		{"./orchestrator/...", []string{module + "/workers", module + "/cmd", module + "/tests", redisClient}, nil},
		{"./router/...", []string{module + "/orchestrator", module + "/workers", "github.com/valyala/fasthttp"}, nil},
		{"./router", []string{module + "/router/redisstore", redisClient}, nil}, // the store is behind router.SharedState
		{"./tokenizer/...", []string{module + "/proto", module + "/router", module + "/orchestrator", module + "/workers"}, nil},
		{"./proto/...", []string{module + "/tokenizer", module + "/router", module + "/orchestrator", module + "/workers"}, nil},
		{"./workers", []string{module + "/router", module + "/orchestrator"}, nil},
		{"./workers/sim/...", []string{module + "/router", module + "/orchestrator"}, nil},
		{"./orchestrator/protocol/...", []string{"github.com/valyala/fasthttp", module + "/router", module + "/tokenizer"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.pkg, func(t *testing.T) {
			cmd := exec.Command("go", "list", "-deps", tc.pkg)
			cmd.Dir = ".."
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, string(out))
			for _, dep := range strings.Fields(string(out)) {
				for _, f := range tc.forbidden {
					require.False(t, dep == f || strings.HasPrefix(dep, f+"/"), "%s imports %s", tc.pkg, dep)
				}
				for _, f := range tc.exact {
					require.NotEqual(t, f, dep, "%s imports %s", tc.pkg, dep)
				}
			}
		})
	}
}
