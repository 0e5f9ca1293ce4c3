package workers

import (
	"context"
	"fmt"

	"go.uber.org/zap"
)

// CacheSizeReader reads a worker's KV cache size from its engine: a GET of
// Path, whose 200 body Parse turns into tokens. The orchestrator's protocol
// adapters provide one for the engines that report the size (vLLM, SGLang).
type CacheSizeReader struct {
	// Path is the URL path to GET, e.g. /metrics.
	Path string
	// Parse returns the KV cache size in tokens (> 0) from the body, or an
	// error saying why the body holds none.
	Parse func(body []byte) (int64, error)
	// BlockSize returns the engine's KV block size in tokens from the same
	// body, 0 when it does not say; nil: never read.
	BlockSize func(body []byte) int
}

// cacheSize is what a worker's engine reported of its KV cache.
type cacheSize struct {
	tokens    int64
	blockSize int // 0: not reported
}

// cacheSizeTries bounds the reads of one worker process's cache size: an
// engine that has not reported it after that many is taken not to, and the
// router falls back to its configured size.
const cacheSizeTries = 3

// maxCacheSizeBody bounds the body read for the cache size (a vLLM /metrics
// page with its histograms is some hundred kB).
const maxCacheSizeBody = 8 << 20

// wantsCacheSizeLocked reports whether w's cache size should be read after
// its next passing health check; f.mu is held.
func (f *Fleet) wantsCacheSizeLocked(w *worker) bool {
	return f.sizes(w.spec.Engine).Path != "" && w.kvCacheTokens == 0 && w.sizeTries < cacheSizeTries
}

// readCacheSize reads the KV cache size of the worker s; nothing when its
// engine reports none.
func (f *Fleet) readCacheSize(ctx context.Context, s *WorkerSpec) (cacheSize, error) {
	r := f.sizes(s.Engine)
	if r.Path == "" {
		return cacheSize{}, nil
	}
	body, err := f.probe.get(ctx, s.URL+r.Path, maxCacheSizeBody)
	var n int64
	if err == nil {
		n, err = r.Parse(body)
	}
	if err == nil && n <= 0 {
		err = fmt.Errorf("reported a KV cache of %d tokens", n)
	}
	if err != nil {
		return cacheSize{}, fmt.Errorf("KV cache size of %s: %w", s.Name, err)
	}
	size := cacheSize{tokens: n}
	if r.BlockSize != nil {
		size.blockSize = r.BlockSize(body)
	}
	return size, nil
}

// recordCacheSizeLocked keeps the outcome of one read of w's cache size
// (nothing when its engine reports none); f.mu is held. The last failed
// try is logged: the router then assumes its configured size for the
// worker.
func (f *Fleet) recordCacheSizeLocked(w *worker, size cacheSize, err error) {
	if f.sizes(w.spec.Engine).Path == "" {
		return
	}
	w.sizeTries++
	if err == nil {
		w.kvCacheTokens, w.kvBlockSize = size.tokens, size.blockSize
		f.log.Info("worker KV cache size read", zap.String("worker", w.spec.Name), zap.Int64("tokens", size.tokens),
			zap.Int("block_size", size.blockSize))
		return
	}
	if w.sizeTries == cacheSizeTries {
		f.log.Warn("worker KV cache size unknown: the router assumes router.kv_blocks_per_worker",
			zap.String("worker", w.spec.Name), zap.Error(err))
	}
}
