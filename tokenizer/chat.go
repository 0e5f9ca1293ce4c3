package tokenizer

import (
	"strings"

	"github.com/cespare/xxhash/v2"
)

// ChatMessage is one chat message as the template renders it. Content is
// the message's text (content parts already joined); ToolCalls is the raw
// JSON of an assistant's tool_calls, empty when there are none.
type ChatMessage struct {
	Role      string
	Name      string
	Content   string
	ToolCalls string
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
