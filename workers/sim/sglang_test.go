package sim

import (
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/proto/openai"
)

// bootPort returns the port of w's SGLang bootstrap server.
func bootPort(t *testing.T, w *testWorker) int {
	t.Helper()
	_, p, err := net.SplitHostPort(w.s.BootstrapAddr())
	require.NoError(t, err, "worker serves no bootstrap server")
	port, err := strconv.Atoi(p)
	require.NoError(t, err)
	return port
}

// withBootstrap is what an SGLang router sends both legs: the client body
// plus bootstrap_host, bootstrap_port (nil: JSON null) and bootstrap_room.
func withBootstrap(client map[string]any, port any, room uint64) map[string]any {
	b := map[string]any{}
	for k, v := range client {
		b[k] = v
	}
	b["bootstrap_host"], b["bootstrap_port"], b["bootstrap_room"] = "127.0.0.1", port, room
	return b
}

// legResult is one leg's response, or the error that prevented it.
type legResult struct {
	r   httpResult
	err error
}

// sendAsync posts body to url on its own goroutine; the channel yields the
// result once.
func sendAsync(url string, body any) <-chan legResult {
	ch := make(chan legResult, 1)
	go func() {
		r, err := doErr(http.MethodPost, url, body, nil)
		ch <- legResult{r, err}
	}()
	return ch
}

func await(t *testing.T, ch <-chan legResult) httpResult {
	t.Helper()
	select {
	case res := <-ch:
		require.NoError(t, res.err)
		return res.r
	case <-time.After(20 * time.Second):
		t.Fatal("leg did not answer")
		return httpResult{}
	}
}

// sglangErr parses SGLang's flat error body.
func sglangErr(t *testing.T, r httpResult) flatError {
	t.Helper()
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	var e flatError
	require.NoError(t, json.Unmarshal(r.body, &e), "body: %s", r.body)
	require.Equal(t, "error", e.Object)
	require.Equal(t, r.status, e.Code, "code is the HTTP status")
	require.NotEmpty(t, e.Message)
	return e
}

// sglangStreamErr parses a 200 SSE response that holds only SGLang's error
// event and [DONE].
func sglangStreamErr(t *testing.T, r httpResult) flatError {
	t.Helper()
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	require.Equal(t, openai.ContentTypeSSE, r.header.Get("Content-Type"))
	evs := sseEvents(t, r.body)
	require.Len(t, evs, 2, "body: %s", r.body)
	require.True(t, openai.IsDone(evs[1]))
	var ev struct {
		Error flatError `json:"error"`
	}
	require.NoError(t, json.Unmarshal(evs[0], &ev))
	require.Equal(t, "error", ev.Error.Object)
	require.NotEmpty(t, ev.Error.Message)
	return ev.Error
}

func TestSGLangPrefillAndDecode(t *testing.T) {
	pre := startWorker(t, testConfig("context", ProtocolSGLang))
	dec := startWorker(t, testConfig("generation", ProtocolSGLang))
	agg := startWorker(t, testConfig("mixed", ProtocolSGLang))
	type order int
	const (
		together order = iota
		prefillFirst
		decodeFirst
	)
	tests := []struct {
		name   string
		kind   endpointKind
		stream bool
		order  order
	}{
		{"chat together", kindChat, false, together},
		{"chat stream together", kindChat, true, together},
		{"completion together", kindCompletion, false, together},
		{"completion stream together", kindCompletion, true, together},
		{"chat prefill first", kindChat, false, prefillFirst},
		{"completion stream prefill first", kindCompletion, true, prefillFirst},
		{"chat stream decode first", kindChat, true, decodeFirst},
		{"completion decode first", kindCompletion, false, decodeFirst},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := "/v1/chat/completions"
			client := chatReq(longText("sgl"+strconv.Itoa(i), 100), nil)
			if tt.kind == kindCompletion {
				path = "/v1/completions"
				client = completionReq(longText("sgl"+strconv.Itoa(i), 100), nil)
			}
			client["max_tokens"], client["stream"] = 10, tt.stream
			client["stream_options"] = map[string]any{"include_usage": true}
			body := withBootstrap(client, bootPort(t, pre), uint64(1)<<62+uint64(i))

			var preCh, decCh <-chan legResult
			switch tt.order {
			case together:
				preCh, decCh = sendAsync(pre.url+path, body), sendAsync(dec.url+path, body)
			case prefillFirst:
				preCh = sendAsync(pre.url+path, body)
				require.Eventually(t, func() bool { return pre.s.sched.stats().Pins == 1 }, 5*time.Second, time.Millisecond,
					"the prefill pins its room and waits for the decode")
				decCh = sendAsync(dec.url+path, body)
			case decodeFirst:
				decCh = sendAsync(dec.url+path, body)
				require.Eventually(t, func() bool { return dec.s.sched.stats().Running == 1 }, 5*time.Second, time.Millisecond,
					"the decode is admitted and waits for the room")
				preCh = sendAsync(pre.url+path, body)
			}
			d, p := await(t, decCh), await(t, preCh)

			text, usage := outputText(t, tt.kind, d, tt.stream)
			require.Equal(t, 10, usage.CompletionTokens)
			aggText, _ := outputText(t, tt.kind, post(t, agg.url+path, body), tt.stream)
			require.Equal(t, aggText, text, "disaggregated output equals aggregated output (a mixed worker ignores the bootstrap fields)")

			// The prefill answers like SGLang's: the first token, finish "length".
			preText, preUsage := outputText(t, tt.kind, p, tt.stream)
			require.NotEmpty(t, preText)
			require.True(t, strings.HasPrefix(text, preText), "the decode continues from the prefill's token")
			require.Equal(t, 1, preUsage.CompletionTokens)
			require.Equal(t, usage.PromptTokens, preUsage.PromptTokens)
			require.Contains(t, string(p.body), `"finish_reason":"length"`)
			if tt.stream {
				require.Equal(t, openai.ContentTypeSSE, p.header.Get("Content-Type"))
				evs := sseEvents(t, p.body)
				require.True(t, openai.IsDone(evs[len(evs)-1]))
			}
			require.Equal(t, 0, pre.s.sched.stats().Pins, "the decode took the room")
		})
	}
}

// TestSGLangNullBootstrapPort: a null bootstrap_port means the decode's own
// bootstrap_port, as in SGLang's scheduler.
func TestSGLangNullBootstrapPort(t *testing.T) {
	pre := startWorker(t, testConfig("context", ProtocolSGLang))
	cfg := testConfig("generation", ProtocolSGLang)
	cfg.BootstrapPort = bootPort(t, pre)
	dec := startWorker(t, cfg)
	body := withBootstrap(chatReq("null port", map[string]any{"max_tokens": 3}), nil, 7)
	preCh := sendAsync(pre.url+"/v1/chat/completions", body)
	text, _ := outputText(t, kindChat, post(t, dec.url+"/v1/chat/completions", body), false)
	require.NotEmpty(t, text)
	require.Equal(t, http.StatusOK, await(t, preCh).status)
}

// TestSGLangWrongBootstrapPort: the decode meets the prefill only through
// bootstrap_host:bootstrap_port, so a wrong port fails the decode (bounded
// by kv_transfer_timeout), and the prefill, whose room nobody takes, fails
// with SGLang's bootstrapping timeout.
func TestSGLangWrongBootstrapPort(t *testing.T) {
	cfg := testConfig("context", ProtocolSGLang)
	cfg.KVTransferTimeout = 300 * time.Millisecond
	pre := startWorker(t, cfg)
	cfg = testConfig("generation", ProtocolSGLang)
	cfg.KVTransferTimeout = 300 * time.Millisecond
	dec := startWorker(t, cfg)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedPort := closed.Addr().(*net.TCPAddr).Port
	require.NoError(t, closed.Close())
	_, openAIPort, err := net.SplitHostPort(strings.TrimPrefix(pre.url, "http://"))
	require.NoError(t, err)

	tests := []struct {
		name    string
		port    int
		stream  bool
		message string
	}{
		{"nothing listening", closedPort, false, "Could not reach the bootstrap server"},
		{"nothing listening, stream", closedPort, true, "Could not reach the bootstrap server"},
		{"the prefill's OpenAI port", mustAtoi(t, openAIPort), false, "answered 404"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := withBootstrap(chatReq("wrong port "+strconv.Itoa(i), map[string]any{"max_tokens": 4, "stream": tt.stream}), tt.port, uint64(100+i))
			preCh := sendAsync(pre.url+"/v1/chat/completions", body)
			start := time.Now()
			d := post(t, dec.url+"/v1/chat/completions", body)
			require.Less(t, time.Since(start), 5*time.Second, "bounded")
			e := requireTransferFailed(t, d, tt.stream, uint64(100+i))
			require.Contains(t, e.Message, tt.message)

			p := await(t, preCh)
			if tt.stream {
				require.Contains(t, sglangStreamErr(t, p).Message, "in KVPoll.Bootstrapping")
			} else {
				require.Equal(t, http.StatusInternalServerError, p.status)
				require.Contains(t, sglangErr(t, p).Message, "in KVPoll.Bootstrapping")
			}
			require.Equal(t, 0, pre.s.sched.stats().Pins, "the unpulled room expired")
		})
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}

// TestSGLangUnknownRoomTimesOut: a room no prefill ever pins fails the
// decode after kv_transfer_timeout with SGLang's WaitingForInput timeout.
func TestSGLangUnknownRoomTimesOut(t *testing.T) {
	pre := startWorker(t, testConfig("context", ProtocolSGLang))
	cfg := testConfig("generation", ProtocolSGLang)
	cfg.KVTransferTimeout = 250 * time.Millisecond
	dec := startWorker(t, cfg)
	for _, stream := range []bool{false, true} {
		t.Run("stream="+strconv.FormatBool(stream), func(t *testing.T) {
			body := withBootstrap(completionReq("nobody prefills this", map[string]any{"max_tokens": 4, "stream": stream}), bootPort(t, pre), 42)
			start := time.Now()
			r := post(t, dec.url+"/v1/completions", body)
			elapsed := time.Since(start)
			require.GreaterOrEqual(t, elapsed, 250*time.Millisecond, "waits kv_transfer_timeout")
			require.Less(t, elapsed, 5*time.Second)
			var e flatError
			if stream {
				e = sglangStreamErr(t, r)
			} else {
				require.Equal(t, http.StatusInternalServerError, r.status)
				e = sglangErr(t, r)
			}
			require.Contains(t, e.Message, "Request 42 timed out after")
			require.Contains(t, e.Message, "in KVPoll.WaitingForInput")
			require.Equal(t, 0, dec.s.sched.stats().Running, "the decode released its slot")
		})
	}
}

// TestSGLangCachedTokensSecondTurn: turn 2 of a conversation finds turn 1's
// prompt and reply cached on both legs; the decode pulls only the rest.
func TestSGLangCachedTokensSecondTurn(t *testing.T) {
	pre := startWorker(t, testConfig("context", ProtocolSGLang))
	dec := startWorker(t, testConfig("generation", ProtocolSGLang))
	msgs := []map[string]any{{"role": "user", "content": longText("sglang conversation", 1000)}}
	turn := func(room uint64, max int) (httpResult, httpResult, string, openai.Usage) {
		body := withBootstrap(map[string]any{"model": Defaults().Model, "messages": msgs, "max_tokens": max}, bootPort(t, pre), room)
		preCh := sendAsync(pre.url+"/v1/chat/completions", body)
		d := post(t, dec.url+"/v1/chat/completions", body)
		text, usage := outputText(t, kindChat, d, false)
		return d, await(t, preCh), text, usage
	}
	d1, p1, reply, u1 := turn(1, 40)
	require.Equal(t, "0", d1.header.Get(headerCachedTokens))
	require.Equal(t, "0", p1.header.Get(headerCachedTokens))
	require.Equal(t, 0, u1.CachedTokens())
	msgs = append(msgs, map[string]any{"role": "assistant", "content": reply}, map[string]any{"role": "user", "content": "go on"})
	d2, p2, _, u2 := turn(2, 4)
	require.Greater(t, u2.CachedTokens(), 1000, "the decode holds turn 1's prompt and reply")
	require.Equal(t, d2.header.Get(headerCachedTokens), strconv.Itoa(u2.CachedTokens()))
	preCached, err := strconv.Atoi(p2.header.Get(headerCachedTokens))
	require.NoError(t, err)
	require.Greater(t, preCached, 900, "the prefill holds turn 1's prompt")
	require.Less(t, modelledUs(t, d2), modelledUs(t, d1), "less to transfer")
}

func TestSGLangRejects(t *testing.T) {
	workers := map[string]*testWorker{
		"context":    startWorker(t, testConfig("context", ProtocolSGLang)),
		"generation": startWorker(t, testConfig("generation", ProtocolSGLang)),
	}
	noPortCfg := testConfig("generation", ProtocolSGLang) // bootstrap_port 0: no default for a null port
	workers["generation without default port"] = startWorker(t, noPortCfg)
	tests := []struct {
		name    string
		worker  string
		extra   map[string]any
		drop    string // body key to remove
		status  int
		stream  bool // expect SGLang's in-stream error
		param   string
		message string
	}{
		{"decode without room", "generation", nil, "bootstrap_room", 400, false, "bootstrap_room", "without bootstrap room id"},
		{"streaming decode without room", "generation", map[string]any{"stream": true}, "bootstrap_room", 400, true, "bootstrap_room", "without bootstrap room id"},
		{"prefill without room", "context", nil, "bootstrap_room", 400, false, "bootstrap_room", "without bootstrap room id"},
		{"decode without host", "generation", nil, "bootstrap_host", 400, false, "bootstrap_host", "bootstrap_host: required"},
		{"room above 2^63-1", "generation", map[string]any{"bootstrap_room": uint64(1) << 63}, "", 400, false, "bootstrap_room", "[0, 2^63-1]"},
		{"negative room", "generation", map[string]any{"bootstrap_room": -1}, "", 400, false, "bootstrap_room", "expected an integer"},
		{"port out of range", "generation", map[string]any{"bootstrap_port": 70000}, "", 400, false, "bootstrap_port", "[1, 65535]"},
		{"null port without a default", "generation without default port", map[string]any{"bootstrap_port": nil}, "", 400, false, "bootstrap_port", "null port"},
		{"unknown model", "generation", map[string]any{"model": "nope"}, "", 404, false, "model", "does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := withBootstrap(chatReq("reject me", map[string]any{"max_tokens": 2}), 1, 9)
			for k, v := range tt.extra {
				body[k] = v
			}
			delete(body, tt.drop)
			r := post(t, workers[tt.worker].url+"/v1/chat/completions", body)
			var e flatError
			if tt.stream {
				e = sglangStreamErr(t, r)
				require.Equal(t, "BAD_REQUEST", e.Type)
			} else {
				require.Equal(t, tt.status, r.status, "body: %s", r.body)
				e = sglangErr(t, r)
			}
			require.Equal(t, tt.status, e.Code)
			require.NotNil(t, e.Param)
			require.Equal(t, tt.param, *e.Param)
			require.Contains(t, e.Message, tt.message)
			if tt.status == 400 && !tt.stream {
				require.Equal(t, "BadRequestError", e.Type)
			}
		})
	}
}

func TestSGLangBootstrapServer(t *testing.T) {
	pre := startWorker(t, testConfig("context", ProtocolSGLang))
	base := "http://" + pre.s.BootstrapAddr()
	_, openAIPort, err := net.SplitHostPort(strings.TrimPrefix(pre.url, "http://"))
	require.NoError(t, err)
	tests := []struct {
		name   string
		method string
		path   string
		body   any
		status int
		want   string
	}{
		{"health", http.MethodGet, "/health", nil, 200, ""},
		{"parallel info", http.MethodGet, "/route?engine_rank=-1&target_dp_group=-1", nil, 200, `{"prefill_dp_size":1,"prefill_tp_size":1}`},
		{"rank 0", http.MethodGet, "/route?engine_rank=0&target_dp_group=0", nil, 200, `{"rank_ip":"127.0.0.1","rank_port":` + openAIPort + `}`},
		{"missing inputs", http.MethodGet, "/route", nil, 400, "Missing inputs for bootstrap server."},
		{"unknown rank", http.MethodGet, "/route?engine_rank=3&target_dp_group=0", nil, 404, "Bootstrap info not Found"},
		{"route put", http.MethodPut, "/route", "{}", 405, "Method not allowed"},
		{"bad room", http.MethodPost, "/rooms/x/pull", "{}", 400, "room: must be an integer"},
		{"room above 2^63-1", http.MethodPost, "/rooms/9223372036854775808/pull", "{}", 400, "room: must be an integer"},
		{"bad body", http.MethodPost, "/rooms/1/pull", "[", 400, "invalid"},
		{"no such room", http.MethodPost, "/rooms/1/pull", `{"wait_ms":20}`, 404, codeRoomUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := do(t, tt.method, base+tt.path, tt.body, nil)
			require.Equal(t, tt.status, r.status, "body: %s", r.body)
			require.Contains(t, string(r.body), tt.want)
		})
	}
	t.Run("mixed and generation workers serve none", func(t *testing.T) {
		require.Empty(t, startWorker(t, testConfig("mixed", ProtocolSGLang)).s.BootstrapAddr())
		require.Empty(t, startWorker(t, testConfig("generation", ProtocolSGLang)).s.BootstrapAddr())
	})
}

// TestSGLangBootstrapPortInUse: Serve fails, naming the key, when the
// bootstrap port cannot be listened on.
func TestSGLangBootstrapPortInUse(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	cfg := testConfig("context", ProtocolSGLang)
	cfg.BootstrapPort = taken.Addr().(*net.TCPAddr).Port
	s, err := New(cfg, testTokenizer(t, "cl100k_base"), nil)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	err = s.Serve(t.Context(), ln)
	require.ErrorContains(t, err, "bootstrap_port")
	_, err = ln.Accept()
	require.Error(t, err, "Serve closed its listener")
}
