package sim

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/proto/openai"
)

// ctxLeg is what a TensorRT-LLM context response hands the orchestrator.
type ctxLeg struct {
	raw      map[string]json.RawMessage // choices[0].disaggregated_params, key by key
	params   disagg.DisaggregatedParams
	promptID []int
	usage    json.RawMessage
	finish   string
	text     string
}

// parseCtx reads a context response the way an orchestrator would: the
// handle stays raw JSON.
func parseCtx(t *testing.T, r httpResult) ctxLeg {
	t.Helper()
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	var resp struct {
		Choices []struct {
			Text                string          `json:"text"`
			Message             *openai.Message `json:"message"`
			FinishReason        string          `json:"finish_reason"`
			DisaggregatedParams json.RawMessage `json:"disaggregated_params"`
		} `json:"choices"`
		PromptTokenIDs []int           `json:"prompt_token_ids"`
		Usage          json.RawMessage `json:"usage"`
	}
	require.NoError(t, json.Unmarshal(r.body, &resp))
	require.Len(t, resp.Choices, 1)
	c := resp.Choices[0]
	leg := ctxLeg{promptID: resp.PromptTokenIDs, usage: resp.Usage, finish: c.FinishReason, text: c.Text}
	if c.Message != nil {
		leg.text = c.Message.Content.String()
	}
	require.NoError(t, json.Unmarshal(c.DisaggregatedParams, &leg.raw))
	require.NoError(t, json.Unmarshal(c.DisaggregatedParams, &leg.params))
	return leg
}

// genBody builds the generation leg from the client body and the context
// response, as PROTOCOLS.md §1 step 3 says.
func genBody(t *testing.T, kind endpointKind, client map[string]any, leg ctxLeg) map[string]any {
	t.Helper()
	p := map[string]json.RawMessage{}
	for k, v := range leg.raw {
		p[k] = v
	}
	p["request_type"] = json.RawMessage(`"` + disagg.RequestGenerationOnly + `"`)
	p["ctx_usage"] = leg.usage
	b := map[string]any{}
	for k, v := range client {
		b[k] = v
	}
	b["disaggregated_params"] = p
	if kind == kindChat {
		b["prompt_token_ids"] = leg.promptID
	} else {
		b["prompt"] = leg.promptID
	}
	return b
}

func ctxBody(client map[string]any) map[string]any {
	b := map[string]any{}
	for k, v := range client {
		b[k] = v
	}
	b["disaggregated_params"] = map[string]any{"request_type": disagg.RequestContextOnly, "disagg_request_id": uint64(1) << 60, "conversation_id": "conv-1"}
	b["stream"] = false
	b["stream_options"] = nil
	return b
}

// outputText returns the text of a JSON or SSE response.
func outputText(t *testing.T, kind endpointKind, r httpResult, stream bool) (string, openai.Usage) {
	t.Helper()
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	if !stream {
		if kind == kindChat {
			resp := decodeChat(t, r)
			return resp.Choices[0].Message.Content.String(), *resp.Usage
		}
		resp := decodeCompletion(t, r)
		return resp.Choices[0].Text, *resp.Usage
	}
	var text strings.Builder
	var usage openai.Usage
	for _, ev := range sseEvents(t, r.body) {
		if openai.IsDone(ev) {
			break
		}
		var chunk struct {
			Choices []struct {
				Text  string `json:"text"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *openai.Usage `json:"usage"`
		}
		require.NoError(t, json.Unmarshal(ev, &chunk), "event %s", ev)
		for _, c := range chunk.Choices {
			text.WriteString(c.Text + c.Delta.Content)
		}
		if chunk.Usage != nil {
			usage = *chunk.Usage
		}
	}
	return text.String(), usage
}

func TestTRTLLMContextThenGeneration(t *testing.T) {
	ctxW := startWorker(t, testConfig("context", ProtocolTRTLLM))
	genW := startWorker(t, testConfig("generation", ProtocolTRTLLM))
	aggW := startWorker(t, testConfig("mixed", ProtocolTRTLLM))
	tests := []struct {
		name   string
		kind   endpointKind
		stream bool
	}{
		{"chat", kindChat, false},
		{"chat stream", kindChat, true},
		{"completion", kindCompletion, false},
		{"completion stream", kindCompletion, true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := "/v1/chat/completions"
			client := chatReq(longText("trt"+strconv.Itoa(i), 100), nil)
			if tt.kind == kindCompletion {
				path = "/v1/completions"
				client = completionReq(longText("trt"+strconv.Itoa(i), 100), nil)
			}
			client["max_tokens"] = 12
			client["stream"] = tt.stream
			client["stream_options"] = map[string]any{"include_usage": true}

			leg := parseCtx(t, post(t, ctxW.url+path, ctxBody(client)))
			require.Equal(t, openai.FinishNotFinished, leg.finish)
			p := leg.params
			require.Equal(t, disagg.RequestContextOnly, p.RequestType)
			require.Len(t, p.FirstGenTokens, 1)
			require.NotNil(t, p.CtxRequestID)
			require.Greater(t, *p.CtxRequestID, uint64(1)<<53, "ids exercise 64-bit relays")
			require.Equal(t, strconv.FormatUint(*p.CtxRequestID, 10), string(leg.raw["ctx_request_id"]))
			require.Equal(t, "null", string(leg.raw["draft_tokens"]))
			require.Equal(t, "0", string(leg.raw["ctx_dp_rank"]))
			require.Equal(t, ctxW.url, *p.CtxInfoEndpoint)
			require.Equal(t, uint64(1)<<60, *p.DisaggRequestID)
			require.Equal(t, "conv-1", p.ConversationID)
			st, err := decodeOpaqueState(*p.EncodedOpaqueState)
			require.NoError(t, err)
			require.Equal(t, ctxW.url, st.URL)
			require.NotEmpty(t, leg.promptID)
			require.Equal(t, 1, ctxW.s.sched.stats().Pins)

			gen := post(t, genW.url+path, genBody(t, tt.kind, client, leg))
			if tt.stream {
				require.Equal(t, openai.ContentTypeSSE, gen.header.Get("Content-Type"))
			}
			text, usage := outputText(t, tt.kind, gen, tt.stream)
			require.Equal(t, 0, ctxW.s.sched.stats().Pins, "the pull released the pin")

			agg := post(t, aggW.url+path, client)
			aggText, _ := outputText(t, tt.kind, agg, tt.stream)
			require.Equal(t, aggText, text, "disaggregated output equals aggregated output")
			tok := testTokenizer(t, "cl100k_base")
			require.Equal(t, p.FirstGenTokens[0], tok.Encode(text)[0], "the first token is first_gen_tokens")

			var ctxUsage openai.Usage
			require.NoError(t, json.Unmarshal(leg.usage, &ctxUsage))
			require.Equal(t, ctxUsage.PromptTokens, usage.PromptTokens, "usage comes from ctx_usage")
			require.Equal(t, ctxUsage.CachedTokens(), usage.CachedTokens())
			require.Equal(t, 12, usage.CompletionTokens)

			// A handle is valid once.
			again := post(t, genW.url+path, genBody(t, tt.kind, client, leg))
			require.Equal(t, http.StatusBadRequest, again.status)
			require.Contains(t, again.errorBody(t).Error.Message, "unknown KV handle")
		})
	}
}

func TestTRTLLMRejectedHandles(t *testing.T) {
	cfg := testConfig("context", ProtocolTRTLLM)
	cfg.KVTransferTimeout = 50 * time.Millisecond
	ctxW := startWorker(t, cfg)
	genW := startWorker(t, testConfig("generation", ProtocolTRTLLM))
	client := chatReq("expire me", map[string]any{"max_tokens": 3})

	t.Run("expired", func(t *testing.T) {
		leg := parseCtx(t, post(t, ctxW.url+"/v1/chat/completions", ctxBody(client)))
		time.Sleep(200 * time.Millisecond)
		r := post(t, genW.url+"/v1/chat/completions", genBody(t, kindChat, client, leg))
		require.Equal(t, http.StatusBadRequest, r.status)
		e := r.errorBody(t)
		require.Equal(t, openai.ErrTypeInvalidRequest, e.Error.Type)
		// The expiry loop or the pull itself dropped the pin.
		require.Equal(t, 0, ctxW.s.sched.stats().Pins)
	})
	t.Run("unknown", func(t *testing.T) {
		leg := parseCtx(t, post(t, ctxW.url+"/v1/chat/completions", ctxBody(client)))
		bogus := *leg.params.CtxRequestID + 1
		leg.raw["ctx_request_id"] = json.RawMessage(strconv.FormatUint(bogus, 10))
		leg.raw["encoded_opaque_state"] = json.RawMessage(`"` + encodeOpaqueState(opaqueState{URL: ctxW.url, Key: trtPinKey(bogus), CtxRequestID: bogus}) + `"`)
		r := post(t, genW.url+"/v1/chat/completions", genBody(t, kindChat, client, leg))
		require.Equal(t, http.StatusBadRequest, r.status)
		require.Contains(t, r.errorBody(t).Error.Message, "unknown KV handle")
		require.Equal(t, 1, ctxW.s.sched.stats().Pins, "the real handle is untouched")
		require.Equal(t, 1, ctxW.s.sched.expirePins(time.Now().Add(time.Hour)))
	})
	t.Run("prompt mismatch", func(t *testing.T) {
		leg := parseCtx(t, post(t, ctxW.url+"/v1/chat/completions", ctxBody(client)))
		leg.promptID = append([]int{1}, leg.promptID...)
		r := post(t, genW.url+"/v1/chat/completions", genBody(t, kindChat, client, leg))
		require.Equal(t, http.StatusBadRequest, r.status)
		require.Contains(t, r.errorBody(t).Error.Message, "does not match")
		require.Equal(t, 1, ctxW.s.sched.stats().Pins, "a mismatching pull does not consume the handle")
		require.Equal(t, 1, ctxW.s.sched.expirePins(time.Now().Add(time.Hour)))
	})
	t.Run("unreachable context worker", func(t *testing.T) {
		leg := parseCtx(t, post(t, ctxW.url+"/v1/chat/completions", ctxBody(client)))
		id := *leg.params.CtxRequestID
		leg.raw["encoded_opaque_state"] = json.RawMessage(`"` + encodeOpaqueState(opaqueState{URL: "http://127.0.0.1:1", CtxRequestID: id}) + `"`)
		r := post(t, genW.url+"/v1/chat/completions", genBody(t, kindChat, client, leg))
		// TensorRT-LLM reports a failed transfer as a 400 BadRequestError.
		require.Equal(t, http.StatusBadRequest, r.status)
		require.JSONEq(t, `{"object":"error","message":"`+trtKVTransferError+`","type":"BadRequestError","param":null,"code":400}`, string(r.body))
		require.Equal(t, 1, ctxW.s.sched.expirePins(time.Now().Add(time.Hour)))
	})
}

func TestTRTLLMFirstTokenEOSFinishes(t *testing.T) {
	cfg := testConfig("context", ProtocolTRTLLM)
	cfg.EOSProbability = 0.999
	ctxW := startWorker(t, cfg)
	leg := parseCtx(t, post(t, ctxW.url+"/v1/chat/completions", ctxBody(chatReq("eos at once", nil))))
	require.Equal(t, openai.FinishStop, leg.finish)
	require.Nil(t, leg.params.CtxRequestID, "a finished request has no handle")
	require.Equal(t, 0, ctxW.s.sched.stats().Pins)
}

// TestGenerationPaysOnlyMissingBlocks: on turn 2 of a conversation the gen
// worker already holds turn 1's prompt and reply, so it pulls less.
func TestGenerationPaysOnlyMissingBlocks(t *testing.T) {
	ctxW := startWorker(t, testConfig("context", ProtocolTRTLLM))
	genW := startWorker(t, testConfig("generation", ProtocolTRTLLM))
	msgs := []map[string]any{{"role": "user", "content": longText("conversation", 1000)}}
	turn := func(max int) (httpResult, string) {
		client := map[string]any{"model": Defaults().Model, "messages": msgs, "max_tokens": max}
		leg := parseCtx(t, post(t, ctxW.url+"/v1/chat/completions", ctxBody(client)))
		r := post(t, genW.url+"/v1/chat/completions", genBody(t, kindChat, client, leg))
		text, _ := outputText(t, kindChat, r, false)
		return r, text
	}
	first, reply := turn(40)
	require.Equal(t, "0", first.header.Get(headerCachedTokens))
	msgs = append(msgs, map[string]any{"role": "assistant", "content": reply}, map[string]any{"role": "user", "content": "go on"})
	second, _ := turn(4)
	held, err := strconv.Atoi(second.header.Get(headerCachedTokens))
	require.NoError(t, err)
	require.Greater(t, held, 1000, "the gen worker holds turn 1's prompt and reply")
	require.Less(t, modelledUs(t, second), modelledUs(t, first), "less to transfer")
}

func TestVLLMPrefillThenDecode(t *testing.T) {
	ctxW := startWorker(t, testConfig("context", ProtocolVLLM))
	genW := startWorker(t, testConfig("generation", ProtocolVLLM))
	aggW := startWorker(t, testConfig("mixed", ProtocolVLLM))
	for _, stream := range []bool{false, true} {
		t.Run("stream="+strconv.FormatBool(stream), func(t *testing.T) {
			client := chatReq(longText("vllm"+strconv.FormatBool(stream), 100), map[string]any{"max_tokens": 9, "stream": stream})
			prefill := map[string]any{}
			for k, v := range client {
				prefill[k] = v
			}
			prefill["kv_transfer_params"] = map[string]any{"do_remote_decode": true, "do_remote_prefill": false,
				"remote_engine_id": nil, "remote_block_ids": nil, "remote_host": nil, "remote_port": nil}
			prefill["stream"], prefill["max_tokens"] = false, 1
			hdr := map[string]string{"X-Request-Id": "req-" + strconv.FormatBool(stream)}
			pr := do(t, http.MethodPost, ctxW.url+"/v1/chat/completions", prefill, hdr)
			resp := decodeChat(t, pr)
			require.Equal(t, openai.FinishLength, *resp.Choices[0].FinishReason)
			require.Equal(t, 1, resp.Usage.CompletionTokens)
			var kv disagg.KVTransferParams
			require.NoError(t, json.Unmarshal(resp.KVTransferParams, &kv))
			require.True(t, kv.DoRemotePrefill)
			require.False(t, kv.DoRemoteDecode)
			require.Equal(t, "127.0.0.1", *kv.RemoteHost)
			require.Equal(t, ctxW.url, "http://127.0.0.1:"+strconv.Itoa(*kv.RemotePort))
			require.NotEmpty(t, kv.RemoteBlockIDs)
			require.Equal(t, 1, *kv.TPSize)
			require.NotEmpty(t, *kv.RemoteEngineID)

			decode := map[string]any{}
			for k, v := range client {
				decode[k] = v
			}
			decode["kv_transfer_params"] = resp.KVTransferParams // verbatim
			text, _ := outputText(t, kindChat, do(t, http.MethodPost, genW.url+"/v1/chat/completions", decode, hdr), stream)
			aggText, _ := outputText(t, kindChat, post(t, aggW.url+"/v1/chat/completions", client), stream)
			require.Equal(t, aggText, text)
			require.True(t, strings.HasPrefix(text, resp.Choices[0].Message.Content.String()), "decode replays the prefill's token")

			again := do(t, http.MethodPost, genW.url+"/v1/chat/completions", decode, hdr)
			require.Equal(t, http.StatusBadRequest, again.status)
			again.errorBody(t)
		})
	}
}

func TestRoleEnforcement(t *testing.T) {
	workers := map[string]*testWorker{}
	for _, proto := range Protocols {
		for _, role := range []string{"context", "generation"} {
			workers[proto+"/"+role] = startWorker(t, testConfig(role, proto))
		}
	}
	fakeState := encodeOpaqueState(opaqueState{URL: "http://127.0.0.1:1", CtxRequestID: 5})
	tests := []struct {
		name   string
		worker string
		extra  map[string]any
		want   int
	}{
		{"trtllm gen rejects context_only", "trtllm/generation", map[string]any{"disaggregated_params": map[string]any{"request_type": "context_only"}}, 400},
		{"trtllm ctx rejects generation_only", "trtllm/context", map[string]any{"disaggregated_params": map[string]any{
			"request_type": "generation_only", "ctx_request_id": 5, "encoded_opaque_state": fakeState, "first_gen_tokens": []int{1}}}, 400},
		{"trtllm ctx serves plain requests", "trtllm/context", nil, 200},
		{"trtllm gen serves plain requests", "trtllm/generation", nil, 200},
		{"vllm gen rejects prefill", "vllm/generation", map[string]any{"kv_transfer_params": map[string]any{"do_remote_decode": true}}, 400},
		{"vllm ctx rejects decode", "vllm/context", map[string]any{"kv_transfer_params": map[string]any{
			"do_remote_prefill": true, "remote_request_id": "x", "remote_host": "127.0.0.1", "remote_port": 1}}, 400},
		{"vllm ignores trtllm params", "vllm/generation", map[string]any{"disaggregated_params": map[string]any{"request_type": "context_only"}}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := chatReq("role check", map[string]any{"max_tokens": 2})
			for k, v := range tt.extra {
				body[k] = v
			}
			r := post(t, workers[tt.worker].url+"/v1/chat/completions", body)
			require.Equal(t, tt.want, r.status, "body: %s", r.body)
			if tt.want != 200 {
				require.Contains(t, r.errorBody(t).Error.Message, "role")
			}
		})
	}
}

// TestTRTLLMGenerationFromMessagesOnly: a generation leg without
// prompt_token_ids or ctx_usage renders the messages itself and reports its
// own usage.
func TestTRTLLMGenerationFromMessagesOnly(t *testing.T) {
	ctxW := startWorker(t, testConfig("context", ProtocolTRTLLM))
	genW := startWorker(t, testConfig("generation", ProtocolTRTLLM))
	client := chatReq(longText("messages only", 200), map[string]any{"max_tokens": 5, "stream": true, "stream_options": map[string]any{"include_usage": true}})
	leg := parseCtx(t, post(t, ctxW.url+"/v1/chat/completions", ctxBody(client)))
	p := map[string]json.RawMessage{}
	for k, v := range leg.raw {
		p[k] = v
	}
	p["request_type"] = json.RawMessage(`"generation_only"`)
	body := map[string]any{}
	for k, v := range client {
		body[k] = v
	}
	body["disaggregated_params"] = p
	text, usage := outputText(t, kindChat, post(t, genW.url+"/v1/chat/completions", body), true)
	require.NotEmpty(t, text)
	require.Equal(t, len(leg.promptID), usage.PromptTokens)
	require.Equal(t, 0, usage.CachedTokens(), "nothing was held locally")
	require.Equal(t, 5, usage.CompletionTokens)
}
