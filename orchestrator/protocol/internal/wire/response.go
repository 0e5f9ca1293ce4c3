package wire

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/proto/openai"
)

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
// prompt_token_ids an array. Every value it reads must have its OpenAI
// type (id and model strings, created and the usage counts integers) or
// be null. Keys match exactly, as the engines (Python) write and read
// them. Errors are *protocol.ContextResponseError naming adapter and the
// key. Nothing in the result aliases body.
//
// The body is scanned once (validated as json.Valid does) and only the
// values duet reads are decoded: a ctx response is read on every
// disaggregated request, and decoding it whole with encoding/json cost
// about a tenth of the relay's CPU (issue 13).
func ParseContext(adapter string, ep protocol.Endpoint, body []byte) (Parsed, error) {
	bad := func(err error, format string, args ...any) error {
		return &protocol.ContextResponseError{Adapter: adapter, Reason: fmt.Sprintf(format, args...), Err: err}
	}
	if err := openai.CheckDepth(body, openai.MaxWorkerDepth); err != nil {
		return Parsed{}, bad(err, "not a response") // a stack per level in encoding/json
	}
	var buf [16]member // a ctx response has about ten keys
	top, err := scanMembers(body, buf[:0])
	switch {
	case errors.Is(err, errNotObject):
		return Parsed{}, bad(nil, "not a JSON object")
	case err != nil:
		return Parsed{}, bad(err, "not JSON")
	}
	var ctx protocol.Context
	for _, f := range []struct {
		key string
		dst *string
	}{{"id", &ctx.ResponseID}, {"model", &ctx.Model}} {
		if *f.dst, err = decodeString(top.get(f.key)); err != nil {
			return Parsed{}, bad(err, "%s", f.key)
		}
	}
	if ctx.Created, err = decodeInt64(top.get("created")); err != nil {
		return Parsed{}, bad(err, "created")
	}
	var stack [2]json.RawMessage
	choices, ok := arrayElements(top.get("choices"), stack[:0])
	switch {
	case !ok:
		return Parsed{}, bad(errNotArray, "choices")
	case len(choices) != 1:
		return Parsed{}, bad(nil, "%d choices, want 1", len(choices))
	}
	c, err := readChoice(choices[0], ep)
	if err != nil {
		return Parsed{}, bad(err, "choices[0]")
	}
	ctx.FinishReason, ctx.Text = c.finishReason, c.text
	if openai.IsFailureFinishReason(ctx.FinishReason) {
		return Parsed{}, bad(nil, "finish_reason %q", ctx.FinishReason)
	}
	usage, err := decodeUsage(top.get("usage"))
	if err != nil {
		return Parsed{}, bad(err, "usage")
	}
	ctx.PromptTokens, ctx.CachedTokens, ctx.CompletionTokens = usage.PromptTokens, usage.CachedTokens(), usage.CompletionTokens
	ctx.CachedReported = usage.PromptTokensDetails != nil
	ids := nullToNil(top.get("prompt_token_ids"))
	if ids != nil && !IsArray(ids) {
		return Parsed{}, bad(nil, "prompt_token_ids is not an array")
	}
	// The raw values leave in one copy of their own.
	raws := cloneAll(ids, nullToNil(top.get("usage")), c.params, nullToNil(top.get("kv_transfer_params")))
	ctx.PromptTokenIDs, ctx.Usage = raws[0], raws[1]
	return Parsed{Context: ctx, ChoiceParams: raws[2], KVTransferParams: raws[3]}, nil
}

// choiceRead is what ParseContext takes from the one choice.
type choiceRead struct {
	finishReason, text string
	params             json.RawMessage // disaggregated_params, nil when absent or null
}

// readChoice reads a choice: its finish_reason, its text (message.content
// for chat, text for completions) and its disaggregated_params. A null
// choice reads as an empty one. Errors name the key from the choice down.
func readChoice(raw json.RawMessage, ep protocol.Endpoint) (choiceRead, error) {
	if IsNull(raw) {
		return choiceRead{}, nil
	}
	var buf [16]member
	o, err := scanMembers(raw, buf[:0])
	if err != nil {
		return choiceRead{}, err
	}
	var c choiceRead
	if c.finishReason, err = decodeString(o.get("finish_reason")); err != nil {
		return choiceRead{}, fmt.Errorf("finish_reason: %w", err)
	}
	if c.text, err = choiceText(o, ep); err != nil {
		return choiceRead{}, err
	}
	c.params = nullToNil(o.get("disaggregated_params"))
	return c, nil
}

// choiceText returns a choice's output text: message.content for chat
// (string, null, or content parts joined), text for completions.
func choiceText(o members, ep protocol.Endpoint) (string, error) {
	if ep != protocol.EndpointChat {
		text, err := decodeString(o.get("text"))
		if err != nil {
			return "", fmt.Errorf("text: %w", err)
		}
		return text, nil
	}
	msg := o.get("message")
	if IsNull(msg) {
		return "", nil
	}
	content, err := Member(msg, "content")
	if err != nil {
		return "", fmt.Errorf("message: %w", err)
	}
	if IsArray(content) { // content parts: rare in a one-token answer
		var c openai.Content
		if err := json.Unmarshal(content, &c); err != nil {
			return "", fmt.Errorf("message.%w", err)
		}
		return c.String(), nil
	}
	text, err := decodeString(content)
	if err != nil {
		return "", fmt.Errorf("message.content: %w", err)
	}
	return text, nil
}

// decodeUsage reads the counts of a usage object; absent or null gives
// zeros. Keys it does not read may hold anything.
func decodeUsage(raw json.RawMessage) (*openai.Usage, error) {
	u := &openai.Usage{}
	if IsNull(raw) {
		return u, nil
	}
	var buf [16]member
	o, err := scanMembers(raw, buf[:0])
	if err != nil {
		return nil, err
	}
	for _, f := range []struct {
		key string
		dst *int
	}{{"prompt_tokens", &u.PromptTokens}, {"completion_tokens", &u.CompletionTokens}, {"total_tokens", &u.TotalTokens}} {
		if *f.dst, err = decodeInt(o.get(f.key)); err != nil {
			return nil, fmt.Errorf("%s: %w", f.key, err)
		}
	}
	details := o.get("prompt_tokens_details")
	if IsNull(details) {
		return u, nil
	}
	rawCached, err := Member(details, "cached_tokens")
	if err != nil {
		return nil, fmt.Errorf("prompt_tokens_details: %w", err)
	}
	cached, err := decodeInt(rawCached)
	if err != nil {
		return nil, fmt.Errorf("prompt_tokens_details.cached_tokens: %w", err)
	}
	u.PromptTokensDetails = &openai.PromptTokensDetails{CachedTokens: cached}
	return u, nil
}

// cloneAll copies raws into one new buffer; each result has its own
// capacity, so an append to one cannot overwrite the next.
func cloneAll(raws ...json.RawMessage) []json.RawMessage {
	n := 0
	for _, r := range raws {
		n += len(r)
	}
	buf := make([]byte, 0, n)
	out := make([]json.RawMessage, len(raws))
	for i, r := range raws {
		if r == nil {
			continue
		}
		start := len(buf)
		buf = append(buf, r...)
		out[i] = buf[start:len(buf):len(buf)]
	}
	return out
}

// nullToNil returns nil for an absent or null value, else raw.
func nullToNil(raw json.RawMessage) json.RawMessage {
	if IsNull(raw) {
		return nil
	}
	return raw
}
