package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// ChatRequest is a POST /v1/chat/completions body. Only the fields duet reads
// are typed; a relayed body is rewritten with RewriteBody so that fields not
// listed here reach the worker unchanged.
type ChatRequest struct {
	Model               string         `json:"model"`
	Messages            []Message      `json:"messages"`
	Stream              bool           `json:"stream,omitempty"`
	StreamOptions       *StreamOptions `json:"stream_options,omitempty"`
	MaxTokens           *int           `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int           `json:"max_completion_tokens,omitempty"`
	MinTokens           *int           `json:"min_tokens,omitempty"`
	IgnoreEOS           bool           `json:"ignore_eos,omitempty"`
	Stop                Stop           `json:"stop,omitempty"`
	N                   *int           `json:"n,omitempty"`
	Seed                *int64         `json:"seed,omitempty"`
	Temperature         *float64       `json:"temperature,omitempty"`
	User                string         `json:"user,omitempty"`
	// CacheSalt isolates the request's prefix cache (vLLM, SGLang): only
	// requests with the same salt share KV blocks.
	CacheSalt string `json:"cache_salt,omitempty"`
	// PromptTokenIDs is set by the orchestrator on a TensorRT-LLM
	// generation-only leg: the token ids the context worker prefilled.
	PromptTokenIDs []int `json:"prompt_token_ids,omitempty"`
	ChatTemplateFields
}

// ChatTemplateFields are the fields of a chat request that the model's
// chat template reads, as vLLM's ChatCompletionRequest defines them
// (vllm/entrypoints/openai/protocol.py, v0.11): the tools, whether the
// prompt ends with the assistant's generation prompt (default true) or
// continues the final message, extra template variables, and whether the
// tokenizer adds its special tokens (BOS) to the rendered prompt (default
// false: templates write them). SGLang reads the same names.
type ChatTemplateFields struct {
	Tools                json.RawMessage            `json:"tools,omitempty"`
	AddGenerationPrompt  *bool                      `json:"add_generation_prompt,omitempty"`
	ContinueFinalMessage bool                       `json:"continue_final_message,omitempty"`
	ChatTemplateKwargs   map[string]json.RawMessage `json:"chat_template_kwargs,omitempty"`
	AddSpecialTokens     bool                       `json:"add_special_tokens,omitempty"`
}

// GenerationPrompt reports whether the rendered prompt ends with the
// assistant's generation prompt: add_generation_prompt, default true.
func (f *ChatTemplateFields) GenerationPrompt() bool {
	return f.AddGenerationPrompt == nil || *f.AddGenerationPrompt
}

// CheckTemplateFields rejects what vLLM rejects: continue_final_message
// with an explicit add_generation_prompt true.
func (f *ChatTemplateFields) CheckTemplateFields() error {
	if f.ContinueFinalMessage && f.AddGenerationPrompt != nil && *f.AddGenerationPrompt {
		return errors.New("cannot set both `continue_final_message` and `add_generation_prompt` to true")
	}
	return nil
}

// CompletionRequest is a POST /v1/completions body.
type CompletionRequest struct {
	Model         string         `json:"model"`
	Prompt        Prompt         `json:"prompt"`
	Stream        bool           `json:"stream,omitempty"`
	StreamOptions *StreamOptions `json:"stream_options,omitempty"`
	MaxTokens     *int           `json:"max_tokens,omitempty"`
	MinTokens     *int           `json:"min_tokens,omitempty"`
	IgnoreEOS     bool           `json:"ignore_eos,omitempty"`
	Stop          Stop           `json:"stop,omitempty"`
	N             *int           `json:"n,omitempty"`
	Seed          *int64         `json:"seed,omitempty"`
	Temperature   *float64       `json:"temperature,omitempty"`
	User          string         `json:"user,omitempty"`
	// CacheSalt isolates the request's prefix cache (vLLM, SGLang): only
	// requests with the same salt share KV blocks.
	CacheSalt string `json:"cache_salt,omitempty"`
}

// StreamOptions is the stream_options object of a streaming request.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// Limit returns the output token limit of a chat request:
// max_completion_tokens when set, else max_tokens, else 0 (no limit given).
func (r *ChatRequest) Limit() int {
	if r.MaxCompletionTokens != nil {
		return *r.MaxCompletionTokens
	}
	if r.MaxTokens != nil {
		return *r.MaxTokens
	}
	return 0
}

// Limit returns max_tokens, or 0 when it is not set.
func (r *CompletionRequest) Limit() int {
	if r.MaxTokens != nil {
		return *r.MaxTokens
	}
	return 0
}

// Stop is the stop field: absent, one string, or a list of strings.
type Stop []string

// UnmarshalJSON accepts null, a string or an array of strings.
func (s *Stop) UnmarshalJSON(b []byte) error {
	if isNull(b) {
		*s = nil
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var one string
		if err := Unquote(b, &one); err != nil {
			return err
		}
		*s = Stop{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("stop: must be a string or an array of strings")
	}
	*s = many
	return nil
}

// Prompt is the prompt of a completion request in any of its four shapes.
// Exactly one of Text, Texts, Tokens or TokenLists is non-nil after decoding
// (an empty string leaves all of them empty and Kind reports PromptText).
type Prompt struct {
	Kind       PromptKind
	Text       string
	Texts      []string
	Tokens     []int
	TokenLists [][]int
}

// PromptKind tells which shape a Prompt had on the wire.
type PromptKind int

// The shapes a completion prompt can take.
const (
	PromptMissing    PromptKind = iota // absent or null
	PromptText                         // "a string"
	PromptTexts                        // ["batched", "strings"]
	PromptTokens                       // [1, 2, 3]
	PromptTokenLists                   // [[1, 2], [3]]
)

// Batched reports whether the prompt holds more than one prompt.
func (p Prompt) Batched() bool {
	return (p.Kind == PromptTexts && len(p.Texts) != 1) || (p.Kind == PromptTokenLists && len(p.TokenLists) != 1)
}

// Single returns the one prompt of a non-batched Prompt as text or tokens.
// A one-element list is unwrapped.
func (p Prompt) Single() (text string, tokens []int, isTokens bool) {
	switch p.Kind {
	case PromptTexts:
		return p.Texts[0], nil, false
	case PromptTokens:
		return "", p.Tokens, true
	case PromptTokenLists:
		return "", p.TokenLists[0], true
	default:
		return p.Text, nil, false
	}
}

// UnmarshalJSON accepts a string, an array of strings, an array of token ids
// or an array of token id arrays.
func (p *Prompt) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case isNull(b):
		*p = Prompt{Kind: PromptMissing}
		return nil
	case len(b) > 0 && b[0] == '"':
		p.Kind = PromptText
		return Unquote(b, &p.Text)
	case len(b) > 1 && b[0] == '[':
		return p.unmarshalArray(b)
	}
	return errors.New("prompt: must be a string, an array of strings or an array of token ids")
}

func (p *Prompt) unmarshalArray(b []byte) error {
	inner := bytes.TrimSpace(b[1:])
	switch {
	case len(inner) > 0 && inner[0] == '"':
		p.Kind = PromptTexts
		return wrapPrompt(json.Unmarshal(b, &p.Texts))
	case len(inner) > 0 && inner[0] == '[':
		p.Kind = PromptTokenLists
		return wrapPrompt(json.Unmarshal(b, &p.TokenLists))
	default:
		p.Kind = PromptTokens
		return wrapPrompt(json.Unmarshal(b, &p.Tokens))
	}
}

func wrapPrompt(err error) error {
	if err != nil {
		return fmt.Errorf("prompt: %w", err)
	}
	return nil
}

// MarshalJSON writes the prompt in the shape it was read in.
func (p Prompt) MarshalJSON() ([]byte, error) {
	switch p.Kind {
	case PromptTexts:
		return json.Marshal(p.Texts)
	case PromptTokens:
		return json.Marshal(p.Tokens)
	case PromptTokenLists:
		return json.Marshal(p.TokenLists)
	case PromptMissing:
		return []byte("null"), nil
	default:
		return json.Marshal(p.Text)
	}
}

func isNull(b []byte) bool { return bytes.Equal(bytes.TrimSpace(b), []byte("null")) }

// Unquote sets *s to the string literal b spells, as json.Unmarshal does,
// in a string that does not alias b. A literal a decoder or scanner already
// validated (an UnmarshalJSON method's, a scanned value) without escapes
// in valid UTF-8 is its bytes between the quotes: most message contents
// take that path, which spares a second validating decode per message
// (issue 13: relay CPU). Anything else, including a literal that is not
// valid, goes to json.Unmarshal.
func Unquote(b []byte, s *string) error {
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' && plain(b[1:len(b)-1]) {
		*s = string(b[1 : len(b)-1])
		return nil
	}
	return json.Unmarshal(b, s)
}

// plain reports whether b is the inside of a JSON string literal that
// needs no unescaping: valid UTF-8 without quotes, backslashes or control
// characters.
func plain(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c == '"' || c == '\\' {
			return false
		}
	}
	return utf8.Valid(b)
}
