package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/duet-serve/duet/router/redisstore/redistest"
	"github.com/stretchr/testify/require"
)

// twoModels starts one duet serving two models, each over its own 2 ctx +
// 2 gen sims: "alpha/Model-A" (alias "a") on the trtllm protocol and
// "beta/Model-B" (alias "b") on vllm. extra is appended to its config.
func twoModels(t *testing.T, extra string) *deployment {
	t.Helper()
	port := freePorts(t, 1)[0]
	pool := func(model string) string {
		return fmt.Sprintf(`{engine: sim, count: 2, base_port: %d, side_port_base: %d, model: %s, args: ["--time-scale", "0.02"]}`,
			freePortRun(t, 2), freePortRun(t, 2), model)
	}
	cfg := fmt.Sprintf(`
log: {level: info}
server: {host: 127.0.0.1, port: %d}
fleet: {run_dir: %s, health_interval: 200ms}
models:
  - name: alpha/Model-A
    aliases: [a]
    orchestrator: {protocol: trtllm}
    fleet: {context: %s, generation: %s}
  - name: beta/Model-B
    aliases: [b]
    orchestrator: {protocol: vllm}
    fleet: {context: %s, generation: %s}
%s`, port, t.TempDir(), pool("alpha/Model-A"), pool("alpha/Model-A"), pool("beta/Model-B"), pool("beta/Model-B"), extra)
	p := startDuet(t, "serve", "--config", writeFile(t, "models.yaml", cfg))
	d := &deployment{url: fmt.Sprintf("http://127.0.0.1:%d", port), proc: p}
	waitHTTP(t, p, d.url+"/health", 90*time.Second)
	return d
}

// Two models behind one duet: each request goes to its model's workers, by
// the model's name or alias (sent to the workers as the name they serve);
// /v1/models, /health, /cluster_info and the metrics cover both; an
// unknown model is a 404 listing the served ones.
func TestTwoModelsBehindOneDuet(t *testing.T) {
	d := twoModels(t, "")
	var list struct{ Data []struct{ ID string } }
	require.Equal(t, http.StatusOK, getJSON(t, d.url+"/v1/models", &list))
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	require.Equal(t, []string{"alpha/Model-A", "a", "beta/Model-B", "b"}, ids)

	for _, tc := range []struct{ asked, served string }{
		{"alpha/Model-A", "alpha/Model-A"}, {"a", "alpha/Model-A"}, {"beta/Model-B", "beta/Model-B"}, {"b", "beta/Model-B"},
	} {
		for _, stream := range []bool{false, true} {
			code, _, out := post(t, d.url+"/v1/chat/completions", fmt.Sprintf(
				`{"model":%q,"stream":%t,"max_tokens":4,"messages":[{"role":"user","content":"which model are you?"}]}`, tc.asked, stream))
			require.Equal(t, http.StatusOK, code, "%s: %s", tc.asked, out)
			require.Contains(t, string(out), fmt.Sprintf(`"model":%q`, tc.served), "the workers of %s answered", tc.served)
		}
	}
	code, _, out := post(t, d.url+"/v1/completions", `{"model":"gamma","prompt":"hi","max_tokens":2}`)
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, string(out), `model \"gamma\" does not exist (served: alpha/Model-A, a, beta/Model-B, b)`)

	var health struct {
		Status string
		Models map[string]struct {
			ContextWorkers    int `json:"context_workers"`
			GenerationWorkers int `json:"generation_workers"`
		}
	}
	require.Equal(t, http.StatusOK, getJSON(t, d.url+"/health", &health))
	require.Len(t, health.Models, 2)
	require.Equal(t, 2, health.Models["beta/Model-B"].GenerationWorkers)

	var info struct {
		Models []struct {
			Model    string
			Protocol string
			Workers  []json.RawMessage
		}
	}
	require.Equal(t, http.StatusOK, getJSON(t, d.url+"/cluster_info", &info))
	require.Len(t, info.Models, 2)
	require.Equal(t, "beta/Model-B", info.Models[1].Model)
	require.Equal(t, "vllm", info.Models[1].Protocol)
	require.Len(t, info.Models[1].Workers, 4)

	for _, model := range []string{"alpha/Model-A", "beta/Model-B"} {
		require.Equal(t, 4.0, d.metricWith(t, "duet_requests_total", fmt.Sprintf(`model=%q,status="200"`, model)), model)
	}
}

// Two models on a real Redis: each model's router shares its state in a
// scope of its own (its sessions, load and admin changes), the store's
// metrics carry the model, and both answer.
func TestTwoModelsShareStateOnRedis(t *testing.T) {
	redis := redistest.Start(t)
	d := twoModels(t, fmt.Sprintf("cluster: {state: redis, load_interval: 20ms, redis: {address: %q, timeout: 200ms}}\n", redis.Addr()))
	for _, model := range []string{"alpha/Model-A", "beta/Model-B"} {
		require.Eventually(t, func() bool { return d.metricWith(t, "duet_cluster_store_up", fmt.Sprintf(`model=%q`, model)) == 1 },
			20*time.Second, 20*time.Millisecond, model)
		for turn := range 2 {
			code, hdr, out := post(t, d.url+"/v1/chat/completions", fmt.Sprintf(
				`{"model":%q,"max_tokens":4,"messages":[{"role":"user","content":"a question long enough to be cached across turns of this conversation, please answer"}]}`, model),
				"X-Session-ID", "conv-"+model)
			require.Equal(t, http.StatusOK, code, string(out))
			if turn == 1 {
				require.Equal(t, "sticky", hdr.Get("X-Duet-Route"), "the session the shared store holds for %s", model)
			}
		}
	}
}
