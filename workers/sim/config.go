package sim

import (
	"fmt"
	"math"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/duet-serve/duet/proto/disagg"
)

// Protocols lists the disaggregation protocols the simulated worker speaks.
var Protocols = []string{ProtocolTRTLLM, ProtocolVLLM, ProtocolSGLang}

// Protocol names (the protocol key).
const (
	ProtocolTRTLLM = "trtllm"
	ProtocolVLLM   = "vllm"
	ProtocolSGLang = "sglang"
)

// Config configures one simulated worker. The defaults model
// Llama-3.1-8B-Instruct in BF16 on one H100 80 GB; every modelled duration
// is multiplied by TimeScale (and by FaultSlowFactor).
type Config struct {
	// Role is context, generation or mixed (default mixed).
	Role string `mapstructure:"role" help:"worker role: context, generation or mixed (default mixed)"`
	// Protocol is the disaggregation protocol, trtllm, vllm or sglang
	// (default trtllm).
	Protocol string `mapstructure:"protocol" help:"disaggregation protocol: trtllm, vllm or sglang (default trtllm)"`
	// Host is the address to listen on (default 127.0.0.1).
	Host string `mapstructure:"host" help:"listen address (default 127.0.0.1)"`
	// Port is the TCP port to listen on; 0 picks a free one (default 8100).
	Port int `mapstructure:"port" help:"listen port, 0 for any free port (default 8100)"`
	// BootstrapPort is SGLang's bootstrap port: a context worker with
	// protocol sglang serves its bootstrap server there (0 picks a free one,
	// reported in the startup log); a generation worker uses it for requests
	// whose bootstrap_port is null, as SGLang's decode falls back to its own
	// --disaggregation-bootstrap-port. Ignored by other protocols
	// (default 8998).
	BootstrapPort int `mapstructure:"bootstrap_port" help:"SGLang bootstrap port: served by a context worker (0 for any free port), the fallback for a null bootstrap_port on a generation worker (default 8998)"`
	// AdvertiseURL is the base URL other workers use to reach this one
	// (default empty: derived from the listener address).
	AdvertiseURL string `mapstructure:"advertise_url" help:"base URL peers use to reach this worker (default: from the listen address)"`
	// Model is the served model name (default meta-llama/Llama-3.1-8B-Instruct).
	Model string `mapstructure:"model" help:"served model name (default meta-llama/Llama-3.1-8B-Instruct)"`
	// LoraAdapters are the names of the LoRA adapters the worker serves on
	// top of model, each as if loaded from /adapters/<name> at startup (vLLM
	// --lora-modules name=path, SGLang --lora-paths name=path); requests
	// select one the way the protocol's engine does (see lora.go). A name is
	// non-empty, has no whitespace and no ':' (SGLang's model:adapter
	// separator), differs from model and appears once (default empty: none).
	LoraAdapters []string `mapstructure:"lora_adapters" help:"LoRA adapter names served on top of model, each as if loaded from /adapters/<name> (vLLM --lora-modules, SGLang --lora-paths; default none)"`
	// MaxModelLen is the context window in tokens, prompt plus output
	// (default 131072, Llama 3.1's 128k window).
	MaxModelLen int `mapstructure:"max_model_len" help:"context window in tokens, prompt + output (default 131072)"`
	// BlockSize is the number of tokens per KV block (default 32,
	// TensorRT-LLM's tokens_per_block).
	BlockSize int `mapstructure:"block_size" help:"tokens per KV cache block (default 32)"`
	// KVCapacityBlocks is the KV cache size in blocks (default 14000). An 8B
	// Llama keeps 32 layers x 8 KV heads x 128 dims x 2 (K,V) x 2 bytes =
	// 128 KiB per token; of 80 GB at 90% utilisation, 16 GB of weights and
	// ~2 GB of activations leave ~55 GiB, about 450k tokens = 14000 blocks.
	KVCapacityBlocks int `mapstructure:"kv_capacity_blocks" help:"KV cache capacity in blocks (default 14000, ~450k tokens)"`
	// PrefillTokensPerSec is the prefill throughput in tokens/s, shared by
	// all concurrent prefills (default 20000: 16 GFLOP per token at ~30% of
	// an H100's dense BF16 peak).
	PrefillTokensPerSec float64 `mapstructure:"prefill_tokens_per_sec" help:"prefill throughput in tokens/s, shared by concurrent prefills (default 20000)"`
	// PrefillOverhead is the fixed latency of one prefill: scheduling and
	// the sampling step. Engines batch prefills, so it delays each request
	// but does not occupy the shared prefill server (default 10ms).
	PrefillOverhead time.Duration `mapstructure:"prefill_overhead" help:"fixed cost per prefill (default 10ms)"`
	// ITLBase is the inter-token latency of a batch of one (default 7ms:
	// reading 16 GB of weights at ~3 TB/s plus launch overhead).
	ITLBase time.Duration `mapstructure:"itl_base" help:"inter-token latency with one running sequence (default 7ms)"`
	// ITLPerSeq is the inter-token latency added per running sequence
	// (default 50us: 256 sequences give ~20 ms).
	ITLPerSeq time.Duration `mapstructure:"itl_per_seq" help:"inter-token latency added per running sequence (default 50us)"`
	// KVTransferTokensPerSec is the KV transfer rate between workers in
	// tokens/s (default 200000: 128 KiB per token over ~25 GB/s RDMA).
	KVTransferTokensPerSec float64 `mapstructure:"kv_transfer_tokens_per_sec" help:"KV transfer rate between workers in tokens/s (default 200000)"`
	// KVTransferOverhead is the fixed cost of one KV transfer (default 2ms).
	KVTransferOverhead time.Duration `mapstructure:"kv_transfer_overhead" help:"fixed cost per KV transfer (default 2ms)"`
	// KVTransferTimeout is how long a context worker keeps a prompt's blocks
	// pinned for a pull; it is a protocol timeout and is not scaled by
	// time_scale (default 30s, vLLM's lease).
	KVTransferTimeout time.Duration `mapstructure:"kv_transfer_timeout" help:"how long a KV handle stays valid, not scaled (default 30s)"`
	// MaxNumSeqs is the maximum number of running sequences (default 256,
	// vLLM's default).
	MaxNumSeqs int `mapstructure:"max_num_seqs" help:"maximum running sequences (default 256)"`
	// MaxWaiting bounds the waiting queue; a request beyond it gets 429
	// (default 1024; 0 rejects whenever no slot is free).
	MaxWaiting int `mapstructure:"max_waiting" help:"waiting queue bound, 429 beyond it (default 1024)"`
	// TimeScale multiplies every modelled duration: 1 is real time, 0.01
	// makes tests fast, 0 removes all modelled delays (default 1).
	TimeScale float64 `mapstructure:"time_scale" help:"multiplier for every modelled duration, 0 disables delays (default 1)"`
	// Seed seeds the output text and fault draws (default 0).
	Seed int64 `mapstructure:"seed" help:"seed for output text and fault draws (default 0)"`
	// EOSProbability is the per-token chance of an early end of sequence
	// when ignore_eos is false and min_tokens is reached (default 0.002,
	// a mean natural length of ~500 tokens).
	EOSProbability float64 `mapstructure:"eos_probability" help:"per-token chance of an early stop without ignore_eos (default 0.002)"`
	// DefaultMaxTokens is the output limit when a request sets none, in
	// tokens (default 512).
	DefaultMaxTokens int `mapstructure:"default_max_tokens" help:"output token limit when the request sets none (default 512)"`
	// MaxBodyBytes is the largest accepted request body in bytes; larger
	// bodies get 413 (default 8388608, 8 MiB).
	MaxBodyBytes int `mapstructure:"max_body_bytes" help:"largest request body in bytes, 413 beyond (default 8388608)"`
	// MaxHeaderBytes bounds the request line plus headers in bytes; larger
	// get 431 (default 16384).
	MaxHeaderBytes int `mapstructure:"max_header_bytes" help:"largest request header in bytes, 431 beyond (default 16384)"`
	// ShutdownTimeout bounds how long in-flight requests may finish after
	// the stop signal before they are aborted (default 10s).
	ShutdownTimeout time.Duration `mapstructure:"shutdown_timeout" help:"grace period for in-flight requests on shutdown (default 10s)"`
	// FaultErrorRate is the fraction of completion requests answered with
	// 500 (default 0).
	FaultErrorRate float64 `mapstructure:"fault_error_rate" help:"fraction of requests failing with 500 (default 0)"`
	// FaultHangRate is the fraction of completion requests that hang before
	// the first byte until the client gives up or fault_hang_max passes
	// (default 0).
	FaultHangRate float64 `mapstructure:"fault_hang_rate" help:"fraction of requests hanging before the first byte (default 0)"`
	// FaultHangMax bounds a hang, after which the connection is closed
	// without a response (default 10m).
	FaultHangMax time.Duration `mapstructure:"fault_hang_max" help:"longest hang before the connection is closed (default 10m)"`
	// FaultDieRate is the fraction of completion requests whose worker
	// "dies": streams stop after fault_die_after_tokens tokens without
	// [DONE] and the connection closes; non-streaming requests get the
	// connection closed without a response (default 0).
	FaultDieRate float64 `mapstructure:"fault_die_rate" help:"fraction of requests dying mid-stream (default 0)"`
	// FaultDieAfterTokens is how many tokens a dying, garbled, cut,
	// stalled or engine-failing (fault_error_event_rate) stream sends
	// before its fault strikes (default 4).
	FaultDieAfterTokens int `mapstructure:"fault_die_after_tokens" help:"tokens a dying, garbled, cut, stalled or engine-failing stream sends before its fault (default 4)"`
	// FaultSlowFactor multiplies every modelled duration, on top of
	// time_scale, to model a slow worker (default 1, no slowdown).
	FaultSlowFactor float64 `mapstructure:"fault_slow_factor" help:"extra multiplier for modelled durations, a slow worker (default 1)"`
	// FaultGarbageRate is the fraction of completion requests answered with
	// garbage: a stream sends fault_die_after_tokens tokens, then an event
	// whose data is not JSON, then goes on; a non-streaming request gets 200
	// with an HTML page (text/html) or truncated JSON (default 0).
	FaultGarbageRate float64 `mapstructure:"fault_garbage_rate" help:"fraction of requests answered with a body or event that is not JSON (default 0)"`
	// FaultCutRate is the fraction of completion requests whose connection
	// is closed in the middle of an event: a stream sends
	// fault_die_after_tokens tokens, then half of the next event and half of
	// its HTTP chunk; a non-streaming request gets its headers and half of
	// its body (default 0).
	FaultCutRate float64 `mapstructure:"fault_cut_rate" help:"fraction of requests whose connection closes in the middle of an event (default 0)"`
	// FaultStallRate is the fraction of completion requests that stall: a
	// stream sends fault_die_after_tokens tokens, a non-streaming request its
	// headers, then nothing until the client leaves or fault_hang_max passes
	// (default 0).
	FaultStallRate float64 `mapstructure:"fault_stall_rate" help:"fraction of requests stalling mid-response (default 0)"`
	// FaultErrorEventRate is the fraction of completion requests whose
	// generation fails inside the engine, reported as the protocol's engine
	// reports an internal error: a stream sends fault_die_after_tokens
	// tokens, then vLLM and SGLang send an error event (code 500) and
	// [DONE], TensorRT-LLM cuts the stream without [DONE]; a non-streaming
	// request or a context leg gets the engine's error response (vLLM 500,
	// SGLang 500, TensorRT-LLM 400 BadRequestError). See enginefail.go
	// (default 0).
	FaultErrorEventRate float64 `mapstructure:"fault_error_event_rate" help:"fraction of requests failing inside the engine after fault_die_after_tokens tokens, reported the engine's way (error event, or a cut stream on trtllm) (default 0)"`
	// FaultKVPullFailRate is the fraction of generation requests carrying a
	// KV handle (vLLM do_remote_prefill, TensorRT-LLM generation_only,
	// SGLang bootstrap fields on a decode worker) whose KV pull fails,
	// reported as the engine reports it: vLLM a role chunk, a 500 error
	// event and [DONE] (non-streaming 500), SGLang a "Decode transfer
	// failed" error event and [DONE] (500), TensorRT-LLM a stream cut
	// before any token (non-streaming 400 "Error in kv cache transfer for
	// generation requests"). Nothing is taken from the context worker,
	// which keeps its pin until kv_transfer_timeout (default 0).
	FaultKVPullFailRate float64 `mapstructure:"fault_kv_pull_fail_rate" help:"fraction of generation requests whose KV pull fails, reported the engine's way; the context worker keeps its pin (default 0)"`
	// KVEventsEndpoint turns on KV cache events: the ZeroMQ endpoint
	// (tcp://host:port, ipc://path) the worker binds a PUB socket on to
	// publish its cache's BlockStored, BlockRemoved and AllBlocksCleared
	// events in vLLM's wire format (map layout, integer block hashes, topic
	// "", data_parallel_rank 0), as proto/kvevents reads them. Port 0 picks
	// a free port (logged at startup). Default "": no events, no socket.
	//
	// vLLM's equivalent is --kv-events-config
	// '{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":E,"replay_endpoint":R}':
	// kv_events_endpoint is E, set meaning enable_kv_cache_events with the
	// zmq publisher; kv_events_replay_endpoint is R. vLLM's other fields keep
	// their defaults (buffer_steps 10000, hwm 100000, topic ""). One
	// difference: vLLM binds E only when it names a wildcard host ("*",
	// "::") or is ipc:// or inproc://, and otherwise connects to a
	// subscriber that binds; the sim always binds, so a subscriber always
	// connects to it (vLLM's default "tcp://*:5557" behaves the same in both).
	KVEventsEndpoint string `mapstructure:"kv_events_endpoint" help:"publish vLLM-format KV cache events on a ZeroMQ PUB socket bound here, e.g. tcp://127.0.0.1:5557 (vLLM --kv-events-config endpoint; default empty: off)"`
	// KVEventsReplayEndpoint is where the worker binds a ROUTER socket that
	// answers replay requests for the last 10000 batches, so a subscriber
	// can fill a sequence gap (vLLM's replay_endpoint). Only with
	// kv_events_endpoint. Default "": no replay.
	KVEventsReplayEndpoint string `mapstructure:"kv_events_replay_endpoint" help:"ZeroMQ ROUTER endpoint answering KV event replay requests (vLLM replay_endpoint; default empty: none)"`
}

// Defaults returns the default configuration (Llama-3.1-8B on one H100).
func Defaults() Config {
	return Config{
		Role:                   string(disagg.RoleMixed),
		Protocol:               ProtocolTRTLLM,
		Host:                   "127.0.0.1",
		Port:                   8100,
		BootstrapPort:          disagg.DefaultBootstrapPort,
		Model:                  "meta-llama/Llama-3.1-8B-Instruct",
		MaxModelLen:            131072,
		BlockSize:              32,
		KVCapacityBlocks:       14000,
		PrefillTokensPerSec:    20000,
		PrefillOverhead:        10 * time.Millisecond,
		ITLBase:                7 * time.Millisecond,
		ITLPerSeq:              50 * time.Microsecond,
		KVTransferTokensPerSec: 200000,
		KVTransferOverhead:     2 * time.Millisecond,
		KVTransferTimeout:      30 * time.Second,
		MaxNumSeqs:             256,
		MaxWaiting:             1024,
		TimeScale:              1,
		EOSProbability:         0.002,
		DefaultMaxTokens:       512,
		MaxBodyBytes:           8 << 20,
		MaxHeaderBytes:         16 << 10,
		ShutdownTimeout:        10 * time.Second,
		FaultHangMax:           10 * time.Minute,
		FaultDieAfterTokens:    4,
		FaultSlowFactor:        1,
	}
}

// Validate checks the configuration; errors name the key.
func (c Config) Validate() error {
	if _, err := disagg.ParseRole(c.Role); err != nil {
		return fmt.Errorf("role: %w", err)
	}
	if !slices.Contains(Protocols, c.Protocol) {
		return fmt.Errorf("protocol: unknown protocol %q (valid: %s)", c.Protocol, strings.Join(Protocols, ", "))
	}
	if c.Host == "" {
		return fmt.Errorf("host: must not be empty")
	}
	if c.AdvertiseURL != "" {
		if err := checkBaseURL(c.AdvertiseURL); err != nil {
			return fmt.Errorf("advertise_url: %w", err)
		}
	}
	if strings.TrimSpace(c.Model) == "" {
		return fmt.Errorf("model: must not be empty")
	}
	for _, check := range []func() error{c.validateInts, c.validateRates, c.validateDurations, c.validateFaults, c.validateKVEvents, c.validateLoRA} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

func (c Config) validateInts() error {
	for _, f := range []struct {
		key      string
		val, min int
	}{
		{"port", c.Port, 0},
		{"bootstrap_port", c.BootstrapPort, 0},
		{"max_model_len", c.MaxModelLen, 1},
		{"block_size", c.BlockSize, 1},
		{"kv_capacity_blocks", c.KVCapacityBlocks, 1},
		{"max_num_seqs", c.MaxNumSeqs, 1},
		{"max_waiting", c.MaxWaiting, 0},
		{"default_max_tokens", c.DefaultMaxTokens, 1},
		{"max_body_bytes", c.MaxBodyBytes, 1},
		{"max_header_bytes", c.MaxHeaderBytes, 1024},
		{"fault_die_after_tokens", c.FaultDieAfterTokens, 0},
	} {
		if f.val < f.min {
			if f.min == 1 {
				return fmt.Errorf("%s: must be > 0, got %d", f.key, f.val)
			}
			return fmt.Errorf("%s: must be >= %d, got %d", f.key, f.min, f.val)
		}
	}
	if c.Port > 65535 {
		return fmt.Errorf("port: must be <= 65535, got %d", c.Port)
	}
	if c.BootstrapPort > 65535 {
		return fmt.Errorf("bootstrap_port: must be <= 65535, got %d", c.BootstrapPort)
	}
	if c.servesBootstrap() && c.BootstrapPort != 0 && c.BootstrapPort == c.Port {
		return fmt.Errorf("bootstrap_port: must differ from port (%d)", c.Port)
	}
	if c.BlockSize > 4096 {
		return fmt.Errorf("block_size: must be <= 4096, got %d", c.BlockSize)
	}
	if c.KVCapacityBlocks > math.MaxInt32 {
		return fmt.Errorf("kv_capacity_blocks: must be <= %d, got %d", math.MaxInt32, c.KVCapacityBlocks)
	}
	return nil
}

func (c Config) validateRates() error {
	for _, f := range []struct {
		key string
		val float64
	}{
		{"prefill_tokens_per_sec", c.PrefillTokensPerSec},
		{"kv_transfer_tokens_per_sec", c.KVTransferTokensPerSec},
		{"fault_slow_factor", c.FaultSlowFactor},
	} {
		if !(f.val > 0) || math.IsInf(f.val, 0) {
			return fmt.Errorf("%s: must be > 0, got %v", f.key, f.val)
		}
	}
	if !(c.TimeScale >= 0) || math.IsInf(c.TimeScale, 0) {
		return fmt.Errorf("time_scale: must be >= 0, got %v", c.TimeScale)
	}
	if !(c.EOSProbability >= 0 && c.EOSProbability < 1) {
		return fmt.Errorf("eos_probability: must be in [0, 1), got %v", c.EOSProbability)
	}
	return nil
}

func (c Config) validateDurations() error {
	for _, f := range []struct {
		key string
		val time.Duration
		pos bool // must be > 0 rather than >= 0
	}{
		{"prefill_overhead", c.PrefillOverhead, false},
		{"itl_base", c.ITLBase, false},
		{"itl_per_seq", c.ITLPerSeq, false},
		{"kv_transfer_overhead", c.KVTransferOverhead, false},
		{"kv_transfer_timeout", c.KVTransferTimeout, true},
		{"shutdown_timeout", c.ShutdownTimeout, true},
		{"fault_hang_max", c.FaultHangMax, true},
	} {
		if f.pos && f.val <= 0 {
			return fmt.Errorf("%s: must be > 0, got %s", f.key, f.val)
		}
		if f.val < 0 {
			return fmt.Errorf("%s: must be >= 0, got %s", f.key, f.val)
		}
	}
	return nil
}

func (c Config) validateFaults() error {
	for _, f := range []struct {
		key string
		val float64
	}{
		{"fault_error_rate", c.FaultErrorRate},
		{"fault_hang_rate", c.FaultHangRate},
		{"fault_die_rate", c.FaultDieRate},
		{"fault_garbage_rate", c.FaultGarbageRate},
		{"fault_cut_rate", c.FaultCutRate},
		{"fault_stall_rate", c.FaultStallRate},
		{"fault_error_event_rate", c.FaultErrorEventRate},
		{"fault_kv_pull_fail_rate", c.FaultKVPullFailRate},
	} {
		if !(f.val >= 0 && f.val <= 1) {
			return fmt.Errorf("%s: must be in [0, 1], got %v", f.key, f.val)
		}
	}
	return nil
}

func (c Config) validateKVEvents() error {
	if c.KVEventsEndpoint == "" {
		if c.KVEventsReplayEndpoint != "" {
			return fmt.Errorf("kv_events_replay_endpoint: needs kv_events_endpoint")
		}
		return nil
	}
	if err := checkZMQEndpoint(c.KVEventsEndpoint); err != nil {
		return fmt.Errorf("kv_events_endpoint: %w", err)
	}
	if c.KVEventsReplayEndpoint != "" {
		if err := checkZMQEndpoint(c.KVEventsReplayEndpoint); err != nil {
			return fmt.Errorf("kv_events_replay_endpoint: %w", err)
		}
		if c.KVEventsReplayEndpoint == c.KVEventsEndpoint && !strings.HasSuffix(c.KVEventsEndpoint, ":0") {
			return fmt.Errorf("kv_events_replay_endpoint: must differ from kv_events_endpoint (%s)", c.KVEventsEndpoint)
		}
	}
	return nil
}

func (c Config) validateLoRA() error {
	seen := make(map[string]bool, len(c.LoraAdapters))
	for i, name := range c.LoraAdapters {
		switch {
		case name == "":
			return fmt.Errorf("lora_adapters[%d]: must not be empty", i)
		case strings.ContainsFunc(name, unicode.IsSpace):
			return fmt.Errorf("lora_adapters[%d]: %q must not contain whitespace", i, name)
		case strings.Contains(name, ":"):
			return fmt.Errorf("lora_adapters[%d]: %q must not contain ':' (SGLang's model:adapter separator)", i, name)
		case name == c.Model:
			return fmt.Errorf("lora_adapters[%d]: %q is the model's name", i, name)
		case seen[name]:
			return fmt.Errorf("lora_adapters[%d]: %q is listed twice", i, name)
		}
		seen[name] = true
	}
	return nil
}

// checkZMQEndpoint accepts tcp://host:port (host may be "*"), ipc://path and
// inproc://name, the endpoints a ZeroMQ socket binds.
func checkZMQEndpoint(ep string) error {
	scheme, rest, _ := strings.Cut(ep, "://")
	switch {
	case rest == "":
		return fmt.Errorf("%q: want tcp://host:port, ipc://path or inproc://name", ep)
	case scheme == "ipc" || scheme == "inproc":
		return nil
	case scheme != "tcp":
		return fmt.Errorf("%q: unknown scheme %q (valid: tcp, ipc, inproc)", ep, scheme)
	}
	if _, port, err := net.SplitHostPort(rest); err != nil {
		return fmt.Errorf("%q: %w", ep, err)
	} else if p, err := strconv.Atoi(port); (err != nil || p < 0 || p > 65535) && port != "*" {
		return fmt.Errorf("%q: port must be 0..65535", ep)
	}
	return nil
}

// checkBaseURL accepts an absolute http(s) URL with a host and no query.
func checkBaseURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme must be http or https, got %q", raw)
	}
	if u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("must be a base URL like http://host:port, got %q", raw)
	}
	return nil
}

// servesBootstrap reports whether the worker runs an SGLang bootstrap
// server: protocol sglang in the context role (SGLang's prefill mode). A
// mixed worker is an SGLang server without a disaggregation mode and has
// none.
func (c Config) servesBootstrap() bool {
	return c.Protocol == ProtocolSGLang && c.Role == string(disagg.RoleContext)
}
