package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/duet-serve/duet/proto/disagg"
)

// The simulator reports its KV cache size the way the engine whose
// protocol it speaks does, so that duet's fleet reads it as it would from
// that engine. TensorRT-LLM reports it only in drained iteration stats,
// which the simulator does not imitate; under every protocol the
// simulator also reports it in its own metrics (CacheSizePath).

// cacheTokens is the KV cache size in tokens.
func (c Config) cacheTokens() int64 { return int64(c.KVCapacityBlocks) * int64(c.BlockSize) }

// capacityTokensMetric is the simulator's own gauge of its KV cache size.
const capacityTokensMetric = "duet_sim_kv_capacity_tokens"

// CacheSizePath is where the simulator reports its KV cache size under
// every protocol: its metrics page (ParseCacheSize).
const CacheSizePath = "/metrics"

// ParseCacheSize reads the KV cache size, in tokens, from the simulator's
// metrics page.
func ParseCacheSize(page []byte) (int64, error) {
	for line := range bytes.Lines(page) {
		rest, ok := bytes.CutPrefix(line, []byte(capacityTokensMetric+"{"))
		if !ok {
			continue
		}
		_, value, _ := bytes.Cut(rest, []byte("} "))
		n, err := strconv.ParseFloat(string(bytes.TrimSpace(value)), 64)
		if err != nil || !(n >= 1 && n <= 1<<50) { // NaN fails too
			return 0, fmt.Errorf("%s: unusable value %q", capacityTokensMetric, bytes.TrimSpace(value))
		}
		return int64(n), nil
	}
	return 0, errors.New("no " + capacityTokensMetric + " (not a duet sim?)")
}

// blockSizeMetric is the simulator's own gauge of its KV block size.
const blockSizeMetric = "duet_sim_kv_block_size"

// ParseBlockSize reads the KV block size, in tokens, from the simulator's
// metrics page; 0 when it has none.
func ParseBlockSize(page []byte) int {
	for line := range bytes.Lines(page) {
		rest, ok := bytes.CutPrefix(line, []byte(blockSizeMetric+"{"))
		if !ok {
			continue
		}
		_, value, _ := bytes.Cut(rest, []byte("} "))
		n, err := strconv.ParseFloat(string(bytes.TrimSpace(value)), 64)
		if err != nil || !(n >= 1 && n <= 1<<16) {
			return 0
		}
		return int(n)
	}
	return 0
}

// writeCacheConfigInfo writes vLLM's vllm:cache_config_info series: a gauge
// of 1 whose labels are the cache config's fields rendered by Python's
// str(), as vLLM V1 does (vllm/v1/metrics/loggers.py, log_metrics_info,
// one series per engine; kv_cache_size_tokens as of vllm-project/vllm
// #42206). A subset of the fields, in vLLM's order.
func writeCacheConfigInfo(w io.Writer, c Config) {
	const name = "vllm:cache_config_info"
	fmt.Fprintf(w, "# HELP %s Information of the LLMEngine CacheConfig\n# TYPE %s gauge\n", name, name)
	fmt.Fprintf(w, `%s{block_size="%d",gpu_memory_utilization="0.9",cache_dtype="auto",is_attention_free="False",`+
		`num_gpu_blocks_override="None",sliding_window="None",enable_prefix_caching="True",prefix_caching_hash_algo="sha256",`+
		`cpu_offload_gb="0",calculate_kv_scales="False",num_gpu_blocks="%d",num_cpu_blocks="None",`+
		`kv_cache_size_tokens="%d",engine="0"} 1.0`+"\n", name, c.BlockSize, c.KVCapacityBlocks, c.cacheTokens())
}

// sglangServerInfo is the simulator's answer to SGLang's GET
// /get_server_info (and /server_info): a few server arguments, the
// scheduler's init info and one internal state per data-parallel rank
// (python/sglang/srt/entrypoints/http_server.py; the scheduler's
// get_init_info and get_internal_state).
type sglangServerInfo struct {
	ModelPath          string            `json:"model_path"`
	PageSize           int               `json:"page_size"`
	DPSize             int               `json:"dp_size"`
	DisaggregationMode string            `json:"disaggregation_mode"`
	MaxTotalTokens     *int64            `json:"max_total_tokens"` // the command-line cap: unset
	Status             string            `json:"status"`
	MaxTotalNumTokens  int64             `json:"max_total_num_tokens"`
	MaxReqInputLen     int               `json:"max_req_input_len"`
	InternalStates     []sglangRankState `json:"internal_states"`
	Version            string            `json:"version"`
}

type sglangRankState struct {
	LastGenThroughput float64           `json:"last_gen_throughput"`
	MemoryUsage       sglangMemoryUsage `json:"memory_usage"`
}

type sglangMemoryUsage struct {
	Weight        float64 `json:"weight"`
	KVCache       float64 `json:"kvcache"`
	TokenCapacity int64   `json:"token_capacity"`
}

// handleServerInfo answers SGLang's server info request.
func (s *Server) handleServerInfo(ctx *fasthttp.RequestCtx) {
	mode := map[string]string{string(disagg.RoleContext): "prefill", string(disagg.RoleGeneration): "decode"}[s.cfg.Role]
	if mode == "" {
		mode = "null" // a mixed worker: SGLang's DisaggregationMode.NULL
	}
	body, _ := json.Marshal(sglangServerInfo{ // cannot fail
		ModelPath: s.cfg.Model, PageSize: s.cfg.BlockSize, DPSize: 1, DisaggregationMode: mode,
		Status: "ready", MaxTotalNumTokens: s.cfg.cacheTokens(), MaxReqInputLen: s.cfg.MaxModelLen - 1,
		InternalStates: []sglangRankState{{MemoryUsage: sglangMemoryUsage{TokenCapacity: s.cfg.cacheTokens()}}},
		Version:        "duet-sim",
	})
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}
