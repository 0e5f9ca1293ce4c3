package sim

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/duet-serve/duet/proto/openai"
)

// answerUnary decodes in the handler and writes one JSON response.
func (s *Server) answerUnary(ctx *fasthttp.RequestCtx, r *run) {
	var sink textSink
	res, err := s.decode(r, &sink, false)
	s.end(r, res.tokens)
	s.logDone(r, len(res.tokens), res.finish, err)
	if e := s.engineError(r.j, err); e != nil {
		s.metrics.request(r.j.phase, outcomeServerError)
		s.fail(ctx, e)
		return
	}
	if err != nil {
		s.metrics.request(r.j.phase, outcomeAborted)
		s.fail(ctx, &httpError{status: http.StatusServiceUnavailable, msg: err.Error()})
		return
	}
	s.metrics.request(r.j.phase, outcomeOK)
	s.writeJSON(ctx, s.response(r.j, sink.b.String(), res.finish, r.completedUsage(len(res.tokens)), extras{}))
}

// answerContext serves a context-only request: it waits for the prefill,
// samples the first token and, unless that token ends the request, pins the
// prompt's blocks and returns the handle.
func (s *Server) answerContext(ctx *fasthttp.RequestCtx, r *run) {
	j := r.j
	if s.cfg.Protocol == ProtocolSGLang {
		s.answerPrefillSGLang(ctx, r)
		return
	}
	if !s.clock.sleepUntil(s.abortCtx, r.firstAt) {
		r.lease.finish(seqBlocks{})
		s.metrics.request(j.phase, outcomeAborted)
		writeError(ctx, &httpError{status: http.StatusServiceUnavailable, msg: errAborted.Error()})
		return
	}
	r.ready = true
	first, eos := r.nextToken()
	text, finish := "", ""
	if eos {
		finish = openai.FinishStop
	} else {
		text = s.vocab.text(first)
		if emit, stopped := newStopper(j.stop, j.minTokens).add(text, 1); stopped {
			text, finish = emit, openai.FinishStop
		}
	}
	var ex extras
	pinned := false
	if s.cfg.Protocol == ProtocolTRTLLM {
		// A first token that ends the request gets no handle: the request
		// is finished and its blocks go back to the cache.
		id := s.ids.ctxRequestID()
		if finish == "" {
			_, pinned = r.lease.pin(trtPinKey(id), s.pinExpiry(), s.pinInfo(j), j.promptBlocks())
			finish = openai.FinishNotFinished
		}
		ex.promptTokenIDs = j.prompt
		ex.disaggParams = s.contextParams(j, id, first, pinned, len(j.prompt))
	} else {
		// vLLM pins even when the first token ends the request: its proxy
		// always sends the decode leg, which replays the same token.
		key := j.id + "-" + strconv.FormatUint(s.ids.seq.Add(1), 10)
		if finish == "" {
			finish = openai.FinishLength
		}
		var blocks []int32
		blocks, pinned = r.lease.pin(key, s.pinExpiry(), s.pinInfo(j), j.promptBlocks())
		ex.kvParams = s.vllmParams(key, blocks)
	}
	if !pinned {
		s.end(r, nil)
		if finish != openai.FinishStop { // pin keys are unique: only on a bug
			s.metrics.request(j.phase, outcomeServerError)
			writeError(ctx, &httpError{status: http.StatusInternalServerError, msg: "cannot pin the KV blocks"})
			return
		}
	}
	completion := 1
	if eos {
		completion = 0
	}
	s.metrics.generationTokens.Add(uint64(completion))
	s.metrics.request(j.phase, outcomeOK)
	s.logDone(r, completion, finish, nil)
	s.writeJSON(ctx, s.response(j, text, finish, r.completedUsage(completion), ex))
}

func (s *Server) pinExpiry() time.Time { return s.clock.now().Add(s.cfg.KVTransferTimeout) }

func (s *Server) pinInfo(j *job) pinInfo {
	info := pinInfo{PromptTokens: len(j.prompt), BlockSize: s.cfg.BlockSize}
	if len(j.hashes) > 0 {
		info.LastHash = j.hashes[len(j.hashes)-1]
	}
	return info
}

// completedUsage is the run's usage with completion tokens filled in.
func (r *run) completedUsage(completion int) openai.Usage {
	u := r.usage
	details := *r.usage.PromptTokensDetails
	u.PromptTokensDetails = &details
	u.CompletionTokens = completion
	u.TotalTokens = u.PromptTokens + completion
	return u
}

// extras are the engine fields of a non-streaming response.
type extras struct {
	disaggParams   json.RawMessage // TensorRT-LLM choices[0].disaggregated_params
	promptTokenIDs []int           // TensorRT-LLM top-level prompt_token_ids
	kvParams       json.RawMessage // vLLM top-level kv_transfer_params
}

// response builds the JSON body of a non-streaming response.
func (s *Server) response(j *job, text, finish string, u openai.Usage, ex extras) any {
	if j.kind == kindChat {
		return openai.ChatResponse{
			ID: j.id, Object: openai.ObjectChatCompletion, Created: s.clock.now().Unix(), Model: j.model,
			Choices: []openai.ChatChoice{{
				Message:             openai.Message{Role: "assistant", Content: openai.TextContent(text)},
				FinishReason:        &finish,
				DisaggregatedParams: ex.disaggParams,
			}},
			Usage: &u, PromptTokenIDs: ex.promptTokenIDs, KVTransferParams: ex.kvParams,
		}
	}
	return openai.CompletionResponse{
		ID: j.id, Object: openai.ObjectTextCompletion, Created: s.clock.now().Unix(), Model: j.model,
		Choices: []openai.CompletionChoice{{Text: text, FinishReason: &finish, DisaggregatedParams: ex.disaggParams}},
		Usage:   &u, PromptTokenIDs: ex.promptTokenIDs, KVTransferParams: ex.kvParams,
	}
}

func (s *Server) writeJSON(ctx *fasthttp.RequestCtx, v any) {
	body, err := json.Marshal(v)
	if err != nil { // only on a bug: every field is a plain type
		s.log.Error("encode response", zap.Error(err))
		s.fail(ctx, &httpError{status: http.StatusInternalServerError, msg: "cannot encode response"})
		return
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}
