package workers

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// testSizes reads a worker's cache size as a decimal number at /cache-size.
var testSizes = CacheSizeReader{Path: "/cache-size", Parse: func(b []byte) (int64, error) {
	return strconv.ParseInt(string(b), 10, 64)
}, BlockSize: func(b []byte) int { return len(b) }} // the body's length stands for a block size

// anyEngine reads every engine's size with r.
func anyEngine(r CacheSizeReader) func(string) CacheSizeReader {
	return func(string) CacheSizeReader { return r }
}

// sizeServer is a pre-launched worker that reports size at /cache-size (a
// 500 while size is 0), counting the reads, and answers other paths 200
// while healthy, 503 otherwise.
type sizeServer struct {
	*httptest.Server
	size    atomic.Int64
	reads   atomic.Int64
	healthy atomic.Bool
}

func newSizeServer(t *testing.T, size int64) *sizeServer {
	s := &sizeServer{}
	s.size.Store(size)
	s.healthy.Store(true)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/cache-size" {
			if !s.healthy.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			return
		}
		s.reads.Add(1)
		if n := s.size.Load(); n > 0 {
			fmt.Fprint(w, n)
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(s.Close)
	return s
}

// sizedFleet starts a fleet of one pre-launched ctx worker at url that
// reads cache sizes; health rounds run only when the test calls
// checkHealth.
func sizedFleet(t *testing.T, url string) *Fleet {
	t.Helper()
	cfg := Defaults()
	cfg.RunDir = t.TempDir()
	cfg.HealthInterval = time.Hour
	cfg.UnhealthyThreshold = 1
	cfg.Context.Count, cfg.Context.URLs = 0, []string{url}
	cfg.Generation.Count = 0
	f, err := New(cfg, Options{Logger: zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)), CacheSize: anyEngine(testSizes)})
	require.NoError(t, err)
	require.NoError(t, f.Start(context.Background()))
	t.Cleanup(func() { stopFleet(t, f) })
	return f
}

func TestExternalWorkerComesUpWithItsCacheSize(t *testing.T) {
	srv := newSizeServer(t, 4096)
	f := sizedFleet(t, srv.URL)
	w := byName(f.Snapshot(), "ctx-0")
	require.True(t, w.Healthy())
	require.Equal(t, int64(4096), w.KVCacheTokens)
	require.Equal(t, 4, w.KVBlockSize, "read from the same answer")
	f.checkHealth(context.Background())
	require.Equal(t, int64(1), srv.reads.Load(), "a known size is not read again")
}

func TestCacheSizeReadsStopAfterTheTriesAndResumeWhenTheWorkerComesBack(t *testing.T) {
	srv := newSizeServer(t, 0)
	f := sizedFleet(t, srv.URL)
	for range 5 {
		f.checkHealth(context.Background())
	}
	w := byName(f.Snapshot(), "ctx-0")
	require.True(t, w.Healthy(), "a worker that reports no size still serves")
	require.Zero(t, w.KVCacheTokens)
	require.Equal(t, int64(cacheSizeTries), srv.reads.Load())

	// It goes down and comes back, maybe as another process: read again.
	srv.healthy.Store(false)
	f.checkHealth(context.Background())
	require.Equal(t, StateDown, byName(f.Snapshot(), "ctx-0").State)
	srv.healthy.Store(true)
	srv.size.Store(8192)
	f.checkHealth(context.Background())
	w = byName(f.Snapshot(), "ctx-0")
	require.True(t, w.Healthy())
	require.Equal(t, int64(8192), w.KVCacheTokens)
}

func TestLaunchedWorkerComesUpWithItsCacheSize(t *testing.T) {
	cfg := testConfig(t, 1, []string{"--cache-size", "2048"}, 1, nil)
	f, err := New(cfg, Options{Logger: zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)), CacheSize: anyEngine(testSizes)})
	require.NoError(t, err)
	require.NoError(t, f.Start(context.Background()))
	t.Cleanup(func() { stopFleet(t, f) })
	ws := f.Snapshot()
	require.Equal(t, int64(2048), byName(ws, "ctx-0").KVCacheTokens, "read before the worker is up")
	require.Zero(t, byName(ws, "gen-0").KVCacheTokens, "gen-0 answers 404: no size")
	require.False(t, slices.ContainsFunc(ws, func(w Worker) bool { return !w.Healthy() }))
}
