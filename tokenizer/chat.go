package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/duet-serve/duet/tokenizer/chattemplate"
)

// ChatMessage is one chat message. Content is the message's text (the
// text parts joined), which duet's built-in ChatML template renders; a
// model's template also reads the fields after it, as the engine reads the
// request's message.
type ChatMessage struct {
	Role    string
	Name    string
	Content string
	// ToolCalls is the raw JSON of an assistant's tool_calls, empty when
	// there are none.
	ToolCalls string
	// Parts are the content parts when the content was a list of parts; nil
	// for string or null content.
	Parts []ChatPart
	// NullContent is true when the content was null or absent.
	NullContent bool
	// ToolCallID is the id of the call a tool message answers; nil when
	// absent.
	ToolCallID *string
	// Reasoning is an assistant's reasoning (reasoning or
	// reasoning_content); nil when absent.
	Reasoning *string
}

// ChatPart is one part of a message's content list: its type and, for
// text and refusal parts, its text.
type ChatPart struct {
	Type string
	Text *string
}

// Chat is a chat request as the chat template renders it.
type Chat struct {
	Messages []ChatMessage
	// Tools is the raw JSON of the request's tools list; nil when absent.
	Tools json.RawMessage
	// AddGenerationPrompt ends the prompt with the assistant's generation
	// prompt; ContinueFinalMessage instead leaves the final message open.
	AddGenerationPrompt  bool
	ContinueFinalMessage bool
	// Kwargs are the request's chat_template_kwargs.
	Kwargs map[string]json.RawMessage
	// AddSpecialTokens adds the tokenizer's special tokens (BOS) to the
	// rendered prompt, as vLLM's add_special_tokens does (default false:
	// the template writes them).
	AddSpecialTokens bool
}

// The template. Every message renders to
//
//	<|im_start|>{role}[ name={name}]\n{content}[\n<tool_calls>{json}</tool_calls>]<|im_end|>\n
//
// and the conversation ends with the generation prompt
//
//	<|im_start|>assistant\n
//
// The markers are encoded as ordinary text (cl100k/o200k have no ChatML
// special tokens). Every message ends in a newline and the next begins with
// "<", a boundary tiktoken's pre-tokenizer never merges across, so encoding
// messages one by one gives exactly the tokens of encoding the whole prompt.
const (
	imStart          = "<|im_start|>"
	imEnd            = "<|im_end|>"
	generationPrompt = imStart + "assistant\n"
)

// generationPromptKey is the cache key of the generation prompt; message
// keys are hashes of rendered text, which never equal this constant except
// by a 2^-64 accident.
var generationPromptKey = xxhash.Sum64String("\x00generation-prompt")

// RenderChat renders a conversation with the template above, ending with the
// assistant generation prompt.
func RenderChat(msgs []ChatMessage) string {
	var b strings.Builder
	for i := range msgs {
		b.WriteString(msgs[i].render())
	}
	b.WriteString(generationPrompt)
	return b.String()
}

func (m *ChatMessage) render() string {
	var b strings.Builder
	b.Grow(len(imStart) + len(m.Role) + len(m.Content) + len(m.ToolCalls) + 48)
	b.WriteString(imStart)
	b.WriteString(m.Role)
	if m.Name != "" {
		b.WriteString(" name=")
		b.WriteString(m.Name)
	}
	b.WriteByte('\n')
	b.WriteString(m.Content)
	if m.ToolCalls != "" {
		b.WriteString("\n<tool_calls>")
		b.WriteString(m.ToolCalls)
		b.WriteString("</tool_calls>")
	}
	b.WriteString(imEnd)
	b.WriteByte('\n')
	return b.String()
}

// key hashes every field with separators that cannot occur in a role.
func (m *ChatMessage) key() uint64 {
	d := xxhash.New()
	for _, s := range [...]string{m.Role, m.Name, m.Content, m.ToolCalls} {
		_, _ = d.WriteString(s)
		_, _ = d.Write([]byte{0})
	}
	return d.Sum64()
}

// Conversation is the Chat of msgs ending with the generation prompt, as a
// client's chat request is by default.
func Conversation(msgs []ChatMessage) Chat {
	return Chat{Messages: msgs, AddGenerationPrompt: true}
}

// EncodeChat returns the token ids of the rendered conversation.
//
// With a model's chat template it renders c as the engine does (see
// tokenizer/chattemplate) and encodes the text; an error is the client's:
// the template refused the conversation (roles that do not alternate, a
// media part) or the request is malformed, and the engine would refuse it
// too. A model without a template refuses every chat (ErrNoChatTemplate).
//
// With the built-in ChatML template, the prompt ends with the generation
// prompt when c.AddGenerationPrompt is set; the tokens of every rendered
// message are cached, keyed by a hash of the message, so turn N of a
// conversation tokenizes only its new messages.
func (t *Tokenizer) EncodeChat(c Chat) ([]int, error) {
	switch {
	case t.template != nil:
		conv, err := c.conversation()
		if err != nil {
			return nil, err
		}
		text, err := t.template.Render(conv)
		if err != nil {
			return nil, err
		}
		if c.AddSpecialTokens {
			return t.EncodePrompt(text), nil
		}
		return t.Encode(text), nil
	case t.model != nil:
		return nil, ErrNoChatTemplate
	}
	var out []int
	for i := range c.Messages {
		out = append(out, t.encodeMessage(&c.Messages[i])...)
	}
	if c.AddGenerationPrompt {
		out = append(out, t.generationPrompt()...)
	}
	return out, nil
}

// conversation converts c to what the template renders.
func (c *Chat) conversation() (chattemplate.Conversation, error) {
	conv := chattemplate.Conversation{
		Messages:             make([]chattemplate.Message, len(c.Messages)),
		AddGenerationPrompt:  c.AddGenerationPrompt,
		ContinueFinalMessage: c.ContinueFinalMessage,
		Kwargs:               c.Kwargs,
	}
	if len(c.Tools) > 0 && string(c.Tools) != "null" {
		if err := json.Unmarshal(c.Tools, &conv.Tools); err != nil {
			return conv, fmt.Errorf("tools: must be an array of tools: %w", err)
		}
	}
	for i := range c.Messages {
		m, err := c.Messages[i].templateMessage()
		if err != nil {
			return conv, fmt.Errorf("messages[%d].%w", i, err)
		}
		conv.Messages[i] = m
	}
	return conv, nil
}

func (m *ChatMessage) templateMessage() (chattemplate.Message, error) {
	tm := chattemplate.Message{Role: m.Role, Name: m.Name, ToolCallID: m.ToolCallID, Reasoning: m.Reasoning}
	switch {
	case m.Parts != nil:
		parts := make([]chattemplate.Part, len(m.Parts))
		for i, p := range m.Parts {
			parts[i] = chattemplate.Part{Type: p.Type, Text: p.Text}
		}
		tm.Content = chattemplate.Parts(parts...)
	case !m.NullContent:
		tm.Content = chattemplate.Text(m.Content)
	}
	if m.ToolCalls != "" && m.ToolCalls != "null" {
		if err := json.Unmarshal([]byte(m.ToolCalls), &tm.ToolCalls); err != nil {
			return tm, fmt.Errorf("tool_calls: must be an array of tool calls: %w", err)
		}
	}
	return tm, nil
}

func (t *Tokenizer) encodeMessage(m *ChatMessage) []int {
	if t.cache == nil {
		return t.Encode(m.render())
	}
	key := m.key()
	if toks, ok := t.cache.get(key); ok {
		return toks
	}
	toks := t.Encode(m.render())
	t.cache.put(key, toks)
	return toks
}

func (t *Tokenizer) generationPrompt() []int {
	if t.cache == nil {
		return t.Encode(generationPrompt)
	}
	if toks, ok := t.cache.get(generationPromptKey); ok {
		return toks
	}
	toks := t.Encode(generationPrompt)
	t.cache.put(generationPromptKey, toks)
	return toks
}
