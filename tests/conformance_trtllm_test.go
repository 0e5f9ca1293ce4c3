package tests

import (
	"encoding/json"
	"fmt"
	"math/big"
	"testing"

	"github.com/stretchr/testify/require"
)

func testConformanceTRTLLM(t *testing.T) {
	fakes := startTRTFakes(t, 2, 2)
	d := startConformanceDuet(t, "trtllm", urls(fakes.ctx), urls(fakes.gen))
	set := func(v trtVariant) func() { return func() { fakes.set(v) } }
	// generated: the client gets the gen worker's answer with the context
	// phase's prompt and cached tokens (trtllm.md §1.5).
	generated := func(c reqCase) want {
		return want{content: genText, finish: "stop", prompt: c.prompt, cached: trtCached, completion: len(genTokens), ctxCalls: 1, genCalls: 1}
	}
	session := func(c *reqCase) { c.headers = []string{"X-Session-ID", "conv-42"} }
	vs := []variant{
		{name: "ctx-not-finished", source: "trtllm.md §2.2 (newest handle, ctx_request_id above 2^53, prompt_token_ids), §2.3 (gen echoes the handle, usage from ctx_usage), §2.5, §6 #1 #15 #16 #19 #20 #25",
			set: set(trtVariant{}), want: generated},
		{name: "ctx-length-old-handle-gen-own-usage", source: "trtllm.md §2.2 (second example: older handle), §1.5 eras S4/S6 (gen reports its own usage), §6 #2",
			set: set(trtVariant{ctxFinish: "length", oldHandle: true, genOwnUsage: true}), want: generated},
		{name: "ctx-stop-finished", source: "trtllm.md §1.2 (_need_gen: stop means finished; TRT-LLM's own server drops the token when streaming), §2.2 (early finish, null ids), §5, §6 #3",
			set: set(trtVariant{ctxFinish: "stop"}),
			want: func(c reqCase) want {
				return want{content: firstToken, finish: "stop", prompt: c.prompt, cached: trtCached, completion: 1,
					route: "round-robin+ctx-finished", ctxCalls: 1, genCalls: 0}
			}},
		{name: "ctx-null-finish", source: "trtllm.md §6 #4 (finish_reason null); PROTOCOLS.md §1.2 (unknown reasons continue when a handle is present)",
			set: set(trtVariant{ctxFinish: "null"}), want: generated},
		{name: "ctx-tool-calls", source: "trtllm.md §2.2 (chat turns stop into tool_calls), §6 #3 (duet continues so that calls are not lost)",
			set: set(trtVariant{ctxFinish: "tool_calls"}), want: generated},
		{name: "chat-prompt-token-ids-null", source: "trtllm.md §2.2 (S10: chat ctx answers prompt_token_ids null), §6 #7",
			only: func(c reqCase) bool { return c.endpoint == "chat" }, set: set(trtVariant{nullChatPromptIDs: true}), want: generated},
		{name: "session-conversation-id", source: "trtllm.md §1.1, §1.3 (conversation_id on both legs), §2.1 (S8d)",
			req: session, set: set(trtVariant{}), want: generated},
		{name: "json-spaced-reordered-escaped", source: "trtllm.md §2.6 (json.dumps separators, ensure_ascii escapes), §4.7; key order (vllm.md §4)",
			set: set(trtVariant{style: jsonStyle{spaced: true, escape: true, reverse: true}}), want: generated},

		{name: "stream-no-usage-requested", source: "trtllm.md §2.5 (usage chunk only with stream_options), §6 #16", only: onlyStream,
			req: func(c *reqCase) { c.includeUsage = false }, set: set(trtVariant{}), want: generated},
		{name: "stream-comments", source: "trtllm.md §4.4 (no comments are sent; a proxy ignores them anyway: vllm.md §4)", only: onlyStream,
			set: set(trtVariant{sse: sseStyle{comments: true}}), want: generated},
		{name: "stream-crlf", source: "trtllm.md §1.5 (S3 splits on \\r\\n\\r\\n too), §4.4", only: onlyStream,
			set: set(trtVariant{sse: sseStyle{crlf: true}}), want: generated},
		{name: "stream-error-frame", source: "trtllm.md §2.5 (completions: json.dumps error event with code null, then [DONE]; T3), §6 #17",
			only: func(c reqCase) bool { return c.stream && c.endpoint == "completions" },
			set: set(trtVariant{stream: streamShape{errorAfter: 2,
				errorFrame: `{"error": {"message": "Insufficient KV cache for gen-only benchmark mode: need 48 blocks \u2014 have 0", "type": "server_error", "code": null, "param": null}}`}}),
			want: func(reqCase) want {
				return want{streamErr: true, partial: genTokens[0] + genTokens[1], errMessage: "Insufficient KV cache for gen-only benchmark mode: need 48 blocks — have 0",
					errType: "server_error", errParam: "null", errCode: "null", ctxCalls: 1, genCalls: 1}
			}},
		{name: "stream-cut", source: "trtllm.md §2.5 (chat re-raises: no error event, no [DONE]), §6 #18",
			only: func(c reqCase) bool { return c.stream && c.endpoint == "chat" },
			set:  set(trtVariant{stream: streamShape{errorAfter: 2, cut: true}}),
			want: func(reqCase) want {
				return want{streamErr: true, partial: genTokens[0] + genTokens[1], errType: "server_error", errContains: []string{"generation"}, ctxCalls: 1, genCalls: 1}
			}},

		{name: "ctx-no-handle", source: "trtllm.md §1.2 (_verify_ctx_response: no handle on a continuing response), §6 #5",
			set: set(trtVariant{ctxNoHandle: true}),
			want: func(reqCase) want {
				return want{status: 502, errContains: []string{"context", "disaggregated_params"}, errType: "server_error", ctxCalls: 2, genCalls: 0}
			}},
		{name: "ctx-two-choices", source: "trtllm.md §1.2 (_verify_ctx_response: exactly one choice), §6 #6",
			set: set(trtVariant{ctxTwoChoices: true}),
			want: func(reqCase) want {
				return want{status: 502, errContains: []string{"context", "2 choices"}, errType: "server_error", ctxCalls: 2, genCalls: 0}
			}},
		{name: "ctx-200-null-body", source: "trtllm.md §2.4 (CppExecutorError: a 200 whose body is null), §6 #14",
			set: set(trtVariant{ctxError: &errReply{200, "application/json", "null"}}),
			want: func(reqCase) want {
				return want{status: 502, errContains: []string{"context", "not a JSON object"}, errType: "server_error", ctxCalls: 2, genCalls: 0}
			}},
		{name: "ctx-error-internal-error-type", source: "trtllm.md §2.4 (harmony: 400 with type internal_error), §6 #11",
			set: set(trtVariant{ctxError: func() *errReply {
				e := flatError(400, "internal_error", "Harmony parse failed: unexpected token <|channel|>")
				return &e
			}()}),
			want: func(reqCase) want {
				return want{status: 400, errMessage: "Harmony parse failed: unexpected token <|channel|>", errType: "internal_error",
					errParam: "null", errCode: "400", ctxCalls: 1, genCalls: 0}
			}},
		{name: "gen-finish-cancelled", source: "trtllm.md §2.2 finish table (CANCELLED → cancelled), §2.3 (generation finish reasons)",
			set: set(trtVariant{genFinish: "cancelled"}),
			want: func(c reqCase) want {
				switch {
				case !c.stream: // the gen worker gave up: retried on the other one
					return want{status: 502, errContains: []string{"generation", "cancelled"}, errType: "server_error", ctxCalls: 2, genCalls: 2}
				case c.endpoint == "chat": // the finish comes in its own chunk, after all content
					return want{streamErr: true, partial: genText, errContains: []string{"cancelled"}, errType: "server_error", ctxCalls: 1, genCalls: 1}
				default: // the finish rides on the last token, which must not reach the client as a success
					return want{streamErr: true, partial: genTokens[0] + genTokens[1] + genTokens[2], errContains: []string{"cancelled"},
						errType: "server_error", ctxCalls: 1, genCalls: 1}
				}
			}},
		{name: "client-extra-field-nvext", source: "PROTOCOLS.md §4 (accept unknown extra fields such as nvext without failing); trtllm.md §2.1, §4.8 (workers forbid unknown keys)",
			req: func(c *reqCase) { c.extra += `,"nvext":{"ignore_eos":true}` }, set: set(trtVariant{}), want: generated},
		{name: "client-stream-options-without-stream", source: "trtllm.md §4.8 (stream_options with stream false: 400), §6 #27",
			only: onlyWhole, req: func(c *reqCase) { c.includeUsage = true }, set: set(trtVariant{}),
			want: func(reqCase) want {
				return want{status: 400, errContains: []string{"tream"}, clientFault: true, ctxCalls: 0, genCalls: 0} // rejected before any call
			}},
		{name: "ctx-error-flat-400", source: "trtllm.md §2.4 (ErrorResponse, S18 prompt too long with a float length), §6 #9",
			set: set(trtVariant{maxNumTokens: 5}),
			want: func(c reqCase) want {
				return want{status: 400, errMessage: fmt.Sprintf("The sum of prompt length (%d.0), query length (0) should not exceed max_num_tokens (5)", c.prompt),
					errType: "BadRequestError", errParam: "null", errCode: "400", ctxCalls: 1, genCalls: 0}
			}},
		{name: "ctx-error-extra-forbidden", source: "trtllm.md §2.1 (extra=forbid; v1.1/1.2 params have no conversation_id), §2.4 validation handler {\"error\": str}, §6 #10",
			req: session, set: set(trtVariant{oldModel: true}),
			want: func(c reqCase) want {
				return want{status: 400, errMessage: trtExtraForbidden(c.endpoint == "chat", "disaggregated_params.conversation_id", json.RawMessage(`"conv-42"`)),
					errCode: "null", ctxCalls: 1, genCalls: 0}
			}},
		{name: "gen-error-extra-forbidden-ctx-usage", source: "trtllm.md §5 (version risk: ctx_usage on a v1.1/1.2 gen worker), §2.1, §6 #10",
			set: set(trtVariant{oldModel: true}),
			want: func(c reqCase) want { // the handle was refused: one fresh attempt (it may have been spent), then the 400
				return want{status: 400, errContains: []string{"extra_forbidden", "disaggregated_params.ctx_usage"}, errCode: "null", ctxCalls: 2, genCalls: 2}
			}},
	}
	for i := range vs {
		vs[i].wire = trtWire(fakes)
	}
	extra := func(c reqCase) string {
		if c.endpoint == "chat" {
			return `,"min_tokens":2`
		}
		return `,"min_tokens":1`
	}
	runVariants(t, d, &fakes.fakeFleet, extra, vs)
}

// trtWire checks both legs against trtllm.md §1.1 and §1.3: the context
// leg is the client's body with disaggregated_params context_only, stream
// false, stream_options null; the generation leg is the client's body
// with the issued handle (ctx_request_id byte for byte), request_type
// generation_only, the same disagg_request_id, ctx_usage and the prompt's
// token ids.
func trtWire(fakes *trtFakes) func(*testing.T, reqCase, want, legs) {
	return func(t *testing.T, c reqCase, w want, l legs) {
		client := clientFields(t, c)
		session := len(c.headers) > 0
		for _, p := range l.ctx {
			f := p.fields(t)
			dp, err := decodeFields(f["disaggregated_params"])
			require.NoError(t, err, "context disaggregated_params: %s", f["disaggregated_params"])
			require.Equal(t, `"context_only"`, string(dp["request_type"]))
			requireBigID(t, dp["disagg_request_id"], 40)
			if session {
				require.Equal(t, `"conv-42"`, string(dp["conversation_id"]))
			} else {
				require.NotContains(t, dp, "conversation_id")
			}
			require.Equal(t, "false", string(f["stream"]))
			require.True(t, isNull(f["stream_options"]), "stream_options null on the context leg")
			requireKept(t, client, f, "model", "messages", "prompt", "temperature", "max_tokens", "min_tokens")
		}
		for _, g := range l.gen {
			f := g.fields(t)
			dp, err := decodeFields(f["disaggregated_params"])
			require.NoError(t, err)
			require.Equal(t, `"generation_only"`, string(dp["request_type"]))
			is := fakes.issueFor(string(dp["disagg_request_id"]))
			require.NotNil(t, is, "the generation leg carries its context leg's disagg_request_id %s", dp["disagg_request_id"])
			require.Equal(t, is.ctxRequestID, string(dp["ctx_request_id"]), "ctx_request_id byte for byte")
			requireBigID(t, dp["ctx_request_id"], 53)
			require.Equal(t, fmt.Sprintf("%q", is.opaque), string(dp["encoded_opaque_state"]))
			require.JSONEq(t, string(is.usage), string(dp["ctx_usage"]), "ctx_usage is the context response's usage")
			if session {
				require.Equal(t, `"conv-42"`, string(dp["conversation_id"]))
			}
			ids, _ := json.Marshal(is.promptIDs)
			switch {
			case c.endpoint == "completions":
				require.JSONEq(t, string(ids), string(f["prompt"]), "completions prompt = the context's prompt_token_ids")
			case is.promptIDs == nil:
				require.NotContains(t, f, "prompt_token_ids")
			default:
				require.JSONEq(t, string(ids), string(f["prompt_token_ids"]))
			}
			requireKept(t, client, f, "model", "messages", "temperature", "stream", "stream_options", "max_tokens", "min_tokens")
		}
	}
}

// requireBigID asserts a JSON integer of at least 2^bits, written as
// digits (no float64 rounding or exponent on the way).
func requireBigID(t *testing.T, raw json.RawMessage, bits uint) {
	t.Helper()
	n, ok := new(big.Int).SetString(string(raw), 10)
	require.True(t, ok, "an integer id written as digits: %s", raw)
	require.True(t, n.Cmp(new(big.Int).Lsh(big.NewInt(1), bits)) >= 0, "id %s below 2^%d", raw, bits)
}
