package main

import (
	"io/fs"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/spf13/viper"
	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/configs"
)

// configSeeds exercise every kind of key: scalars of each type, durations,
// lists, lists of structs, free-form maps, and the errors of each.
var configSeeds = []string{
	"sim: {port: 9100, time_scale: 0.5, model: m}\n",
	"server: {port: 0, host: 0.0.0.0, max_body_bytes: 1048576}\nrouter: {policy: kv-aware, tokens_per_block: 16}\n",
	"orchestrator: {protocol: vllm, context_timeout: 2s, session_headers: [X-A, X-B], max_model_len: 4096, max_model_len_by_model: [\"a.b=10\"]}\n",
	"fleet:\n  context:\n    engine: trtllm\n    model: m\n    engine_config:\n      kv_cache_config: {free_gpu_memory_fraction: 0.8}\n  allow_gpu_sharing: true\n",
	"fleet: {context: {urls: [\"http://a:1\"]}, generation: {urls: [\"http://b:2\"]}}\n",
	"queue: {max_waiting: 10}\nlog: {level: debug}\n",
	"sever: {port: 1}\n", "server: {prot: 1}\n", "server: {maxBodyBytes: 1}\n", "router: {policy: random}\n",
	"server: {port: many}\n", "orchestrator: {context_timeout: soon}\n", "orchestrator: {protocol: sglang, max_local_prefill_tokens: 10}\n",
	"server: [1, 2]\n", "server: 7\n", "a: &x {b: *x}\n", "- 1\n- 2\n", "{}", "", "\t", "a: b: c\n", "!!binary AAAA\n",
	"x: &a [1,1,1,1]\ny: &b [*a,*a,*a,*a]\nz: [*b,*b,*b,*b]\n",
}

// FuzzLoadConfig loads arbitrary YAML as the config file. It must not
// panic; an error says "config: ..." (and, for an unknown key, names it);
// an accepted file gives a valid configuration, the same one each time;
// and loading costs at most a constant times the file's size beyond a
// fixed allowance.
func FuzzLoadConfig(f *testing.F) {
	for _, s := range configSeeds {
		f.Add([]byte(s))
	}
	entries, err := fs.Glob(configs.Files, "*.yaml")
	require.NoError(f, err)
	for _, name := range entries {
		b, err := configs.Files.ReadFile(name)
		require.NoError(f, err)
		f.Add(b)
	}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "DUET_") {
			f.Skipf("%s is set: the environment would override the fuzzed files", kv)
		}
	}
	f.Fuzz(func(t *testing.T, yaml []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		cfg, err := loadConfig(viper.New(), "", yaml)
		runtime.ReadMemStats(&after)
		allocated := after.TotalAlloc - before.TotalAlloc
		require.LessOrEqual(t, allocated, uint64(4096*len(yaml)+16<<20), "allocated %d bytes for %d bytes of YAML", allocated, len(yaml))
		if err != nil {
			require.True(t, strings.HasPrefix(err.Error(), "config: "), "error %q does not start with config:", err)
			return
		}
		require.NoError(t, cfg.Validate())
		again, err := loadConfig(viper.New(), "", yaml)
		require.NoError(t, err)
		require.Equal(t, cfg, again, "loading is not deterministic")
	})
}
