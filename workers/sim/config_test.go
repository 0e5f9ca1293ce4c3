package sim

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDefaultsValidate(t *testing.T) {
	require.NoError(t, Defaults().Validate())
	require.Empty(t, Defaults().KVEventsEndpoint, "KV events are off by default")
	for _, ep := range []string{"tcp://*:5557", "tcp://127.0.0.1:0", "tcp://[::1]:5557", "ipc:///tmp/kv", "inproc://kv"} {
		c := Defaults()
		c.KVEventsEndpoint = ep
		require.NoError(t, c.Validate(), ep)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"role", func(c *Config) { c.Role = "prefill" }, `role: unknown role "prefill" (valid: context, generation, mixed)`},
		{"protocol", func(c *Config) { c.Protocol = "tgi" }, `protocol: unknown protocol "tgi" (valid: trtllm, vllm, sglang)`},
		{"host", func(c *Config) { c.Host = "" }, "host: must not be empty"},
		{"port", func(c *Config) { c.Port = 70000 }, "port: must be <= 65535, got 70000"},
		{"bootstrap_port negative", func(c *Config) { c.BootstrapPort = -1 }, "bootstrap_port: must be >= 0, got -1"},
		{"bootstrap_port too large", func(c *Config) { c.BootstrapPort = 65536 }, "bootstrap_port: must be <= 65535, got 65536"},
		{"bootstrap_port equals port", func(c *Config) { c.Protocol, c.Role, c.BootstrapPort = ProtocolSGLang, "context", c.Port },
			"bootstrap_port: must differ from port (8100)"},
		{"advertise_url", func(c *Config) { c.AdvertiseURL = "ftp://x" }, `advertise_url: scheme must be http or https, got "ftp://x"`},
		{"model", func(c *Config) { c.Model = " " }, "model: must not be empty"},
		{"block_size", func(c *Config) { c.BlockSize = 0 }, "block_size: must be > 0, got 0"},
		{"kv_capacity_blocks", func(c *Config) { c.KVCapacityBlocks = -1 }, "kv_capacity_blocks: must be > 0, got -1"},
		{"max_waiting", func(c *Config) { c.MaxWaiting = -1 }, "max_waiting: must be >= 0, got -1"},
		{"prefill_tokens_per_sec", func(c *Config) { c.PrefillTokensPerSec = 0 }, "prefill_tokens_per_sec: must be > 0, got 0"},
		{"NaN rate", func(c *Config) { c.KVTransferTokensPerSec = math.NaN() }, "kv_transfer_tokens_per_sec: must be > 0, got NaN"},
		{"time_scale", func(c *Config) { c.TimeScale = -1 }, "time_scale: must be >= 0, got -1"},
		{"eos_probability", func(c *Config) { c.EOSProbability = 1 }, "eos_probability: must be in [0, 1), got 1"},
		{"itl_base", func(c *Config) { c.ITLBase = -time.Millisecond }, "itl_base: must be >= 0, got -1ms"},
		{"kv_transfer_timeout", func(c *Config) { c.KVTransferTimeout = 0 }, "kv_transfer_timeout: must be > 0, got 0s"},
		{"fault_error_rate", func(c *Config) { c.FaultErrorRate = 1.5 }, "fault_error_rate: must be in [0, 1], got 1.5"},
		{"fault_slow_factor", func(c *Config) { c.FaultSlowFactor = 0 }, "fault_slow_factor: must be > 0, got 0"},
		{"fault_cut_rate", func(c *Config) { c.FaultCutRate = -0.1 }, "fault_cut_rate: must be in [0, 1], got -0.1"},
		{"fault_error_event_rate", func(c *Config) { c.FaultErrorEventRate = 2 }, "fault_error_event_rate: must be in [0, 1], got 2"},
		{"fault_kv_pull_fail_rate", func(c *Config) { c.FaultKVPullFailRate = math.NaN() }, "fault_kv_pull_fail_rate: must be in [0, 1], got NaN"},
		{"kv_events_endpoint scheme", func(c *Config) { c.KVEventsEndpoint = "http://127.0.0.1:5557" },
			`kv_events_endpoint: "http://127.0.0.1:5557": unknown scheme "http" (valid: tcp, ipc, inproc)`},
		{"kv_events_endpoint no port", func(c *Config) { c.KVEventsEndpoint = "tcp://127.0.0.1" },
			`kv_events_endpoint: "tcp://127.0.0.1": address 127.0.0.1: missing port in address`},
		{"kv_events_endpoint port", func(c *Config) { c.KVEventsEndpoint = "tcp://*:70000" },
			`kv_events_endpoint: "tcp://*:70000": port must be 0..65535`},
		{"kv_events_endpoint empty address", func(c *Config) { c.KVEventsEndpoint = "ipc://" },
			`kv_events_endpoint: "ipc://": want tcp://host:port, ipc://path or inproc://name`},
		{"kv_events_replay_endpoint alone", func(c *Config) { c.KVEventsReplayEndpoint = "tcp://*:5558" },
			"kv_events_replay_endpoint: needs kv_events_endpoint"},
		{"kv_events_replay_endpoint same", func(c *Config) { c.KVEventsEndpoint, c.KVEventsReplayEndpoint = "tcp://*:5557", "tcp://*:5557" },
			"kv_events_replay_endpoint: must differ from kv_events_endpoint (tcp://*:5557)"},
		{"lora_adapters empty name", func(c *Config) { c.LoraAdapters = []string{"a", ""} }, "lora_adapters[1]: must not be empty"},
		{"lora_adapters whitespace", func(c *Config) { c.LoraAdapters = []string{"my adapter"} },
			`lora_adapters[0]: "my adapter" must not contain whitespace`},
		{"lora_adapters colon", func(c *Config) { c.LoraAdapters = []string{"m:a"} },
			`lora_adapters[0]: "m:a" must not contain ':' (SGLang's model:adapter separator)`},
		{"lora_adapters model", func(c *Config) { c.LoraAdapters = []string{"a", c.Model} },
			`lora_adapters[1]: "meta-llama/Llama-3.1-8B-Instruct" is the model's name`},
		{"lora_adapters duplicate", func(c *Config) { c.LoraAdapters = []string{"a", "b", "a"} }, `lora_adapters[2]: "a" is listed twice`},
		{"kv_events_replay_endpoint scheme", func(c *Config) { c.KVEventsEndpoint, c.KVEventsReplayEndpoint = "tcp://*:5557", "udp://x:1" },
			`kv_events_replay_endpoint: "udp://x:1": unknown scheme "udp" (valid: tcp, ipc, inproc)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Defaults()
			tt.mutate(&c)
			require.EqualError(t, c.Validate(), tt.want)
		})
	}
}

// TestConfigTags checks the convention the config loader relies on: every
// field has mapstructure and help tags and a supported kind.
func TestConfigTags(t *testing.T) {
	typ := reflect.TypeOf(Config{})
	allowed := map[reflect.Type]bool{
		reflect.TypeOf(""): true, reflect.TypeOf(0): true, reflect.TypeOf(int64(0)): true, reflect.TypeOf(uint64(0)): true,
		reflect.TypeOf(0.0): true, reflect.TypeOf(false): true, reflect.TypeOf(time.Duration(0)): true, reflect.TypeOf([]string{}): true,
	}
	seen := map[string]bool{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		key := f.Tag.Get("mapstructure")
		require.NotEmpty(t, key, f.Name)
		require.NotEmpty(t, f.Tag.Get("help"), f.Name)
		require.True(t, allowed[f.Type], "%s has unsupported kind %s", f.Name, f.Type)
		require.False(t, seen[key], "duplicate key %s", key)
		seen[key] = true
	}
	for _, k := range []string{"role", "protocol", "host", "port", "advertise_url", "model", "block_size", "kv_capacity_blocks",
		"prefill_tokens_per_sec", "prefill_overhead", "itl_base", "itl_per_seq", "kv_transfer_tokens_per_sec",
		"kv_transfer_overhead", "kv_transfer_timeout", "max_num_seqs", "max_waiting", "time_scale", "seed",
		"eos_probability", "default_max_tokens", "max_body_bytes", "bootstrap_port", "kv_events_endpoint",
		"kv_events_replay_endpoint", "fault_error_event_rate", "fault_kv_pull_fail_rate", "lora_adapters"} {
		require.True(t, seen[k], "required key %s", k)
	}
}
