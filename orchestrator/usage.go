package orchestrator

import (
	"encoding/json"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/proto/openai"
)

// patchResponseUsage makes a gen worker's usage report the prompt and
// cached tokens of the context phase (the gen worker only saw a KV
// transfer). It returns the body (unchanged when there is nothing to patch
// or it cannot be read) and the usage reported to the client (zero when
// there is none). It serves whole responses and single SSE chunks alike.
func patchResponseUsage(body []byte, c *protocol.Context) ([]byte, openai.Usage) {
	var probe struct {
		Usage *openai.Usage `json:"usage"`
	}
	if err := json.Unmarshal(body, &probe); err != nil || probe.Usage == nil {
		return body, openai.Usage{}
	}
	u := *probe.Usage
	if c == nil || c.PromptTokens == 0 {
		return body, u
	}
	u.PromptTokens = c.PromptTokens
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	u.PromptTokensDetails = &openai.PromptTokensDetails{CachedTokens: c.CachedTokens}
	out, err := openai.RewriteBody(body, map[string]any{"usage": u})
	if err != nil {
		return body, *probe.Usage
	}
	return out, u
}
