package workers

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
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

// testReports reads a worker's cache size as testSizes does and its
// context length from its /v1/models, as from vLLM's or SGLang's.
var testReports = func() CacheSizeReader {
	r := testSizes
	r.ModelLenPath, r.ParseModelLen = ModelsPath, ParseModelLen
	return r
}()

// anyEngine reads every engine's size with r.
func anyEngine(r CacheSizeReader) func(string) CacheSizeReader {
	return func(string) CacheSizeReader { return r }
}

// sizeServer is a pre-launched worker that reports size at /cache-size
// and modelLen as vLLM does at /v1/models (a 500 while the value is 0),
// counting the reads, and answers other paths 200 while healthy, 503
// otherwise.
type sizeServer struct {
	*httptest.Server
	size, modelLen    atomic.Int64
	reads, modelReads atomic.Int64
	healthy           atomic.Bool
}

func newSizeServer(t *testing.T, size int64) *sizeServer {
	s := &sizeServer{}
	s.size.Store(size)
	s.healthy.Store(true)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == ModelsPath {
			s.modelReads.Add(1)
			if n := s.modelLen.Load(); n > 0 {
				fmt.Fprintf(w, `{"object":"list","data":[{"id":"m","object":"model","owned_by":"vllm","root":"m","parent":null,"max_model_len":%d}]}`, n)
				return
			}
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
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
	return reportingFleet(t, url, testSizes)
}

// reportingFleet is sizedFleet reading the reports r reads.
func reportingFleet(t *testing.T, url string, r CacheSizeReader) *Fleet {
	t.Helper()
	cfg := Defaults()
	cfg.RunDir = t.TempDir()
	cfg.HealthInterval = time.Hour
	cfg.UnhealthyThreshold = 1
	cfg.Context.Count, cfg.Context.URLs = 0, []string{url}
	cfg.Generation.Count = 0
	f, err := New(cfg, Options{Logger: zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)), CacheSize: anyEngine(r)})
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
	require.Equal(t, int64(reportTries), srv.reads.Load())

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

func TestExternalWorkerComesUpWithItsContextLength(t *testing.T) {
	srv := newSizeServer(t, 4096)
	srv.modelLen.Store(32768)
	f := reportingFleet(t, srv.URL, testReports)
	w := byName(f.Snapshot(), "ctx-0")
	require.True(t, w.Healthy())
	require.Equal(t, 32768, w.MaxModelLen)
	require.Equal(t, int64(4096), w.KVCacheTokens)
	for range 3 {
		f.checkHealth(context.Background())
	}
	require.Equal(t, int64(1), srv.modelReads.Load(), "a known context length is not read again")
	require.Equal(t, int64(1), srv.reads.Load())
}

// Each report is read until it is known or the tries are spent: a known
// cache size is not read again while the context length is retried.
func TestContextLengthReadsStopAfterTheTriesAndResumeWhenTheWorkerComesBack(t *testing.T) {
	srv := newSizeServer(t, 4096)
	f := reportingFleet(t, srv.URL, testReports)
	for range 5 {
		f.checkHealth(context.Background())
	}
	w := byName(f.Snapshot(), "ctx-0")
	require.True(t, w.Healthy(), "a worker that reports no context length still serves")
	require.Zero(t, w.MaxModelLen)
	require.Equal(t, int64(reportTries), srv.modelReads.Load())
	require.Equal(t, int64(1), srv.reads.Load())

	// It goes down and comes back, maybe as another process: read both again.
	srv.healthy.Store(false)
	f.checkHealth(context.Background())
	w = byName(f.Snapshot(), "ctx-0")
	require.Equal(t, StateDown, w.State)
	require.Zero(t, w.KVCacheTokens, "forgotten with the process")
	srv.healthy.Store(true)
	srv.modelLen.Store(8192)
	f.checkHealth(context.Background())
	w = byName(f.Snapshot(), "ctx-0")
	require.True(t, w.Healthy())
	require.Equal(t, 8192, w.MaxModelLen)
	require.Equal(t, int64(4096), w.KVCacheTokens)
	require.Equal(t, int64(2), srv.reads.Load())
}

// A restarted process reports afresh: its context length is read again.
func TestRestartedWorkerReportsItsContextLengthAgain(t *testing.T) {
	models := filepath.Join(t.TempDir(), "models.json")
	writeModels := func(n int) {
		require.NoError(t, os.WriteFile(models, fmt.Appendf(nil, `{"object":"list","data":[{"id":"m","parent":null,"max_model_len":%d}]}`, n), 0o644))
	}
	writeModels(4096)
	cfg := testConfig(t, 1, []string{"--models-file", models}, 0, nil)
	f, err := New(cfg, Options{Logger: zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)), CacheSize: anyEngine(testReports)})
	require.NoError(t, err)
	require.NoError(t, f.Start(context.Background()))
	t.Cleanup(func() { stopFleet(t, f) })
	first := f.Snapshot()[0]
	require.Equal(t, 4096, first.MaxModelLen, "read before the worker is up")

	restart := func(pid, n int) Worker {
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		return waitFor(t, f, 20*time.Second, "ctx-0 restarted", func(ws []Worker) bool {
			return ws[0].State == StateUp && ws[0].Restarts == n
		})[0]
	}
	writeModels(2048) // the next process serves a shorter context
	back := restart(first.PID, 1)
	require.Equal(t, 2048, back.MaxModelLen)

	require.NoError(t, os.Remove(models)) // the next one reports none: the old value is forgotten
	back = restart(back.PID, 2)
	require.Zero(t, back.MaxModelLen)
}
