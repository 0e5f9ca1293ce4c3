package vllm_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/orchestrator/protocol/vllm"
)

func TestParseCacheSizeReadsEveryVLLMVariant(t *testing.T) {
	for _, tc := range []struct {
		file string
		want int64
	}{
		{"v0.txt", 27153 * 16},
		{"v1-dp2.txt", 61440 * 16},         // num_gpu_blocks is already the engines' sum
		{"v1-tokens-dp2.txt", 2 * 1048576}, // one engine's tokens each, not num_gpu_blocks × block_size
	} {
		t.Run(tc.file, func(t *testing.T) {
			page, err := os.ReadFile(filepath.Join("testdata", "metrics", tc.file))
			require.NoError(t, err)
			got, err := vllm.New().ParseCacheSize(page)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestParseCacheSizeSaysWhyAPageHasNone(t *testing.T) {
	for _, tc := range []struct {
		file, want string
	}{
		{"v1-none.txt", `num_gpu_blocks="None"`},
		{"no-stats.txt", "no vllm:cache_config_info series"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			page, err := os.ReadFile(filepath.Join("testdata", "metrics", tc.file))
			require.NoError(t, err)
			_, err = vllm.New().ParseCacheSize(page)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestParseCacheSizeLabels(t *testing.T) {
	for _, tc := range []struct {
		name, page string
		want       int64
		err        string
	}{
		{name: "escaped quote and brace in a value",
			page: `vllm:cache_config_info{kv_cache_layout="a\"}b\\",block_size="16",num_gpu_blocks="100"} 1.0` + "\n", want: 1600},
		{name: "spaces after commas", page: `vllm:cache_config_info{block_size="16", num_gpu_blocks="10"} 1` + "\n", want: 160},
		{name: "a longer metric name is another metric",
			page: "vllm:cache_config_info_x{block_size=\"16\",num_gpu_blocks=\"10\"} 1\nvllm:cache_config_info{block_size=\"8\",num_gpu_blocks=\"10\"} 1\n", want: 80},
		{name: "tokens of an engine counted once",
			page: "vllm:cache_config_info{kv_cache_size_tokens=\"500\",engine=\"0\"} 1\nvllm:cache_config_info{kv_cache_size_tokens=\"500\",engine=\"0\"} 1\n", want: 500},
		{name: "unterminated value", page: `vllm:cache_config_info{block_size="16` + "\n", err: "unescaped new-line"},
		{name: "no quotes", page: `vllm:cache_config_info{block_size=16} 1` + "\n", err: `expected '"' at start of label value`},
		// The format ends every line with \n; a page without it was cut short.
		{name: "no final line feed", page: `vllm:cache_config_info{block_size="16",num_gpu_blocks="10"} 1`, err: "unexpected end of input stream"},
		// One malformed line fails the page, as it fails a Prometheus scrape.
		{name: "another metric malformed",
			page: "vllm:num_requests_waiting{ 1\nvllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"10\"} 1\n", err: "line 1"},
		{name: "negative blocks", page: `vllm:cache_config_info{block_size="16",num_gpu_blocks="-5"} 1` + "\n", err: "no usable"},
		{name: "overflowing product", page: `vllm:cache_config_info{block_size="1048576",num_gpu_blocks="1125899906842624"} 1` + "\n", err: "no usable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := vllm.New().ParseCacheSize([]byte(tc.page))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func FuzzParseCacheSize(f *testing.F) {
	for _, name := range []string{"v0.txt", "v1-dp2.txt", "v1-tokens-dp2.txt", "v1-none.txt"} {
		page, err := os.ReadFile(filepath.Join("testdata", "metrics", name))
		require.NoError(f, err)
		f.Add(page)
	}
	f.Fuzz(func(t *testing.T, page []byte) {
		n, err := vllm.New().ParseCacheSize(page)
		if err == nil && (n <= 0 || n > 1<<50) {
			t.Fatalf("size %d without an error", n)
		}
	})
}

func TestParseBlockSize(t *testing.T) {
	for file, want := range map[string]int{"v0.txt": 16, "v1-dp2.txt": 16, "v1-tokens-dp2.txt": 64, "v1-none.txt": 16} {
		page, err := os.ReadFile(filepath.Join("testdata", "metrics", file))
		require.NoError(t, err)
		require.Equal(t, want, vllm.New().ParseBlockSize(page), file)
	}
	for _, page := range []string{"", "vllm:cache_config_info{block_size=\"None\"} 1\n", "vllm:cache_config_info{block_size=\"-3\"} 1\n"} {
		require.Zero(t, vllm.New().ParseBlockSize([]byte(page)), page)
	}
}
