package sglang

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/duet-serve/duet/orchestrator/protocol"
)

// serverInfo is the part of SGLang's GET /get_server_info answer that
// gives the KV cache size (python/sglang/srt/entrypoints/http_server.py:
// the server arguments, merged with the schedulers' init info and their
// internal states). max_total_num_tokens is the token pool of one
// scheduler: with data parallelism, rank 0's (data_parallel_controller.py
// keeps the first rank's init info), and every rank has a pool of its own;
// internal_states holds one entry per rank, whose memory_usage reports its
// token_capacity in newer releases. The server argument
// max_total_tokens is only a command-line cap and is not read.
type serverInfo struct {
	MaxTotalNumTokens *int64 `json:"max_total_num_tokens"`
	// PageSize is the server argument page_size: tokens per KV page
	// (python/sglang/srt/server_args.py, default 1).
	PageSize       *int64 `json:"page_size"`
	DPSize         *int64 `json:"dp_size"`
	InternalStates []struct {
		MemoryUsage *struct {
			TokenCapacity *int64 `json:"token_capacity"`
		} `json:"memory_usage"`
	} `json:"internal_states"`
}

var _ protocol.CacheSizeReporter = (*Adapter)(nil)

// CacheSizePath is where an SGLang server reports its KV cache size. Newer
// releases also serve it at /server_info, keeping this path as an alias.
func (*Adapter) CacheSizePath() string { return "/get_server_info" }

// ParseCacheSize reads the server's KV cache size, in tokens: the ranks'
// token capacities summed when every rank reports one, else
// max_total_num_tokens times dp_size.
func (*Adapter) ParseCacheSize(body []byte) (int64, error) {
	var info serverInfo
	if err := json.Unmarshal(body, &info); err != nil {
		return 0, fmt.Errorf("server info is not the expected JSON object: %w", err)
	}
	if n := info.rankCapacities(); n > 0 {
		return n, nil
	}
	if info.MaxTotalNumTokens == nil {
		return 0, errors.New("server info has no max_total_num_tokens")
	}
	perRank, ranks := *info.MaxTotalNumTokens, int64(1)
	if info.DPSize != nil && *info.DPSize > 1 {
		ranks = *info.DPSize
	}
	if perRank <= 0 || perRank > protocol.MaxCacheTokens/ranks {
		return 0, fmt.Errorf("server info has max_total_num_tokens %d", perRank)
	}
	return perRank * ranks, nil
}

// ParseBlockSize reads the server's KV page size (page_size), 0 when the
// body has none.
func (*Adapter) ParseBlockSize(body []byte) int {
	var info serverInfo
	if json.Unmarshal(body, &info) != nil || info.PageSize == nil || *info.PageSize < 1 || *info.PageSize > 1<<16 {
		return 0
	}
	return int(*info.PageSize)
}

// rankCapacities sums the ranks' token capacities; 0 unless every rank
// reports a usable one.
func (info *serverInfo) rankCapacities() int64 {
	var total int64
	for _, st := range info.InternalStates {
		if st.MemoryUsage == nil || st.MemoryUsage.TokenCapacity == nil {
			return 0
		}
		n := *st.MemoryUsage.TokenCapacity
		if n <= 0 || n > protocol.MaxCacheTokens-total {
			return 0
		}
		total += n
	}
	return total
}
