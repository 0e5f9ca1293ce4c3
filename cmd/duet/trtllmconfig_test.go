package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/workers"
	"github.com/spf13/viper"
	"github.com/stretchr/testify/require"
)

// loadTRTLLM translates a TensorRT-LLM config from testdata and loads the
// result as duet loads any config.
func loadTRTLLM(t *testing.T, name string) (Config, []string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "trtllm", name))
	require.NoError(t, err)
	require.True(t, isTRTLLMConfig(data))
	doc, notes, err := translateTRTLLMConfig(data)
	require.NoError(t, err)
	cfg, err := loadConfig(viper.New(), "", doc)
	require.NoError(t, err, string(doc))
	return cfg, notes
}

func TestTRTLLMConfigGolden(t *testing.T) {
	for _, tc := range []struct {
		file          string
		ctx, gen      []string
		policy        string
		localPrefill  int
		models        []string
		notesContain  []string
		tokensPerBlck int
	}{
		{file: "disagg-serving-basic.yaml", ctx: []string{"http://localhost:8001", "http://localhost:8002"},
			gen: []string{"http://localhost:8003"}, policy: "round-robin", notesContain: []string{"worker settings (backend)"}},
		{file: "disagg_config_load_balance.yaml", ctx: []string{"http://localhost:8001", "http://localhost:8002"},
			gen: []string{"http://localhost:8003", "http://localhost:8004"}, policy: "least-load", models: []string{"TinyLlama/TinyLlama-1.1B-Chat-v1.0"},
			notesContain: []string{"context_servers.router.use_tokens", "generation_servers.router.max_batch_size", "free_gpu_memory_fraction"}},
		{file: "disagg_config_cache_aware_balance.yaml", ctx: []string{"http://localhost:8001", "http://localhost:8002"},
			gen: []string{"http://localhost:8003", "http://localhost:8004"}, policy: "kv-aware", models: []string{"TinyLlama/TinyLlama-1.1B-Chat-v1.0"},
			notesContain: []string{"context_servers.router.max_num_tokens"}},
		{file: "disagg_config_conditional.yaml", ctx: []string{"http://localhost:8001"}, gen: []string{"http://localhost:8002"},
			policy: "kv-aware", localPrefill: 100, models: []string{"TinyLlama/TinyLlama-1.1B-Chat-v1.0"},
			notesContain: []string{"context_servers.router.type round_robin and generation_servers.router.type kv_cache_aware differ"}},
		{file: "disagg-serving-fleet.yaml", ctx: []string{"http://localhost:8001", "http://localhost:8002"},
			gen: []string{"http://localhost:8003"}, policy: "kv-aware", notesContain: []string{"num_workers: no equivalent", "disagg_coordinator_url: no equivalent"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			cfg, notes := loadTRTLLM(t, tc.file)
			require.Equal(t, "localhost", cfg.Server.Host)
			require.Equal(t, 8000, cfg.Server.Port)
			require.Equal(t, "trtllm", cfg.Orchestrator.Protocol)
			require.Equal(t, 1, cfg.Orchestrator.MaxRetries, "TensorRT-LLM's max_retries default")
			require.Equal(t, tc.ctx, cfg.Fleet.Context.URLs)
			require.Equal(t, tc.gen, cfg.Fleet.Generation.URLs)
			require.Equal(t, "trtllm", cfg.Fleet.Context.Engine)
			require.Equal(t, tc.policy, cfg.Router.Policy)
			require.Equal(t, tc.localPrefill, cfg.Orchestrator.MaxLocalPrefillTokens)
			require.Equal(t, tc.models, cfg.Orchestrator.Models)
			all := strings.Join(notes, "\n")
			for _, want := range tc.notesContain {
				require.Contains(t, all, want)
			}
		})
	}
}

func TestTRTLLMConfigRouterOptions(t *testing.T) {
	doc, notes, err := translateTRTLLMConfig([]byte(`
hostname: 0.0.0.0
port: 9000
max_retries: 3
context_servers: {num_instances: 1, urls: ["h1:1"], router: {type: Conversation, tokens_per_block: 64, match_threshold: 0.5}}
generation_servers: {num_instances: 1, urls: ["h2:2"], router: {type: conversation, max_sessions: 500}}
`))
	require.NoError(t, err)
	cfg, err := loadConfig(viper.New(), "", doc)
	require.NoError(t, err)
	require.Equal(t, "conversation", cfg.Router.Policy, "types are matched case-insensitively")
	require.Equal(t, 64, cfg.Router.TokensPerBlock)
	require.Equal(t, 500, cfg.Router.MaxSessions)
	require.Equal(t, 3, cfg.Orchestrator.MaxRetries)
	require.Equal(t, "0.0.0.0", cfg.Server.Host)
	require.Contains(t, strings.Join(notes, "\n"), "context_servers.router.match_threshold")
}

func TestTRTLLMConfigErrorsNameTheKey(t *testing.T) {
	sections := "context_servers: {num_instances: 1, urls: [\"h:1\"]}\ngeneration_servers: {num_instances: 1, urls: [\"h:2\"]}\n"
	for doc, want := range map[string]string{
		"disagg_cluster: {cluster_uri: \"http://h:8000\"}\n":                                                          "disagg_cluster.cluster_uri: duet reads workers registered in etcd",
		"disagg_cluster: {cluster_uri: \"etcd://h:2379\", inactive_interval_sec: 10}\n":                               "disagg_cluster.inactive_interval_sec: unknown key",
		"context_servers: {urls: [\"h:1\", \"h:2\"]}\ngeneration_servers: {urls: [\"h:3\"]}\n":                        "context_servers: number of urls (2) should be equal to num_instances (1)",
		"context_servers: {urls: [\"http://h:1\"]}\ngeneration_servers: {urls: [\"h:3\"]}\n":                          `context_servers.urls[0]: must be "host:port" (no scheme)`,
		"context_servers: {num_instances: 2}\ngeneration_servers: {urls: [\"h:3\"]}\n":                                "context_servers.urls: required",
		"context_servers: {urls: [\"h:1\"], router: {type: random}}\ngeneration_servers: {urls: [\"h:3\"]}\n":         `context_servers.router.type: unsupported router type "random"`,
		"backend: pytorch\ncontext_servers: {urls: [\"h:1\"], backend: trt}\ngeneration_servers: {urls: [\"h:3\"]}\n": "context_servers.backend: set both at the top level and in context_servers, with different values",
		"context_servers: {urls: [\"h:1\"]}\n":                                                                        "generation_servers: at least one server",
		"conditional_disagg_config: {max_local_prefill: 3}\n" + sections:                                              "conditional_disagg_config.max_local_prefill: unknown key",
	} {
		_, _, err := translateTRTLLMConfig([]byte(doc))
		require.ErrorContains(t, err, want, doc)
	}
	require.False(t, isTRTLLMConfig([]byte("router: {policy: conversation}\n")), "duet's own config")
}

func TestTRTLLMServiceDiscoveryConfig(t *testing.T) {
	cfg, notes := loadTRTLLM(t, "service-discovery.yaml")
	require.Equal(t, "etcd://localhost:2379", cfg.Fleet.EtcdURI)
	require.Equal(t, "example_cluster", cfg.Fleet.EtcdClusterName)
	require.Empty(t, cfg.Fleet.Context.URLs, "the workers register themselves")
	require.Zero(t, cfg.Fleet.Context.Count)
	require.Contains(t, strings.Join(notes, "\n"), "worker settings (backend)")
	doc, notes, err := translateTRTLLMConfig([]byte(`
port: 8000
disagg_cluster: {cluster_uri: "etcd://localhost:2379", cluster_name: test_cluster, heartbeat_interval_sec: 1, inactive_timeout_sec: 3}
context_servers: {router: {type: round_robin}, urls: ["ignored:1"]}
generation_servers: {router: {type: round_robin}}
`))
	require.NoError(t, err)
	cfg, err = loadConfig(viper.New(), "", doc)
	require.NoError(t, err)
	require.Empty(t, cfg.Fleet.Context.URLs, "TensorRT-LLM ignores urls with disagg_cluster")
	require.Equal(t, "test_cluster", cfg.Fleet.EtcdClusterName)
	require.Contains(t, strings.Join(notes, "\n"), "disagg_cluster.inactive_timeout_sec: no equivalent")
}

func TestEmittedTRTLLMConfigReadsBack(t *testing.T) {
	ws := []workers.Worker{{Name: "ctx-0", Role: disagg.RoleContext, URL: "http://10.0.0.1:8100"},
		{Name: "gen-0", Role: disagg.RoleGeneration, URL: "http://10.0.0.2:8200"}}
	emitted, err := workers.TRTLLMDisaggConfig("0.0.0.0", 8123, ws)
	require.NoError(t, err)
	doc, _, err := translateTRTLLMConfig(emitted)
	require.NoError(t, err)
	cfg, err := loadConfig(viper.New(), "", doc)
	require.NoError(t, err)
	require.Equal(t, []string{"http://10.0.0.1:8100"}, cfg.Fleet.Context.URLs)
	require.Equal(t, []string{"http://10.0.0.2:8200"}, cfg.Fleet.Generation.URLs)
	require.Equal(t, 8123, cfg.Server.Port)
}
