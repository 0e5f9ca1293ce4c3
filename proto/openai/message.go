package openai

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
)

// Roles lists the chat message roles duet and its simulated worker accept,
// in the order error messages name them.
var Roles = []string{"system", "developer", "user", "assistant", "tool", "function"}

// ValidRole reports whether role is one of Roles.
func ValidRole(role string) bool { return slices.Contains(Roles, role) }

// Message is one chat message. Content may be a string, an array of content
// parts, or null (an assistant message that only calls tools).
type Message struct {
	Role       string          `json:"role"`
	Content    Content         `json:"content"`
	Name       string          `json:"name,omitempty"`
	ToolCalls  json.RawMessage `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	// Reasoning is an assistant's reasoning sent back in the history
	// (vLLM reads "reasoning" and the older "reasoning_content"); chat
	// templates such as Qwen3's render it.
	Reasoning        *string `json:"reasoning,omitempty"`
	ReasoningContent *string `json:"reasoning_content,omitempty"`
}

// ReasoningText returns the message's reasoning, or nil when it has none.
func (m *Message) ReasoningText() *string {
	if m.Reasoning != nil {
		return m.Reasoning
	}
	return m.ReasoningContent
}

// Content is a message's content: plain text or a list of parts.
type Content struct {
	// Text holds string content.
	Text string
	// Parts holds array content; nil for string content.
	Parts []ContentPart
	// Null is true when the content was JSON null or absent.
	Null bool
}

// ContentPart is one element of array content. Only text parts carry text
// duet reads; other part types (image_url, input_audio) are kept raw.
type ContentPart struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
	// Raw is the part as received, so non-text parts survive a relay.
	Raw json.RawMessage `json:"-"`
}

// TextContent is a convenience constructor for string content.
func TextContent(s string) Content { return Content{Text: s} }

// String returns the text of the content: the string itself, or the text
// parts joined with no separator.
func (c Content) String() string {
	if c.Parts == nil {
		return c.Text
	}
	var b strings.Builder
	for _, p := range c.Parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// UnmarshalJSON accepts a string, null or an array of content parts.
func (c *Content) UnmarshalJSON(b []byte) error {
	*c = Content{}
	switch {
	case isNull(b):
		c.Null = true
		return nil
	case len(b) > 0 && b[0] == '"':
		return Unquote(b, &c.Text)
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(b, &raws); err != nil {
		return errors.New("content: must be a string, null or an array of content parts")
	}
	c.Parts = make([]ContentPart, len(raws))
	for i, raw := range raws {
		if err := json.Unmarshal(raw, &c.Parts[i]); err != nil {
			return errors.New("content: each part must be an object with a type")
		}
		c.Parts[i].Raw = raw
	}
	return nil
}

// MarshalJSON writes the content in the shape it was read in.
func (c Content) MarshalJSON() ([]byte, error) {
	switch {
	case c.Null:
		return []byte("null"), nil
	case c.Parts == nil:
		return json.Marshal(c.Text)
	}
	raws := make([]json.RawMessage, len(c.Parts))
	for i, p := range c.Parts {
		if p.Raw != nil {
			raws[i] = p.Raw
			continue
		}
		b, err := json.Marshal(struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}{p.Type, p.Text})
		if err != nil {
			return nil, err
		}
		raws[i] = b
	}
	return json.Marshal(raws)
}
