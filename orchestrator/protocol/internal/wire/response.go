package wire

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/proto/openai"
)

// choice is one choice of a chat (Message) or completion (Text) response.
type choice struct {
	Text                string          `json:"text"`
	Message             *openai.Message `json:"message"`
	FinishReason        *string         `json:"finish_reason"`
	DisaggregatedParams json.RawMessage `json:"disaggregated_params"`
}

// Parsed is a ctx response read by ParseContext: the Context fields common
// to all engines, and the raw engine fields an adapter takes its handle
// from. Context.Handle and Context.Finished are left for the adapter.
type Parsed struct {
	// Context has everything but Handle and Finished filled.
	Context protocol.Context
	// ChoiceParams is choices[0].disaggregated_params, nil when absent or
	// null.
	ChoiceParams json.RawMessage
	// KVTransferParams is the top-level kv_transfer_params, nil when absent
	// or null.
	KVTransferParams json.RawMessage
}

// ParseContext reads a 2xx ctx response of the given endpoint. It requires
// a JSON object with exactly one choice whose finish_reason, when set, is
// not a failure reason (it may be null or absent: the adapter decides from
// the handle); a present usage must be an object and a present
// prompt_token_ids an array. Errors are *protocol.ContextResponseError
// naming adapter. Nothing in the result aliases body.
func ParseContext(adapter string, ep protocol.Endpoint, body []byte) (Parsed, error) {
	bad := func(err error, format string, args ...any) error {
		return &protocol.ContextResponseError{Adapter: adapter, Reason: fmt.Sprintf(format, args...), Err: err}
	}
	if err := openai.CheckDepth(body, openai.MaxWorkerDepth); err != nil {
		return Parsed{}, bad(err, "not a response") // a stack per level in encoding/json
	}
	top, err := DecodeObject(body)
	switch {
	case errors.Is(err, errNotObject):
		return Parsed{}, bad(nil, "not a JSON object")
	case err != nil:
		return Parsed{}, bad(err, "not JSON")
	}
	var r struct {
		ID      string
		Model   string
		Created int64
		Choices []choice
	}
	for _, f := range []struct {
		key string
		dst any
	}{{"id", &r.ID}, {"model", &r.Model}, {"created", &r.Created}, {"choices", &r.Choices}} {
		if raw := top[f.key]; !IsNull(raw) {
			if err := json.Unmarshal(raw, f.dst); err != nil {
				return Parsed{}, bad(err, "%s", f.key)
			}
		}
	}
	if len(r.Choices) != 1 {
		return Parsed{}, bad(nil, "%d choices, want 1", len(r.Choices))
	}
	c := r.Choices[0]
	var reason string
	if c.FinishReason != nil {
		reason = *c.FinishReason
	}
	if openai.IsFailureFinishReason(reason) {
		return Parsed{}, bad(nil, "finish_reason %q", reason)
	}
	rawUsage := nullToNil(top["usage"])
	usage, err := parseUsage(rawUsage)
	if err != nil {
		return Parsed{}, bad(err, "usage")
	}
	ids := nullToNil(top["prompt_token_ids"])
	if ids != nil && !IsArray(ids) {
		return Parsed{}, bad(nil, "prompt_token_ids is not an array")
	}
	p := Parsed{
		Context: protocol.Context{
			PromptTokenIDs:   ids,
			Usage:            rawUsage,
			PromptTokens:     usage.PromptTokens,
			CachedTokens:     usage.CachedTokens(),
			CompletionTokens: usage.CompletionTokens,
			FinishReason:     reason,
			Text:             c.Text,
			ResponseID:       r.ID,
			Model:            r.Model,
			Created:          r.Created,
		},
		ChoiceParams:     nullToNil(c.DisaggregatedParams),
		KVTransferParams: nullToNil(top["kv_transfer_params"]),
	}
	if ep == protocol.EndpointChat {
		p.Context.Text = ""
		if c.Message != nil {
			p.Context.Text = c.Message.Content.String()
		}
	}
	return p, nil
}

// parseUsage decodes a usage object; absent or null gives zeros.
func parseUsage(raw json.RawMessage) (*openai.Usage, error) {
	u := &openai.Usage{}
	if IsNull(raw) {
		return u, nil
	}
	if !IsObject(raw) {
		return nil, errNotObject
	}
	if err := json.Unmarshal(raw, u); err != nil {
		return nil, err
	}
	return u, nil
}

// nullToNil returns nil for an absent or null value, else raw.
func nullToNil(raw json.RawMessage) json.RawMessage {
	if IsNull(raw) {
		return nil
	}
	return raw
}
