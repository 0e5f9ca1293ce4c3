package tests

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// trtVariant is what the TensorRT-LLM fakes answer. Every worker is a
// trtllm-serve OpenAI server; disaggregated_params.request_type says
// whether a request is a context_only, a generation_only or a plain one.
type trtVariant struct {
	// ctxFinish is the context response's finish_reason: "" for
	// not_finished (trtllm.md §2.2), "length" (older builds, max_tokens 1),
	// "stop" (end of sequence at the first token: the request is done),
	// "tool_calls", or "null" for JSON null (trtllm.md §6 #4).
	ctxFinish string
	// ctxNoHandle drops the handle from a continuing context response and
	// ctxTwoChoices answers two choices: both break _verify_ctx_response
	// (trtllm.md §1.2, §6 #5, #6). ctxError replaces the context answer.
	ctxNoHandle, ctxTwoChoices bool
	ctxError                   *errReply
	// genFinish, when set, replaces the generation finish reason
	// (trtllm.md §2.3: timeout, cancelled, ...).
	genFinish string
	// oldHandle writes the older, shorter handle (trtllm.md §2.2, second
	// example) instead of the newest one.
	oldHandle bool
	// nullChatPromptIDs answers chat context requests with
	// prompt_token_ids null (trtllm.md §2.2, the S10 regression).
	nullChatPromptIDs bool
	// genOwnUsage makes the generation worker report its own usage instead
	// of rewriting it from ctx_usage (trtllm.md §1.5, eras S4/S6).
	genOwnUsage bool
	// oldModel makes every worker a v1.1/1.2-era one (S8b): its
	// disaggregated_params know neither ctx_usage nor conversation_id and
	// reject them as extra_forbidden (trtllm.md §2.1, §5).
	oldModel bool
	// maxNumTokens > 0 rejects longer prompts on context requests
	// (trtllm.md §2.4, S18).
	maxNumTokens int
	style        jsonStyle
	sse          sseStyle
	stream       streamShape
}

// trtCached is the cached_tokens every context response reports.
const trtCached = 3

// trtIssue is one handle a context worker issued.
type trtIssue struct {
	ctxRequestID string // the decimal digits as written
	disaggID     string
	opaque       string
	firstGen     []int
	promptIDs    []int // nil when the response said null
	usage        []byte
	consumed     bool
}

// trtFakes is the TensorRT-LLM fleet and the handles its context workers
// issued, which generation workers pull.
type trtFakes struct {
	fakeFleet
	variantSlot[trtVariant]

	mu       sync.Mutex // guards the fields below
	byCtxID  map[string]*trtIssue
	byDisagg map[string]*trtIssue
	seq      uint64
}

func startTRTFakes(t *testing.T, nCtx, nGen int) *trtFakes {
	c := &trtFakes{byCtxID: map[string]*trtIssue{}, byDisagg: map[string]*trtIssue{}}
	c.ctx = startPool(t, "ctx", nCtx, c.serve)
	c.gen = startPool(t, "gen", nGen, c.serve)
	return c
}

// issueFor returns the handle issued to the attempt with disagg_request_id
// id (its JSON text).
func (c *trtFakes) issueFor(id string) *trtIssue {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byDisagg[id]
}

// TensorRT-LLM's OpenAI models forbid extra keys (trtllm.md §2.1, §4.8).
var (
	trtChatKeys = []string{"model", "messages", "max_tokens", "max_completion_tokens", "min_tokens", "stream",
		"stream_options", "temperature", "top_p", "top_k", "n", "stop", "ignore_eos", "seed", "user", "logprobs",
		"top_logprobs", "presence_penalty", "frequency_penalty", "tools", "tool_choice", "response_format",
		"prompt_token_ids", "prompt_token_ids_b64", "disaggregated_params", "conversation_params", "chat_template_kwargs"}
	trtCompletionKeys = []string{"model", "prompt", "max_tokens", "min_tokens", "stream", "stream_options", "temperature",
		"top_p", "top_k", "n", "stop", "ignore_eos", "seed", "user", "logprobs", "echo", "presence_penalty",
		"frequency_penalty", "disaggregated_params", "conversation_params"}
	// trtParamKeysOld is DisaggregatedParams of v1.1/1.2 (S8b);
	// trtParamKeys the newest (trtllm.md §2.1 table).
	trtParamKeysOld = []string{"request_type", "first_gen_tokens", "ctx_request_id", "encoded_opaque_state", "draft_tokens",
		"disagg_request_id", "ctx_dp_rank", "ctx_info_endpoint", "schedule_style"}
	trtParamKeys = append(slices.Clone(trtParamKeysOld), "first_gen_log_probs", "first_gen_logits", "ctx_usage",
		"return_prompt_token_ids_b64", "conversation_id", "resolved_thinking")
)

// trtExtraForbidden is the message of trtllm-serve's validation handler for
// an unknown key at loc (pydantic v2's text; trtllm.md §2.4).
func trtExtraForbidden(chat bool, loc string, raw json.RawMessage) string {
	model := "CompletionRequest"
	if chat {
		model = "ChatCompletionRequest"
	}
	return fmt.Sprintf("1 validation error for %s\n%s\n  Extra inputs are not permitted [type=extra_forbidden, input_value=%s, input_type=%s]",
		model, loc, raw, pyType(raw))
}

func pyType(raw json.RawMessage) string {
	switch b := bytes.TrimSpace(raw); {
	case len(b) > 0 && b[0] == '"':
		return "str"
	case len(b) > 0 && b[0] == '{':
		return "dict"
	case len(b) > 0 && b[0] == '[':
		return "list"
	}
	return "int"
}

// trtValidationError is trtllm-serve's 400 for a request its models
// reject: {"error": "<text>"}, not an ErrorResponse (trtllm.md §2.4).
func trtValidationError(msg string) errReply {
	return errReply{400, "application/json", string(jsonStyle{}.encode(object{{"error", msg}}))}
}

func (c *trtFakes) serve(e *fakeEngine, w http.ResponseWriter, r *http.Request, body []byte) {
	v := c.variant()
	f, err := decodeFields(body)
	if err != nil {
		trtValidationError(fmt.Sprintf("1 validation error for request body\n  JSON decode error [type=json_invalid]: %v", err)).write(w)
		return
	}
	allowed, paramKeys := trtCompletionKeys, trtParamKeys
	if isChat(r) {
		allowed = trtChatKeys
	}
	if v.oldModel {
		paramKeys = trtParamKeysOld
	}
	var dp map[string]json.RawMessage
	if !isNull(f["disaggregated_params"]) {
		if dp, err = decodeFields(f["disaggregated_params"]); err != nil {
			trtValidationError("disaggregated_params: Input should be a valid dictionary").write(w)
			return
		}
	}
	for _, k := range sortedKeys(f) {
		if !slices.Contains(allowed, k) {
			trtValidationError(trtExtraForbidden(isChat(r), k, f[k])).write(w)
			return
		}
	}
	for _, k := range sortedKeys(dp) {
		if !slices.Contains(paramKeys, k) {
			trtValidationError(trtExtraForbidden(isChat(r), "disaggregated_params."+k, dp[k])).write(w)
			return
		}
	}
	if !isNull(f["stream_options"]) && !boolField(f, "stream") { // trtllm.md §4.8
		msg := "Stream options can only be defined when stream is true."
		if isChat(r) {
			msg = "stream_options can only be set if stream is true"
		}
		trtValidationError("1 validation error for request\n  Value error, " + msg + " [type=value_error]").write(w)
		return
	}
	switch rt := stringField(dp, "request_type"); rt {
	case "context_only":
		c.context(e, w, r, f, dp, v)
	case "generation_only":
		c.generation(w, r, f, dp, v)
	case "":
		trtAnswer(w, r, f, nil, v)
	default: // S13 __post_init__ validates the type
		flatError(400, "BadRequestError", fmt.Sprintf("Unknown request type: %s", rt)).write(w)
	}
}

// context answers a context_only request with the handle (trtllm.md §2.2).
func (c *trtFakes) context(e *fakeEngine, w http.ResponseWriter, r *http.Request, f, dp map[string]json.RawMessage, v trtVariant) {
	if boolField(f, "stream") { // streamed chunks carry no disaggregated_params: useless (trtllm.md §2.2)
		flatError(400, "BadRequestError", "fake trtllm-serve: context_only requests must not stream").write(w)
		return
	}
	if v.ctxError != nil {
		v.ctxError.write(w)
		return
	}
	n := promptLen(f)
	if v.maxNumTokens > 0 && n > v.maxNumTokens { // S18 _check_arguments, pytorch backend
		flatError(400, "BadRequestError", fmt.Sprintf("The sum of prompt length (%d.0), query length (0) should not exceed max_num_tokens (%d)", n, v.maxNumTokens)).write(w)
		return
	}
	ids := make([]int, n)
	for i := range ids {
		ids[i] = 128000 + i
	}
	finish := v.ctxFinish
	if finish == "" {
		finish = "not_finished"
	}
	disagg := rawJSON("null")
	if !isNull(dp["disagg_request_id"]) {
		disagg = rawJSON(bytes.TrimSpace(dp["disagg_request_id"]))
	}
	usage := v.style.encode(object{{"prompt_tokens", n}, {"total_tokens", n + 1}, {"completion_tokens", 1},
		{"prompt_tokens_details", object{{"cached_tokens", trtCached}}}})
	var ctxID, opaque any // null on an early finish (trtllm.md §1.2, S1)
	firstGen := []int{9906}
	var finishJSON any = finish
	if finish == "null" {
		finishJSON = nil
	}
	if finish != "stop" {
		c.mu.Lock()
		c.seq++
		id := fmt.Sprintf("%d", uint64(1)<<53+1+2*c.seq) // above 2^53: a float64 would change it
		op := base64.StdEncoding.EncodeToString([]byte{0xfb, 0xef, 0xff, byte(c.seq), byte(e.port)})
		is := &trtIssue{ctxRequestID: id, disaggID: string(disagg), opaque: op, firstGen: firstGen, usage: compactJSON(usage)}
		if !(isChat(r) && v.nullChatPromptIDs) {
			is.promptIDs = ids
		}
		c.byCtxID[id], c.byDisagg[string(disagg)] = is, is
		c.mu.Unlock()
		ctxID, opaque = rawJSON(id), op
	}
	handle := object{{"request_type", "context_only"}, {"first_gen_tokens", firstGen}, {"first_gen_log_probs", nil},
		{"first_gen_logits", nil}, {"ctx_request_id", ctxID}, {"encoded_opaque_state", opaque}, {"draft_tokens", nil},
		{"disagg_request_id", disagg}, {"ctx_dp_rank", nil}, {"ctx_info_endpoint", nil}, {"schedule_style", nil},
		{"conversation_id", nil}, {"ctx_usage", nil}, {"return_prompt_token_ids_b64", false}, {"resolved_thinking", nil}}
	if v.oldHandle || v.oldModel {
		handle = object{{"request_type", "context_only"}, {"first_gen_tokens", firstGen}, {"ctx_request_id", ctxID},
			{"encoded_opaque_state", opaque}, {"draft_tokens", nil}, {"disagg_request_id", disagg}, {"ctx_dp_rank", 0},
			{"ctx_info_endpoint", fmt.Sprintf("tcp://127.0.0.1:%d", 41000+e.port%1000)}, {"schedule_style", 0}}
	}
	var handleJSON any = handle
	if v.ctxNoHandle {
		handleJSON = nil
	}
	var body object
	if isChat(r) {
		var promptIDs any = ids
		if v.nullChatPromptIDs {
			promptIDs = nil
		}
		body = object{{"id", "chatcmpl-6f1c0e8d1a2b4c3d9e8f7a6b5c4d3e2f"}, {"object", "chat.completion"}, {"created", time.Now().Unix()},
			{"model", fakeModel}, {"choices", []any{object{{"index", 0}, {"message", object{{"role", "assistant"},
				{"content", firstToken}, {"reasoning_content", ""}, {"reasoning", nil}, {"tool_calls", []any{}}}},
				{"logprobs", nil}, {"finish_reason", finishJSON}, {"stop_reason", nil}, {"mm_embedding_handle", nil},
				{"disaggregated_params", handleJSON}, {"avg_decoded_tokens_per_iter", nil}}}},
			{"usage", rawJSON(usage)}, {"prompt_token_ids", promptIDs}, {"prompt_token_ids_b64", nil}}
	} else {
		body = object{{"id", "cmpl-0a1b2c3d4e5f"}, {"object", "text_completion"}, {"created", time.Now().Unix()}, {"model", fakeModel},
			{"choices", []any{object{{"index", 0}, {"text", firstToken}, {"token_ids", nil}, {"logprobs", nil},
				{"context_logits", nil}, {"finish_reason", finishJSON}, {"stop_reason", nil}, {"disaggregated_params", handleJSON},
				{"avg_decoded_tokens_per_iter", rawJSON("1.0")}}}},
			{"usage", rawJSON(usage)}, {"prompt_token_ids", ids}}
	}
	if v.ctxTwoChoices {
		for i := range body {
			if body[i].k == "choices" {
				body[i].v = append(body[i].v.([]any), body[i].v.([]any)[0])
			}
		}
	}
	writeJSONBody(w, v.style.encode(body))
}

// generation checks a generation_only request against the handle it
// names and answers it (trtllm.md §1.3, §2.3, §2.5).
func (c *trtFakes) generation(w http.ResponseWriter, r *http.Request, f, dp map[string]json.RawMessage, v trtVariant) {
	for _, k := range []string{"ctx_request_id", "first_gen_tokens"} {
		if isNull(dp[k]) {
			flatError(400, "BadRequestError", fmt.Sprintf("Invalid disaggregated params: %s is required for generation_only requests", k)).write(w)
			return
		}
	}
	if !isNull(dp["ctx_usage"]) && !bytes.HasPrefix(bytes.TrimSpace(dp["ctx_usage"]), []byte("{")) {
		trtValidationError(trtExtraForbidden(isChat(r), "disaggregated_params.ctx_usage", dp["ctx_usage"])).write(w)
		return
	}
	id := string(bytes.TrimSpace(dp["ctx_request_id"]))
	var firstGen []int
	_ = json.Unmarshal(dp["first_gen_tokens"], &firstGen)
	c.mu.Lock()
	is := c.byCtxID[id]
	ok := is != nil && !is.consumed && stringField(dp, "encoded_opaque_state") == is.opaque && slices.Equal(firstGen, is.firstGen)
	if ok {
		is.consumed = true
	}
	c.mu.Unlock()
	if !ok { // the transceiver finds no such context request (S9: any exception → 400)
		flatError(400, "BadRequestError", fmt.Sprintf("Failed to receive the KV cache of context request %s: unknown, already received, or not issued with this state", id)).write(w)
		return
	}
	promptKey := "prompt_token_ids"
	if !isChat(r) {
		promptKey = "prompt"
	}
	var got []int
	if is.promptIDs != nil && (json.Unmarshal(f[promptKey], &got) != nil || !slices.Equal(got, is.promptIDs)) {
		flatError(400, "BadRequestError", fmt.Sprintf("%s does not match the context request's prompt_token_ids", promptKey)).write(w)
		return
	}
	trtAnswer(w, r, f, dp, v)
}

// trtAnswer generates the full answer of a generation_only or a plain
// request; dp, when set, is echoed (trtllm.md §1.4, §2.3).
func trtAnswer(w http.ResponseWriter, r *http.Request, f, dp map[string]json.RawMessage, v trtVariant) {
	toks, finish := generate(f)
	if v.genFinish != "" {
		finish = v.genFinish
	}
	n, cached := promptLen(f), 0
	if ctxUsage := dp["ctx_usage"]; !v.genOwnUsage && !isNull(ctxUsage) { // trtllm.md §1.5 (S1/S2)
		var u clientUsage
		_ = json.Unmarshal(ctxUsage, &u)
		n, cached = u.PromptTokens, u.cached()
	}
	usage := object{{"prompt_tokens", n}, {"total_tokens", n + len(toks)}, {"completion_tokens", len(toks)},
		{"prompt_tokens_details", object{{"cached_tokens", cached}}}}
	var echo any
	if dp != nil {
		echo = object{}
		for _, k := range sortedKeys(dp) {
			echo = append(echo.(object), field{k, rawJSON(bytes.TrimSpace(dp[k]))})
		}
	}
	created := time.Now().Unix()
	if !boolField(f, "stream") {
		var body object
		if isChat(r) {
			body = object{{"id", "chatcmpl-9a8b7c6d5e4f"}, {"object", "chat.completion"}, {"created", created}, {"model", fakeModel},
				{"choices", []any{object{{"index", 0}, {"message", object{{"role", "assistant"}, {"content", strings.Join(toks, "")},
					{"reasoning_content", ""}, {"reasoning", nil}, {"tool_calls", []any{}}}}, {"logprobs", nil},
					{"finish_reason", finish}, {"stop_reason", nil}, {"mm_embedding_handle", nil}, {"disaggregated_params", echo},
					{"avg_decoded_tokens_per_iter", nil}}}},
				{"usage", usage}, {"prompt_token_ids", nil}, {"prompt_token_ids_b64", nil}}
		} else {
			body = object{{"id", "cmpl-9a8b7c6d5e4f"}, {"object", "text_completion"}, {"created", created}, {"model", fakeModel},
				{"choices", []any{object{{"index", 0}, {"text", strings.Join(toks, "")}, {"token_ids", nil}, {"logprobs", nil},
					{"context_logits", nil}, {"finish_reason", finish}, {"stop_reason", nil}, {"disaggregated_params", echo},
					{"avg_decoded_tokens_per_iter", rawJSON("1.0")}}}},
				{"usage", usage}, {"prompt_token_ids", nil}}
		}
		writeJSONBody(w, v.style.encode(body))
		return
	}
	id, obj := "cmpl-1234567890123456789", "text_completion"
	if isChat(r) {
		id, obj = "chatcmpl-1234567890123456789", "chat.completion.chunk"
	}
	head := func(choices []any) object {
		return object{{"id", id}, {"object", obj}, {"created", created}, {"model", fakeModel}, {"choices", choices}}
	}
	shape, sse := v.stream, v.sse
	var m chunkMaker
	if isChat(r) { // exclude_none chunks, role chunk with a trailing space, finish in its own chunk (trtllm.md §2.5)
		sse.trailingSpace = true
		shape.finishOwnChunk = true
		m = chunkMaker{
			role: func() []byte {
				return v.style.encode(head([]any{object{{"index", 0}, {"delta", object{{"role", "assistant"}}}}}))
			},
			token: func(tok string, _ any) []byte {
				return v.style.encode(head([]any{object{{"index", 0}, {"delta", object{{"content", tok}, {"reasoning_content", ""}}},
					{"avg_decoded_tokens_per_iter", rawJSON("1.0")}}}))
			},
			finish: func(fr string) []byte {
				return v.style.encode(head([]any{object{{"index", 0}, {"delta", object{{"content", ""}, {"reasoning_content", ""}}},
					{"finish_reason", fr}, {"avg_decoded_tokens_per_iter", rawJSON("1.0")}}}))
			},
		}
	} else { // every key, nulls included (trtllm.md §2.5)
		m = chunkMaker{token: func(tok string, fr any) []byte {
			return v.style.encode(append(head([]any{object{{"index", 0}, {"text", tok}, {"token_ids", nil}, {"logprobs", nil},
				{"finish_reason", fr}, {"stop_reason", nil}, {"avg_decoded_tokens_per_iter", rawJSON("1.0")}}}), field{"usage", nil}))
		}}
	}
	if trtIncludeUsage(f) {
		m.usage = func() []byte { return v.style.encode(append(head([]any{}), field{"usage", usage})) }
	}
	writeStream(startSSE(w, sse), shape, toks, finish, m)
}

// trtIncludeUsage: usage only when stream_options is given, whose
// include_usage defaults to true (trtllm.md §2.5).
func trtIncludeUsage(f map[string]json.RawMessage) bool {
	if isNull(f["stream_options"]) {
		return false
	}
	so := struct {
		IncludeUsage *bool `json:"include_usage"`
	}{}
	_ = json.Unmarshal(f["stream_options"], &so)
	return so.IncludeUsage == nil || *so.IncludeUsage
}

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
