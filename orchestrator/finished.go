package orchestrator

import (
	"encoding/json"
	"net/http"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/proto/openai"
)

// finishedAtContext answers a request the ctx worker already completed
// (e.g. end of sequence at the first token): its content reaches the client
// in the form the client asked for. The upstream TensorRT-LLM server loses
// this content on streaming requests; duet does not.
func (o *Orchestrator) finishedAtContext(f *flight, c protocol.Context) (*Response, error) {
	req := f.req
	f.route.Shape = ShapeCtxFinished
	usage := contextUsage(c)
	id, created, model := c.ResponseID, c.Created, c.Model
	if model == "" {
		model = req.Model
	}
	if created == 0 {
		created = o.now().Unix()
	}
	finish := c.FinishReason
	var body []byte
	var events [][]byte
	if req.Endpoint == protocol.EndpointChat {
		body, events = chatFinished(req, id, model, created, c.Text, finish, usage)
	} else {
		body, events = completionFinished(req, id, model, created, c.Text, finish, usage)
	}
	f.cachedTokens, f.ttft = c.CachedTokens, f.sinceStart()
	if !req.Stream {
		f.end(http.StatusOK, nil)
		return &Response{Status: http.StatusOK, Body: body, Route: f.route}, nil
	}
	return &Response{Status: http.StatusOK, Route: f.route, events: events, flight: f}, nil
}

func contextUsage(c protocol.Context) *openai.Usage {
	var u openai.Usage
	if c.Usage == nil || json.Unmarshal(c.Usage, &u) != nil {
		u = openai.Usage{PromptTokens: c.PromptTokens, CompletionTokens: c.CompletionTokens,
			TotalTokens:         c.PromptTokens + c.CompletionTokens,
			PromptTokensDetails: &openai.PromptTokensDetails{CachedTokens: c.CachedTokens}}
	}
	return &u
}

func chatFinished(req *Request, id, model string, created int64, text, finish string, usage *openai.Usage) ([]byte, [][]byte) {
	if !req.Stream {
		return mustJSON(openai.ChatResponse{ID: id, Object: openai.ObjectChatCompletion, Created: created, Model: model,
			Choices: []openai.ChatChoice{{Message: openai.Message{Role: "assistant", Content: openai.TextContent(text)}, FinishReason: &finish}},
			Usage:   usage}), nil
	}
	chunk := func(d openai.Delta, fr *string) []byte {
		return mustJSON(openai.ChatChunk{ID: id, Object: openai.ObjectChatCompletionChunk, Created: created, Model: model,
			Choices: []openai.ChatChunkChoice{{Delta: d, FinishReason: fr}}})
	}
	events := [][]byte{chunk(openai.Delta{Role: "assistant", Content: openai.Ptr("")}, nil)}
	if text != "" {
		events = append(events, chunk(openai.Delta{Content: &text}, nil))
	}
	events = append(events, chunk(openai.Delta{}, &finish))
	if req.IncludeUsage {
		events = append(events, mustJSON(openai.ChatChunk{ID: id, Object: openai.ObjectChatCompletionChunk, Created: created,
			Model: model, Choices: []openai.ChatChunkChoice{}, Usage: usage}))
	}
	return nil, events
}

func completionFinished(req *Request, id, model string, created int64, text, finish string, usage *openai.Usage) ([]byte, [][]byte) {
	if !req.Stream {
		return mustJSON(openai.CompletionResponse{ID: id, Object: openai.ObjectTextCompletion, Created: created, Model: model,
			Choices: []openai.CompletionChoice{{Text: text, FinishReason: &finish}}, Usage: usage}), nil
	}
	chunk := func(text string, fr *string) []byte {
		return mustJSON(openai.CompletionChunk{ID: id, Object: openai.ObjectTextCompletion, Created: created, Model: model,
			Choices: []openai.CompletionChoice{{Text: text, FinishReason: fr}}})
	}
	var events [][]byte
	if text != "" {
		events = append(events, chunk(text, nil))
	}
	events = append(events, chunk("", &finish))
	if req.IncludeUsage {
		events = append(events, mustJSON(openai.CompletionChunk{ID: id, Object: openai.ObjectTextCompletion, Created: created,
			Model: model, Choices: []openai.CompletionChoice{}, Usage: usage}))
	}
	return nil, events
}

// mustJSON marshals wire types that cannot fail to encode.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only duet's own wire structs reach here
	}
	return b
}
