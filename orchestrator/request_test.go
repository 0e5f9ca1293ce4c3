package orchestrator

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/orchestrator/protocol"
)

// Regression (issue 11): cache_salt isolates an engine's prefix cache, so
// it must isolate duet's block hashes (and so prefix matching) too.
func TestCacheSaltSeedsBlockHashes(t *testing.T) {
	h := newHarness(t, testConfig(), nil, nil)
	prompt := `"messages":[{"role":"user","content":"a long shared system prompt that spans several blocks of tokens for sure, repeated: one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty"}]`
	parse := func(extra string) *Request {
		req, err := h.o.parse(Incoming{Endpoint: protocol.EndpointChat, Body: []byte(`{"model":"m",` + prompt + extra + `}`), RequestID: "r"})
		require.NoError(t, err)
		require.NotEmpty(t, req.Hashes)
		return req
	}
	plain, a1, a2, b := parse(""), parse(`,"cache_salt":"tenant-a"`), parse(`,"cache_salt":"tenant-a"`), parse(`,"cache_salt":"tenant-b"`)
	require.Equal(t, plain.Tokens, a1.Tokens, "the salt does not change the prompt")
	require.Equal(t, a1.Hashes, a2.Hashes)
	require.NotEqual(t, a1.Hashes[0], b.Hashes[0])
	require.NotEqual(t, a1.Hashes[0], plain.Hashes[0])
}

// Regression (issue 12, found by FuzzParse): encoding/json matches keys
// case-insensitively and merges duplicates, the engines match exactly, so
// {"MAX_TOKENS":5,"max_tokens":2000} was charged as 5 tokens while the
// engine generated up to 2000. Such bodies are now a 400 naming the key.
func TestKeysTheEnginesReadDifferentlyAreRejected(t *testing.T) {
	h := newHarness(t, testConfig(), nil, nil)
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		name     string
		endpoint protocol.Endpoint
		body     string
		param    string
		message  string
	}{
		{"case variant", protocol.EndpointChat, `{"model":"m",` + msgs + `,"max_tokens":2000,"MAX_TOKENS":5}`,
			"MAX_TOKENS", `did you mean "max_tokens"`},
		{"case variant alone", protocol.EndpointCompletions, `{"mOdel":"m","prompt":"hi"}`, "mOdel", `did you mean "model"`},
		{"Kelvin sign folds to k", protocol.EndpointChat, `{"model":"m",` + msgs + `,"max_to\u212aens":5}`,
			"max_to\u212aens", `did you mean "max_tokens"`},
		{"long s folds to s", protocol.EndpointChat, `{"model":"m",` + msgs + `,"\u017ftream":true}`,
			"\u017ftream", `did you mean "stream"`},
		{"nested in a message", protocol.EndpointChat, `{"model":"m","messages":[{"role":"user","content":"a"},{"Role":"user","role":"system","content":"b"}]}`,
			"messages[1].Role", `did you mean "messages[1].role"`},
		{"nested in a content part", protocol.EndpointChat, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","TEXT":"b"}]}]}`,
			"messages[0].content[0].TEXT", `did you mean "messages[0].content[0].text"`},
		{"nested in a session field", protocol.EndpointChat, `{"model":"m",` + msgs + `,"conversation_params":{"Conversation_Id":"x"}}`,
			"conversation_params.Conversation_Id", `did you mean "conversation_params.conversation_id"`},
		{"duplicate", protocol.EndpointChat, `{"model":"m",` + msgs + `,"max_tokens":2000,"max_tokens":5}`,
			"max_tokens", "duplicate key"},
		{"duplicate object merged by encoding/json", protocol.EndpointCompletions,
			`{"model":"m","prompt":"a","stream":true,"stream_options":{"include_usage":true},"stream_options":{}}`,
			"stream_options", "duplicate key"},
		{"duplicate in a message", protocol.EndpointChat, `{"model":"m","messages":[{"role":"user","role":"system","content":"b"}]}`,
			"messages[0].role", "duplicate key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.o.parse(Incoming{Endpoint: tc.endpoint, Body: []byte(tc.body), RequestID: "r"})
			var e *Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, 400, e.Status)
			require.Equal(t, tc.param, e.Param)
			require.Contains(t, e.Message, tc.message)
		})
	}

	// Keys duet does not decode pass through whatever their case, and an
	// escaped key is the key it spells.
	for _, body := range []string{
		`{"model":"m",` + msgs + `,"Temperature_Schedule":1,"response_format":{"Type":"json_object","type":"x"}}`,
		`{"model":"m",` + msgs + `,"max_tok\u0065ns":5}`,
	} {
		req, err := h.o.parse(Incoming{Endpoint: protocol.EndpointChat, Body: []byte(body), RequestID: "r"})
		require.NoError(t, err, body)
		require.JSONEq(t, body, string(req.Body))
	}
}

func TestOpenAICacheAndSafetyFields(t *testing.T) {
	ctx := newFakeWorker(t, ctxOK)
	h := newHarness(t, testConfig(), []*fakeWorker{ctx}, []*fakeWorker{newFakeWorker(t, genStream(1, true))})
	for _, c := range []struct {
		extra, header, session, user string
	}{
		{`,"prompt_cache_key":"pk-1"`, "", "pk-1", ""},
		{`,"prompt_cache_key":"pk-1","conversation_params":{"conversation_id":"c-1"}`, "", "c-1", ""},
		{`,"prompt_cache_key":"pk-1"`, "h-1", "pk-1", ""},
		{`,"safety_identifier":"u-7"`, "", "", "u-7"},
		{`,"safety_identifier":"u-7","user":"u-8"`, "", "", "u-8"},
	} {
		req, err := h.o.parse(Incoming{Endpoint: 1, Body: testChatBody(false, c.extra), RequestID: "r",
			Header: func(n string) string {
				if n == "X-Session-ID" {
					return c.header
				}
				return ""
			}})
		require.NoError(t, err, c.extra)
		want := c.session
		if want == "" {
			want = c.header
		}
		require.Equal(t, want, req.SessionKey, c.extra)
		require.Equal(t, c.user, req.User, c.extra)
		require.NotContains(t, string(req.Body), "prompt_cache_key", "no worker gets it")
		require.NotContains(t, string(req.Body), "safety_identifier")
	}
	resp, _ := h.run(testChatBody(false, `,"prompt_cache_key":"pk-2","safety_identifier":"u-9"`), nil)
	require.Equal(t, http.StatusOK, resp.Status)
	require.NotContains(t, ctx.calls()[0], "prompt_cache_key")
	require.NotContains(t, ctx.calls()[0], "safety_identifier")
}

func TestSessionEndHeader(t *testing.T) {
	h := newHarness(t, testConfig(), []*fakeWorker{newFakeWorker(t, ctxOK)}, []*fakeWorker{newFakeWorker(t, genStream(1, true))})
	for value, want := range map[string]bool{"1": true, "true": true, "0": false, "": false, "no": false} {
		req, err := h.o.parse(Incoming{Endpoint: 1, Body: testChatBody(false, ""), RequestID: "r",
			Header: func(n string) string {
				if n == HeaderSessionEnd {
					return value
				}
				return ""
			}})
		require.NoError(t, err)
		require.Equal(t, want, req.EndSession, value)
	}
}

func TestAgentSessionHeaders(t *testing.T) {
	h := newHarness(t, testConfig(), []*fakeWorker{newFakeWorker(t, ctxOK)}, []*fakeWorker{newFakeWorker(t, genStream(1, true))})
	parse := func(headers map[string]string) *Request {
		req, err := h.o.parse(Incoming{Endpoint: 1, Body: testChatBody(false, ""), RequestID: "r",
			Header: func(n string) string { return headers[n] }})
		require.NoError(t, err)
		return req
	}
	for _, name := range []string{"X-Multi-Turn-Session-Id", "X-Claude-Code-Session-Id", "Thread-Id", "Session-Id", "Session_id",
		"X-Deepseek-Harness-Session-Id", "X-Litellm-Session-Id"} {
		require.Equal(t, "s-"+name, parse(map[string]string{name: "s-" + name}).SessionKey, name)
	}
	require.Equal(t, "duet", parse(map[string]string{"X-Session-ID": "duet", "X-Claude-Code-Session-Id": "claude"}).SessionKey,
		"duet's own header first")
	require.True(t, parse(map[string]string{"X-Dynamo-Session-Final": "true"}).EndSession, "Dynamo's end-of-session header")
}
