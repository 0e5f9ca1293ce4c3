package sim

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/proto/kvevents"
	"github.com/duet-serve/duet/tokenizer"
)

// withAdapter returns a completion body for prompt that selects adapter
// ("" for the base model) the protocol's way.
func withAdapter(protocol, adapter string, prompt any) map[string]any {
	b := map[string]any{"model": "m", "prompt": prompt, "max_tokens": 4, "ignore_eos": true}
	switch {
	case adapter == "":
	case protocol == ProtocolVLLM:
		b["model"] = adapter
	case protocol == ProtocolSGLang:
		b["model"] = "m:" + adapter
	default:
		b["lora_request"] = trtLoRA(adapter)
	}
	return b
}

// An adapter's KV is its own: the same prompt under another adapter, or
// under the base model, finds nothing cached, and under the same adapter
// again finds the prompt's full blocks (all but the last token's block).
func TestLoRAAdaptersDoNotShareCache(t *testing.T) {
	prompt := longText("lora cache", 300)
	for _, p := range Protocols {
		t.Run(p, func(t *testing.T) {
			w := startWorker(t, loraConfig("mixed", p))
			cached := func(adapter string) (int, int) {
				t.Helper()
				r := post(t, w.url+"/v1/completions", withAdapter(p, adapter, prompt))
				resp := decodeCompletion(t, r)
				require.Equal(t, strconv.Itoa(resp.Usage.CachedTokens()), r.header.Get(headerCachedTokens))
				return resp.Usage.CachedTokens(), resp.Usage.PromptTokens
			}
			got, n := cached("sql")
			require.Zero(t, got, "first request")
			require.Greater(t, n, 2*w.s.cfg.BlockSize)
			got, _ = cached("chat")
			require.Zero(t, got, "another adapter shares no block")
			got, _ = cached("")
			require.Zero(t, got, "the base model shares no block with an adapter")
			got, _ = cached("sql")
			require.Equal(t, (n-1)/w.s.cfg.BlockSize*w.s.cfg.BlockSize, got, "the same adapter again")
			got, _ = cached("chat")
			require.Equal(t, (n-1)/w.s.cfg.BlockSize*w.s.cfg.BlockSize, got)
		})
	}
}

// The blocks an adapter's request stores are reported with lora_name and
// lora_id (the adapter's position in lora_adapters, from 1), their hashes
// salted with the adapter; the base model's carry neither.
func TestLoRAKVEventsNameTheAdapter(t *testing.T) {
	cfg := kvEventsConfig()
	cfg.LoraAdapters = []string{"sql", "chat"}
	w, rec := startKVWorker(t, cfg)
	prompt := intsFrom(7000, 10) // two full blocks of 4; the output fills a third
	for _, tc := range []struct {
		adapter string
		id      int64
	}{{"chat", 2}, {"", 0}, {"sql", 1}} {
		t.Run("adapter="+tc.adapter, func(t *testing.T) {
			seen := len(rec.snapshot())
			body := completionReq(prompt, map[string]any{"max_tokens": 4, "ignore_eos": true})
			if tc.adapter != "" {
				body["model"] = tc.adapter
			}
			r := post(t, w.url+"/v1/completions", body)
			require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
			var stored *kvevents.BlockStored
			waitUntil(t, "the request's BlockStored", func() bool {
				for _, ev := range rec.snapshot()[seen:] {
					if s, ok := ev.(*kvevents.BlockStored); ok && len(s.TokenIDs) >= 4 && s.TokenIDs[0] == prompt[0] {
						stored = s
					}
				}
				return stored != nil
			})
			require.False(t, stored.HasParent)
			require.Len(t, stored.BlockHashes, 3, "prompt and output blocks")
			require.Equal(t, seqHashes(stored.TokenIDs, cfg.BlockSize, tc.adapter), keys(stored.BlockHashes))
			require.Equal(t, tc.adapter, stored.LoraName)
			if tc.adapter == "" {
				require.Nil(t, stored.LoraID)
				require.Equal(t, tokenizer.BlockHashes(stored.TokenIDs, cfg.BlockSize), keys(stored.BlockHashes))
				return
			}
			require.NotNil(t, stored.LoraID)
			require.Equal(t, tc.id, *stored.LoraID)
		})
	}
}

// A short prompt's output blocks keep the adapter: they are hashed from
// the adapter's salt, so the next turn, whose prompt holds them, finds
// them under the adapter only.
func TestLoRAShortPromptOutputBlocksCached(t *testing.T) {
	cfg := loraConfig("mixed", ProtocolVLLM)
	cfg.BlockSize = 4
	w := startWorker(t, cfg)
	prompt := intsFrom(9000, 3) // shorter than a block
	resp := decodeCompletion(t, post(t, w.url+"/v1/completions", map[string]any{
		"model": "sql", "prompt": prompt, "max_tokens": 9, "ignore_eos": true}))
	require.Equal(t, 9, resp.Usage.CompletionTokens)
	tok := testTokenizer(t, "cl100k_base")
	next := append(append([]int(nil), prompt...), tok.Encode(resp.Choices[0].Text)...)
	require.GreaterOrEqual(t, len(next), 12)
	for _, tc := range []struct {
		model  string
		cached string
	}{{"chat", "0"}, {"m", "0"}, {"sql", "8"}} {
		r := post(t, w.url+"/v1/completions", map[string]any{"model": tc.model, "prompt": next[:12], "max_tokens": 1})
		require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
		require.Equal(t, tc.cached, r.header.Get(headerCachedTokens), "model %s", tc.model)
	}
}

// A vLLM prefill and decode of an adapter's request agree on its block
// hashes, so the decode takes over the prefill's KV; a decode under
// another adapter names a different prefix and its pull is refused.
func TestLoRAPrefillThenDecode(t *testing.T) {
	ctxW := startWorker(t, loraConfig("context", ProtocolVLLM))
	genW := startWorker(t, loraConfig("generation", ProtocolVLLM))
	prefill := func(model string) json.RawMessage {
		t.Helper()
		resp := decodeCompletion(t, post(t, ctxW.url+"/v1/completions", map[string]any{
			"model": model, "prompt": longText("lora pd", 200), "max_tokens": 1,
			"kv_transfer_params": map[string]any{"do_remote_decode": true}}))
		return resp.KVTransferParams
	}
	decode := func(model string, kv json.RawMessage) httpResult {
		t.Helper()
		return post(t, genW.url+"/v1/completions", map[string]any{
			"model": model, "prompt": longText("lora pd", 200), "max_tokens": 3, "kv_transfer_params": kv})
	}
	kv := prefill("sql")
	var p disagg.KVTransferParams
	require.NoError(t, json.Unmarshal(kv, &p))
	require.True(t, p.DoRemotePrefill)
	resp := decodeCompletion(t, decode("sql", kv))
	require.Equal(t, 3, resp.Usage.CompletionTokens)
	require.Equal(t, "sql", resp.Model)

	kv = prefill("sql")
	r := decode("chat", kv)
	require.Equal(t, http.StatusBadRequest, r.status, "body: %s", r.body)
	require.Contains(t, r.errorBody(t).Error.Message, "does not match the request's prompt")
	require.Equal(t, 1, ctxW.s.sched.stats().Pins, "a refused pull leaves the pin")
	decodeCompletion(t, decode("sql", kv))
}
