package vllm

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/duet-serve/duet/orchestrator/protocol"
)

// cacheInfoMetric is the Prometheus series through which vLLM publishes
// its CacheConfig: a gauge of 1 whose labels are the config's fields, each
// value rendered by Python's str() (so an unset field reads "None").
// vLLM v0.6-v0.8 (vllm/engine/metrics.py, PrometheusStatLogger.info) has
// one series with no engine label; V1 (vllm/v1/metrics/loggers.py,
// PrometheusStatLogger.log_metrics_info) has one per engine, labelled
// engine="<index>", with the same values in each: num_gpu_blocks is
// already summed over data-parallel engines there (the engine core
// client's ready handshake), while kv_cache_size_tokens, added in 2026
// (vllm-project/vllm#42206), is one engine's capacity in tokens, counting
// hybrid models' groups correctly.
const cacheInfoMetric = "vllm:cache_config_info"

var _ protocol.CacheSizeReporter = (*Adapter)(nil)

// CacheSizePath is where a vLLM server reports its KV cache size: its
// Prometheus page, served by `vllm serve` by default.
func (*Adapter) CacheSizePath() string { return "/metrics" }

// ParseCacheSize reads the server's KV cache size, in tokens, from its
// /metrics page: kv_cache_size_tokens summed over the engines when the
// labels have it, else num_gpu_blocks × block_size.
func (*Adapter) ParseCacheSize(page []byte) (int64, error) {
	series, err := cacheInfoSeries(page)
	if err != nil {
		return 0, err
	}
	if len(series) == 0 {
		return 0, errors.New("no " + cacheInfoMetric + " series (is the server's stats logging disabled?)")
	}
	if n := perEngineTokens(series); n > 0 {
		return n, nil
	}
	for _, labels := range series {
		blocks, okBlocks := positive(labels["num_gpu_blocks"])
		size, okSize := positive(labels["block_size"])
		if okBlocks && okSize && blocks <= protocol.MaxCacheTokens/size {
			return blocks * size, nil
		}
	}
	return 0, fmt.Errorf("%s has no usable num_gpu_blocks and block_size (num_gpu_blocks=%q)", cacheInfoMetric, series[0]["num_gpu_blocks"])
}

// ParseBlockSize reads the engine's KV block size (the block_size label),
// 0 when the page has none.
func (*Adapter) ParseBlockSize(page []byte) int {
	series, _ := cacheInfoSeries(page)
	for _, labels := range series {
		if n, ok := positive(labels["block_size"]); ok && n <= maxBlockSize {
			return int(n)
		}
	}
	return 0
}

// maxBlockSize bounds a believable KV block size, in tokens.
const maxBlockSize = 1 << 16

// perEngineTokens sums kv_cache_size_tokens over the distinct engines; 0
// when no series has a usable value.
func perEngineTokens(series []map[string]string) int64 {
	seen := map[string]bool{}
	var total int64
	for _, labels := range series {
		n, ok := positive(labels["kv_cache_size_tokens"])
		if !ok || seen[labels["engine"]] {
			continue
		}
		seen[labels["engine"]] = true
		total = min(total+n, protocol.MaxCacheTokens)
	}
	return total
}

// positive parses a label value as a count in (0, protocol.MaxCacheTokens].
func positive(v string) (int64, bool) {
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil && n > 0 && n <= protocol.MaxCacheTokens
}

// cacheInfoSeries returns the label sets of the page's cacheInfoMetric
// samples, in the Prometheus text exposition format (version 0.0.4, what
// vLLM serves to a client that asks for no other). A page that does not
// parse, anywhere, is an error: as in a Prometheus scrape, one malformed
// line (a truncated last line included) fails the page.
func cacheInfoSeries(page []byte) ([]map[string]string, error) {
	// UTF8Validation accepts every name legacy validation does, colons
	// included, and is what Prometheus 3 accepts by default.
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cacheInfoMetric, err)
	}
	metrics := families[cacheInfoMetric].GetMetric()
	out := make([]map[string]string, 0, len(metrics))
	for _, m := range metrics {
		labels := make(map[string]string, len(m.GetLabel()))
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		out = append(out, labels)
	}
	return out, nil
}
