package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// vllmVariant is what the vLLM fakes answer. Every worker is a vLLM server
// with the NIXL connector in kv_both mode: a request whose
// kv_transfer_params say do_remote_decode is a prefill (P), one that says
// do_remote_prefill pulls the KV a P issued (D), anything else runs locally.
type vllmVariant struct {
	// pFinish is the P response's finish_reason; "" writes null.
	pFinish string
	// pParams is the P response's kv_transfer_params: "flat" (block ids a
	// list of ints, vllm.md §1.2 V-2025-12), "nested" (a list of lists plus
	// remote_num_tokens, V-latest), "empty" (remote_block_ids [], a prompt
	// shorter than a block: §6 P4), "null" or "absent".
	pParams string
	// pNoUsage drops usage from the P response (a non-vLLM worker:
	// vllm.md §6 P8); pCached > 0 writes prompt_tokens_details
	// {cached_tokens: pCached}, 0 writes null (vllm.md §2.4, O2).
	pNoUsage bool
	pCached  int
	// sim makes both legs llm-d-inference-sim (vllm.md §3): finish_reason
	// remote_decode, dummy string params, its key order and quirks.
	sim bool
	// maxModelLen > 0 rejects prompts that do not fit (vllm.md §2.2 V3).
	maxModelLen int
	// pError and dError replace the P or D answer.
	pError, dError *errReply
	// dKVLoadFails makes D fail to pull every handle (the prefill died or
	// its lease expired: vllm.md §1.5).
	dKVLoadFails bool
	// dFinish, when set, replaces D's finish reason (e.g. repetition:
	// vllm.md §2.1).
	dFinish string
	// dBidirectional writes kv_transfer_params in D's response (vllm.md
	// §1.5, O4) instead of null (O1).
	dBidirectional bool
	// style, sse and stream shape every body and stream.
	style  jsonStyle
	sse    sseStyle
	stream streamShape
}

// vllmPrefillParams is what a P request must carry (vllm.md §1.1).
const vllmPrefillParams = `{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`

// vllmHandle is a KV handle a P issued: what D must present to pull it.
type vllmHandle struct {
	issuer, engineID, host string
	port                   int
	blocks                 []byte // compacted remote_block_ids
	consumed               bool
}

// vllmFakes is the vLLM fleet and the state its workers share: the KV
// handles the prefills issued, as NIXL would find them.
type vllmFakes struct {
	fakeFleet
	variantSlot[vllmVariant]

	mu      sync.Mutex             // guards the fields below
	handles map[string]*vllmHandle // by remote_request_id
	issued  map[string][]byte      // X-Request-Id → the raw kv_transfer_params P answered
	seq     int
}

func startVLLMFakes(t *testing.T, nCtx, nGen int) *vllmFakes {
	c := &vllmFakes{handles: map[string]*vllmHandle{}, issued: map[string][]byte{}}
	c.ctx = startPool(t, "ctx", nCtx, c.serve)
	c.gen = startPool(t, "gen", nGen, c.serve)
	return c
}

// issuedParams returns the kv_transfer_params a P answered the request id
// with, nil when it answered none.
func (c *vllmFakes) issuedParams(xreq string) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.issued[xreq]
}

// vllmKV is the part of kv_transfer_params a worker reads.
type vllmKV struct {
	DoRemoteDecode  bool            `json:"do_remote_decode"`
	DoRemotePrefill bool            `json:"do_remote_prefill"`
	RemoteEngineID  *string         `json:"remote_engine_id"`
	RemoteRequestID *string         `json:"remote_request_id"`
	RemoteHost      *string         `json:"remote_host"`
	RemotePort      *int            `json:"remote_port"`
	RemoteBlockIDs  json.RawMessage `json:"remote_block_ids"`
}

func (c *vllmFakes) serve(e *fakeEngine, w http.ResponseWriter, r *http.Request, body []byte) {
	v := c.variant()
	f, err := decodeFields(body)
	if err != nil || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		// vLLM's RequestValidationError handler: 400, not 422 (vllm.md §2.2 V4).
		nestedError(400, "Bad Request", nil, fmt.Sprintf("JSON decode error: %v", err)).write(w)
		return
	}
	if m := stringField(f, "model"); m != fakeModel { // vllm.md §2.2 V1
		nestedError(404, "NotFoundError", "model", fmt.Sprintf("The model `%s` does not exist.", m)).write(w)
		return
	}
	var kv vllmKV
	if !isNull(f["kv_transfer_params"]) && json.Unmarshal(f["kv_transfer_params"], &kv) != nil {
		nestedError(400, "Bad Request", "kv_transfer_params", "kv_transfer_params: Input should be a valid dictionary").write(w)
		return
	}
	prefill := kv.DoRemoteDecode
	switch {
	case prefill && v.pError != nil:
		v.pError.write(w)
		return
	case !prefill && v.dError != nil:
		v.dError.write(w)
		return
	}
	if bad := vllmValidate(v, f, prefill); bad != nil {
		bad.write(w)
		return
	}
	switch {
	case prefill && v.sim:
		c.simPrefill(w, r, f, v)
	case prefill:
		c.prefill(e, w, r, f, v)
	default:
		c.decode(w, r, f, kv, v)
	}
}

// vllmValidate applies the request checks vLLM (and, for a streamed P,
// llm-d's sim) makes before running a request.
func vllmValidate(v vllmVariant, f map[string]json.RawMessage, prefill bool) *errReply {
	stream := boolField(f, "stream")
	if !isNull(f["stream_options"]) && !stream { // validate_stream_options (vllm.md §1.6, §2.2 V4)
		e := nestedError(400, "Bad Request", "stream_options", "1 validation error for ChatCompletionRequest\n  Value error, Stream options can only be defined when `stream=True`. [type=value_error]")
		return &e
	}
	if prefill && stream { // llm-d-inference-sim (vllm.md §3 SIM-2, §6 P13); vLLM would drop the params (P11)
		e := nestedError(400, "BadRequestError", nil, "Prefill does not support streaming")
		return &e
	}
	limit := outputLimit(f)
	for _, key := range []string{"min_tokens", "min_completion_tokens"} {
		if n, ok := intField(f, key); ok && limit > 0 && n > limit { // SamplingParams (vllm.md §1.6, P12)
			e := nestedError(400, "BadRequestError", nil, fmt.Sprintf("min_tokens must be less than or equal to max_tokens=%d, got %d.", limit, n))
			return &e
		}
	}
	if n := promptLen(f); v.maxModelLen > 0 && n+max(limit, 1) > v.maxModelLen { // vllm.md §2.2 V3
		e := nestedError(400, "BadRequestError", "input_tokens", fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d output tokens and your prompt contains %d input tokens, for a total of %d tokens. Please reduce the length of the input prompt or the number of requested output tokens.",
			v.maxModelLen, max(limit, 1), n, n+max(limit, 1)))
		return &e
	}
	return nil
}

// vllmIDs returns the response id and object names of a request (vllm.md
// §1.4, §4).
func vllmIDs(r *http.Request) (id, obj, chunkObj string) {
	xreq := r.Header.Get("X-Request-Id")
	if isChat(r) {
		return "chatcmpl-" + xreq, "chat.completion", "chat.completion.chunk"
	}
	return "cmpl-" + xreq, "text_completion", "text_completion"
}

// prefill answers a P request: one sampled token and, per the variant, the
// handle (vllm.md §1.2, §1.3, §2.1).
func (c *vllmFakes) prefill(e *fakeEngine, w http.ResponseWriter, r *http.Request, f map[string]json.RawMessage, v vllmVariant) {
	id, obj, _ := vllmIDs(r)
	n := promptLen(f)
	var params any = nil
	if v.pParams == "flat" || v.pParams == "nested" || v.pParams == "empty" {
		params = rawJSON(c.issue(e, r.Header.Get("X-Request-Id"), id, n, v))
	}
	var finish any
	if v.pFinish != "" {
		finish = v.pFinish
	}
	var ch object
	if isChat(r) {
		ch = object{{"index", 0}, {"message", object{{"role", "assistant"}, {"content", firstToken}, {"refusal", nil},
			{"annotations", nil}, {"audio", nil}, {"function_call", nil}, {"tool_calls", []any{}}, {"reasoning", nil},
			{"reasoning_content", nil}}}, {"logprobs", nil}, {"finish_reason", finish}, {"stop_reason", nil}, {"token_ids", nil}}
	} else {
		ch = object{{"index", 0}, {"text", firstToken}, {"logprobs", nil}, {"finish_reason", finish}, {"stop_reason", nil},
			{"prompt_logprobs", nil}, {"prompt_token_ids", nil}, {"token_ids", nil}}
	}
	var details any
	if v.pCached > 0 {
		details = object{{"cached_tokens", v.pCached}}
	}
	body := object{{"id", id}, {"object", obj}, {"created", time.Now().Unix()}, {"model", fakeModel}, {"choices", []any{ch}},
		{"service_tier", nil}, {"system_fingerprint", nil}}
	if !v.pNoUsage {
		body = append(body, field{"usage", object{{"prompt_tokens", n}, {"total_tokens", n + 1}, {"completion_tokens", 1},
			{"prompt_tokens_details", details}}})
	}
	if isChat(r) {
		body = append(body, field{"prompt_logprobs", nil}, field{"prompt_token_ids", nil})
	}
	if v.pParams != "absent" {
		body = append(body, field{"kv_transfer_params", params})
	}
	writeJSONBody(w, v.style.encode(body))
}

// issue registers a new handle of worker e and returns its
// kv_transfer_params as written.
func (c *vllmFakes) issue(e *fakeEngine, xreq, id string, n int, v vllmVariant) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	rid := fmt.Sprintf("%s-%08x", id, c.seq) // vllm.md §1.4: <id>-<8 random chars>
	blocks := []int{c.seq * 4, c.seq*4 + 1, c.seq*4 + 2}
	if v.pParams == "empty" {
		blocks = []int{}
	}
	var blockIDs any = blocks
	if v.pParams == "nested" {
		blockIDs = []any{blocks}
	}
	h := &vllmHandle{issuer: e.name, engineID: "engine-" + e.name, host: "localhost", port: 5600 + e.port%100}
	params := object{{"do_remote_prefill", true}, {"do_remote_decode", false}, {"remote_block_ids", blockIDs},
		{"remote_engine_id", h.engineID}, {"remote_request_id", rid}, {"remote_host", h.host}, {"remote_port", h.port}, {"tp_size", 1}}
	if v.pParams == "nested" {
		params = append(params, field{"remote_num_tokens", n})
	}
	h.blocks = compactJSON(jsonStyle{}.encode(blockIDs))
	c.handles[rid] = h
	raw := v.style.encode(params)
	c.issued[xreq] = raw
	return raw
}

// consume marks the handle kv names as pulled; false when no P issued it,
// it was pulled already, or its engine, address or blocks are not the
// issuer's (NIXL cannot read those blocks).
func (c *vllmFakes) consume(kv vllmKV) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.handles[*kv.RemoteRequestID]
	if h == nil || h.consumed || h.engineID != *kv.RemoteEngineID || h.host != *kv.RemoteHost || h.port != *kv.RemotePort ||
		!bytes.Equal(h.blocks, compactJSON(kv.RemoteBlockIDs)) {
		return false
	}
	h.consumed = true
	return true
}

// decode answers every request that is not a P: a D pulling a handle, or
// a plain request prefilled locally.
func (c *vllmFakes) decode(w http.ResponseWriter, r *http.Request, f map[string]json.RawMessage, kv vllmKV, v vllmVariant) {
	if v.sim {
		simDecode(w, r, f, v)
		return
	}
	complete := kv.RemoteEngineID != nil && kv.RemoteRequestID != nil && kv.RemoteHost != nil && kv.RemotePort != nil &&
		!isNull(kv.RemoteBlockIDs) && string(compactJSON(kv.RemoteBlockIDs)) != "[]"
	// Incomplete params: "Got invalid KVTransferParams", local prefill
	// (vllm.md §1.5).
	if kv.DoRemotePrefill && complete && (v.dKVLoadFails || !c.consume(kv)) {
		vllmKVLoadFailure(w, r, f, v)
		return
	}
	id, obj, chunkObj := vllmIDs(r)
	toks, finish := generate(f)
	if v.dFinish != "" {
		finish = v.dFinish
	}
	n := promptLen(f)
	if boolField(f, "stream") {
		head := func(choices []any) object {
			return object{{"id", id}, {"object", chunkObj}, {"created", time.Now().Unix()}, {"model", fakeModel}, {"choices", choices}}
		}
		m := chunkMaker{
			token: func(tok string, fr any) []byte {
				if isChat(r) {
					ch := object{{"index", 0}, {"delta", object{{"content", tok}}}, {"logprobs", nil}, {"finish_reason", fr}}
					if fr != nil {
						ch = append(ch, field{"stop_reason", nil})
					}
					return v.style.encode(head([]any{append(ch, field{"token_ids", nil})}))
				}
				return v.style.encode(head([]any{object{{"index", 0}, {"text", tok}, {"logprobs", nil}, {"finish_reason", fr},
					{"stop_reason", nil}, {"prompt_token_ids", nil}, {"token_ids", nil}}}))
			},
			finish: func(fr string) []byte {
				if isChat(r) {
					return v.style.encode(head([]any{object{{"index", 0}, {"delta", object{}}, {"logprobs", nil}, {"finish_reason", fr}, {"stop_reason", nil}}}))
				}
				return v.style.encode(head([]any{object{{"index", 0}, {"text", ""}, {"logprobs", nil}, {"finish_reason", fr}, {"stop_reason", nil}}}))
			},
		}
		if isChat(r) { // vllm.md §2.3 S3: the role chunk
			m.role = func() []byte {
				return v.style.encode(append(head([]any{object{{"index", 0}, {"delta", object{{"role", "assistant"}, {"content", ""}}},
					{"logprobs", nil}, {"finish_reason", nil}}}), field{"prompt_token_ids", nil}))
			}
		}
		if includeUsage(f) { // vllm.md §2.3 S4: choices [], exclude_none
			m.usage = func() []byte {
				return v.style.encode(append(head([]any{}), field{"usage", object{{"prompt_tokens", n},
					{"total_tokens", n + len(toks)}, {"completion_tokens", len(toks)}}}))
			}
		}
		writeStream(startSSE(w, v.sse), v.stream, toks, finish, m)
		return
	}
	var kvOut any
	if v.dBidirectional { // vllm.md §1.5: params for the next turn's P
		kvOut = object{{"do_remote_decode", true}, {"do_remote_prefill", false}, {"remote_engine_id", "engine-decode"},
			{"remote_block_ids", []any{[]int{90, 91}}}, {"remote_host", "localhost"}, {"remote_port", 5700}, {"tp_size", 1},
			{"remote_request_id", id + "-d"}, {"remote_num_tokens", n + len(toks)}}
	}
	usage := object{{"prompt_tokens", n}, {"total_tokens", n + len(toks)}, {"completion_tokens", len(toks)}, {"prompt_tokens_details", nil}}
	var body object
	if isChat(r) {
		body = object{{"id", id}, {"object", obj}, {"created", time.Now().Unix()}, {"model", fakeModel},
			{"choices", []any{object{{"index", 0}, {"message", object{{"role", "assistant"}, {"content", strings.Join(toks, "")},
				{"refusal", nil}, {"annotations", nil}, {"audio", nil}, {"function_call", nil}, {"tool_calls", []any{}},
				{"reasoning", nil}, {"reasoning_content", nil}}}, {"logprobs", nil}, {"finish_reason", finish}, {"stop_reason", nil},
				{"token_ids", nil}}}},
			{"service_tier", nil}, {"system_fingerprint", nil}, {"usage", usage}, {"prompt_logprobs", nil},
			{"prompt_token_ids", nil}, {"kv_transfer_params", kvOut}}
	} else {
		body = object{{"id", id}, {"object", obj}, {"created", time.Now().Unix()}, {"model", fakeModel},
			{"choices", []any{object{{"index", 0}, {"text", strings.Join(toks, "")}, {"logprobs", nil}, {"finish_reason", finish},
				{"stop_reason", nil}, {"prompt_logprobs", nil}, {"prompt_token_ids", nil}, {"token_ids", nil}}}},
			{"service_tier", nil}, {"system_fingerprint", nil}, {"usage", usage}, {"kv_transfer_params", kvOut}}
	}
	writeJSONBody(w, v.style.encode(body))
}

// vllmKVLoadFailure is D's answer when it cannot pull the KV, under the
// default kv_load_failure_policy "fail" (vllm.md §1.5, §2.2 V8, §2.3 S6):
// a 500, or once streaming the role chunk then an error frame.
func vllmKVLoadFailure(w http.ResponseWriter, r *http.Request, f map[string]json.RawMessage, v vllmVariant) {
	if !boolField(f, "stream") {
		nestedError(500, "InternalServerError", nil, "Internal server error").write(w)
		return
	}
	id, _, chunkObj := vllmIDs(r)
	sw := startSSE(w, v.sse)
	if isChat(r) {
		sw.event(v.style.encode(object{{"id", id}, {"object", chunkObj}, {"created", time.Now().Unix()}, {"model", fakeModel},
			{"choices", []any{object{{"index", 0}, {"delta", object{{"role", "assistant"}, {"content", ""}}}, {"logprobs", nil}, {"finish_reason", nil}}}}}))
	}
	sw.event([]byte(`{"error": {"message": "Internal server error", "type": "InternalServerError", "param": null, "code": 500}}`))
	sw.done()
}

// simParams are llm-d-inference-sim's dummy prefill params (vllm.md §3
// SIM-1).
var simParams = object{{"do_remote_decode", false}, {"do_remote_prefill", true}, {"remote_engine_id", "DUMMY_ID"},
	{"remote_block_ids", []string{"DUMMY_ID"}}, {"remote_host", "DUMMY"}, {"remote_port", 1234}, {"tp_size", 1}}

// simPrefill answers a P request as llm-d-inference-sim does (vllm.md §3
// SIM-1): finish_reason remote_decode, dummy params, its own key order,
// no null fields, prompt_tokens_details always an object.
func (c *vllmFakes) simPrefill(w http.ResponseWriter, r *http.Request, f map[string]json.RawMessage, v vllmVariant) {
	id, obj, _ := vllmIDs(r)
	n := promptLen(f)
	raw := v.style.encode(simParams)
	c.mu.Lock()
	c.issued[r.Header.Get("X-Request-Id")] = raw
	c.mu.Unlock()
	ch := object{{"index", 0}, {"finish_reason", "remote_decode"}, {"message", object{{"role", "assistant"}, {"content", firstToken}}}}
	if !isChat(r) {
		ch = object{{"index", 0}, {"finish_reason", "remote_decode"}, {"text", firstToken}}
	}
	writeJSONBody(w, v.style.encode(object{{"id", id}, {"model", fakeModel}, {"object", obj}, {"kv_transfer_params", rawJSON(raw)},
		{"created", time.Now().Unix()}, {"usage", simUsage(n, 1)}, {"choices", []any{ch}}}))
}

func simUsage(prompt, completion int) object {
	return object{{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion},
		{"prompt_tokens_details", object{{"cached_tokens", 0}}}}
}

// simDecode answers a D request as llm-d-inference-sim does (vllm.md §3
// SIM-3, SIM-6): block ids must be strings; no kv_transfer_params in the
// answer; streams have a separate finish chunk and "usage":null on every
// chunk.
func simDecode(w http.ResponseWriter, r *http.Request, f map[string]json.RawMessage, v vllmVariant) {
	if !isNull(f["kv_transfer_params"]) {
		var p struct {
			RemoteBlockIDs []string `json:"remote_block_ids"`
		}
		if err := json.Unmarshal(f["kv_transfer_params"], &p); err != nil {
			nestedError(400, "BadRequestError", nil, "Failed to read and parse request body, "+err.Error()).write(w)
			return
		}
	}
	id, obj, chunkObj := vllmIDs(r)
	toks, finish := generate(f)
	n := promptLen(f)
	if !boolField(f, "stream") {
		ch := object{{"index", 0}, {"finish_reason", finish}, {"message", object{{"role", "assistant"}, {"content", strings.Join(toks, "")}}}}
		if !isChat(r) {
			ch = object{{"index", 0}, {"finish_reason", finish}, {"text", strings.Join(toks, "")}}
		}
		writeJSONBody(w, v.style.encode(object{{"id", id}, {"model", fakeModel}, {"object", obj}, {"created", time.Now().Unix()},
			{"usage", simUsage(n, len(toks))}, {"choices", []any{ch}}}))
		return
	}
	chunk := func(choices []any, usage any) []byte {
		return v.style.encode(object{{"id", id}, {"created", time.Now().Unix()}, {"model", fakeModel}, {"usage", usage},
			{"object", chunkObj}, {"choices", choices}})
	}
	m := chunkMaker{
		token: func(tok string, fr any) []byte {
			if isChat(r) {
				return chunk([]any{object{{"index", 0}, {"finish_reason", fr}, {"delta", object{{"content", tok}}}}}, nil)
			}
			return chunk([]any{object{{"index", 0}, {"finish_reason", fr}, {"text", tok}}}, nil)
		},
		finish: func(fr string) []byte {
			if isChat(r) {
				return chunk([]any{object{{"index", 0}, {"finish_reason", fr}, {"delta", object{}}}}, nil)
			}
			return chunk([]any{object{{"index", 0}, {"finish_reason", fr}, {"text", ""}}}, nil)
		},
	}
	if isChat(r) {
		m.role = func() []byte {
			return chunk([]any{object{{"index", 0}, {"finish_reason", nil}, {"delta", object{{"role", "assistant"}}}}}, nil)
		}
	}
	if includeUsage(f) {
		m.usage = func() []byte { return chunk([]any{}, simUsage(n, len(toks))) }
	}
	shape := v.stream
	shape.finishOwnChunk = true
	writeStream(startSSE(w, v.sse), shape, toks, finish, m)
}

// writeJSONBody writes a 200 JSON body.
func writeJSONBody(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// compactJSON returns b without insignificant whitespace (b itself when it
// is not JSON).
func compactJSON(b []byte) []byte {
	var out bytes.Buffer
	if json.Compact(&out, b) != nil {
		return b
	}
	return out.Bytes()
}

// chunkMaker builds the events of one generation stream.
type chunkMaker struct {
	role   func() []byte                    // chat's first chunk; nil for none
	token  func(tok string, fr any) []byte  // one token; fr is the finish reason or nil
	finish func(finishReason string) []byte // a finish chunk of its own
	usage  func() []byte                    // the usage chunk; nil for none
}

// writeStream writes a generation stream: the role chunk, one chunk per
// token with the finish reason in the last or in its own chunk, the usage
// chunk and [DONE], broken off as the shape says.
func writeStream(sw *sseWriter, shape streamShape, toks []string, finish string, m chunkMaker) {
	if shape.errorFrame != "" && shape.errorAfter == 0 { // vllm.md §2.3 S5: an error before any chunk
		sw.event([]byte(shape.errorFrame))
		sw.done()
		return
	}
	if m.role != nil {
		sw.event(m.role())
	}
	for i, tok := range toks {
		if i > 0 && i == shape.errorAfter {
			if shape.cut {
				return
			}
			if shape.errorFrame != "" {
				sw.event([]byte(shape.errorFrame))
				sw.done()
				return
			}
		}
		var fr any
		if i == len(toks)-1 && !shape.finishOwnChunk {
			fr = finish
		}
		sw.event(m.token(tok, fr))
	}
	if shape.finishOwnChunk {
		sw.event(m.finish(finish))
	}
	if m.usage != nil {
		sw.event(m.usage())
	}
	sw.done()
}
