package workers

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/duet-serve/duet/proto/disagg"
)

func TestDefaultsValid(t *testing.T) {
	require.NoError(t, Defaults().Validate())
}

func TestValidateNamesKey(t *testing.T) {
	cases := []struct {
		name    string
		mutate  func(c *Config)
		wantKey string // the error starts with "<wantKey>: "
		want    string // and contains this
	}{
		{"empty host", func(c *Config) { c.Host = "" }, "host", "must be a host name"},
		{"host with path", func(c *Config) { c.Host = "localhost/x" }, "host", "must be a host name"},
		{"empty gpu", func(c *Config) { c.GPUs = []string{"0", ""} }, "gpus[1]", "GPU index or UUID"},
		{"duplicate gpu", func(c *Config) { c.GPUs = []string{"0", "1", "0"} }, "gpus[2]", `"0" already listed at gpus[0]`},
		{"zero health interval", func(c *Config) { c.HealthInterval = 0 }, "health_interval", "must be > 0, got 0s"},
		{"zero health timeout", func(c *Config) { c.HealthTimeout = 0 }, "health_timeout", "must be > 0"},
		{"zero threshold", func(c *Config) { c.UnhealthyThreshold = 0 }, "unhealthy_threshold", "must be >= 1, got 0"},
		{"negative grace", func(c *Config) { c.ShutdownGrace = -time.Second }, "shutdown_grace", "must be >= 0"},
		{"adapter name", func(c *Config) { c.Generation.LoraAdapters = []string{"m:sql"} }, "generation.lora_adapters", `"m:sql" is not an adapter name (no spaces or ':')`},
		{"adapter twice", func(c *Config) { c.Context.LoraAdapters = []string{"sql", "sql"} }, "context.lora_adapters", `"sql" is listed twice`},
		{"unknown engine", func(c *Config) { c.Context.Engine = "tgi" }, "context.engine", `unknown engine "tgi" (valid: sim, trtllm, vllm, sglang, command)`},
		{"negative count", func(c *Config) { c.Generation.Count = -2 }, "generation.count", "must be >= 0, or -1 for 2 (none when urls are listed), got -2"},
		{"count with urls", func(c *Config) { c.Context.Count, c.Context.URLs = 2, []string{"http://h:1"} }, "context.count", "must be 0 or unset when urls are listed, got 2"},
		{"url entry with a bad bootstrap port", func(c *Config) { c.Context.URLs = []string{"http://h:1 99999"} }, "context.urls[0]", "bootstrap port: must be in 1..65535, got 99999"},
		{"bootstrap port on a generation url", func(c *Config) { c.Generation.URLs = []string{"http://h:1 8998"} }, "generation.urls[0]", "a bootstrap port is for SGLang prefill (context) workers"},
		{"url entry with three fields", func(c *Config) { c.Context.URLs = []string{"http://h:1 8998 x"} }, "context.urls[0]", `want "URL" or "URL BOOTSTRAP_PORT"`},
		{"url scheme", func(c *Config) { c.Context.Count = 0; c.Context.URLs = []string{"h:1"} }, "context.urls[0]", "http:// or https://"},
		{"url without host", func(c *Config) { c.Context.Count = 0; c.Context.URLs = []string{"http://"} }, "context.urls[0]", "has no host"},
		{"url with path", func(c *Config) { c.Generation.Count = 0; c.Generation.URLs = []string{"http://h:1/v1"} }, "generation.urls[0]", "without path"},
		{"duplicate url", func(c *Config) { c.Context.Count = 0; c.Context.URLs = []string{"http://h:1", "http://h:1/"} }, "context.urls[1]", "already listed at urls[0]"},
		{"model required", func(c *Config) { c.Context.Engine = EngineTRTLLM }, "context.model", "required for engine trtllm"},
		{"gpus per worker", func(c *Config) { c.Context.GPUsPerWorker = -2 }, "context.gpus_per_worker", "got -2"},
		{"base port zero", func(c *Config) { c.Context.BasePort = 0 }, "context.base_port", "must be in 1..65535, got 0"},
		{"base port overflow", func(c *Config) { c.Generation.BasePort = 65535 }, "generation.base_port", "up to 65536"},
		{"ports count", func(c *Config) { c.Context.Ports = []string{"9000"} }, "context.ports", "lists 1 ports for count 2"},
		{"port not a number", func(c *Config) { c.Context.Ports = []string{"9000", "x"} }, "context.ports[1]", `not a port number: "x"`},
		{"port range", func(c *Config) { c.Context.Ports = []string{"9000", "70000"} }, "context.ports[1]", "must be in 1..65535, got 70000"},
		{"port clash explicit", func(c *Config) { c.Generation.Ports = []string{"8200", "8101"} }, "generation.ports[1]", "8101 already used by context[1]"},
		{"port clash base", func(c *Config) { c.Generation.BasePort = 8101 }, "generation.base_port (generation[0])", "8101 already used by context[1]"},
		{"side port clash", func(c *Config) {
			c.Context.Engine, c.Context.Model, c.Context.SidePortBase = EngineVLLM, "m", 8200
		}, "context.side_port_base (side port of context[0])", "8200 already used by generation[0]"},
		{"side port range", func(c *Config) {
			c.Generation.Engine, c.Generation.Model, c.Generation.SidePortBase = EngineSGLang, "m", 0
		}, "generation.side_port_base", "must be in 1..65535"},
		{"command required", func(c *Config) { c.Context.Engine = EngineCommand }, "context.command", "required for engine command"},
		{"command empty program", func(c *Config) { c.Context.Engine = EngineCommand; c.Context.Command = []string{" "} }, "context.command[0]", "must not be empty"},
		{"command on other engine", func(c *Config) { c.Generation.Command = []string{"x"} }, "generation.command", "only used by engine command (engine is sim"},
		{"unknown placeholder in command", func(c *Config) {
			c.Context.Engine, c.Context.Command = EngineCommand, []string{"srv", "--port={prot}"}
		}, "context.command[1]", "unknown placeholder {prot}"},
		{"unknown placeholder in args", func(c *Config) { c.Context.Args = []string{"{gpu}"} }, "context.args[0]", "unknown placeholder {gpu}"},
		{"unknown placeholder in env", func(c *Config) { c.Context.Env = []string{"A={nam}"} }, "context.env[0]", "unknown placeholder {nam}"},
		{"env without =", func(c *Config) { c.Generation.Env = []string{"A=1", "B"} }, "generation.env[1]", `want KEY=VALUE, got "B"`},
		{"env empty key", func(c *Config) { c.Generation.Env = []string{"=1"} }, "generation.env[0]", "want KEY=VALUE"},
		{"health path", func(c *Config) { c.Context.HealthPath = "health" }, "context.health_path", "must start with /"},
		{"start timeout", func(c *Config) { c.Context.StartTimeout = -1 }, "context.start_timeout", "must be >= 0"},
		{"engine config on sim", func(c *Config) { c.Context.EngineConfig = map[string]any{"a": 1} }, "context.engine_config", "not supported by engine sim"},
		{"restart attempts", func(c *Config) { c.Context.Restart.Attempts = -1 }, "context.restart.attempts", "must be >= 0"},
		{"restart interval", func(c *Config) { c.Generation.Restart.Interval = 0 }, "generation.restart.interval", "must be > 0 when attempts > 0"},
		{"restart delay", func(c *Config) { c.Context.Restart.Delay = -1 }, "context.restart.delay", "must be >= 0"},
		{"restart max delay", func(c *Config) { c.Context.Restart.MaxDelay = time.Millisecond }, "context.restart.max_delay", "must be >= delay (1s)"},
		{"restart jitter", func(c *Config) { c.Context.Restart.Jitter = 1.5 }, "context.restart.jitter", "must be in [0, 1], got 1.5"},
		{"gpu oversubscription", func(c *Config) {
			c.GPUs = []string{"0", "1", "2"}
			c.Context.GPUsPerWorker, c.Generation.GPUsPerWorker = 1, 1
		}, "gpus", "need 4 GPUs (context 2 x 1, generation 2 x 1) but 3 are available"},
		{"gpus per worker above list", func(c *Config) {
			c.GPUs, c.AllowGPUSharing = []string{"0"}, true
			c.Generation.GPUsPerWorker = 2
		}, "generation.gpus_per_worker", "2 GPUs per worker but only 1 available"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			tc.mutate(&c)
			err := c.Validate()
			require.Error(t, err)
			require.True(t, strings.HasPrefix(err.Error(), tc.wantKey+": "), "error %q does not start with %q", err, tc.wantKey+": ")
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestValidateAccepts(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(c *Config)
	}{
		{"external pools", func(c *Config) {
			c.Context.Count, c.Context.URLs = 0, []string{"http://10.0.0.1:8000", "https://w2"}
			c.Generation.Count, c.Generation.URLs = 0, []string{"http://10.0.0.2:8000/"}
		}},
		{"empty pool", func(c *Config) { c.Generation.Count = 0 }},
		{"gpu sharing", func(c *Config) {
			c.GPUs, c.AllowGPUSharing = []string{"0"}, true
			c.Context.GPUsPerWorker, c.Generation.GPUsPerWorker = 1, 1
		}},
		{"restarts disabled", func(c *Config) { c.Context.Restart = RestartPolicy{} }},
		{"command with placeholders", func(c *Config) {
			c.Context.Engine = EngineCommand
			c.Context.Command = []string{"srv", "--port={port}", `--json={"a":1}`}
			c.Context.Env = []string{"NAME={name}", "EMPTY="}
		}},
		{"engine config on vllm", func(c *Config) {
			c.Context.Engine, c.Context.Model = EngineVLLM, "m"
			c.Context.EngineConfig = map[string]any{"max-model-len": 4096}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			tc.mutate(&c)
			require.NoError(t, c.Validate())
		})
	}
}

// loadFleetSection decodes the fleet section of a YAML file over Defaults,
// strictly, as the config loader does.
func loadFleetSection(t *testing.T, path string) Config {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var doc map[string]yaml.Node
	require.NoError(t, yaml.Unmarshal(data, &doc))
	node, ok := doc["fleet"]
	require.True(t, ok, "%s has no fleet section", path)
	raw, err := yaml.Marshal(&node)
	require.NoError(t, err)
	cfg := Defaults()
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&cfg), path)
	return cfg
}

func TestConfigFilesValid(t *testing.T) {
	files, err := filepath.Glob("../configs/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	noEnv := func(string) (string, bool) { return "", false }
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			cfg := loadFleetSection(t, path)
			require.NoError(t, cfg.Validate())
			plan, err := NewPlan(cfg, Options{Executable: "/usr/local/bin/duet", LookupEnv: noEnv})
			require.NoError(t, err)
			require.NotEmpty(t, plan.Workers)
		})
	}
}

// Regression (issue 10): a pool that lists urls must not also need count: 0.
func TestURLPoolNeedsNoCount(t *testing.T) {
	cfg := Defaults()
	cfg.Context.URLs = []string{"http://10.0.0.5:30000 8998", "http://10.0.0.6:30000"}
	require.NoError(t, cfg.Validate())
	plan, err := NewPlan(cfg, Options{Executable: "/usr/local/bin/duet", LookupEnv: func(string) (string, bool) { return "", false }})
	require.NoError(t, err)
	var ctx []WorkerSpec
	for _, w := range plan.Workers {
		if w.Role == disagg.RoleContext {
			ctx = append(ctx, w)
		}
	}
	require.Len(t, ctx, 2, "the url pool launches nothing and lists its two workers")
	require.Equal(t, "http://10.0.0.5:30000", ctx[0].URL)
	require.Equal(t, 8998, ctx[0].SidePort, "the entry's bootstrap port")
	require.Equal(t, 0, ctx[1].SidePort, "no port named: the worker's default")
}

func TestQuickstartIsTheDefaults(t *testing.T) {
	cfg := loadFleetSection(t, "../configs/quickstart.yaml")
	want := Defaults()
	// The file spells out the sim start timeout the default (0) resolves to,
	// and the count the default (-1, auto) resolves to.
	want.Context.StartTimeout, want.Generation.StartTimeout = 20*time.Second, 20*time.Second
	want.Context.Count, want.Generation.Count = DefaultCount, DefaultCount
	require.Equal(t, want, cfg)
}
