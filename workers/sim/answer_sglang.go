package sim

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"

	"github.com/valyala/fasthttp"

	"github.com/duet-serve/duet/proto/openai"
)

// answerPrefillSGLang serves an SGLang prefill. Like SGLang's prefill it
// computes the prompt and samples one token, then holds the request until
// the decode has taken the KV (here: pulled the pin of bootstrap_room from
// this worker's bootstrap server) and only then answers: a normal
// completion, streamed when the request streams, with that token and
// finish_reason "length" (SGLang's FINISH_LENGTH(length=0)). A room no
// decode takes within kv_transfer_timeout fails with SGLang's
// KVPoll.Bootstrapping timeout, a 500.
func (s *Server) answerPrefillSGLang(ctx *fasthttp.RequestCtx, r *run) {
	j := r.j
	if !s.clock.sleepUntil(s.abortCtx, r.firstAt) {
		r.lease.finish(seqBlocks{})
		s.metrics.request(j.phase, outcomeAborted)
		s.fail(ctx, &httpError{status: http.StatusServiceUnavailable, msg: errAborted.Error()})
		return
	}
	r.ready = true
	first, eos := r.nextToken()
	text, completion := "", 0
	if !eos {
		completion = 1
		text = s.vocab.text(first)
		if emit, stopped := newStopper(j.stop, j.minTokens).add(text, 1); stopped {
			text = emit
		}
	}
	pinned := s.clock.now()
	watch := newPinWatch()
	if _, ok := r.lease.pinWatched(sglangPinKey(j.room), s.pinExpiry(), s.pinInfo(j), j.promptBlocks(), watch); !ok {
		s.end(r, nil)
		s.metrics.request(j.phase, outcomeClientError)
		s.fail(ctx, badRequest("bootstrap_room", "bootstrap_room %d is already in use on this worker", j.room))
		return
	}
	s.metrics.generationTokens.Add(uint64(completion))
	select {
	case <-watch.done:
	case <-s.abortCtx.Done(): // the pin is dropped at shutdown
		s.metrics.request(j.phase, outcomeAborted)
		s.fail(ctx, &httpError{status: http.StatusServiceUnavailable, msg: errAborted.Error()})
		return
	}
	if !watch.taken {
		s.metrics.request(j.phase, outcomeServerError)
		s.logDone(r, completion, "", errHandleExpired)
		s.fail(ctx, &httpError{status: http.StatusInternalServerError, inStream: j.stream, code: codeTransferFailed,
			msg: fmt.Sprintf("Prefill transfer failed for request rank=0 req.rid=%q req.bootstrap_room=%d with exception KVTransferError(bootstrap_room=%d): Request %d timed out after %.1fs in KVPoll.Bootstrapping",
				j.id, j.room, j.room, j.room, s.clock.now().Sub(pinned).Seconds())})
		return
	}
	u := r.completedUsage(completion)
	s.metrics.request(j.phase, outcomeOK)
	s.logDone(r, completion, openai.FinishLength, nil)
	if !j.stream {
		s.writeJSON(ctx, s.response(j, text, openai.FinishLength, u, extras{}))
		return
	}
	// The whole stream is ready: write it as one body.
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	sink := newStreamSink(w, j, s.vocab, s.clock.now().Unix())
	if err := sink.piece(first, text, !eos && text == s.vocab.text(first)); err == nil {
		_ = sink.finish(openai.FinishLength, u) // a bytes.Buffer does not fail
	}
	ctx.SetContentType(openai.ContentTypeSSE)
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.SetBody(buf.Bytes())
}
