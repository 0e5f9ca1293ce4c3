package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
)

// probeTool is the tool the probe offers a template that uses tools.
var probeTool = json.RawMessage(`{"type": "function", "function": {"name": "get_weather",
 "description": "Get the weather in a city.", "parameters": {"type": "object",
 "properties": {"city": {"type": "string"}}, "required": ["city"]}}}`)

// probe renders a small conversation (system, user, assistant, user) with
// and without the generation prompt, and with a tool when the template
// uses tools, so that a template that uses something duet cannot evaluate
// fails at load, not on a request. An error the template raises itself
// (raise_exception) is its verdict on the conversation, not a gap in duet:
// the probe then retries without the system message before failing.
func (t *Template) probe() error {
	convs := [][]Message{
		{{Role: "system", Content: Text("You are a helpful assistant.")}, {Role: "user", Content: Text("Hello!")},
			{Role: "assistant", Content: Text("Hi. How can I help?")}, {Role: "user", Content: Text("What is 2+2?")}},
		{{Role: "user", Content: Text("Hello!")}, {Role: "assistant", Content: Text("Hi. How can I help?")},
			{Role: "user", Content: Text("What is 2+2?")}},
	}
	var tools [][]json.RawMessage
	tools = append(tools, nil)
	if t.usesTool {
		tools = append(tools, []json.RawMessage{probeTool})
	}
	var raised error
	for _, msgs := range convs {
		ok := true
		for _, tl := range tools {
			for _, gen := range []bool{true, false} {
				_, err := t.Render(Conversation{Messages: msgs, Tools: tl, AddGenerationPrompt: gen})
				var te *TemplateError
				switch {
				case errors.As(err, &te):
					raised, ok = err, false
				case err != nil:
					return fmt.Errorf("rendering a probe conversation: %w", err)
				}
			}
		}
		if ok {
			return nil
		}
	}
	return fmt.Errorf("rendering a probe conversation: %w", raised)
}
