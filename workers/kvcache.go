package workers

import (
	"context"
	"fmt"

	"go.uber.org/zap"
)

// CacheSizeReader reads what a worker's engine reports of itself once its
// process is up: its KV cache size, a GET of Path whose 200 body Parse
// turns into tokens, and its context length, a GET of ModelLenPath whose
// 200 body ParseModelLen turns into tokens. Either path may be "": the
// engine reports nothing there. The orchestrator's protocol adapters
// provide the cache size for the engines that report it (vLLM, SGLang).
type CacheSizeReader struct {
	// Path is the URL path to GET for the KV cache size, e.g. /metrics.
	Path string
	// Parse returns the KV cache size in tokens (> 0) from the body, or an
	// error saying why the body holds none.
	Parse func(body []byte) (int64, error)
	// BlockSize returns the engine's KV block size in tokens from the same
	// body, 0 when it does not say; nil: never read.
	BlockSize func(body []byte) int
	// ModelLenPath is the URL path to GET for the context length (prompt
	// plus output tokens), e.g. ModelsPath; "": the engine reports none and
	// the orchestrator keeps its configured max_model_len.
	ModelLenPath string
	// ParseModelLen returns the context length in tokens (> 0) from that
	// body (e.g. ParseModelLen), or an error saying why it holds none.
	ParseModelLen func(body []byte) (int, error)
	// Adapters returns the LoRA adapters listed in the same body (e.g.
	// ParseAdapters); nil: never read.
	Adapters func(body []byte) []string
}

// reports is what a worker process's engine reported of itself; a zero
// field was not reported (yet).
type reports struct {
	kvCacheTokens int64
	kvBlockSize   int // read with kvCacheTokens, from the same body
	maxModelLen   int
	adapters      []string // read with maxModelLen, from the same body
}

// reportSet names the reports to read from a worker.
type reportSet struct{ cacheSize, modelLen bool }

func (s reportSet) any() bool { return s.cacheSize || s.modelLen }

// readResult is one read of a worker's reports: what was read, and for
// each report asked for and not read, why.
type readResult struct {
	reports
	cacheSizeErr, modelLenErr error
}

// reportTries bounds the reads of one worker process's reports: a report
// the engine has not made after that many reads is taken to be one it does
// not make, and duet falls back to its configured value.
const reportTries = 3

// maxReportBody bounds the body read for a report (a vLLM /metrics page
// with its histograms is some hundred kB).
const maxReportBody = 8 << 20

// reportsOf returns the reports the engine of a worker makes.
func (f *Fleet) reportsOf(engine string) reportSet {
	r := f.sizes(engine)
	return reportSet{cacheSize: r.Path != "", modelLen: r.ModelLenPath != ""}
}

// missingReportsLocked returns the reports of w to read after its next
// passing health check: those its engine makes that it has not made yet,
// while tries remain; f.mu is held.
func (f *Fleet) missingReportsLocked(w *worker) reportSet {
	if w.reportTries >= reportTries {
		return reportSet{}
	}
	want := f.reportsOf(w.spec.Engine)
	want.cacheSize = want.cacheSize && w.reported.kvCacheTokens == 0
	want.modelLen = want.modelLen && w.reported.maxModelLen == 0
	return want
}

// readReports reads the reports in want from the engine of worker s, each
// with its own GET.
func (f *Fleet) readReports(ctx context.Context, s *WorkerSpec, want reportSet) readResult {
	r := f.sizes(s.Engine)
	var res readResult
	if want.cacheSize {
		var body []byte
		res.kvCacheTokens, body, res.cacheSizeErr = readReport(ctx, f.probe, s, "KV cache size", r.Path, r.Parse)
		if res.cacheSizeErr == nil && r.BlockSize != nil {
			res.kvBlockSize = r.BlockSize(body)
		}
	}
	if want.modelLen {
		var body []byte
		res.maxModelLen, body, res.modelLenErr = readReport(ctx, f.probe, s, "context length", r.ModelLenPath, r.ParseModelLen)
		if res.modelLenErr == nil && r.Adapters != nil {
			res.adapters = r.Adapters(body)
		}
	}
	return res
}

// readReport GETs path from worker s and parses the body into what, which
// must be positive; it returns the body too, for further reads from it.
func readReport[N int | int64](ctx context.Context, p *prober, s *WorkerSpec, what, path string,
	parse func([]byte) (N, error)) (N, []byte, error) {
	body, err := p.get(ctx, s.URL+path, maxReportBody)
	var n N
	if err == nil {
		n, err = parse(body)
	}
	if err == nil && n <= 0 {
		err = fmt.Errorf("reported %d tokens", n)
	}
	if err != nil {
		return 0, nil, fmt.Errorf("%s of %s: %w", what, s.Name, err)
	}
	return n, body, nil
}

// recordReportsLocked keeps the outcome of one read of the reports want of
// w (nothing when want is empty); f.mu is held. Each report is logged
// once: when read, or after the last failed try, when duet falls back to
// its configured value.
func (f *Fleet) recordReportsLocked(w *worker, want reportSet, res readResult) {
	if !want.any() {
		return
	}
	w.reportTries++
	last := w.reportTries == reportTries
	name := zap.String("worker", w.spec.Name)
	if want.cacheSize {
		switch {
		case res.cacheSizeErr == nil:
			w.reported.kvCacheTokens, w.reported.kvBlockSize = res.kvCacheTokens, res.kvBlockSize
			f.log.Info("worker KV cache size read", name, zap.Int64("tokens", res.kvCacheTokens), zap.Int("block_size", res.kvBlockSize))
		case last:
			f.log.Warn("worker KV cache size unknown: the router assumes router.kv_blocks_per_worker", name, zap.Error(res.cacheSizeErr))
		}
	}
	if want.modelLen {
		switch {
		case res.modelLenErr == nil:
			w.reported.maxModelLen, w.reported.adapters = res.maxModelLen, res.adapters
			f.log.Info("worker context length read", name, zap.Int("max_model_len", res.maxModelLen), zap.Strings("lora_adapters", res.adapters))
		case last:
			f.log.Warn("worker context length unknown: the orchestrator assumes orchestrator.max_model_len", name, zap.Error(res.modelLenErr))
		}
	}
}
