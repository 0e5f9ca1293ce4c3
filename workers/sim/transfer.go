package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// codeTransferFailed is the code of a KV transfer that failed on the way
// (the context worker unreachable or failing), not a handle it refused.
const codeTransferFailed = "kv_transfer_failed"

// pullPath is the worker-to-worker endpoint a generation worker calls to
// take over a context worker's pinned KV blocks.
const pullPath = "/internal/kv/pull"

// pullTimeout bounds one pull round trip (the modelled transfer time is
// paid separately).
const pullTimeout = 10 * time.Second

// pullRequest is the body of POST /internal/kv/pull.
type pullRequest struct {
	Key          string `json:"key"`
	PromptTokens int    `json:"prompt_tokens"`
	BlockSize    int    `json:"block_size"`
	LastHash     uint64 `json:"last_block_hash"`
}

// handlePull serves a pull: it checks the request against the pin and
// consumes it. Errors: 404 unknown (never issued or already pulled), 410
// expired, 409 the pin's prompt differs from the puller's.
func (s *Server) handlePull(ctx *fasthttp.RequestCtx) {
	var req pullRequest
	if err := json.Unmarshal(ctx.PostBody(), &req); err != nil {
		writeError(ctx, jsonError(err))
		return
	}
	check := func(p pinInfo) error {
		if p.PromptTokens != req.PromptTokens || p.BlockSize != req.BlockSize || p.LastHash != req.LastHash {
			return fmt.Errorf("%w: pinned %d tokens (block size %d), pull asks for %d tokens (block size %d) or a different prefix",
				errHandleMismatch, p.PromptTokens, p.BlockSize, req.PromptTokens, req.BlockSize)
		}
		return nil
	}
	info, err := s.sched.takePin(req.Key, s.clock.now(), check)
	switch {
	case errors.Is(err, errHandleUnknown):
		writeError(ctx, &httpError{status: http.StatusNotFound, code: "kv_handle_unknown", msg: fmt.Sprintf("%v: %q", err, req.Key)})
	case errors.Is(err, errHandleExpired):
		s.metrics.pinsExpired.Add(1)
		writeError(ctx, &httpError{status: http.StatusGone, code: "kv_handle_expired", msg: fmt.Sprintf("%v: %q", err, req.Key)})
	case err != nil:
		writeError(ctx, &httpError{status: http.StatusConflict, code: "kv_handle_mismatch", msg: err.Error()})
	default:
		s.metrics.pulls.Add(1)
		body, _ := json.Marshal(info) // plain struct, cannot fail
		ctx.SetContentType("application/json")
		ctx.SetBody(body)
	}
}

// pull takes over the KV of j's prompt from the context worker named in
// j.remote. Any failure is an *httpError for the client: a rejected handle
// is a 400 (as on a real engine), an unreachable worker a 502.
func (s *Server) pull(j *job) *httpError {
	var last uint64
	if len(j.hashes) > 0 {
		last = j.hashes[len(j.hashes)-1]
	}
	body, _ := json.Marshal(pullRequest{Key: j.remote.key, PromptTokens: len(j.prompt), BlockSize: s.cfg.BlockSize, LastHash: last})
	ctx, cancel := context.WithTimeout(s.abortCtx, pullTimeout)
	defer cancel()
	url := strings.TrimRight(j.remote.url, "/") + pullPath
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return badRequest(handleParam(s.cfg.Protocol), "invalid context worker URL %q: %v", j.remote.url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return &httpError{status: http.StatusBadGateway, code: codeTransferFailed,
			msg: fmt.Sprintf("KV transfer from context worker %s failed: %v", j.remote.url, err)}
	}
	defer resp.Body.Close()
	reply, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch st := resp.StatusCode; {
	case err != nil:
		return &httpError{status: http.StatusBadGateway, code: codeTransferFailed,
			msg: fmt.Sprintf("KV transfer from context worker %s failed: %v", j.remote.url, err)}
	case st == http.StatusOK:
		return nil
	case st == http.StatusNotFound || st == http.StatusGone || st == http.StatusConflict:
		return &httpError{status: http.StatusBadRequest, param: handleParam(s.cfg.Protocol), code: "kv_handle_invalid",
			msg: fmt.Sprintf("KV transfer from context worker %s rejected: %s", j.remote.url, peerMessage(reply))}
	default:
		return &httpError{status: http.StatusBadGateway, code: codeTransferFailed,
			msg: fmt.Sprintf("KV transfer from context worker %s failed with status %d: %s", j.remote.url, st, peerMessage(reply))}
	}
}

func handleParam(protocol string) string {
	if protocol == ProtocolVLLM {
		return "kv_transfer_params"
	}
	return "disaggregated_params"
}

// peerMessage extracts the message of an OpenAI error body, or a prefix of
// the raw body.
func peerMessage(body []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	if len(body) > 200 {
		body = body[:200]
	}
	return string(body)
}

// newPullClient returns the client for pulls. It is net/http rather than
// fasthttp because its idle connections, and so all its goroutines, end on
// CloseIdleConnections, which Serve calls on its way out.
func newPullClient() *http.Client {
	return &http.Client{
		Timeout: pullTimeout,
		Transport: &http.Transport{
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     30 * time.Second,
		},
	}
}
