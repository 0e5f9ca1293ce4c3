package tests

import (
	"encoding/json"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func testConformanceSGLang(t *testing.T) {
	fakes := startSGLangFakes(t, 2, 2)
	d := startConformanceDuet(t, "sglang", fakes.contextURLs(), urls(fakes.gen))
	set := func(v sglVariant) func() { return func() { fakes.set(v) } }
	// decoded: the client gets the decode's answer; SGLang's legs report
	// no separate context usage, so usage is the decode's own.
	decoded := func(c reqCase) want {
		return want{content: genText, finish: "stop", prompt: c.prompt, cached: 0, completion: len(genTokens), ctxCalls: 1, genCalls: 1}
	}
	vs := []variant{
		{name: "prefill-answers", source: "sglang.md §2 (bootstrap fields), §3 (both legs at once), §4 (the client gets the decode response), §7 (the prefill's own answer, streamed when the body streams), §10",
			set: set(sglVariant{}), want: decoded},
		{name: "prefill-slow", source: "sglang.md §3 (the gateway waits for the prefill; the prefill answers after its KV transfer, §7)",
			set: set(sglVariant{pDelay: 300 * time.Millisecond}), want: decoded},
		{name: "prefill-aborts-after-handoff", source: "sglang.md §7 (KVPoll.Failed → prepare_abort 500), §8 (error shapes), §5 (mini_lb ignores the prefill status)",
			set: set(sglVariant{pAbortAfterHandoff: true}), want: decoded},
		{name: "json-spaced-escaped", source: "sglang.md §9 (json.dumps spacing); escapes as vllm.md §4",
			set: set(sglVariant{style: jsonStyle{spaced: true, escape: true, reverse: true}}), want: decoded},
		{name: "stream-no-usage-requested", source: "sglang.md §10 (usage chunk only with include_usage)", only: onlyStream,
			req: func(c *reqCase) { c.includeUsage = false }, set: set(sglVariant{}), want: decoded},
		{name: "decode-mid-stream-error", source: "sglang.md §8 (stream abort: json.dumps frame, type HTTPStatus name, then [DONE])", only: onlyStream,
			set: set(sglVariant{stream: streamShape{errorAfter: 2,
				errorFrame: `{"error": {"object": "error", "message": "Decode out of memory", "type": "INTERNAL_SERVER_ERROR", "param": null, "code": 500}}`}}),
			want: func(reqCase) want {
				return want{streamErr: true, partial: genTokens[0] + genTokens[1], errMessage: "Decode out of memory",
					errType: "INTERNAL_SERVER_ERROR", errParam: "null", errCode: "500", ctxCalls: 1, genCalls: 1}
			}},
		{name: "decode-error-400", source: "sglang.md §9 (flat ErrorResponse, integer code)",
			set: set(sglVariant{maxContext: 10}),
			want: func(c reqCase) want {
				// The legs run at once and a failed decode cancels the
				// prefill: it may not have been sent (ctxCalls -1, either).
				return want{status: 400, errMessage: sglTooLong(10, c.prompt, 16), errType: "BadRequestError", errParam: "null",
					errCode: "400", ctxCalls: -1, genCalls: 1}
			}},
		{name: "prefill-unavailable-decode-times-out", source: "sglang.md §8 (the decode waits for the room, then aborts 500; a stream gets an error frame), §1 (a retry picks a new pair and room)",
			set: set(sglVariant{pUnavailable: true, meetTimeout: 250 * time.Millisecond}),
			want: func(reqCase) want { // each gen worker failed once before anything was sent
				return want{status: 502, errContains: []string{"generation", "KVPoll.WaitingForInput"}, errType: "server_error", ctxCalls: 2, genCalls: 2}
			}},
	}
	for i := range vs {
		vs[i].wire = sglWire(fakes)
	}
	extra := func(c reqCase) string {
		if c.endpoint == "chat" {
			return `,"min_tokens":2`
		}
		return `,"min_tokens":1`
	}
	runVariants(t, d, &fakes.fakeFleet, extra, vs)
}

// sglWire checks sglang.md §2: each attempt sends the same body to both
// legs, the client's body plus bootstrap_host (the prefill's host),
// bootstrap_port (the port its urls entry gives) and a bootstrap_room below
// 2^63, fresh per attempt.
func sglWire(fakes *sglFakes) func(*testing.T, reqCase, want, legs) {
	return func(t *testing.T, c reqCase, w want, l legs) {
		client := clientFields(t, c)
		prefillOf := map[uint64]call{}
		for _, p := range l.ctx {
			room := sglRoomOf(t, p)
			require.NotContains(t, prefillOf, room, "a fresh bootstrap_room per attempt")
			prefillOf[room] = p
		}
		for _, g := range l.gen {
			f := g.fields(t)
			room := sglRoomOf(t, g)
			p, ok := prefillOf[room]
			if !ok && w.ctxCalls < 0 {
				continue // the decode failed at once and its prefill was cancelled before it was sent
			}
			require.True(t, ok, "the decode's bootstrap_room %d reached a prefill", room)
			require.JSONEq(t, string(p.Body), string(g.Body), "both legs get the same body")
			require.Equal(t, `"127.0.0.1"`, string(f["bootstrap_host"]), "the prefill's host")
			require.Equal(t, strconv.Itoa(fakes.bootstrapPort(p.Engine)), string(f["bootstrap_port"]),
				"the bootstrap port of %s, the prefill the room went to", p.Engine)
			requireKept(t, client, f, "model", "messages", "prompt", "temperature", "stream", "stream_options", "max_tokens", "min_tokens")
		}
	}
}

func sglRoomOf(t *testing.T, c call) uint64 {
	t.Helper()
	f := c.fields(t)
	var room uint64
	require.NoError(t, json.Unmarshal(f["bootstrap_room"], &room), "bootstrap_room is an integer: %s", f["bootstrap_room"])
	require.LessOrEqual(t, room, uint64(math.MaxInt64))
	return room
}
