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

// TestImportRules pins DESIGN.md's package edges.
func TestImportRules(t *testing.T) {
	cases := []struct {
		pkg       string
		forbidden []string
	}{
		{"./orchestrator/...", []string{module + "/workers", module + "/cmd", module + "/tests", redisClient}},
		{"./router/...", []string{module + "/orchestrator", module + "/workers", "github.com/valyala/fasthttp"}},
		{"./router", []string{module + "/router/redisstore", redisClient}}, // the store is behind router.SharedState
		{"./tokenizer/...", []string{module + "/proto", module + "/router", module + "/orchestrator", module + "/workers"}},
		{"./proto/...", []string{module + "/tokenizer", module + "/router", module + "/orchestrator", module + "/workers"}},
		{"./workers", []string{module + "/router", module + "/orchestrator"}},
		{"./workers/sim/...", []string{module + "/router", module + "/orchestrator"}},
		{"./orchestrator/protocol/...", []string{"github.com/valyala/fasthttp", module + "/router", module + "/tokenizer"}},
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
			}
		})
	}
}
