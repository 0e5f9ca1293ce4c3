package sim

import (
	"bufio"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/duet-serve/duet/proto/openai"
)

// run is one admitted request on its way to its first token and beyond.
type run struct {
	j        *job
	lease    *lease
	arrival  time.Time
	firstAt  time.Time     // when the first token is due
	modelled time.Duration // this request's prefill or transfer time
	cached   int           // prompt tokens found in this worker's cache
	usage    openai.Usage  // prompt side of the reported usage
	sampler  *sampler
	pending  []int // tokens emitted before sampling resumes (first_gen_tokens)
	fault    faultDraw
	ready    bool // the KV of the prompt is in place (prefilled or pulled)
}

// handleCompletion serves POST /v1/chat/completions and /v1/completions:
// parse, inject faults, admit, then answer in one of three ways (context
// handle, SSE stream, JSON). Everything the stream writer needs is copied
// out of ctx first.
func (s *Server) handleCompletion(ctx *fasthttp.RequestCtx, kind endpointKind) {
	arrival := s.clock.now()
	requestID := string(ctx.Request.Header.Peek("X-Request-Id"))
	if requestID != "" {
		ctx.Response.Header.Set("X-Request-Id", requestID)
	}
	j, herr := s.parseJob(kind, ctx.PostBody(), requestID)
	if herr != nil {
		s.metrics.request(phaseAggregated, outcomeFor(herr.status))
		s.log.Debug("bad request", zap.String("request_id", requestID), zap.Int("status", herr.status), zap.String("error", herr.msg))
		s.fail(ctx, herr)
		return
	}
	f := s.faults.draw(j.remote != nil)
	switch {
	case f.fail:
		s.metrics.faults[faultError].Add(1)
		s.metrics.request(j.phase, outcomeServerError)
		s.fail(ctx, &httpError{status: http.StatusInternalServerError, code: "injected_fault", msg: "injected fault: internal server error"})
		return
	case f.hang:
		s.metrics.request(j.phase, outcomeServerError)
		s.hang(ctx, f.hangMax)
		return
	case f.die && (!j.stream || j.phase == phaseContext): // an SGLang prefill's stream is one body
		s.metrics.request(j.phase, outcomeServerError)
		s.die(ctx)
		return
	case (f.garbage || f.cut || f.stall) && (!j.stream || j.phase == phaseContext):
		s.metrics.request(j.phase, outcomeServerError)
		s.brokenAnswer(ctx, j, f)
		return
	case f.cut || f.stall:
		s.brokenStream(ctx, j, arrival, f)
		return
	case f.errorEvent && j.phase == phaseContext: // a context leg answers in one piece
		s.metrics.faults[faultErrorEvent].Add(1)
		s.metrics.request(j.phase, outcomeServerError)
		s.fail(ctx, s.engineError(j, errEngineFailed))
		return
	}
	r, herr := s.start(j, arrival, f)
	if herr != nil {
		s.metrics.request(j.phase, outcomeFor(herr.status))
		s.fail(ctx, herr)
		return
	}
	setRunHeaders(&ctx.Response.Header, r)
	switch {
	case j.phase == phaseContext:
		s.answerContext(ctx, r)
	case j.stream:
		ctx.SetContentType(openai.ContentTypeSSE)
		ctx.Response.Header.Set("Cache-Control", "no-cache")
		if s.cutsStream(f) {
			ctx.SetConnectionClose()
		}
		s.streams.Add(1)
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			defer s.streams.Add(-1)
			s.stream(w, r)
		})
	default:
		s.answerUnary(ctx, r)
	}
}

// start admits the job and, for a generation request, pulls its KV (SGLang:
// meets its bootstrap room, which may wait for the prefill). It books the
// prefill (or transfer) time and returns the run; on error no state is left
// behind. Under the kv_pull_fail fault nothing is pulled: the context
// worker keeps its pin until kv_transfer_timeout, as for a handle nobody
// pulls, and decode fails the run when the transfer would have ended.
func (s *Server) start(j *job, arrival time.Time, f faultDraw) (*run, *httpError) {
	bs := s.cfg.BlockSize
	spec := admitSpec{hashes: j.hashes, totalBlocks: s.sched.kv.BlocksFor(len(j.prompt) + j.limit)}
	if j.phase == phaseGeneration {
		spec.maxMatch = len(j.hashes) // the whole prompt's KV is needed
	} else {
		spec.maxMatch = (len(j.prompt) - 1) / bs // the last prompt token is always computed
	}
	l, err := s.sched.admit(s.abortCtx, spec)
	switch {
	case errors.Is(err, errQueueFull):
		return nil, &httpError{status: http.StatusTooManyRequests, code: "queue_full",
			msg: "the worker's waiting queue is full (max_waiting=" + strconv.Itoa(s.cfg.MaxWaiting) + "), retry later"}
	case errors.Is(err, errTooLarge):
		return nil, &httpError{status: http.StatusBadRequest, code: "context_length_exceeded",
			msg: "prompt plus max_tokens needs more KV cache than this worker has (" + strconv.Itoa(s.cfg.KVCapacityBlocks*bs) + " tokens)"}
	case err != nil:
		return nil, &httpError{status: http.StatusServiceUnavailable, msg: "worker is shutting down"}
	}
	r := &run{j: j, lease: l, arrival: arrival, fault: f}
	r.cached = min(l.matchedBlocks()*bs, len(j.prompt))
	r.usage = openai.Usage{PromptTokens: len(j.prompt), PromptTokensDetails: &openai.PromptTokensDetails{CachedTokens: r.cached}}
	r.sampler = newSampler(s.vocab, samplerSpec{prompt: j.prompt, workerSeed: s.cfg.Seed, reqSeed: j.seed,
		eosProb: s.cfg.EOSProbability, minTokens: j.minTokens, ignoreEOS: j.ignoreEOS})
	s.metrics.prefixQueries.Add(uint64(len(j.prompt)))
	s.metrics.prefixHits.Add(uint64(r.cached))
	now := s.clock.now()
	if j.phase != phaseGeneration {
		s.metrics.promptTokens.Add(uint64(len(j.prompt)))
		uncached := len(j.prompt) - r.cached
		r.modelled = s.model.Prefill(uncached, f.slow)
		_, computed := s.prefillQ.Reserve(now, s.model.PrefillCompute(uncached, f.slow))
		r.firstAt = computed.Add(s.model.Overhead(f.slow))
		s.metrics.prefillTokens.Add(uint64(uncached))
		s.metrics.addDuration(&s.metrics.prefillNanos, r.modelled)
		return r, nil
	}
	if !f.kvPullFail {
		var herr *httpError
		now, herr = s.fetchKV(j, now)
		switch {
		case herr != nil && herr.code == codeTransferFailed && s.cfg.Protocol != ProtocolSGLang:
			// The context worker could not be reached (dead, restarting):
			// the engine reports a failed transfer its own way, as the
			// kv_pull_fail fault does.
			f.kvPullFail, r.fault.kvPullFail = true, true
		case herr != nil:
			l.finish(seqBlocks{})
			return nil, herr
		}
	}
	missing := len(j.prompt) - r.cached
	r.modelled = s.model.Transfer(missing, f.slow)
	r.firstAt = now.Add(r.modelled)
	if f.kvPullFail {
		return r, nil // no KV arrives: nothing is counted as transferred
	}
	s.metrics.transferTokens.Add(uint64(missing))
	s.metrics.transferSkipped.Add(uint64(r.cached))
	s.metrics.addDuration(&s.metrics.transferNanos, r.modelled)
	r.pending = j.remote.firstGen
	r.sampler.skip(len(r.pending))
	if u := j.ctxUsage; u != nil {
		r.usage.PromptTokens = u.PromptTokens
		r.usage.PromptTokensDetails.CachedTokens = u.CachedTokens()
	}
	return r, nil
}

// fetchKV takes over j's KV from its context worker (SGLang meets its
// bootstrap room, the others pull the handle) and returns when the
// transfer starts: now, or for SGLang the time after the room kept the
// decode waiting.
func (s *Server) fetchKV(j *job, now time.Time) (time.Time, *httpError) {
	if s.cfg.Protocol == ProtocolSGLang {
		if herr := s.meet(j); herr != nil {
			return now, herr
		}
		return s.clock.now(), nil
	}
	return now, s.pull(j)
}

// Headers with the modelled numbers, for tests and debugging.
const (
	headerCachedTokens = "X-Duet-Sim-Cached-Tokens"
	headerModelledUs   = "X-Duet-Sim-Modelled-Us" // prefill or KV transfer time
	headerTTFTUs       = "X-Duet-Sim-TTFT-Us"     // arrival to first token due
)

func setRunHeaders(h *fasthttp.ResponseHeader, r *run) {
	h.Set(headerCachedTokens, strconv.Itoa(r.cached))
	h.Set(headerModelledUs, strconv.FormatInt(r.modelled.Microseconds(), 10))
	h.Set(headerTTFTUs, strconv.FormatInt(r.firstAt.Sub(r.arrival).Microseconds(), 10))
}

// nextToken returns the next output token: pending ones first.
func (r *run) nextToken() (id int, eos bool) {
	if len(r.pending) > 0 {
		id, r.pending = r.pending[0], r.pending[1:]
		return id, id == r.sampler.v.eos
	}
	return r.sampler.next()
}

// end finishes the lease, registering the blocks that were computed (the
// prompt and the generated tokens) when the prompt's KV was in place.
func (s *Server) end(r *run, generated []int) {
	if !r.ready {
		r.lease.finish(seqBlocks{})
		return
	}
	j := r.j
	b := j.promptBlocks()
	if len(generated) > 0 {
		all := make([]int, 0, len(j.prompt)+len(generated))
		all = append(append(all, j.prompt...), generated...)
		b = seqBlocks{hashes: extendHashes(j.hashes, all, s.cfg.BlockSize, j.adapter), tokens: all, adapter: j.adapter}
	}
	r.lease.finish(b)
	s.metrics.generationTokens.Add(uint64(len(generated)))
}

// logDone writes a request's access line (debug level: one per request).
func (s *Server) logDone(r *run, completion int, finish string, err error) {
	if ce := s.log.Check(zap.DebugLevel, "request done"); ce != nil {
		ce.Write(zap.String("request_id", r.j.id), zap.Stringer("phase", r.j.phase), zap.Int("prompt_tokens", len(r.j.prompt)),
			zap.Int("cached_tokens", r.cached), zap.Int("completion_tokens", completion), zap.String("finish", finish),
			zap.Duration("modelled", r.modelled), zap.Duration("ttft", r.firstAt.Sub(r.arrival)), zap.Error(err))
	}
}

func outcomeFor(status int) outcome {
	switch {
	case status < 400:
		return outcomeOK
	case status == http.StatusTooManyRequests:
		return outcomeRejected
	case status < 500:
		return outcomeClientError
	default:
		return outcomeServerError
	}
}
