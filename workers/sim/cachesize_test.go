package sim

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The sim reports its KV cache size in its own metrics under every
// protocol, and the way the engine does under vLLM's and SGLang's (the
// end-to-end tests read those through duet's engine parsers).
func TestSimReportsItsCacheSizePerProtocol(t *testing.T) {
	for _, protocol := range Protocols {
		t.Run(protocol, func(t *testing.T) {
			cfg := slowConfig()
			cfg.Protocol, cfg.BlockSize, cfg.KVCapacityBlocks = protocol, 16, 300
			w := startWorker(t, cfg)
			m := do(t, http.MethodGet, w.url+"/metrics", nil, nil)
			n, err := ParseCacheSize(m.body)
			require.NoError(t, err)
			require.Equal(t, int64(4800), n)
			require.Equal(t, protocol == ProtocolVLLM, strings.Contains(string(m.body),
				`num_gpu_blocks="300",num_cpu_blocks="None",kv_cache_size_tokens="4800",engine="0"} 1.0`+"\n"))

			for _, path := range []string{"/get_server_info", "/server_info"} {
				info := do(t, http.MethodGet, w.url+path, nil, nil)
				if protocol != ProtocolSGLang {
					require.Equal(t, http.StatusNotFound, info.status, path)
					continue
				}
				require.Equal(t, http.StatusOK, info.status, path)
				var got sglangServerInfo
				require.NoError(t, json.Unmarshal(info.body, &got))
				require.Equal(t, int64(4800), got.MaxTotalNumTokens)
				require.Equal(t, 16, got.PageSize)
				require.Len(t, got.InternalStates, 1)
				require.Equal(t, int64(4800), got.InternalStates[0].MemoryUsage.TokenCapacity)
			}
		})
	}
}

func TestParseCacheSizeNeedsTheSimGauge(t *testing.T) {
	_, err := ParseCacheSize([]byte("vllm:num_requests_running{model_name=\"m\"} 0\n"))
	require.ErrorContains(t, err, "no duet_sim_kv_capacity_tokens")
	_, err = ParseCacheSize([]byte("duet_sim_kv_capacity_tokens{model_name=\"m\"} NaN\n"))
	require.ErrorContains(t, err, "unusable value")
}

func TestParseBlockSizeReadsTheSimGauge(t *testing.T) {
	require.Equal(t, 16, ParseBlockSize([]byte("duet_sim_kv_block_size{model_name=\"m\"} 16\n")))
	require.Zero(t, ParseBlockSize([]byte("duet_sim_kv_capacity_tokens{model_name=\"m\"} 100\n")))
	require.Zero(t, ParseBlockSize([]byte("duet_sim_kv_block_size{model_name=\"m\"} NaN\n")))
}
