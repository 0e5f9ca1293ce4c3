package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/router"
	"github.com/duet-serve/duet/tokenizer"
	"github.com/duet-serve/duet/workers"
)

// A worker's side port is its SGLang bootstrap port only under protocol
// sglang; under vllm it is the NIXL side channel, which the router has no
// use for.
func TestMembersCarryBootstrapPortsUnderSGLangOnly(t *testing.T) {
	ws := []workers.Worker{
		{Name: "ctx-0", Role: disagg.RoleContext, URL: "http://127.0.0.1:8100", SidePort: 5600, State: workers.StateUp},
		{Name: "gen-0", Role: disagg.RoleGeneration, URL: "http://127.0.0.1:8200", State: workers.StateStarting},
	}
	require.Equal(t, []router.Member{
		{ID: "ctx-0", URL: "http://127.0.0.1:8100", Role: disagg.RoleContext, BootstrapPort: 5600, Healthy: true},
		{ID: "gen-0", URL: "http://127.0.0.1:8200", Role: disagg.RoleGeneration},
	}, members(ws, "sglang"))
	require.Zero(t, members(ws, "vllm")[0].BootstrapPort)
}

// A worker the admin API removed is no member; it stays in the snapshot as
// a running process.
func TestMembersLeaveOutRemovedWorkers(t *testing.T) {
	ws := []workers.Worker{
		{Name: "ctx-0", Role: disagg.RoleContext, URL: "http://127.0.0.1:8100", State: workers.StateUp, Removed: true},
		{Name: "gen-0", Role: disagg.RoleGeneration, URL: "http://127.0.0.1:8200", State: workers.StateUp},
	}
	require.Equal(t, []router.Member{
		{ID: "gen-0", URL: "http://127.0.0.1:8200", Role: disagg.RoleGeneration, Healthy: true},
	}, members(ws, "trtllm"))
}

func TestCacheSizeReadersByEngineAndProtocol(t *testing.T) {
	simPage := []byte("duet_sim_kv_capacity_tokens{model_name=\"m\"} 448000\n")
	vllmPage := []byte(`vllm:cache_config_info{block_size="16",num_gpu_blocks="100",engine="0"} 1.0` + "\n")
	for _, tc := range []struct {
		protocol, engine, path string
		page                   []byte
		want                   int64
	}{
		{"trtllm", workers.EngineSim, "/metrics", simPage, 448000},
		{"trtllm", workers.EngineTRTLLM, "", nil, 0},
		{"trtllm", workers.EngineCommand, "", nil, 0},
		{"vllm", workers.EngineSim, "/metrics", vllmPage, 1600},
		{"vllm", workers.EngineVLLM, "/metrics", vllmPage, 1600},
		{"vllm", workers.EngineCommand, "/metrics", vllmPage, 1600},
		{"sglang", workers.EngineSGLang, "/get_server_info", []byte(`{"max_total_num_tokens":5000}`), 5000},
		{"sglang", workers.EngineSim, "/get_server_info", []byte(`{"max_total_num_tokens":5000}`), 5000},
	} {
		r := cacheSizeReaders(tc.protocol)(tc.engine)
		require.Equal(t, tc.path, r.Path, "%s under %s", tc.engine, tc.protocol)
		if tc.path == "" {
			continue
		}
		n, err := r.Parse(tc.page)
		require.NoError(t, err, "%s under %s", tc.engine, tc.protocol)
		require.Equal(t, tc.want, n, "%s under %s", tc.engine, tc.protocol)
	}
}

// vLLM and SGLang workers, and command or sim workers speaking their
// protocols, report their context length in /v1/models; TensorRT-LLM's,
// and a sim speaking its protocol, report none.
func TestContextLengthReadersByEngineAndProtocol(t *testing.T) {
	for _, tc := range []struct {
		protocol, engine string
		reads            bool
	}{
		{"trtllm", workers.EngineSim, false},
		{"trtllm", workers.EngineTRTLLM, false},
		{"trtllm", workers.EngineCommand, false},
		{"vllm", workers.EngineSim, true},
		{"vllm", workers.EngineVLLM, true},
		{"vllm", workers.EngineCommand, true},
		{"vllm", workers.EngineTRTLLM, false},
		{"sglang", workers.EngineSim, true},
		{"sglang", workers.EngineSGLang, true},
		{"sglang", workers.EngineCommand, true},
	} {
		r := cacheSizeReaders(tc.protocol)(tc.engine)
		if !tc.reads {
			require.Empty(t, r.ModelLenPath, "%s under %s", tc.engine, tc.protocol)
			continue
		}
		require.Equal(t, "/v1/models", r.ModelLenPath, "%s under %s", tc.engine, tc.protocol)
		n, err := r.ParseModelLen([]byte(`{"object":"list","data":[{"id":"m","parent":null,"max_model_len":4096}]}`))
		require.NoError(t, err)
		require.Equal(t, 4096, n)
	}
}

func TestMembersCarryTheReportedContextLength(t *testing.T) {
	ws := []workers.Worker{{Name: "ctx-0", Role: disagg.RoleContext, URL: "http://127.0.0.1:8100", State: workers.StateUp, MaxModelLen: 4096}}
	require.Equal(t, 4096, members(ws, "vllm")[0].MaxModelLen)
}

// Launched sims count the frontend's tokens: they get its tokenizer as
// absolute paths, a template name as it is, and a non-default encoding.
func TestSimTokenizerArgs(t *testing.T) {
	args, err := simTokenizerArgs(tokenizer.Defaults())
	require.NoError(t, err)
	require.Empty(t, args, "the built-in default needs no flags")

	dir := t.TempDir()
	t.Chdir(dir)
	require.NoError(t, os.WriteFile("tool_use.jinja", []byte("{{ messages }}"), 0o644))
	cfg := tokenizer.Defaults()
	cfg.Source, cfg.ChatTemplate, cfg.Encoding = "model", "tool_use.jinja", "o200k_base"
	args, err = simTokenizerArgs(cfg)
	require.NoError(t, err)
	require.Equal(t, []string{"--tokenizer-source", filepath.Join(dir, "model"),
		"--tokenizer-chat-template", filepath.Join(dir, "tool_use.jinja"), "--tokenizer-encoding", "o200k_base"}, args)

	cfg.ChatTemplate = "tool_use" // a name in the model's tokenizer_config.json
	args, err = simTokenizerArgs(cfg)
	require.NoError(t, err)
	require.Contains(t, args, "tool_use")
}

// A launched vLLM fleet serving a local model directory counts with that
// model's tokenizer without a tokenizer.source; a hub id or a sim fleet
// keeps the built-in encoding, and an explicit source wins.
func TestModelTokenizerFromTheFleet(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte("{}"), 0o644))
	cfg := defaultConfig()
	require.Empty(t, modelTokenizer(cfg).Source, "sim fleet")
	cfg.Fleet.Context.Engine, cfg.Fleet.Context.Model = workers.EngineVLLM, "meta-llama/Llama-3.1-8B-Instruct"
	require.Empty(t, modelTokenizer(cfg).Source, "hub id")
	cfg.Fleet.Generation.Engine, cfg.Fleet.Generation.Model = workers.EngineVLLM, dir
	require.Equal(t, dir, modelTokenizer(cfg).Source)
	cfg.Tokenizer.Source = "/elsewhere"
	require.Equal(t, "/elsewhere", modelTokenizer(cfg).Source)
}
