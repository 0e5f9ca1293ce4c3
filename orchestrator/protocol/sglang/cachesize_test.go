package sglang_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/orchestrator/protocol/sglang"
)

func TestParseCacheSizeReadsEverySGLangVariant(t *testing.T) {
	for _, tc := range []struct {
		file string
		want int64
	}{
		{"v0.4.json", 425061},
		{"dp2-memory.json", 300000 + 290000},
		{"dp2-no-memory.json", 2 * 300000},
	} {
		t.Run(tc.file, func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join("testdata", "server_info", tc.file))
			require.NoError(t, err)
			got, err := sglang.New().ParseCacheSize(body)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestParseCacheSizeSaysWhyAnAnswerHasNone(t *testing.T) {
	body, err := os.ReadFile(filepath.Join("testdata", "server_info", "no-size.json"))
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		body, want string
	}{
		"no size":  {string(body), "no max_total_num_tokens"},
		"not JSON": {"<html>", "not the expected JSON"},
		"zero":     {`{"max_total_num_tokens":0}`, "max_total_num_tokens 0"},
		"overflow": {`{"max_total_num_tokens":1125899906842624,"dp_size":4}`, "max_total_num_tokens"},
		"a string": {`{"max_total_num_tokens":"425061"}`, "not the expected JSON"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := sglang.New().ParseCacheSize([]byte(tc.body))
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestParseCacheSizeFallsBackWhenARankHasNoCapacity(t *testing.T) {
	got, err := sglang.New().ParseCacheSize([]byte(`{"max_total_num_tokens":1000,"dp_size":2,` +
		`"internal_states":[{"memory_usage":{"token_capacity":1000}},{"memory_usage":{}}]}`))
	require.NoError(t, err)
	require.Equal(t, int64(2000), got)
}

func TestParseBlockSizeReadsThePageSize(t *testing.T) {
	for file, want := range map[string]int{"dp2-memory.json": 16, "dp2-no-memory.json": 1, "v0.4.json": 0} {
		body, err := os.ReadFile(filepath.Join("testdata", "server_info", file))
		require.NoError(t, err)
		require.Equal(t, want, sglang.New().ParseBlockSize(body), file)
	}
	for _, body := range []string{"", "[]", `{"page_size":0}`, `{"page_size":"16"}`, `{"page_size":1e9}`} {
		require.Zero(t, sglang.New().ParseBlockSize([]byte(body)), body)
	}
}
