package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/proto/openai"
	"github.com/duet-serve/duet/tokenizer"
)

type endpointKind int

const (
	kindChat endpointKind = iota
	kindCompletion
)

// phase is what a request asks of this worker.
type phase int

const (
	phaseAggregated phase = iota // prefill and decode here
	phaseContext                 // prefill, first token, pin the KV for a pull
	phaseGeneration              // pull the KV from a context worker, decode
)

var phaseNames = [...]string{"aggregated", "context", "generation"}

func (p phase) String() string { return phaseNames[p] }

// job is a validated completion request, copied out of the RequestCtx.
type job struct {
	kind      endpointKind
	phase     phase
	id        string // response id
	requestID string // X-Request-Id, may be empty
	model     string
	adapter   string // LoRA adapter the request selects (lora.go); "" for the base model
	stream    bool
	usage     bool // stream_options.include_usage
	prompt    []int
	hashes    []uint64 // chained hashes of the prompt's full blocks, salted with adapter (seqHashes)
	limit     int      // maximum output tokens
	minTokens int
	ignoreEOS bool
	stop      []string
	seed      *int64

	// Disaggregation (see disagg.go).
	params   *disagg.DisaggregatedParams // TensorRT-LLM request params, as received
	remote   *remoteKV                   // generation phase: where the KV is
	ctxUsage *openai.Usage               // TensorRT-LLM generation: usage the ctx worker saw
	room     uint64                      // SGLang bootstrap_room (prefill and decode)
}

// chatBody and completionBody add the engine fields to the OpenAI requests.
type chatBody struct {
	openai.ChatRequest
	engineFields
}

type completionBody struct {
	openai.CompletionRequest
	engineFields
}

type engineFields struct {
	DisaggregatedParams *disagg.DisaggregatedParams `json:"disaggregated_params"`
	KVTransferParams    *disagg.KVTransferParams    `json:"kv_transfer_params"`
	// SGLang's bootstrap fields; bootstrap_port may be null.
	BootstrapHost *string `json:"bootstrap_host"`
	BootstrapPort *int    `json:"bootstrap_port"`
	BootstrapRoom *uint64 `json:"bootstrap_room"`
	// LoRA selection (lora.go), read per protocol: SGLang's lora_path (an
	// adapter name) and TensorRT-LLM's lora_request (a LoRARequest).
	LoraPath    json.RawMessage `json:"lora_path"`
	LoraRequest json.RawMessage `json:"lora_request"`
}

// common is what both request kinds share after decoding.
type common struct {
	model                string
	stream               bool
	opts                 *openai.StreamOptions
	maxTokens, minTokens *int
	ignoreEOS            bool
	stop                 []string
	n                    *int
	seed                 *int64
}

// parseJob decodes and validates a request body and tokenizes its prompt.
// It changes no state.
func (s *Server) parseJob(kind endpointKind, body []byte, requestID string) (*job, *httpError) {
	if len(body) == 0 {
		return nil, badRequest("", "request body is empty")
	}
	if s.cfg.Protocol == ProtocolTRTLLM {
		if herr := s.checkTRTLLMFields(kind, body); herr != nil {
			return nil, herr
		}
	}
	j := &job{kind: kind, requestID: requestID}
	var c common
	var ef engineFields
	var herr *httpError
	if kind == kindChat {
		c, ef, herr = s.decodeChat(j, body)
	} else {
		c, ef, herr = s.decodeCompletion(j, body)
	}
	if herr != nil {
		return nil, herr
	}
	if herr := s.applyCommon(j, c); herr != nil {
		return nil, herr
	}
	if herr := s.selectAdapter(j, c.model, ef); herr != nil {
		return nil, herr
	}
	if herr := s.classify(j, ef); herr != nil {
		return nil, herr
	}
	j.hashes = seqHashes(j.prompt, s.cfg.BlockSize, j.adapter)
	j.id = s.responseID(kind, requestID)
	return j, nil
}

func (s *Server) decodeChat(j *job, body []byte) (common, engineFields, *httpError) {
	var r chatBody
	if err := json.Unmarshal(body, &r); err != nil {
		return common{}, engineFields{}, jsonError(err)
	}
	c := common{model: r.Model, stream: r.Stream, opts: r.StreamOptions, maxTokens: r.MaxTokens,
		minTokens: r.MinTokens, ignoreEOS: r.IgnoreEOS, stop: r.Stop, n: r.N, seed: r.Seed}
	if r.MaxCompletionTokens != nil {
		c.maxTokens = r.MaxCompletionTokens // it wins over max_tokens
	}
	if herr := s.checkModel(r.Model); herr != nil {
		return c, r.engineFields, herr
	}
	if len(r.Messages) == 0 && !s.promptIDsSuffice(&r) {
		return c, r.engineFields, badRequest("messages", "messages: required, must be a non-empty array")
	}
	if err := r.CheckTemplateFields(); err != nil {
		return c, r.engineFields, badRequest("continue_final_message", "%v", err)
	}
	if len(r.PromptTokenIDs) > 0 {
		if herr := checkTokenIDs("prompt_token_ids", r.PromptTokenIDs); herr != nil {
			return c, r.engineFields, herr
		}
		j.prompt = r.PromptTokenIDs
		return c, r.engineFields, nil
	}
	chat := tokenizer.Chat{Messages: make([]tokenizer.ChatMessage, len(r.Messages)), Tools: r.Tools,
		AddGenerationPrompt: r.GenerationPrompt(), ContinueFinalMessage: r.ContinueFinalMessage,
		Kwargs: r.ChatTemplateKwargs, AddSpecialTokens: r.AddSpecialTokens}
	for i := range r.Messages {
		if herr := templateMessage(&r.Messages[i], i, &chat.Messages[i]); herr != nil {
			return c, r.engineFields, herr
		}
	}
	var err error
	if j.prompt, err = s.tok.EncodeChat(chat); err != nil {
		return c, r.engineFields, badRequest("messages", "%v", err)
	}
	return c, r.engineFields, nil
}

// promptIDsSuffice reports whether a chat request without messages is
// served from its prompt_token_ids: TensorRT-LLM requires the messages key
// but, given prompt_token_ids, skips the chat template and accepts an empty
// list (openai_server.py openai_chat, NVIDIA snapshot 00057725).
func (s *Server) promptIDsSuffice(r *chatBody) bool {
	return s.cfg.Protocol == ProtocolTRTLLM && r.Messages != nil && len(r.PromptTokenIDs) > 0
}

// templateMessage fills out with message i as the chat template reads it,
// or refuses an unknown role.
func templateMessage(m *openai.Message, i int, out *tokenizer.ChatMessage) *httpError {
	if !openai.ValidRole(m.Role) {
		return badRequest(fmt.Sprintf("messages[%d].role", i),
			"messages[%d].role: unknown role %q (valid: %s)", i, m.Role, strings.Join(openai.Roles, ", "))
	}
	*out = tokenizer.ChatMessage{Role: m.Role, Name: m.Name, Content: m.Content.String(), ToolCalls: string(m.ToolCalls),
		NullContent: m.Content.Null, Reasoning: m.ReasoningText()}
	if m.ToolCallID != "" {
		out.ToolCallID = &m.ToolCallID
	}
	if m.Content.Parts != nil {
		out.Parts = make([]tokenizer.ChatPart, 0, len(m.Content.Parts))
	}
	for k := range m.Content.Parts {
		out.Parts = append(out.Parts, tokenizer.ChatPart{Type: m.Content.Parts[k].Type, Text: &m.Content.Parts[k].Text})
	}
	return nil
}

func (s *Server) decodeCompletion(j *job, body []byte) (common, engineFields, *httpError) {
	var r completionBody
	if err := json.Unmarshal(body, &r); err != nil {
		return common{}, engineFields{}, jsonError(err)
	}
	c := common{model: r.Model, stream: r.Stream, opts: r.StreamOptions, maxTokens: r.MaxTokens,
		minTokens: r.MinTokens, ignoreEOS: r.IgnoreEOS, stop: r.Stop, n: r.N, seed: r.Seed}
	if herr := s.checkModel(r.Model); herr != nil {
		return c, r.engineFields, herr
	}
	switch {
	case r.Prompt.Kind == openai.PromptMissing:
		return c, r.engineFields, badRequest("prompt", "prompt: required")
	case r.Prompt.Batched():
		return c, r.engineFields, badRequest("prompt", "prompt: batched prompts are not supported, send one prompt per request")
	}
	text, tokens, isTokens := r.Prompt.Single()
	if isTokens {
		if herr := checkTokenIDs("prompt", tokens); herr != nil {
			return c, r.engineFields, herr
		}
		j.prompt = tokens
	} else {
		j.prompt = s.tok.EncodePrompt(text)
	}
	if len(j.prompt) == 0 {
		return c, r.engineFields, badRequest("prompt", "prompt: must not be empty")
	}
	return c, r.engineFields, nil
}

func (s *Server) checkModel(model string) *httpError {
	switch {
	case model == "":
		return badRequest("model", "model: required")
	case !s.servesModel(model):
		return &httpError{status: http.StatusNotFound, param: "model", code: "model_not_found",
			msg: fmt.Sprintf("The model `%s` does not exist (this worker serves `%s`).", model, s.cfg.Model)}
	}
	return nil
}

func checkTokenIDs(param string, ids []int) *httpError {
	for i, id := range ids {
		if id < 0 || id > 1<<30 {
			return badRequest(param, "%s[%d]: invalid token id %d", param, i, id)
		}
	}
	return nil
}

// applyCommon validates the sampling fields and fills them into j.
func (s *Server) applyCommon(j *job, c common) *httpError {
	j.model, j.stream, j.ignoreEOS, j.seed = c.model, c.stream, c.ignoreEOS, c.seed
	j.usage = c.opts != nil && c.opts.IncludeUsage
	if c.n != nil && *c.n != 1 {
		return badRequest("n", "n: only 1 is supported, got %d", *c.n)
	}
	room := s.cfg.MaxModelLen - len(j.prompt)
	if room < 1 {
		param := "messages"
		if j.kind == kindCompletion {
			param = "prompt"
		}
		return &httpError{status: http.StatusBadRequest, param: param, code: "context_length_exceeded",
			msg: fmt.Sprintf("This model's maximum context length is %d tokens. However, your prompt has %d tokens.", s.cfg.MaxModelLen, len(j.prompt))}
	}
	if c.maxTokens != nil {
		if *c.maxTokens < 1 {
			return badRequest("max_tokens", "max_tokens: must be at least 1, got %d", *c.maxTokens)
		}
		if *c.maxTokens > room {
			return &httpError{status: http.StatusBadRequest, param: "max_tokens", code: "context_length_exceeded",
				msg: fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the prompt, %d for the completion).",
					s.cfg.MaxModelLen, len(j.prompt)+*c.maxTokens, len(j.prompt), *c.maxTokens)}
		}
		j.limit = *c.maxTokens
	} else {
		j.limit = min(s.cfg.DefaultMaxTokens, room)
	}
	if c.minTokens != nil {
		if *c.minTokens < 0 {
			return badRequest("min_tokens", "min_tokens: must be >= 0, got %d", *c.minTokens)
		}
		if *c.minTokens > j.limit {
			return badRequest("min_tokens", "min_tokens: must be <= max_tokens (%d), got %d", j.limit, *c.minTokens)
		}
		j.minTokens = *c.minTokens
	}
	for i, st := range c.stop {
		if len(st) > 1024 {
			return badRequest("stop", "stop[%d]: longer than 1024 bytes", i)
		}
	}
	j.stop = c.stop
	return nil
}

// responseID returns "chatcmpl-…" or "cmpl-…", from X-Request-Id when the
// client sent a usable one.
func (s *Server) responseID(kind endpointKind, requestID string) string {
	rid := requestID
	if !usableRequestID(rid) {
		rid = s.ids.requestID()
	}
	if kind == kindChat {
		return "chatcmpl-" + rid
	}
	return "cmpl-" + rid
}

func usableRequestID(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == '"' || r == '\\' || r > '~' })
}
