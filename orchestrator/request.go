package orchestrator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/orchestrator/tenant"
	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/proto/openai"
	"github.com/duet-serve/duet/tokenizer"
)

// Incoming is a client request as the frontend hands it over. Header is only
// called during Handle.
type Incoming struct {
	Endpoint  protocol.Endpoint
	Body      []byte
	Header    func(name string) string
	RequestID string
	Received  time.Time
	// Stopping is closed when the server begins shutting down: it ends a
	// wait in the admission queue (requests already admitted finish). Nil
	// never closes.
	Stopping <-chan struct{}
}

// Request is a validated client request.
type Request struct {
	Endpoint     protocol.Endpoint
	ID           string
	Received     time.Time
	Model        string
	Stream       bool
	IncludeUsage bool
	// MaxTokens is the output limit, or the configured default when unset.
	MaxTokens int
	// SessionKey is the conversation id, "" when the request has none.
	SessionKey string
	// ParentSession is the session of the agent that started this one, ""
	// when none (agents.go).
	ParentSession string
	// User is the body's user field, for admission fairness.
	User string
	// CacheSalt is the body's cache_salt: it seeds Hashes, so prompts with
	// different salts never match (the engine keeps their caches apart).
	CacheSalt string
	// Tenant is the tenant the request came from (nil: none claims it).
	Tenant *tenant.Tenant
	// Adapter is the LoRA adapter it names ("": the base model; lora.go).
	Adapter string
	// Class is its queue priority class ("": the queue's default).
	Class string
	// Tokens are the prompt's token ids as the workers will count them;
	// Hashes their chained block hashes at the router's block size.
	Tokens []int
	Hashes []uint64
	// Body is the client's body without any internal field.
	Body []byte
	// EndSession is set when the client said, with the X-Session-End
	// header, that this is its session's last request: the router forgets
	// the session's pin when the request ends.
	EndSession bool
	// ReportMigrations is set when the client asked, with the
	// X-Duet-Report-Migrations header, to be told when its stream moves to
	// another gen worker (an SSE comment, which OpenAI clients skip).
	ReportMigrations bool
	// PromptIDs, when set, is the prompt as a JSON array of token ids, sent
	// instead of the body's: a migrated chat answer's continuation on an
	// engine that does not continue a final message (continue.go).
	PromptIDs json.RawMessage
}

// HeaderReportMigrations asks duet to report each migration of the
// request's stream as an SSE comment line before the continuation:
// ": duet-migration {"from":..,"to":..,"failure":..,"sent_tokens":..}".
const HeaderReportMigrations = "X-Duet-Report-Migrations"

// HeaderSessionEnd marks a session's last request: when it ends, the
// session's pin is released on every replica instead of after
// router.session_ttl (agents that know a task is done send it, so that the
// pinned workers' share of placement frees at once).
const HeaderSessionEnd = "X-Session-End"

// headerDynamoSessionFinal is NVIDIA Dynamo's name for HeaderSessionEnd
// (lib/llm/src/protocols/agents.rs, x-dynamo-session-final).
const headerDynamoSessionFinal = "X-Dynamo-Session-Final"

// headerTrue reports a header value that turns an option on: any but
// empty, "0", "false" and "no".
func headerTrue(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "0", "false", "no":
		return false
	}
	return true
}

// sessionHeaders are read in order after the body fields (DESIGN.md):
// duet's and aiperf's, then the ones peers accept (NVIDIA Dynamo
// lib/llm/src/protocols/agents.rs; SGLang's model gateway;
// TensorRT-LLM tensorrt_llm/serve/conversation_id.py, 2026), then the
// ones agent clients send, each stable across a session's turns (Claude
// Code's, OpenAI Codex CLI's thread and, in older versions, session id,
// DeepSeek's harness, LiteLLM's proxy), as Dynamo maps them.
var sessionHeaders = []string{"X-Session-ID", "X-Correlation-ID", "X-Session-Affinity", "X-Dynamo-Session-ID",
	"X-SMG-Routing-Key", "X-Multi-Turn-Session-Id", "X-Claude-Code-Session-Id", "Thread-Id", "Session-Id", "Session_id",
	"X-Deepseek-Harness-Session-Id", "X-Litellm-Session-Id"}

// conversationFields are the body fields that may carry a session key.
type conversationFields struct {
	ConversationParams  *conversationID `json:"conversation_params"`
	DisaggregatedParams *conversationID `json:"disaggregated_params"`
	// PromptCacheKey is OpenAI's prompt_cache_key: requests that share it
	// share a prefix, which is what a session pins.
	PromptCacheKey string `json:"prompt_cache_key"`
	// SafetyIdentifier is OpenAI's safety_identifier, the end user's stable
	// id that replaces user: the admission queue's fairness key when the
	// body has no user.
	SafetyIdentifier string `json:"safety_identifier"`
	loraFields
}

type conversationID struct {
	ConversationID string `json:"conversation_id"`
}

// chatBody and completionBody decode a request and its session fields in
// one pass.
type chatBody struct {
	openai.ChatRequest
	conversationFields
}

type completionBody struct {
	openai.CompletionRequest
	conversationFields
}

// parse validates an incoming request; every rejection is a 4xx *Error and
// happens before any worker is called.
func (o *Orchestrator) parse(in Incoming) (*Request, error) {
	req := &Request{Endpoint: in.Endpoint, ID: in.RequestID, Received: in.Received}
	t, err := o.identify(in)
	if err != nil {
		return nil, err
	}
	req.Tenant = t
	var conv conversationFields
	switch in.Endpoint {
	case protocol.EndpointChat:
		conv, err = o.parseChat(in.Body, req)
	case protocol.EndpointCompletions:
		conv, err = o.parseCompletion(in.Body, req)
	default:
		err = &Error{Status: http.StatusNotFound, Message: "unknown endpoint"}
	}
	if err != nil {
		return nil, err
	}
	if req.SessionKey, err = o.sessionKey(conv, in.Header); err != nil {
		return nil, err
	}
	if req.SessionKey, req.ParentSession, err = o.agentSessions(in.Header, req.SessionKey); err != nil {
		return nil, err
	}
	if in.Header != nil {
		req.ReportMigrations = headerTrue(in.Header(HeaderReportMigrations))
		req.EndSession = headerTrue(in.Header(HeaderSessionEnd)) || headerTrue(in.Header(headerDynamoSessionFinal))
	}
	if req.User == "" {
		req.User = conv.SafetyIdentifier
	}
	if req.Body, err = stripInternalFields(in.Body); err != nil {
		return nil, badRequest("", "request body must be a JSON object")
	}
	if req.Body, err = o.unalias(req); err != nil {
		return nil, badRequest("", "request body must be a JSON object")
	}
	req.Hashes = tokenizer.SaltedBlockHashes(req.Tokens, o.router.BlockSize(), tenantIdentity(t, req, tokenizer.AdapterSalt(req.Adapter, req.CacheSalt)))
	return req, nil
}

// strippedFields are the body keys no worker gets: disagg.InternalFields,
// and the gateway fields duet consumes (prompt_cache_key keys the session,
// safety_identifier the admission fairness), which the engines do not use
// and TensorRT-LLM rejects (its request models forbid unknown keys).
var strippedFields = append(slices.Clone(disagg.InternalFields), "prompt_cache_key", "safety_identifier")

// stripInternalFields removes every strippedFields key. Most bodies hold
// none: when no key name occurs in the body and no \u escape could spell
// one, the body is returned as is without a decode.
func stripInternalFields(body []byte) ([]byte, error) {
	if !bytes.Contains(body, []byte(`\u`)) {
		found := false
		for _, k := range strippedFields {
			if bytes.Contains(body, []byte(k)) {
				found = true
				break
			}
		}
		if !found {
			return body, nil
		}
	}
	return openai.RewriteBody(body, nil, strippedFields...)
}

func (o *Orchestrator) parseChat(body []byte, req *Request) (conversationFields, error) {
	var b chatBody
	if err := json.Unmarshal(body, &b); err != nil {
		return b.conversationFields, decodeError(err)
	}
	if err := checkKeys(body, chatKeys); err != nil {
		return b.conversationFields, err
	}
	if err := o.resolveModel(b.Model, b.loraFields, req); err != nil {
		return b.conversationFields, err
	}
	return b.conversationFields, o.checkChat(&b.ChatRequest, req)
}

func (o *Orchestrator) checkChat(r *openai.ChatRequest, req *Request) error {
	if err := o.checkCommon(r.Model, r.N, r.MaxTokens, r.MinTokens, "max_tokens"); err != nil {
		return err
	}
	if r.MaxCompletionTokens != nil && *r.MaxCompletionTokens < 1 {
		return badRequest("max_completion_tokens", "max_completion_tokens must be >= 1, got %d", *r.MaxCompletionTokens)
	}
	if len(r.Messages) == 0 {
		return badRequest("messages", "messages must be a non-empty array")
	}
	limitKey := "max_tokens"
	if r.MaxCompletionTokens != nil {
		limitKey = "max_completion_tokens"
	}
	if err := checkStreamAndMinTokens(r.Stream, r.StreamOptions, r.MinTokens, r.Limit(), limitKey); err != nil {
		return err
	}
	if err := o.checkLimit(r.Model, r.MaxCompletionTokens, "max_completion_tokens"); err != nil {
		return err
	}
	if err := r.CheckTemplateFields(); err != nil {
		return badRequest("continue_final_message", "%v", err)
	}
	msgs := make([]tokenizer.ChatMessage, len(r.Messages))
	for i := range r.Messages {
		m := &r.Messages[i]
		if !openai.ValidRole(m.Role) {
			return badRequest(fmt.Sprintf("messages[%d].role", i), "messages[%d].role must be one of %s, got %q",
				i, strings.Join(openai.Roles, ", "), m.Role)
		}
		msgs[i] = tokenizer.ChatMessage{Role: m.Role, Name: m.Name, Content: m.Content.String(), ToolCalls: string(m.ToolCalls),
			Parts: chatParts(m.Content.Parts), NullContent: m.Content.Null, ToolCallID: optional(m.ToolCallID), Reasoning: m.ReasoningText()}
	}
	tokens, err := o.tok.EncodeChat(tokenizer.Chat{Messages: msgs, Tools: r.Tools, AddGenerationPrompt: r.GenerationPrompt(),
		ContinueFinalMessage: r.ContinueFinalMessage, Kwargs: r.ChatTemplateKwargs, AddSpecialTokens: r.AddSpecialTokens})
	if err != nil {
		return badRequest("messages", "%v", err)
	}
	req.Tokens = tokens
	req.User, req.CacheSalt = r.User, r.CacheSalt
	return o.fill(req, r.Model, r.Stream, r.StreamOptions, r.Limit(), limitKey, "messages")
}

func (o *Orchestrator) parseCompletion(body []byte, req *Request) (conversationFields, error) {
	var b completionBody
	if err := json.Unmarshal(body, &b); err != nil {
		return b.conversationFields, decodeError(err)
	}
	if err := checkKeys(body, completionKeys); err != nil {
		return b.conversationFields, err
	}
	if err := o.resolveModel(b.Model, b.loraFields, req); err != nil {
		return b.conversationFields, err
	}
	return b.conversationFields, o.checkCompletion(&b.CompletionRequest, req)
}

func (o *Orchestrator) checkCompletion(r *openai.CompletionRequest, req *Request) error {
	if err := o.checkCommon(r.Model, r.N, r.MaxTokens, r.MinTokens, "max_tokens"); err != nil {
		return err
	}
	switch {
	case r.Prompt.Kind == openai.PromptMissing:
		return badRequest("prompt", "prompt is required")
	case r.Prompt.Batched():
		return badRequest("prompt", "batched prompts are not supported: send one prompt per request")
	}
	if err := checkStreamAndMinTokens(r.Stream, r.StreamOptions, r.MinTokens, r.Limit(), "max_tokens"); err != nil {
		return err
	}
	text, tokens, isTokens := r.Prompt.Single()
	if isTokens {
		req.Tokens = tokens
	} else {
		req.Tokens = o.tok.EncodePrompt(text)
	}
	if len(req.Tokens) == 0 {
		return badRequest("prompt", "prompt must not be empty")
	}
	req.User, req.CacheSalt = r.User, r.CacheSalt
	return o.fill(req, r.Model, r.Stream, r.StreamOptions, r.Limit(), "max_tokens", "prompt")
}

// checkStreamAndMinTokens rejects what every engine rejects, before any
// worker is called: stream_options without stream (OpenAI, vLLM and
// TensorRT-LLM answer 400; duet's context phase would hide it by dropping
// the key), and min_tokens above the output limit (vLLM 400s it on the
// decode leg only, after a prefill).
func checkStreamAndMinTokens(stream bool, so *openai.StreamOptions, minTokens *int, limit int, limitKey string) error {
	switch {
	case so != nil && !stream:
		return badRequest("stream_options", "stream_options is only allowed when stream is true")
	case minTokens != nil && limit > 0 && *minTokens > limit:
		return badRequest("min_tokens", "min_tokens (%d) must not exceed %s (%d)", *minTokens, limitKey, limit)
	}
	return nil
}

// contextLimit is the context length a request must fit in, prompt plus
// output tokens, and whose it is.
type contextLimit struct {
	tokens int
	// workers: the smallest the available workers reported, below the
	// configured one; else the configured one.
	workers bool
}

// contextLen returns the context length of model: the configured one
// (max_model_len, max_model_len_by_model) or, when smaller, the smallest
// the available workers reported, since a request must fit every worker
// that may serve a phase of it.
func (o *Orchestrator) contextLen(model string) contextLimit {
	n := o.lens.of(model)
	if w := o.router.Pool().MaxModelLen(); w > 0 && w < n {
		return contextLimit{tokens: w, workers: true}
	}
	return contextLimit{tokens: n}
}

// String names the limit and its owner, for error messages.
func (l contextLimit) String() string {
	if l.workers {
		return fmt.Sprintf("the workers' context length is %d tokens", l.tokens)
	}
	return fmt.Sprintf("this model's maximum context length is %d tokens", l.tokens)
}

// key names the limit as a setting, for error messages.
func (l contextLimit) key() string {
	if l.workers {
		return fmt.Sprintf("the workers' context length (%d)", l.tokens)
	}
	return fmt.Sprintf("max_model_len (%d)", l.tokens)
}

// fill completes req once its prompt is tokenized, checking the context
// length as vLLM does (serving_engine.py _validate_input): the prompt alone
// and the prompt plus the output limit must fit in the model's context
// length (contextLimit). Without an output limit the default is capped to
// what is left of the context.
func (o *Orchestrator) fill(req *Request, model string, stream bool, so *openai.StreamOptions, limit int, limitKey, promptKey string) error {
	req.Model, req.Stream = model, stream
	req.IncludeUsage = stream && so != nil && so.IncludeUsage
	maxLen, prompt := o.contextLen(model), len(req.Tokens)
	switch {
	case prompt >= maxLen.tokens:
		return badRequest(promptKey, "%s; the prompt has %d tokens, leaving no room for output", maxLen, prompt)
	case limit > maxLen.tokens-prompt:
		return badRequest(limitKey, "%s; you requested %d tokens (%d in the prompt, %d in %s)",
			maxLen, prompt+limit, prompt, limit, limitKey)
	case limit == 0:
		req.MaxTokens = min(o.cfg.DefaultMaxTokens, maxLen.tokens-prompt)
	default:
		req.MaxTokens = limit
	}
	return nil
}

// checkLimit rejects an output limit above the model's context length
// before the prompt is tokenized.
func (o *Orchestrator) checkLimit(model string, limit *int, key string) error {
	if limit == nil {
		return nil
	}
	if maxLen := o.contextLen(model); *limit > maxLen.tokens {
		return badRequest(key, "%s must be <= %s, got %d", key, maxLen.key(), *limit)
	}
	return nil
}

// checkCommon validates the fields chat and completions share.
func (o *Orchestrator) checkCommon(model string, n, maxTokens, minTokens *int, maxKey string) error {
	switch {
	case model == "":
		return badRequest("model", "model is required")
	case n != nil && *n > 1:
		return badRequest("n", "n > 1 is not supported: duet returns one choice per request")
	case n != nil && *n < 1:
		return badRequest("n", "n must be 1, got %d", *n)
	case maxTokens != nil && *maxTokens < 1:
		return badRequest(maxKey, "%s must be >= 1, got %d", maxKey, *maxTokens)
	case minTokens != nil && *minTokens < 0:
		return badRequest("min_tokens", "min_tokens must be >= 0, got %d", *minTokens)
	}
	if err := o.checkLimit(model, minTokens, "min_tokens"); err != nil {
		return err
	}
	return o.checkLimit(model, maxTokens, maxKey)
}

// decodeError turns a JSON decoding error into a 400 naming the field.
func decodeError(err error) *Error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		field := typeErr.Field
		for _, embedded := range []string{"ChatRequest.", "CompletionRequest.", "conversationFields."} {
			field = strings.TrimPrefix(field, embedded)
		}
		return badRequest(field, "%s: expected %s, got JSON %s", field, typeErr.Type, typeErr.Value)
	}
	var syntaxErr *json.SyntaxError
	if errors.As(err, &syntaxErr) {
		return badRequest("", "the request body is not valid JSON: %s (at byte %d)", syntaxErr, syntaxErr.Offset)
	}
	return badRequest("", "invalid request: %v", err)
}

// keySource is one place a session key may come from.
type keySource struct{ source, value string }

// sessionKey returns the first non-empty session key: body fields, then the
// headers in order (read only until one has a key). An invalid key is a
// 400.
func (o *Orchestrator) sessionKey(f conversationFields, header func(string) string) (string, error) {
	body := [...]keySource{
		{"conversation_params.conversation_id", f.ConversationParams.id()},
		{"disaggregated_params.conversation_id", f.DisaggregatedParams.id()},
		{"prompt_cache_key", f.PromptCacheKey},
	}
	for _, c := range body {
		if c.value != "" {
			return o.checkedKey(c)
		}
	}
	if header == nil {
		return "", nil
	}
	for _, names := range [...][]string{sessionHeaders, o.cfg.SessionHeaders} {
		for _, h := range names {
			if v := header(h); v != "" {
				return o.checkedKey(keySource{h, v})
			}
		}
	}
	return "", nil
}

// checkedKey returns c's value when it is a valid session id, else a 400
// naming where it came from.
func (o *Orchestrator) checkedKey(c keySource) (string, error) {
	if err := CheckID(c.value, o.cfg.MaxSessionIDLength); err != nil {
		return "", badRequest(c.source, "%s: %v", c.source, err)
	}
	return c.value, nil
}

// id is the conversation id, "" when the field is absent.
func (c *conversationID) id() string {
	if c == nil {
		return ""
	}
	return c.ConversationID
}

// CheckID accepts a client-supplied id (session or request id): printable
// ASCII without spaces, up to max bytes.
func CheckID(id string, max int) error {
	if len(id) > max {
		return fmt.Errorf("session id longer than %d bytes", max)
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return fmt.Errorf("session id may hold only printable ASCII without spaces")
		}
	}
	return nil
}

// chatParts returns the parts of list content as the chat template reads
// them (nil for string content).
func chatParts(parts []openai.ContentPart) []tokenizer.ChatPart {
	if parts == nil {
		return nil
	}
	out := make([]tokenizer.ChatPart, len(parts))
	for i := range parts {
		out[i] = tokenizer.ChatPart{Type: parts[i].Type, Text: &parts[i].Text}
	}
	return out
}

// optional returns nil for an empty string, else a pointer to it.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
