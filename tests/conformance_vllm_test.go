package tests

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

func testConformanceVLLM(t *testing.T) {
	fakes := startVLLMFakes(t, 2, 2)
	d := startConformanceDuet(t, "vllm", urls(fakes.ctx), urls(fakes.gen))
	set := func(v vllmVariant) func() { return func() { fakes.set(v) } }
	params := vllmVariant{pFinish: "length", pParams: "flat"}
	with := func(edit func(*vllmVariant)) func() {
		v := params
		edit(&v)
		return set(v)
	}
	// decoded: the client gets D's answer, with P's prompt and cached tokens.
	decoded := func(cached int) func(reqCase) want {
		return func(c reqCase) want {
			return want{content: genText, finish: "stop", prompt: c.prompt, cached: cached, completion: len(genTokens), ctxCalls: 1, genCalls: 1}
		}
	}
	// finished: P ended the request; the client gets P's token, D is never called.
	finished := func(cached int) func(reqCase) want {
		return func(c reqCase) want {
			return want{content: firstToken, finish: "stop", prompt: c.prompt, cached: cached, completion: 1,
				route: "round-robin+ctx-finished", ctxCalls: 1, genCalls: 0}
		}
	}
	failed := func(status int, msg, typ, param, code string) func(reqCase) want {
		return func(reqCase) want {
			return want{status: status, errMessage: msg, errType: typ, errParam: param, errCode: code, ctxCalls: 1, genCalls: 0}
		}
	}
	// retriedOut: every attempt failed with a 5xx; the client gets duet's 502.
	retriedOut := func(ctxCalls, genCalls int, msg ...string) func(reqCase) want {
		return func(reqCase) want {
			return want{status: 502, errContains: msg, errType: "server_error", ctxCalls: ctxCalls, genCalls: genCalls}
		}
	}
	midError := func(frame string) func() {
		return with(func(v *vllmVariant) { v.stream = streamShape{errorFrame: frame, errorAfter: 2} })
	}
	streamFailed := func(msg, typ, code string) func(reqCase) want {
		return func(reqCase) want {
			return want{streamErr: true, partial: genTokens[0] + genTokens[1], errMessage: msg, errType: typ, errParam: "null",
				errCode: code, ctxCalls: 1, genCalls: 1}
		}
	}
	wire := vllmWire(fakes)
	vs := []variant{
		{name: "prefill-length-params", source: "vllm.md §1.2 (V-2025-12 shape: flat block ids, remote_request_id), §2.1, §6 P2; D answers kv_transfer_params null (§4 O1)",
			set: set(params), want: decoded(0)},
		{name: "prefill-length-nested-blocks-cached", source: "vllm.md §1.2 V-latest (#35758 list-of-lists block ids, #32553 remote_num_tokens), §2.4 prompt_tokens_details, §6 P3",
			set: with(func(v *vllmVariant) { v.pParams, v.pCached = "nested", 5 }), want: decoded(5)},
		{name: "prefill-remote-decode-sim", source: "vllm.md §3 SIM-1 (remote_decode, dummy string params, sim key order), SIM-3, SIM-6 (separate finish chunk, usage:null chunks, HTML escapes); §6 P9, S2, S3",
			set: set(vllmVariant{sim: true, style: jsonStyle{escape: true}}), want: decoded(0)},
		{name: "prefill-stop-null-params", source: "vllm.md §1.3(a) (only length-capped requests got params before 2026-04-30), §2.1, §6 P5",
			set: set(vllmVariant{pFinish: "stop", pParams: "null", pCached: 3}), want: finished(3)},
		{name: "prefill-stop-with-params", source: "vllm.md §1.3(a) (from #32553 FINISHED_STOPPED also gets params), §6 P6",
			set: with(func(v *vllmVariant) { v.pFinish, v.pParams = "stop", "nested" }), want: decoded(0)},
		{name: "prefill-null-finish-params", source: "vllm.md §2.1 (completions pass finish_reason through as is); PROTOCOLS.md §2 (the handle decides)",
			set: with(func(v *vllmVariant) { v.pFinish = "" }), want: decoded(0)},
		{name: "prefill-length-empty-block-ids", source: "vllm.md §6 P4 (remote_block_ids [] for a prompt without a full block; D recomputes)",
			set: with(func(v *vllmVariant) { v.pParams = "empty" }), want: decoded(0)},
		{name: "prefill-cache-threshold-sim", source: "vllm.md §3 SIM (finish_reason cache_threshold, no params), §6 P10 (treat as no params: D prefills)",
			set: with(func(v *vllmVariant) { v.pFinish, v.pParams = "cache_threshold", "null" }), want: decoded(0)},
		{name: "prefill-length-no-params", source: "vllm.md §1.3(b)(c) (no connector: no params), §1.6 (D without params prefills locally), §6 P8",
			set: with(func(v *vllmVariant) { v.pParams = "absent" }), want: decoded(0)},
		{name: "prefill-no-usage", source: "vllm.md §6 P8 (non-vLLM worker), §2.4 / O2 (missing counts as 0): the client keeps D's usage",
			set: with(func(v *vllmVariant) { v.pNoUsage = true }), want: decoded(0)},
		{name: "json-spaced-reordered-escaped", source: "vllm.md §4 (key order differs, \\u escapes), §6 O3; json.dumps separators (§2.3 S2)",
			set: with(func(v *vllmVariant) { v.pCached, v.style = 2, jsonStyle{spaced: true, escape: true, reverse: true} }), want: decoded(2)},
		{name: "decode-bidirectional-params", source: "vllm.md §1.5 (bidirectional mode, #32553), §6 O4",
			set: with(func(v *vllmVariant) { v.dBidirectional = true }), want: decoded(0)},

		{name: "prefill-repetition-null-params", source: "vllm.md §2.1 (repetition, #35451: params null), §6 P7 (run D without params)",
			set: with(func(v *vllmVariant) { v.pFinish, v.pParams = "repetition", "null" }), want: decoded(0)},
		{name: "prefill-abort", source: "vllm.md §2.1 (abort: params null), §6 P7 (or error; do not crash)",
			set: with(func(v *vllmVariant) { v.pFinish, v.pParams = "abort", "null" }), want: retriedOut(2, 0, "context", "abort")},
		{name: "decode-finish-repetition", source: "vllm.md §2.1 (repetition is not an OpenAI finish reason); PROTOCOLS.md §1.2",
			set: with(func(v *vllmVariant) { v.dFinish = "repetition" }), want: decoded(0)},

		{name: "stream-finish-own-chunk", source: "vllm.md §6 S2 (finish_reason in its own empty-delta chunk)", only: onlyStream,
			set: with(func(v *vllmVariant) { v.stream.finishOwnChunk = true }), want: decoded(0)},
		{name: "stream-no-usage-requested", source: "vllm.md §2.3 S4 (a usage chunk only with include_usage)", only: onlyStream,
			req: func(c *reqCase) { c.includeUsage = false }, set: set(params), want: decoded(0)},
		{name: "stream-comments", source: "vllm.md §4 (ignore ': ' comment lines)", only: onlyStream,
			set: with(func(v *vllmVariant) { v.sse.comments = true }), want: decoded(0)},
		{name: "stream-crlf", source: "vllm.md §4 (accept CRLF line endings)", only: onlyStream,
			set: with(func(v *vllmVariant) { v.sse.crlf = true }), want: decoded(0)},
		{name: "stream-split-writes", source: "vllm.md §2.3 S1; trtllm.md §1.4 (events arrive in arbitrary pieces)", only: onlyStream,
			set: with(func(v *vllmVariant) { v.sse.split = true }), want: decoded(0)},
		{name: "stream-mid-error", source: "vllm.md §2.3 S5 (json.dumps error frame, then [DONE])", only: onlyStream,
			set:  midError(`{"error": {"message": "Sampler failed at token \u00e9", "type": "BadRequestError", "param": null, "code": 400}}`),
			want: streamFailed("Sampler failed at token é", "BadRequestError", "400")},
		{name: "stream-mid-error-legacy", source: "vllm.md §2.3 S5 (≤ v0.10.0: the flat object under error), §6 S6", only: onlyStream,
			set:  midError(`{"error": {"object": "error", "message": "Detokenizer failed", "type": "BadRequestError", "param": null, "code": 400}}`),
			want: streamFailed("Detokenizer failed", "BadRequestError", "400")},
		{name: "stream-error-before-any-chunk", source: "vllm.md §2.3 S5 (parser-creation failure: the error frame without any chunk)", only: onlyStream,
			set: with(func(v *vllmVariant) {
				v.stream = streamShape{errorFrame: `{"error": {"message": "Tool parser failed", "type": "BadRequestError", "param": null, "code": 400}}`}
			}),
			want: func(reqCase) want {
				return want{status: 502, errContains: []string{"generation", "Tool parser failed"}, ctxCalls: 2, genCalls: 2}
			}},
		{name: "decode-kv-load-failure", source: "vllm.md §1.5 (kv_load_failure_policy fail), §2.2 V8, §2.3 S6 (stream: role chunk then the error frame), §6 E7",
			set: with(func(v *vllmVariant) { v.dKVLoadFails = true }),
			want: func(c reqCase) want {
				switch {
				case !c.stream: // 500 after the handle: retried with fresh context phases
					return retriedOut(3, 3, "generation", "500", "Internal server error")(c)
				case c.endpoint == "chat": // the role chunk went out: the stream fails
					return want{streamErr: true, errMessage: "Internal server error", errType: "InternalServerError", errParam: "null",
						errCode: "500", ctxCalls: 1, genCalls: 1}
				default: // nothing went out: retried on the other gen worker
					return want{status: 502, errContains: []string{"generation", "Internal server error"}, ctxCalls: 2, genCalls: 2}
				}
			}},

		{name: "prefill-error-nested-404", source: "vllm.md §2.2 V1 (≥ v0.10.1), §6 E1, E4",
			set: with(func(v *vllmVariant) {
				e := nestedError(404, "NotFoundError", "model", "The model `x` does not exist.")
				v.pError = &e
			}),
			want: failed(404, "The model `x` does not exist.", "NotFoundError", `"model"`, "404")},
		{name: "prefill-error-flat-400", source: "vllm.md §2.2 V2 (≤ v0.10.0 flat shape, trailing ' None'), §6 E2",
			set: with(func(v *vllmVariant) {
				e := flatError(400, "BadRequestError", "This model's maximum context length is 4096 tokens. However, you requested 4097 tokens (4096 in the messages, 1 in the completion). Please reduce the length of the messages or completion. None")
				v.pError = &e
			}),
			want: failed(400, "This model's maximum context length is 4096 tokens. However, you requested 4097 tokens (4096 in the messages, 1 in the completion). Please reduce the length of the messages or completion. None", "BadRequestError", "null", "400")},
		{name: "prefill-error-string-401", source: "vllm.md §2.2 V9 (--api-key: error is a string), §6 E8",
			set:  with(func(v *vllmVariant) { v.pError = &errReply{401, "application/json", `{"error":"Unauthorized"}`} }),
			want: failed(401, "Unauthorized", "", "null", "null")},
		{name: "prefill-error-text-500", source: "vllm.md §2.2 V7 (Starlette text/plain 500), §6 E6",
			set:  with(func(v *vllmVariant) { v.pError = &errReply{500, "text/plain; charset=utf-8", "Internal Server Error"} }),
			want: retriedOut(2, 0, "context", "500", "Internal Server Error")},
		{name: "prefill-error-string-code-500-sim", source: "vllm.md §6 E11 (llm-d-inference-sim's fallback error has code \"500\", a string)",
			set: with(func(v *vllmVariant) {
				v.pError = &errReply{500, "application/json", `{"error":{"message":"Internal Server Error","type":"InternalServerError","param":null,"code":"500"}}`}
			}),
			want: retriedOut(2, 0, "context", "500", "Internal Server Error")},
		{name: "prefill-error-empty-500", source: "vllm.md §2.2 V6 (launcher.py: 500, no body, no content-type), §6 E5",
			set:  with(func(v *vllmVariant) { v.pError = &errReply{500, "", ""} }),
			want: retriedOut(2, 0, "context", "500")},
		{name: "prefill-error-detail-422", source: "vllm.md §2.2 V4 note (a 422 {\"detail\": [...]} from FastAPI front-ends), §6 E9",
			set: with(func(v *vllmVariant) {
				v.pError = &errReply{422, "application/json", `{"detail":[{"type":"missing","loc":["body","messages"],"msg":"Field required","input":null}]}`}
			}),
			want: func(reqCase) want {
				return want{status: 422, errContains: []string{"Field required"}, errCode: "null", ctxCalls: 1, genCalls: 0}
			}},
		{name: "prefill-error-rate-limited-429", source: "vllm.md §3 SIM-5 (rate_limit: 429 RateLimitError), §6 E10 (retry 429)",
			set: with(func(v *vllmVariant) {
				e := nestedError(429, "RateLimitError", nil, "Rate limit reached for fake/conformance-model in organization org on requests per min")
				v.pError = &e
			}),
			want: func(reqCase) want {
				return want{status: 503, errContains: []string{"context"}, ctxCalls: 2, genCalls: 0}
			}},
		{name: "prefill-error-string-503", source: "vllm.md §2.2 V10 (elastic EP scaling: error is a string), §6 E8",
			set: with(func(v *vllmVariant) {
				v.pError = &errReply{503, "application/json", `{"error":"The model is currently scaling. Please try again later."}`}
			}),
			want: retriedOut(2, 0, "context", "503", "The model is currently scaling")},
		{name: "client-stream-options-without-stream", source: "vllm.md §1.6, §2.2 V4 (validate_stream_options: 400 when stream is false), §6 P12",
			only: onlyWhole, req: func(c *reqCase) { c.includeUsage = true }, set: set(params),
			want: func(reqCase) want {
				return want{status: 400, errContains: []string{"tream"}, clientFault: true, ctxCalls: 0, genCalls: 0} // rejected before any call
			}},
		{name: "client-min-tokens-above-max-tokens", source: "vllm.md §1.6 (SamplingParams: min_tokens > max_tokens is a 400), §6 P12",
			req: func(c *reqCase) {
				c.extra = regexp.MustCompile(`"min_tokens":\d+`).ReplaceAllString(c.extra, `"min_tokens":20`)
			},
			set: set(params),
			want: func(reqCase) want {
				return want{status: 400, errContains: []string{"min_tokens"}, clientFault: true, ctxCalls: 0, genCalls: 0} // rejected before any call
			}},
		{name: "prefill-prompt-too-long", source: "vllm.md §2.2 V3 (param input_tokens; max_tokens 1 on P)",
			set: with(func(v *vllmVariant) { v.maxModelLen = 5 }),
			want: func(c reqCase) want {
				msg := fmt.Sprintf("This model's maximum context length is 5 tokens. However, you requested 1 output tokens and your prompt contains %d input tokens, for a total of %d tokens. Please reduce the length of the input prompt or the number of requested output tokens.", c.prompt, c.prompt+1)
				return failed(400, msg, "BadRequestError", `"input_tokens"`, "400")(c)
			}},
	}
	for i := range vs {
		vs[i].wire = wire
	}
	extra := func(c reqCase) string {
		if c.endpoint == "chat" {
			return `,"max_completion_tokens":16,"min_tokens":2,"min_completion_tokens":2`
		}
		return `,"min_tokens":1`
	}
	runVariants(t, d, &fakes.fakeFleet, extra, vs)
}

// vllmWire checks both legs against vllm.md §1.1 and §1.6: P gets the
// client's body with the prefill params, stream false, one token and no
// stream_options/min_tokens; D gets the client's own body with P's params
// byte for byte (or none when P returned none) and the same X-Request-Id.
func vllmWire(fakes *vllmFakes) func(*testing.T, reqCase, want, legs) {
	return func(t *testing.T, c reqCase, w want, l legs) {
		client := clientFields(t, c)
		ids := map[string]bool{}
		for _, p := range l.ctx {
			f := p.fields(t)
			require.JSONEq(t, vllmPrefillParams, string(f["kv_transfer_params"]), "prefill kv_transfer_params")
			require.Equal(t, "false", string(f["stream"]))
			require.Equal(t, "1", string(f["max_tokens"]))
			if _, ok := client["max_completion_tokens"]; ok {
				require.Equal(t, "1", string(f["max_completion_tokens"]))
			}
			for _, k := range []string{"stream_options", "min_tokens", "min_completion_tokens"} {
				require.NotContains(t, f, k, "the prefill must not get %s", k)
			}
			requireKept(t, client, f, "model", "messages", "prompt", "temperature")
			id := p.Header.Get("X-Request-Id")
			require.NotEmpty(t, id, "X-Request-Id on the prefill")
			require.False(t, ids[id], "a fresh X-Request-Id per attempt")
			ids[id] = true
		}
		for _, g := range l.gen {
			f := g.fields(t)
			requireKept(t, client, f, "model", "messages", "prompt", "temperature", "stream", "stream_options", "max_tokens",
				"max_completion_tokens", "min_tokens", "min_completion_tokens")
			id := g.Header.Get("X-Request-Id")
			require.True(t, ids[id], "the decode shares its prefill's X-Request-Id %q", id)
			if issued := fakes.issuedParams(id); issued != nil {
				require.Equal(t, string(issued), string(f["kv_transfer_params"]), "the prefill's kv_transfer_params, byte for byte")
			} else {
				require.NotContains(t, f, "kv_transfer_params", "no params when the prefill returned none")
			}
		}
	}
}
