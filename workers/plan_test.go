package workers

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/proto/disagg"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// golden compares got with testdata/<name>, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -update to create it")
	require.Equal(t, string(want), string(got))
}

func envOf(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}

func goldenOpts() Options {
	return Options{Executable: "/opt/duet/bin/duet", LookupEnv: envOf(nil)}
}

func TestPlanGolden(t *testing.T) {
	cases := []struct {
		name   string
		opts   func(o *Options)
		mutate func(c *Config)
	}{
		{"sim", nil, func(c *Config) {}},
		{"sim_tokenizer", func(o *Options) {
			o.SimArgs = []string{"--tokenizer-source", "/models/Llama-3.1-8B-Instruct"}
		}, func(c *Config) { c.Generation.Args = []string{"--time-scale", "0.1"} }},
		{"trtllm", nil, func(c *Config) {
			c.GPUs = []string{"0", "1", "2", "3"}
			for _, p := range []*PoolConfig{&c.Context, &c.Generation} {
				p.Engine, p.Model = EngineTRTLLM, "meta-llama/Llama-3.1-8B-Instruct"
				p.Args = []string{"--backend", "pytorch"}
			}
			c.Context.EngineConfig = map[string]any{
				"kv_cache_config": map[string]any{"free_gpu_memory_fraction": 0.8},
				"max_num_tokens":  8192,
			}
			c.Generation.EngineConfig = map[string]any{
				"cache_transceiver_config": map[string]any{"backend": "UCX", "max_tokens_in_buffer": 4096},
			}
		}},
		{"vllm", func(o *Options) { o.LookupEnv = envOf(map[string]string{"CUDA_VISIBLE_DEVICES": "4,5,6,7"}) }, func(c *Config) {
			for _, p := range []*PoolConfig{&c.Context, &c.Generation} {
				p.Engine, p.Model = EngineVLLM, "Qwen/Qwen3-8B"
				p.Env = []string{"UCX_TLS=all"}
			}
			c.Context.Count, c.Context.GPUsPerWorker = 1, 2
			c.Context.Args = []string{"--tensor-parallel-size", "2"}
			c.Generation.Executable = "/opt/venv/bin/vllm"
			c.Generation.EngineConfig = map[string]any{"max-num-seqs": 128}
		}},
		{"sglang", nil, func(c *Config) {
			c.Host = "0.0.0.0"
			for _, p := range []*PoolConfig{&c.Context, &c.Generation} {
				p.Engine, p.Model, p.Count = EngineSGLang, "/models/llama 3", 1
				p.Executable = "python3"
			}
			c.Generation.SidePortBase = 8998
		}},
		{"command", nil, func(c *Config) {
			c.Context.Engine, c.Context.Model = EngineCommand, "my-model"
			c.Context.GPUsPerWorker = 1
			c.Context.Command = []string{"my-server", "--listen={host}:{port}", "--name", "{name}", "--role={role}", "--gpus={gpus}", "--log={run_dir}/{name}.out", "--rank={index}"}
			c.Context.Env = []string{"MY_MODEL={model}", "QUOTED=it's here"}
			c.Context.StartTimeout = 90 * time.Second
			c.Generation.Count = 0
		}},
		{"external", nil, func(c *Config) {
			c.Context.Count, c.Context.URLs = 0, []string{"http://10.0.0.1:8000", "http://10.0.0.2:8000/"}
			c.Generation.Count = 1
			c.Generation.Model = "sim-model"
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Defaults()
			cfg.RunDir = "/run/duet"
			tc.mutate(&cfg)
			opts := goldenOpts()
			if tc.opts != nil {
				tc.opts(&opts)
			}
			plan, err := NewPlan(cfg, opts)
			require.NoError(t, err)
			var buf bytes.Buffer
			require.NoError(t, plan.WriteScript(&buf))
			golden(t, "plan_"+tc.name+".golden", buf.Bytes())
		})
	}
}

func TestPlanSpecs(t *testing.T) {
	cfg := Defaults()
	cfg.RunDir = "/run/duet"
	cfg.Context.Engine, cfg.Context.Model = EngineVLLM, "m"
	cfg.Generation.Engine, cfg.Generation.Model = EngineSGLang, "m"
	plan, err := NewPlan(cfg, goldenOpts())
	require.NoError(t, err)
	require.Len(t, plan.Workers, 4)
	var names []string
	for _, s := range plan.Workers {
		names = append(names, s.Name)
	}
	require.Equal(t, []string{"ctx-0", "ctx-1", "gen-0", "gen-1"}, names)
	ctx1, gen0 := plan.Workers[1], plan.Workers[2]
	require.Equal(t, disagg.RoleContext, ctx1.Role)
	require.Equal(t, "http://127.0.0.1:8101", ctx1.URL)
	require.Equal(t, 5601, ctx1.SidePort)
	require.Equal(t, []string{"1"}, ctx1.GPUs)
	require.Contains(t, ctx1.Env, "CUDA_VISIBLE_DEVICES=1")
	require.Contains(t, ctx1.Env, "VLLM_NIXL_SIDE_CHANNEL_PORT=5601")
	require.Equal(t, "/run/duet/ctx-1.log", ctx1.LogPath)
	require.Equal(t, 10*time.Minute, ctx1.StartTimeout)
	require.Equal(t, disagg.RoleGeneration, gen0.Role)
	require.Equal(t, 5700, gen0.SidePort)
	require.Contains(t, gen0.Argv, "decode")

	snap := plan.Snapshot()
	require.Equal(t, StateStarting, snap[0].State)
	require.Equal(t, 5700, snap[2].SidePort)
}

func TestPlanPassesAdaptersToSims(t *testing.T) {
	cfg := Defaults()
	cfg.Generation.LoraAdapters = []string{"sql", "chat"}
	plan, err := NewPlan(cfg, goldenOpts())
	require.NoError(t, err)
	ctx0, gen0 := plan.Workers[0], plan.Workers[2]
	require.NotContains(t, ctx0.Argv, "--lora-adapters")
	require.Empty(t, ctx0.Adapters)
	require.Contains(t, strings.Join(gen0.Argv, " "), "--lora-adapters sql,chat")
	require.Equal(t, []string{"sql", "chat"}, gen0.Adapters)
	require.Equal(t, []string{"sql", "chat"}, plan.Snapshot()[2].Adapters)
}

func TestPlanAutoRunDir(t *testing.T) {
	cfg := Defaults()
	cfg.Context.Engine, cfg.Context.Model = EngineTRTLLM, "m"
	cfg.Context.GPUsPerWorker = 0
	plan, err := NewPlan(cfg, goldenOpts())
	require.NoError(t, err)
	require.Equal(t, AutoRunDir, plan.RunDir)
	moved := plan.withRunDir("/tmp/duet-123")
	require.Equal(t, "/tmp/duet-123/ctx-0.yaml", moved.Files[0].Path)
	require.Contains(t, moved.Workers[0].Argv, "/tmp/duet-123/ctx-0.yaml")
	require.Equal(t, "/tmp/duet-123/gen-1.log", moved.Workers[3].LogPath)
	require.Equal(t, AutoRunDir, plan.RunDir, "withRunDir must not modify its receiver")
}

func TestPlanGPUDefaultFromEnv(t *testing.T) {
	cfg := Defaults()
	cfg.RunDir = "/run/duet"
	cfg.Context.GPUsPerWorker, cfg.Generation.GPUsPerWorker = 1, 1
	_, err := NewPlan(cfg, Options{Executable: "duet", LookupEnv: envOf(map[string]string{"CUDA_VISIBLE_DEVICES": "0,1"})})
	require.EqualError(t, err, "gpus: the workers need 4 GPUs (context 2 x 1, generation 2 x 1) but 2 are available (CUDA_VISIBLE_DEVICES=0,1); set allow_gpu_sharing: true to share GPUs")
}

func TestMergeMaps(t *testing.T) {
	base := map[string]any{"a": map[string]any{"x": 1, "y": 2}, "b": true}
	over := map[string]any{"a": map[any]any{"y": 3, "z": 4}, "c": "new", "b": map[string]any{"replaced": true}}
	got := mergeMaps(base, over)
	require.Equal(t, map[string]any{
		"a": map[string]any{"x": 1, "y": 3, "z": 4},
		"b": map[string]any{"replaced": true},
		"c": "new",
	}, got)
	require.Equal(t, map[string]any{"x": 1, "y": 2}, base["a"], "base must not change")
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"":               "''",
		"plain-1.0/x:y=": "plain-1.0/x:y=",
		"two words":      "'two words'",
		`{"a":1}`:        `'{"a":1}'`,
		"it's":           `'it'\''s'`,
	} {
		require.Equal(t, want, shellQuote(in), in)
	}
}

func TestTRTLLMDisaggConfig(t *testing.T) {
	cfg := Defaults()
	cfg.RunDir = "/run/duet"
	cfg.Generation.Count = 1
	plan, err := NewPlan(cfg, goldenOpts())
	require.NoError(t, err)
	out, err := TRTLLMDisaggConfig("localhost", 8000, plan.Snapshot())
	require.NoError(t, err)
	golden(t, "trtllm_disagg_config.golden", out)

	_, err = TRTLLMDisaggConfig("localhost", 8000, plan.Snapshot()[:2])
	require.EqualError(t, err, "trtllm disagg config needs context and generation workers, have 2 and 0")
}
