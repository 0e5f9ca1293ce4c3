package tests

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A TensorRT-LLM disagg_config.yaml, unchanged, is a duet config.
func TestServeTensorRTLLMDisaggConfig(t *testing.T) {
	ctx := strings.TrimPrefix(startSim(t, "--role", "context", "--protocol", "trtllm"), "http://")
	gen := strings.TrimPrefix(startSim(t, "--role", "generation", "--protocol", "trtllm"), "http://")
	port := freePorts(t, 1)[0]
	cfg := fmt.Sprintf(`hostname: 127.0.0.1
port: %d
backend: pytorch
context_servers:
  num_instances: 1
  urls:
      - "%s"
generation_servers:
  num_instances: 1
  router:
    type: load_balancing
    use_tokens: False
  urls:
      - "%s"
`, port, ctx, gen)
	p := startDuet(t, "serve", "--config", writeFile(t, "disagg_config.yaml", cfg))
	d := &deployment{url: fmt.Sprintf("http://127.0.0.1:%d", port), proc: p}
	waitHTTP(t, p, d.url+"/health", 60*time.Second)
	code, hdr, body := d.chat(t, false, "served from a TensorRT-LLM config", "")
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, "ctx-0", hdr.Get("X-Duet-Ctx-Worker"))
	require.Equal(t, "least-load", hdr.Get("X-Duet-Route"), "load_balancing on the generation servers decides")
	require.Contains(t, p.output(), "TensorRT-LLM config: context_servers.router.type round_robin and generation_servers.router.type load_balancing differ")
	d.requireIdle(t)
}
