package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestConformance proves that duet serves every response variant the real
// engines produce, as /tmp/research/{vllm,trtllm,sglang}.md describe them:
// per protocol, fake workers that enforce the engine's wire contract (see
// engine_*_test.go) sit behind one `duet serve`; each subtest switches the
// fakes to one variant and sends chat and completions, streamed and whole,
// through duet. Subtests are named protocol/variant/endpoint/stream.
func TestConformance(t *testing.T) {
	t.Run("vllm", testConformanceVLLM)
	t.Run("trtllm", testConformanceTRTLLM)
	t.Run("sglang", testConformanceSGLang)
}

// startConformanceDuet runs duet over pre-launched (fake) workers.
func startConformanceDuet(t *testing.T, protocol string, ctxURLs, genURLs []string) *deployment {
	t.Helper()
	port := freePorts(t, 1)[0]
	quoted := func(xs []string) string {
		q := make([]string, len(xs))
		for i, x := range xs {
			q[i] = strconv.Quote(x)
		}
		return strings.Join(q, ", ")
	}
	cfg := fmt.Sprintf(`
log: {level: info}
server: {host: 127.0.0.1, port: %d}
orchestrator:
  protocol: %s
  models: [%q]
  max_migrations: 0 # each variant is about the relay; migration has its own tests
  context_timeout: 10s
  first_event_timeout: 10s
  stream_idle_timeout: 10s
router: {policy: round-robin%s}
queue: {enabled: false}
fleet:
  health_interval: 100ms
  context:
    engine: %s
    urls: [%s]
    health_path: /health
  generation:
    engine: %s
    urls: [%s]
    health_path: /health
`, port, protocol, fakeModel, passiveHealthOff(t), protocol, quoted(ctxURLs), protocol, quoted(genURLs))
	p := startDuet(t, "serve", "--config", writeFile(t, "duet.yaml", cfg))
	d := &deployment{url: fmt.Sprintf("http://127.0.0.1:%d", port), proc: p}
	waitHTTP(t, p, d.url+"/health", 60*time.Second)
	require.Eventually(t, func() bool {
		ws := d.cluster(t).Workers
		for _, w := range ws {
			if !w.Healthy {
				return false
			}
		}
		return len(ws) == len(ctxURLs)+len(genURLs)
	}, 10*time.Second, 20*time.Millisecond, "every fake worker healthy in duet")
	return d
}

// passiveHealthOff returns router keys that keep duet's passive health
// (outlier ejection) out of the suite, or "" when the binary has none: the
// error variants fail workers on purpose, and an ejected worker would
// change what the next subtests see. Each variant is about the protocol,
// not about ejection.
func passiveHealthOff(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(duetBin, "serve", "--help").CombinedOutput()
	require.NoError(t, err, "%s", out)
	if strings.Contains(string(out), "--eject-after-5xx") {
		return ", eject_after_5xx: 1000000"
	}
	return ""
}

// reqCase is one client request shape.
type reqCase struct {
	endpoint     string // "chat" or "completions"
	stream       bool
	includeUsage bool     // stream_options.include_usage (streams only)
	headers      []string // name, value, ...
	extra        string   // extra body fields, each with a leading comma
	prompt       int      // the prompt's tokens as the fakes count them
}

func (c reqCase) path() string {
	if c.endpoint == "chat" {
		return "/v1/chat/completions"
	}
	return "/v1/completions"
}

func (c reqCase) name() string {
	if c.stream {
		return c.endpoint + "/stream"
	}
	return c.endpoint + "/whole"
}

// body is the client's request: OpenAI fields, non-ASCII text included.
func (c reqCase) body() string {
	tail := fmt.Sprintf(`"max_tokens":16,"temperature":0%s,"stream":%t`, c.extra, c.stream)
	if c.includeUsage {
		tail += `,"stream_options":{"include_usage":true}`
	}
	if c.endpoint == "chat" {
		return fmt.Sprintf(`{"model":%q,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Tell me about rivers and lakes – and the café by the lake"}],%s}`, fakeModel, tail)
	}
	return fmt.Sprintf(`{"model":%q,"prompt":"Once upon a time in a quiet valley",%s}`, fakeModel, tail)
}

// allCases are the four request shapes every variant runs.
func allCases() []reqCase {
	var out []reqCase
	for _, ep := range []string{"chat", "completions"} {
		for _, stream := range []bool{false, true} {
			out = append(out, reqCase{endpoint: ep, stream: stream, includeUsage: stream})
		}
	}
	return out
}

// want is what the client and the fakes must see for one request.
type want struct {
	// status is the client's HTTP status; 0 means 200.
	status int
	// content, finish and the usage counts of a success. cached < 0 is
	// not checked.
	content                    string
	finish                     string
	prompt, cached, completion int
	// route is X-Duet-Route; "" means "round-robin".
	route string
	// ctxCalls and genCalls are how many requests each pool got; < 0 is
	// not checked.
	ctxCalls, genCalls int
	// The error a failure carries (a non-2xx body, or the error event of a
	// stream that failed after it began): exact message, or a part of it;
	// type; param and code as raw JSON. Empty fields are not checked.
	errMessage, errType, errParam, errCode string
	errContains                            []string
	// clientFault: the failure is the client's request, which the engine
	// rejects whatever the handle: at most one attempt may run (a retry
	// reruns a context phase whose KV the ctx worker pins until its lease
	// expires: vllm.md §1.5, PROTOCOLS.md §2.4).
	clientFault bool
	// streamErr: a 200 stream that carries partial (the content before the
	// failure), then one error event, then [DONE]; duet counts it 502.
	streamErr bool
	partial   string
}

// variant is one engine behaviour under test.
type variant struct {
	name   string
	source string // the report section the shapes come from
	set    func() // configures the fakes
	// only limits the variant to some request shapes; nil runs all four.
	only func(reqCase) bool
	// req adjusts the request shape.
	req  func(*reqCase)
	want func(reqCase) want
	// wire checks what the fakes received; nil checks nothing more.
	wire func(*testing.T, reqCase, want, legs)
}

func onlyStream(c reqCase) bool { return c.stream }

func onlyWhole(c reqCase) bool { return !c.stream }

// runVariants runs every variant against duet, sequentially.
func runVariants(t *testing.T, d *deployment, fl *fakeFleet, extra func(reqCase) string, vs []variant) {
	for _, v := range vs {
		for _, c := range allCases() {
			if v.only != nil && !v.only(c) {
				continue
			}
			c.extra = extra(c)
			if v.req != nil {
				v.req(&c)
			}
			f, err := decodeFields([]byte(c.body()))
			require.NoError(t, err, c.body())
			c.prompt = promptLen(f)
			t.Run(v.name+"/"+c.name(), func(t *testing.T) {
				t.Logf("variant source: %s", v.source)
				fl.quiesce(t)
				fl.reset()
				v.set()
				w := v.want(c)
				metricStatus := w.status
				switch {
				case w.streamErr:
					metricStatus = http.StatusBadGateway
				case metricStatus == 0:
					metricStatus = http.StatusOK
				}
				before := requestsTotal(t, d, c.endpoint, metricStatus)
				code, hdr, body := post(t, d.url+c.path(), c.body(), c.headers...)
				t.Logf("client got %d %s (route %q): %s", code, hdr.Get("Content-Type"), hdr.Get("X-Duet-Route"), body)
				checkClient(t, c, w, code, hdr, body)
				l := settledLegs(t, d, fl, w)
				checkRoute(t, w, hdr, l)
				if v.wire != nil {
					v.wire(t, c, w, l)
				}
				require.Eventually(t, func() bool { return requestsTotal(t, d, c.endpoint, metricStatus) == before+1 },
					time.Minute, 10*time.Millisecond, "duet counts the request with status %d", metricStatus)
			})
		}
	}
	d.requireIdle(t)
}

// settledLegs waits until the pools got the calls w expects, duet holds no
// lease and no fake is still answering, then returns the calls. SGLang's
// prefill leg runs in the background and may end after the client's
// answer, holding its ctx lease until then: once no lease is left, a
// prefill that was sent has reached its fake, and one that was cancelled
// before it was sent never will (the next case must not count it).
func settledLegs(t *testing.T, d *deployment, fl *fakeFleet, w want) legs {
	t.Helper()
	require.Eventually(t, func() bool {
		l := fl.legs()
		return (w.ctxCalls < 0 || len(l.ctx) >= w.ctxCalls) && (w.genCalls < 0 || len(l.gen) >= w.genCalls)
	}, time.Minute, 5*time.Millisecond)
	d.requireIdle(t)
	fl.quiesce(t)
	l := fl.legs()
	if w.ctxCalls >= 0 {
		require.Len(t, l.ctx, w.ctxCalls, "context requests")
	}
	if w.genCalls >= 0 {
		require.Len(t, l.gen, w.genCalls, "generation requests")
	}
	if w.clientFault {
		require.LessOrEqual(t, len(l.ctx), 1, "a request every worker rejects is not retried: each retry ran another context phase")
		require.LessOrEqual(t, len(l.gen), 1, "a request every worker rejects is not retried")
	}
	return l
}

// openAIFinishReasons are the only finish reasons a client may see.
var openAIFinishReasons = []string{"stop", "length", "tool_calls", "content_filter", "function_call"}

type clientUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func (u clientUsage) cached() int {
	if u.PromptTokensDetails == nil {
		return 0
	}
	return u.PromptTokensDetails.CachedTokens
}

// clientBody is a response body or stream event as a client reads it.
type clientBody struct {
	Object  string          `json:"object"`
	Error   json.RawMessage `json:"error"`
	Choices []struct {
		Message *struct {
			Content *string `json:"content"`
		} `json:"message"`
		Delta *struct {
			Content *string `json:"content"`
		} `json:"delta"`
		Text         *string `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *clientUsage `json:"usage"`
}

// text is the choice's content, whichever field carries it.
func (b clientBody) text(i int) string {
	ch := b.Choices[i]
	switch {
	case ch.Message != nil && ch.Message.Content != nil:
		return *ch.Message.Content
	case ch.Delta != nil && ch.Delta.Content != nil:
		return *ch.Delta.Content
	case ch.Text != nil:
		return *ch.Text
	}
	return ""
}

// checkClient asserts what the client received.
func checkClient(t *testing.T, c reqCase, w want, code int, hdr http.Header, body []byte) {
	t.Helper()
	wantStatus := w.status
	if wantStatus == 0 {
		wantStatus = http.StatusOK
	}
	require.Equal(t, wantStatus, code, "client status; body: %s", body)
	require.NotEmpty(t, hdr.Get("X-Request-ID"))
	if code != http.StatusOK {
		require.Equal(t, "application/json", hdr.Get("Content-Type"))
		var e struct {
			Error json.RawMessage `json:"error"`
		}
		require.NoError(t, json.Unmarshal(body, &e), "error body is JSON: %s", body)
		checkError(t, w, e.Error)
		return
	}
	if c.stream {
		checkStream(t, c, w, hdr, body)
		return
	}
	require.Equal(t, "application/json", hdr.Get("Content-Type"))
	var b clientBody
	require.NoError(t, json.Unmarshal(body, &b), "response is JSON: %s", body)
	require.Nil(t, b.Error, "no error in a 200 response: %s", body)
	require.Equal(t, objectName(c, false), b.Object)
	require.Len(t, b.Choices, 1)
	require.Equal(t, w.content, b.text(0), "content")
	require.NotNil(t, b.Choices[0].FinishReason, "finish_reason")
	require.Contains(t, openAIFinishReasons, *b.Choices[0].FinishReason, "an OpenAI finish_reason")
	require.Equal(t, w.finish, *b.Choices[0].FinishReason)
	require.NotNil(t, b.Usage, "usage: %s", body)
	checkUsage(t, w, *b.Usage)
}

func objectName(c reqCase, chunk bool) string {
	switch {
	case c.endpoint == "completions":
		return "text_completion"
	case chunk:
		return "chat.completion.chunk"
	}
	return "chat.completion"
}

func checkUsage(t *testing.T, w want, u clientUsage) {
	t.Helper()
	require.Equal(t, w.prompt, u.PromptTokens, "usage.prompt_tokens: %+v", u)
	require.Equal(t, w.completion, u.CompletionTokens, "usage.completion_tokens")
	require.Equal(t, u.PromptTokens+u.CompletionTokens, u.TotalTokens, "usage.total_tokens")
	if w.cached >= 0 {
		require.Equal(t, w.cached, u.cached(), "usage.prompt_tokens_details.cached_tokens")
	}
}

// checkError asserts an OpenAI error object {"message","type","param","code"}.
func checkError(t *testing.T, w want, raw json.RawMessage) {
	t.Helper()
	var e map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &e), "error is an object: %s", raw)
	for _, k := range []string{"message", "type", "param", "code"} {
		require.Contains(t, e, k, "error.%s: %s", k, raw)
	}
	var msg, typ string
	require.NoError(t, json.Unmarshal(e["message"], &msg), "error.message is a string: %s", raw)
	require.NoError(t, json.Unmarshal(e["type"], &typ), "error.type is a string: %s", raw)
	require.NotEmpty(t, msg)
	require.NotEmpty(t, typ)
	require.False(t, strings.HasPrefix(strings.TrimSpace(msg), "{"), "error.message is not double-encoded JSON: %q", msg)
	if w.errMessage != "" {
		require.Equal(t, w.errMessage, msg, "the worker's message")
	}
	for _, part := range w.errContains {
		require.Contains(t, msg, part)
	}
	if w.errType != "" {
		require.Equal(t, w.errType, typ)
	}
	if w.errParam != "" {
		require.JSONEq(t, w.errParam, string(e["param"]), "error.param")
	}
	if w.errCode != "" {
		require.Equal(t, w.errCode, string(e["code"]), "error.code as the worker wrote it")
	}
}

// checkStream asserts an SSE body: LF framing, data events and comments
// only, JSON chunks of the right object, the content, one OpenAI finish
// reason, a usage chunk exactly when asked for, one [DONE] at the end.
func checkStream(t *testing.T, c reqCase, w want, hdr http.Header, body []byte) {
	t.Helper()
	require.True(t, strings.HasPrefix(hdr.Get("Content-Type"), "text/event-stream"), hdr.Get("Content-Type"))
	require.NotContains(t, string(body), "\r", "duet frames its stream with LF")
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		line := sc.Text()
		require.True(t, line == "" || strings.HasPrefix(line, "data: ") || strings.HasPrefix(line, ": "), "SSE line %q", line)
	}
	events := sseData(body)
	require.NotEmpty(t, events)
	require.Equal(t, "[DONE]", events[len(events)-1], "the stream ends with [DONE]: %s", body)
	var content strings.Builder
	var finishes []string
	var usages []clientUsage
	var errEvent json.RawMessage
	for _, e := range events[:len(events)-1] {
		require.NotEqual(t, "[DONE]", e, "one [DONE]")
		var b clientBody
		require.NoError(t, json.Unmarshal([]byte(e), &b), "event is JSON: %s", e)
		require.Nil(t, errEvent, "nothing but [DONE] after an error event: %s", e)
		if b.Error != nil {
			errEvent = b.Error
			continue
		}
		require.Equal(t, objectName(c, true), b.Object, e)
		for i, ch := range b.Choices {
			content.WriteString(b.text(i))
			if ch.FinishReason != nil {
				finishes = append(finishes, *ch.FinishReason)
			}
		}
		if b.Usage != nil {
			require.Empty(t, b.Choices, "the usage chunk has choices []: %s", e)
			usages = append(usages, *b.Usage)
		}
	}
	if w.streamErr {
		require.NotNil(t, errEvent, "an error event before [DONE]: %s", body)
		checkError(t, w, errEvent)
		require.Equal(t, w.partial, content.String(), "content before the failure")
		require.Empty(t, finishes, "no finish_reason in a failed stream")
		return
	}
	require.Nil(t, errEvent, "no error event: %s", body)
	require.Equal(t, w.content, content.String(), "streamed content")
	require.Len(t, finishes, 1, "exactly one finish_reason: %s", body)
	require.Contains(t, openAIFinishReasons, finishes[0], "an OpenAI finish_reason")
	require.Equal(t, w.finish, finishes[0])
	if !c.includeUsage {
		require.Empty(t, usages, "no usage chunk unless stream_options.include_usage")
		return
	}
	require.Len(t, usages, 1, "one usage chunk: %s", body)
	checkUsage(t, w, usages[0])
}

// checkRoute asserts the X-Duet-* headers against the workers called.
func checkRoute(t *testing.T, w want, hdr http.Header, l legs) {
	t.Helper()
	route := hdr.Get("X-Duet-Route")
	if w.status != 0 || w.streamErr {
		if len(l.ctx)+len(l.gen) > 0 {
			require.NotEmpty(t, route, "X-Duet-Route on a request that reached workers")
		}
		return
	}
	wantRoute := w.route
	if wantRoute == "" {
		wantRoute = "round-robin"
	}
	require.Equal(t, wantRoute, route, "X-Duet-Route")
	if len(l.ctx) > 0 {
		require.Equal(t, l.ctx[len(l.ctx)-1].Engine, hdr.Get("X-Duet-Ctx-Worker"))
	}
	if len(l.gen) > 0 {
		require.Equal(t, l.gen[len(l.gen)-1].Engine, hdr.Get("X-Duet-Gen-Worker"))
	}
}

// requestsTotal reads duet_requests_total{endpoint, status} from /metrics.
func requestsTotal(t *testing.T, d *deployment, endpoint string, status int) int {
	t.Helper()
	v, _ := sample(t, d, fmt.Sprintf(`duet_requests_total{endpoint=%q,status="%d"}`, endpoint, status))
	return int(v)
}

// clientFields decodes the client's body of c.
func clientFields(t *testing.T, c reqCase) map[string]json.RawMessage {
	f, err := decodeFields([]byte(c.body()))
	require.NoError(t, err)
	return f
}

// requireKept asserts that a worker body carries the client's value of
// every key in keys, and no key the client did not send.
func requireKept(t *testing.T, client, got map[string]json.RawMessage, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if cv, ok := client[k]; ok {
			require.Contains(t, got, k)
			require.JSONEq(t, string(cv), string(got[k]), "the client's %s", k)
		} else {
			require.NotContains(t, got, k)
		}
	}
}
