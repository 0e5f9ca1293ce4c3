package tests

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Each fake ctx worker answers with one engine variant of the page that
// reports its KV cache size (the files are the protocol packages' test
// data, reconstructed from the engines' code); duet must read every
// variant the way the engine meant it, and fall back to its default
// (14000 blocks of 32 tokens) where a page holds no size.
func TestWorkersReportTheirCacheSizeInEveryEngineVariant(t *testing.T) {
	fallback := workerCacheDefault
	for _, tc := range []struct {
		protocol, dir, path string
		want                map[string]workerCache // by file
	}{
		{"vllm", "../orchestrator/protocol/vllm/testdata/metrics", "/metrics", map[string]workerCache{
			"v0.txt":            {27153 * 16, "worker"},
			"v1-dp2.txt":        {61440 * 16, "worker"},
			"v1-tokens-dp2.txt": {2 * 1048576, "worker"},
			"v1-none.txt":       fallback,
			"no-stats.txt":      fallback,
		}},
		{"sglang", "../orchestrator/protocol/sglang/testdata/server_info", "/get_server_info", map[string]workerCache{
			"v0.4.json":          {425061, "worker"},
			"dp2-memory.json":    {590000, "worker"},
			"dp2-no-memory.json": {600000, "worker"},
			"no-size.json":       fallback,
		}},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			var ctxURLs []string
			fileOf := map[string]string{} // worker URL -> file
			for file := range tc.want {
				page, err := os.ReadFile(filepath.Join(tc.dir, file))
				require.NoError(t, err)
				e := startEngineWithPages(t, "ctx-"+file, nil, map[string]string{tc.path: string(page)})
				ctxURLs = append(ctxURLs, e.url)
				fileOf[e.url] = file
			}
			gen := startEngine(t, "gen-0", nil)
			d := startConformanceDuet(t, tc.protocol, ctxURLs, []string{gen.url})
			got := map[string]workerCache{}
			for _, w := range d.cluster(t).Workers {
				got[fileOf[w.URL]] = w.workerCache
			}
			for file, want := range tc.want {
				require.Equal(t, want, got[file], file)
			}
			require.Equal(t, fallback, got[""], "the gen fake serves no page")
		})
	}
}

// workerCacheDefault is what the router assumes of a worker that reports no
// size, with kv_blocks_per_worker unset.
var workerCacheDefault = workerCache{14000 * 32, "default"}
