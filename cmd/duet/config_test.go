package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/duet-serve/duet/configs"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"github.com/stretchr/testify/require"
)

func writeYAML(t *testing.T, content string) string {
	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	return path
}

func TestConfigPrecedence(t *testing.T) {
	path := writeYAML(t, "sim:\n  port: 9100\n  time_scale: 0.5\n  model: from-yaml\n")
	t.Setenv("DUET_SIM_TIME_SCALE", "0.25")
	t.Setenv("DUET_SIM_ITL_BASE", "9ms")
	v := viper.New()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	bindSectionFlags(fs, v, "sim", defaultConfig().Sim, "")
	require.NoError(t, fs.Parse([]string{"--model", "from-flag"}))
	cfg, err := loadConfig(v, path, nil)
	require.NoError(t, err)
	require.Equal(t, "from-flag", cfg.Sim.Model, "flag beats YAML")
	require.Equal(t, 0.25, cfg.Sim.TimeScale, "env beats YAML")
	require.Equal(t, 9*time.Millisecond, cfg.Sim.ITLBase, "env reaches a key the YAML does not set")
	require.Equal(t, 9100, cfg.Sim.Port, "YAML beats default")
	require.Equal(t, defaultConfig().Sim.BlockSize, cfg.Sim.BlockSize, "default")
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	cases := []struct{ name, yaml, want string }{
		{"unknown top-level", "sever: {port: 1}\n", "config: unknown key sever.port (valid keys in top level: cluster, fleet, log, models, orchestrator, queue, router, server, sim, tenants, tokenizer, tracing)"},
		{"unknown nested", "server: {prot: 1}\n", "config: unknown key server.prot (valid keys in server: admin_token, debug_address, host, idle_timeout, max_body_bytes, max_concurrency, max_header_bytes, port, read_timeout)"},
		{"camelCase", "server: {maxBodyBytes: 1}\n", "unknown key server.maxbodybytes"},
		{"bad enum", "router: {policy: random}\n", `config: router.policy: unknown policy "random" (valid: conversation, round-robin, least-load, consistent-hash, kv-aware)`},
		{"bad protocol", "orchestrator: {protocol: grpc}\n", `config: orchestrator.protocol: unknown protocol "grpc" (valid: trtllm, vllm, sglang)`},
		{"sglang local prefill", "orchestrator: {protocol: sglang, max_local_prefill_tokens: 10}\n", "orchestrator.max_local_prefill_tokens: must be 0 with protocol sglang"},
		{"bad log level", "log: {level: loud}\n", `config: log.level: unknown level "loud" (valid: debug, info, warn, error)`},
		{"wrong type", "server: {port: many}\n", `config: server.port: not a whole number: "many"`},
		{"bad duration", "orchestrator: {context_timeout: soon}\n", `config: orchestrator.context_timeout: not a duration with a unit (for example 10s or 500ms): "soon"`},
		// A bare number would be nanoseconds: every request would time out.
		{"duration without a unit", "server: {read_timeout: 10}\n", "config: server.read_timeout: a duration needs a unit (for example 10s or 10ms), got 10"},
		{"bad cluster state", "cluster: {state: etcd}\n", `config: cluster.state: must be local or redis, got "etcd"`},
		{"bad redis address", "cluster: {state: redis, redis: {address: redis}}\n", `config: cluster.redis.address: must be host:port, got "redis"`},
		{"unknown class key", "queue: {classes: [{name: a, wait: 1s}]}\n", "queue.classes[0]: has invalid keys: wait"},
		{"class max_wait without unit", "queue: {classes: [{name: a, max_wait: 5}], default_class: a}\n", "queue.classes[0].max_wait: a duration needs a unit"},
		{"bad default class", "queue: {default_class: urgent}\n", `config: queue.default_class: "urgent" is not a class (valid: high, normal, low)`},
		{"tenant class without queue", "tenants: {list: [{name: a, api_keys: [sk-aaaaaaaa], class: high}]}\n",
			"config: tenants.list[0].class: priority classes need the admission queue (queue.enabled: true)"},
		{"unknown tenant class", "queue: {enabled: true}\ntenants: {list: [{name: a, class: urgent}]}\n",
			`config: tenants.list[0].class: "urgent" is not a queue class (valid: high, normal, low)`},
		{"unknown tenant key", "tenants: {list: [{name: a, rpm: 5}]}\n", "tenants.list[0]: has invalid keys: rpm"},
		{"duplicate api key", "tenants: {list: [{name: a, api_keys: [sk-aaaaaaaa]}, {name: b, api_keys: [sk-aaaaaaaa]}]}\n",
			`config: tenants.list[1].api_keys: a key of "b" is also a key of "a"`},
		{"short api key", "tenants: {list: [{name: a, api_keys: [sk]}]}\n", "config: tenants.list[0].api_keys: a key must be at least 8 characters without spaces"},
		{"require key without tenants", "tenants: {require_key: true}\n", "config: tenants.require_key: no tenant is listed in list, every request would be refused"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadConfig(viper.New(), writeYAML(t, tc.yaml), nil)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestConfigFromTheEnvironmentSaysWhatIsWrong(t *testing.T) {
	t.Setenv("DUET_SERVER_PORT", "eighty")
	_, err := loadConfig(viper.New(), "", nil)
	require.EqualError(t, err, `config: server.port: not a whole number: "eighty"`)
	t.Setenv("DUET_SERVER_PORT", "8080")
	t.Setenv("DUET_SERVER_READ_TIMEOUT", "10")
	_, err = loadConfig(viper.New(), "", nil)
	require.EqualError(t, err, `config: server.read_timeout: not a duration with a unit (for example 10s or 500ms): "10"`)
	t.Setenv("DUET_SERVER_READ_TIMEOUT", "30s")
	cfg, err := loadConfig(viper.New(), "", nil)
	require.NoError(t, err)
	require.Equal(t, 30*time.Second, cfg.Server.ReadTimeout)
	require.Equal(t, 8080, cfg.Server.Port)
}

func TestConfigFreeFormMapsAccepted(t *testing.T) {
	_, err := loadConfig(viper.New(), writeYAML(t, "fleet:\n  context:\n    engine: trtllm\n    model: m\n    engine_config:\n      kv_cache_config: {free_gpu_memory_fraction: 0.8}\n  allow_gpu_sharing: true\n"), nil)
	require.NoError(t, err)
}

// TestShippedConfigsValidate loads every file in configs/ (the embedded
// quickstart among them).
func TestShippedConfigsValidate(t *testing.T) {
	entries, err := fs.Glob(configs.Files, "*.yaml")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(entries), 3)
	for _, name := range entries {
		t.Run(name, func(t *testing.T) {
			b, err := configs.Files.ReadFile(name)
			require.NoError(t, err)
			cfg, err := loadConfig(viper.New(), "", b)
			require.NoError(t, err)
			fleets := []Config{cfg}
			if len(cfg.Models) > 0 {
				fleets = cfg.resolved
			}
			for _, f := range fleets {
				require.Positive(t, f.Fleet.Context.Count+len(f.Fleet.Context.URLs))
			}
		})
	}
}

func TestQuickstartIsTwoPlusTwoSimOn8000(t *testing.T) {
	cfg, err := loadConfig(viper.New(), "", configs.Quickstart)
	require.NoError(t, err)
	require.Equal(t, 8000, cfg.Server.Port)
	require.Equal(t, "127.0.0.1", cfg.Server.Host)
	require.Equal(t, "sim", cfg.Fleet.Context.Engine)
	require.Equal(t, 2, cfg.Fleet.Context.Count)
	require.Equal(t, 2, cfg.Fleet.Generation.Count)
	require.NoError(t, checkSimProtocol(cfg))
}

func TestVersionString(t *testing.T) {
	require.Contains(t, versionString(), "duet ")
	require.Contains(t, versionString(), "go1.")
}

// Regression: the README's "Coming from vLLM" fleet, which named no model,
// answered every request with duet's own 404.
func TestReadmeVLLMSnippetServesItsModel(t *testing.T) {
	cfg, err := loadConfig(viper.New(), writeYAML(t, `orchestrator: {protocol: vllm}
fleet:
  context: {engine: vllm, model: Qwen/Qwen3-8B, urls: ["http://10.0.0.11:8100", "http://10.0.0.12:8100"]}
  generation: {engine: vllm, model: Qwen/Qwen3-8B, urls: ["http://10.0.0.21:8200"]}
`), nil)
	require.NoError(t, err)
	require.Equal(t, []string{"Qwen/Qwen3-8B"}, servedModels(cfg))
}

func TestModelsLayTheirSectionsOverTheTopLevel(t *testing.T) {
	cfg, err := loadConfig(viper.New(), writeYAML(t, `
orchestrator: {context_timeout: 5s}
router: {stickiness_tokens: 100}
fleet: {health_interval: 3s, run_dir: /var/run/duet, context: {count: 1}}
models:
  - name: a
    aliases: [alpha]
    fleet: {context: {base_port: 9100}, generation: {base_port: 9200}}
  - name: b
    orchestrator: {protocol: vllm}
    router: {stickiness_tokens: 7}
    fleet: {context: {base_port: 9300}, generation: {base_port: 9400, count: 3}}
`), nil)
	require.NoError(t, err)
	require.Len(t, cfg.resolved, 2)
	a, b := cfg.resolved[0], cfg.resolved[1]
	require.Equal(t, []string{"a", "alpha"}, a.Orchestrator.Models)
	require.Equal(t, []string{"b"}, b.Orchestrator.Models)
	require.Equal(t, "trtllm", a.Orchestrator.Protocol, "the default")
	require.Equal(t, "vllm", b.Orchestrator.Protocol)
	require.Equal(t, 5*time.Second, b.Orchestrator.ContextTimeout, "shared from the top level")
	require.Equal(t, int64(100), a.Router.StickinessTokens)
	require.Equal(t, int64(7), b.Router.StickinessTokens)
	require.Equal(t, 3*time.Second, b.Fleet.HealthInterval)
	require.Equal(t, 1, a.Fleet.Context.Count, "a top-level pool key reaches every model")
	require.Equal(t, 9300, b.Fleet.Context.BasePort)
	require.Equal(t, 3, b.Fleet.Generation.Count)
	require.Equal(t, "/var/run/duet/a", a.Fleet.RunDir, "each model's logs apart")
}

func TestModelsConfigErrors(t *testing.T) {
	cases := []struct{ name, yaml, want string }{
		{"unknown key in a model's section", "models: [{name: a, router: {polcy: x}}]\n",
			"config: models[0] (a): config: unknown key router.polcy (valid keys in router:"},
		{"bad value in a model's section", "models: [{name: a, orchestrator: {protocol: grpc}}]\n",
			`config: models[0] (a): config: orchestrator.protocol: unknown protocol "grpc"`},
		{"unknown key in a model", "models: [{name: a, flet: {}}]\n", "models[0]: has invalid keys: flet"},
		{"name twice", "models: [{name: a}, {name: b, aliases: [a]}]\n", `config: models[1].aliases[0]: "a" is already a name of models[0]`},
		{"empty name", "models: [{aliases: [x]}]\n", `config: models[0].name: "" is not a model name (no spaces)`},
		{"worker queue", "queue: {respect_worker_queue: true}\nmodels: [{name: a}]\n", "config: models: queue.respect_worker_queue scrapes one fleet"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadConfig(viper.New(), writeYAML(t, tc.yaml), nil)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}
