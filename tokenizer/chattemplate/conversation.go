package chattemplate

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Conversation is what one chat request asks the template to render: the
// fields of an OpenAI chat completion request that reach the engine's
// apply_chat_template.
type Conversation struct {
	// Messages are the request's messages, in order.
	Messages []Message
	// Tools is the request's tools list, one raw JSON object per tool; nil
	// when the request has no "tools" (the template then sees none). Each
	// tool is normalised as vLLM's pydantic model dumps it.
	Tools []json.RawMessage
	// Documents is the request's documents list, one raw JSON object per
	// document; nil when the request has none.
	Documents []json.RawMessage
	// AddGenerationPrompt ends the prompt with the opening of an assistant
	// turn (vLLM's default for chat requests is true).
	AddGenerationPrompt bool
	// ContinueFinalMessage renders without the generation prompt and cuts
	// the prompt just after the text of the final message, so the model
	// continues it. It cannot be combined with AddGenerationPrompt.
	ContinueFinalMessage bool
	// Kwargs are the request's chat_template_kwargs as raw JSON values. They
	// are template variables that override the special tokens;
	// "add_generation_prompt", "continue_final_message", "tools" and
	// "documents" override the fields above, as vLLM merges them; the
	// other apply_chat_template parameters (padding, return_dict, ...) are
	// consumed, not seen by the template; "chat_template", "tokenize",
	// "messages" and "conversation" are errors.
	Kwargs map[string]json.RawMessage
}

// Message is one chat message of an OpenAI chat request. Decode it from
// the request's JSON with encoding/json.
type Message struct {
	Role    string
	Content Content
	// Name is the participant's name; empty when absent.
	Name string
	// ToolCalls are an assistant's tool calls; an empty list renders as if
	// absent (vLLM drops it).
	ToolCalls []ToolCall
	// ToolCallID is the id of the call a tool message answers; nil when absent.
	ToolCallID *string
	// Reasoning is an assistant's reasoning ("reasoning", or the older
	// "reasoning_content"); nil when absent. The template sees it as both
	// reasoning and reasoning_content.
	Reasoning *string
}

// ToolCall is one tool call of an assistant message.
type ToolCall struct {
	ID   string
	Type string
	// Name is the function's name.
	Name string
	// Arguments is the function's arguments as the request carries them:
	// usually a JSON string holding a JSON object, which is parsed into
	// the object the template sees (invalid JSON becomes {}, as in vLLM).
	Arguments json.RawMessage
}

// Part is one part of a message's content list.
type Part struct {
	// Type is the part's type: "text" and "refusal" carry text; other
	// types (images, audio) are rejected by Render.
	Type string
	// Text is the part's text (the "text" or "refusal" field); nil when absent.
	Text *string
}

// Content is a message's content: null (the zero value), a string, or a
// list of parts.
type Content struct {
	text   string
	parts  []Part
	isText bool
	isList bool
}

// Text returns string content.
func Text(s string) Content { return Content{text: s, isText: true} }

// Parts returns list content.
func Parts(parts ...Part) Content { return Content{parts: parts, isList: true} }

// TextPart returns a text part.
func TextPart(s string) Part { return Part{Type: "text", Text: &s} }

// IsNull reports whether the content is null.
func (c Content) IsNull() bool { return !c.isText && !c.isList }

// UnmarshalJSON decodes a string, a list of parts, or null.
func (c *Content) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		*c = Content{}
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*c = Text(s)
	case len(b) > 0 && b[0] == '[':
		var raw []json.RawMessage
		if err := json.Unmarshal(b, &raw); err != nil {
			return err
		}
		parts := make([]Part, len(raw))
		for i, r := range raw {
			if err := parts[i].unmarshal(r); err != nil {
				return fmt.Errorf("content[%d]: %w", i, err)
			}
		}
		*c = Parts(parts...)
	default:
		return fmt.Errorf("content: want a string, a list or null, got %.20s", b)
	}
	return nil
}

// unmarshal decodes a part: an object, or a bare string (a text part, as
// vLLM accepts).
func (p *Part) unmarshal(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*p = TextPart(s)
		return nil
	}
	var obj struct {
		Type    string  `json:"type"`
		Text    *string `json:"text"`
		Refusal *string `json:"refusal"`
	}
	if err := json.Unmarshal(b, &obj); err != nil {
		return err
	}
	p.Type, p.Text = obj.Type, obj.Text
	if obj.Type == "refusal" {
		p.Text = obj.Refusal
	}
	return nil
}

// UnmarshalJSON decodes an OpenAI chat message.
func (m *Message) UnmarshalJSON(b []byte) error {
	var w struct {
		Role             string     `json:"role"`
		Content          Content    `json:"content"`
		Name             *string    `json:"name"`
		ToolCalls        []ToolCall `json:"tool_calls"`
		ToolCallID       *string    `json:"tool_call_id"`
		Reasoning        *string    `json:"reasoning"`
		ReasoningContent *string    `json:"reasoning_content"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*m = Message{Role: w.Role, Content: w.Content, ToolCalls: w.ToolCalls, ToolCallID: w.ToolCallID, Reasoning: w.Reasoning}
	if w.Name != nil {
		m.Name = *w.Name
	}
	if m.Reasoning == nil {
		m.Reasoning = w.ReasoningContent
	}
	return nil
}

// UnmarshalJSON decodes an OpenAI tool call.
func (tc *ToolCall) UnmarshalJSON(b []byte) error {
	var w struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*tc = ToolCall{ID: w.ID, Type: w.Type, Name: w.Function.Name, Arguments: w.Function.Arguments}
	return nil
}
