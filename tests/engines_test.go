package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// This file holds what the fake engines of the conformance suite share: an
// in-process worker that records every completion request under a mutex,
// a JSON writer whose spacing, escaping and key order an engine variant
// chooses, an SSE writer with the framing quirks engines have, and request
// reading helpers. The engine-specific fakes are engine_vllm_test.go,
// engine_trtllm_test.go and engine_sglang_test.go; engines_contract_test.go
// shows that they reject what their engines reject; conformance_*_test.go
// run them behind duet.

// fakeModel is the model every fake engine serves.
const fakeModel = "fake/conformance-model"

// What the fakes generate. A decode (generation) fake produces genTokens,
// one stream chunk each; a prefill (context) fake samples firstToken. Both
// hold non-ASCII and HTML characters, so an escaping style changes their
// bytes but never their text.
var (
	genTokens  = []string{"Sure", ", here", " is <café>", " & more."}
	firstToken = "¡Hola"
)

// genText is the whole text a decode fake produces.
var genText = strings.Join(genTokens, "")

// call is one completion request a fake engine received.
type call struct {
	Engine string // duet's name of the worker: ctx-0, gen-1, ...
	Path   string
	Header http.Header
	Body   []byte
}

// fields returns the body's top-level keys with their raw values.
func (c call) fields(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	f, err := decodeFields(c.Body)
	require.NoError(t, err, "%s got a body that is not a JSON object: %s", c.Engine, c.Body)
	return f
}

// engineHandler answers one completion request; body is the request body.
type engineHandler func(e *fakeEngine, w http.ResponseWriter, r *http.Request, body []byte)

// fakeEngine is one fake worker: an HTTP server on a free loopback port
// that serves /health and hands POSTs to the two OpenAI routes to its
// handler, recording each one first. Anything else gets FastAPI's 404/405
// (vllm.md §2.2 V5, trtllm.md §2.4).
type fakeEngine struct {
	name   string
	port   int
	url    string
	handle engineHandler
	srv    *http.Server
	// pages are answered to GETs of their paths (a vLLM /metrics page, an
	// SGLang server info); fixed before the server starts.
	pages map[string]string

	inflight atomic.Int64 // completion requests being answered

	mu    sync.Mutex // guards calls
	calls []call
}

// startEngine starts a fake worker named name (duet's worker name, so that
// X-Duet-*-Worker headers can be matched); it stops with the test.
func startEngine(t *testing.T, name string, h engineHandler) *fakeEngine {
	t.Helper()
	return startEngineWithPages(t, name, h, nil)
}

// startEngineWithPages is startEngine for a worker that also answers GETs
// of pages' paths with their bodies.
func startEngineWithPages(t *testing.T, name string, h engineHandler, pages map[string]string) *fakeEngine {
	t.Helper()
	port := freePorts(t, 1)[0]
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	require.NoError(t, err)
	e := &fakeEngine{name: name, port: port, url: fmt.Sprintf("http://127.0.0.1:%d", port), handle: h, pages: pages}
	e.srv = &http.Server{Handler: e, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = e.srv.Serve(ln) }()
	t.Cleanup(func() { _ = e.srv.Close() })
	return e
}

func (e *fakeEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/health":
		w.WriteHeader(http.StatusOK)
		return
	case "/v1/chat/completions", "/v1/completions":
	default:
		if page, ok := e.pages[r.URL.Path]; ok && r.Method == http.MethodGet {
			_, _ = io.WriteString(w, page)
			return
		}
		errReply{http.StatusNotFound, "application/json", `{"detail":"Not Found"}`}.write(w)
		return
	}
	if r.Method != http.MethodPost {
		errReply{http.StatusMethodNotAllowed, "application/json", `{"detail":"Method Not Allowed"}`}.write(w)
		return
	}
	e.inflight.Add(1)
	defer e.inflight.Add(-1)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	e.mu.Lock()
	e.calls = append(e.calls, call{Engine: e.name, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	e.mu.Unlock()
	e.handle(e, w, r, body)
}

// recorded returns a copy of the calls so far.
func (e *fakeEngine) recorded() []call {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]call(nil), e.calls...)
}

func (e *fakeEngine) reset() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls = nil
}

// startPool starts n fake engines named prefix-0, prefix-1, ... served by h.
func startPool(t *testing.T, prefix string, n int, h engineHandler) []*fakeEngine {
	var out []*fakeEngine
	for i := 0; i < n; i++ {
		out = append(out, startEngine(t, fmt.Sprintf("%s-%d", prefix, i), h))
	}
	return out
}

// variantSlot holds the response variant a fake fleet plays: the test sets
// it between subtests while the fakes' handlers read it.
type variantSlot[T any] struct {
	mu sync.Mutex // guards v
	v  T
}

// set configures the variant for the next requests.
func (s *variantSlot[T]) set(v T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.v = v
}

// variant returns the variant in force.
func (s *variantSlot[T]) variant() T {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.v
}

// fakeFleet is one protocol's fake workers: the context pool and the
// generation pool, in duet's order (ctx-0 is the first urls entry).
type fakeFleet struct {
	ctx, gen []*fakeEngine
}

func (f *fakeFleet) all() []*fakeEngine {
	return append(append([]*fakeEngine(nil), f.ctx...), f.gen...)
}

// quiesce waits until no fake is answering a request (SGLang's prefill leg
// runs on in duet's background after the client got its answer).
func (f *fakeFleet) quiesce(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, e := range f.all() {
			if e.inflight.Load() != 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond, "fake engines still answering")
}

func (f *fakeFleet) reset() {
	for _, e := range f.all() {
		e.reset()
	}
}

// legs is what both pools received for one client request.
type legs struct {
	ctx, gen []call
}

func (f *fakeFleet) legs() legs {
	var l legs
	for _, e := range f.ctx {
		l.ctx = append(l.ctx, e.recorded()...)
	}
	for _, e := range f.gen {
		l.gen = append(l.gen, e.recorded()...)
	}
	return l
}

// urls returns the pool's URLs as duet's fleet.<pool>.urls lists them.
func urls(es []*fakeEngine) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.url
	}
	return out
}

// errReply is an error response exactly as an engine writes it: status,
// Content-Type ("" sends none) and body bytes.
type errReply struct {
	status      int
	contentType string
	body        string
}

func (e errReply) write(w http.ResponseWriter) {
	if e.contentType != "" {
		w.Header().Set("Content-Type", e.contentType)
	}
	w.WriteHeader(e.status)
	_, _ = io.WriteString(w, e.body)
}

// nestedError is vLLM's error body since v0.10.1 (vllm.md §2.2 V1):
// {"error":{"message","type","param","code":int}}, code = the status.
func nestedError(status int, typ string, param any, msg string) errReply {
	body := jsonStyle{}.encode(object{{"error", object{
		{"message", msg}, {"type", typ}, {"param", param}, {"code", status}}}})
	return errReply{status, "application/json", string(body)}
}

// flatError is the flat ErrorResponse of vLLM ≤ v0.10.0 (vllm.md §2.2 V2),
// TensorRT-LLM (trtllm.md §2.4) and SGLang (sglang.md §9):
// {"object":"error","message","type","param","code":int}.
func flatError(status int, typ, msg string) errReply {
	body := jsonStyle{}.encode(object{{"object", "error"}, {"message", msg}, {"type", typ}, {"param", nil}, {"code", status}})
	return errReply{status, "application/json", string(body)}
}

// field is one key of an object.
type field struct {
	k string
	v any
}

// object is a JSON object written in its key order.
type object []field

// rawJSON is written as is.
type rawJSON string

// jsonStyle is how an engine writes JSON. The zero value is compact with
// raw UTF-8: Starlette's JSONResponse and pydantic's model_dump_json
// (vllm.md §2.3 S2, trtllm.md §2.6).
type jsonStyle struct {
	// spaced writes ", " and ": ": Python's json.dumps defaults, which vLLM,
	// SGLang and TensorRT-LLM use for stream error frames (vllm.md §2.3 S2,
	// sglang.md §9, trtllm.md §2.5).
	spaced bool
	// escape writes non-ASCII and <, >, & as \uXXXX: json.dumps'
	// ensure_ascii (trtllm.md §2.6) and Go's HTML escaping (llm-d's sim and
	// sidecar, vllm.md §3 SIM-6, §4 O3).
	escape bool
	// reverse writes the top-level keys in reverse order (engines disagree on
	// key order: vllm.md §4).
	reverse bool
}

// encode writes v: nil, bool, int, int64, uint64, string, rawJSON, []int,
// []string, []any or object.
func (s jsonStyle) encode(v any) []byte {
	if o, ok := v.(object); ok && s.reverse {
		r := make(object, len(o))
		for i := range o {
			r[len(o)-1-i] = o[i]
		}
		v = r
	}
	return s.append(nil, v)
}

func (s jsonStyle) append(b []byte, v any) []byte {
	comma, colon := ",", ":"
	if s.spaced {
		comma, colon = ", ", ": "
	}
	switch x := v.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		return fmt.Appendf(b, "%t", x)
	case int, int64, uint64:
		return fmt.Appendf(b, "%d", x)
	case string:
		return s.appendString(b, x)
	case rawJSON:
		return append(b, x...)
	case []int:
		b = append(b, '[')
		for i, n := range x {
			if i > 0 {
				b = append(b, comma...)
			}
			b = fmt.Appendf(b, "%d", n)
		}
		return append(b, ']')
	case []string:
		items := make([]any, len(x))
		for i := range x {
			items[i] = x[i]
		}
		return s.append(b, items)
	case []any:
		b = append(b, '[')
		for i, item := range x {
			if i > 0 {
				b = append(b, comma...)
			}
			b = s.append(b, item)
		}
		return append(b, ']')
	case object:
		b = append(b, '{')
		for i, f := range x {
			if i > 0 {
				b = append(b, comma...)
			}
			b = s.appendString(b, f.k)
			b = append(b, colon...)
			b = s.append(b, f.v)
		}
		return append(b, '}')
	}
	panic(fmt.Sprintf("jsonStyle: cannot write %T", v))
}

func (s jsonStyle) appendString(b []byte, str string) []byte {
	b = append(b, '"')
	for _, r := range str {
		switch {
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r == '\n':
			b = append(b, `\n`...)
		case r < 0x20:
			b = fmt.Appendf(b, `\u%04x`, r)
		case s.escape && (r > 0x7e || r == '<' || r == '>' || r == '&'):
			if r > 0xffff {
				r -= 0x10000
				b = fmt.Appendf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			} else {
				b = fmt.Appendf(b, `\u%04x`, r)
			}
		default:
			b = append(b, string(r)...)
		}
	}
	return append(b, '"')
}

// sseStyle is an engine's SSE framing.
type sseStyle struct {
	// crlf ends lines with "\r\n". No engine studied emits it, but
	// TensorRT-LLM's own splitter and llm-d's sidecar accept it
	// (trtllm.md §1.5, vllm.md §4): a proxy must tolerate it.
	crlf bool
	// comments interleaves ": ping" comment lines, as their own block and
	// inside an event's block (vllm.md §4: ignore comment lines).
	comments bool
	// trailingSpace writes the first event as "data: <json> \n\n", as
	// TensorRT-LLM frames its chat role chunk (trtllm.md §2.5, §4.4).
	trailingSpace bool
	// split writes each event in 7-byte pieces, flushing each: an event
	// may arrive in any number of reads (trtllm.md §1.4: iter_any).
	split bool
}

// sseWriter writes one stream in an sseStyle.
type sseWriter struct {
	w     http.ResponseWriter
	style sseStyle
	n     int
}

// startSSE sends the 200 headers of a stream (vLLM and TensorRT-LLM add
// the charset: vllm.md §2.3 S1, trtllm.md §2.5).
func startSSE(w http.ResponseWriter, style sseStyle) *sseWriter {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	return &sseWriter{w: w, style: style}
}

// event writes one data event and flushes.
func (s *sseWriter) event(data []byte) {
	nl := "\n"
	if s.style.crlf {
		nl = "\r\n"
	}
	var b bytes.Buffer
	if s.style.comments {
		if s.n%2 == 0 {
			b.WriteString(": ping" + nl + nl)
		} else {
			b.WriteString(": keep-alive" + nl)
		}
	}
	b.WriteString("data: ")
	b.Write(data)
	if s.n == 0 && s.style.trailingSpace {
		b.WriteByte(' ')
	}
	b.WriteString(nl + nl)
	s.n++
	piece := b.Len()
	if s.style.split {
		piece = 7
	}
	for out := b.Bytes(); len(out) > 0; {
		k := min(piece, len(out))
		_, _ = s.w.Write(out[:k])
		out = out[k:]
		if f, ok := s.w.(http.Flusher); ok {
			f.Flush()
		}
	}
}

func (s *sseWriter) done() { s.event([]byte("[DONE]")) }

// streamShape is how a generation fake lays out a stream beyond its
// framing.
type streamShape struct {
	// finishOwnChunk sends finish_reason in a chunk of its own after the last
	// content (llm-d's sim: vllm.md §3 SIM-6; TensorRT-LLM chat:
	// trtllm.md §2.5) instead of in the last content chunk (vLLM: vllm.md
	// §2.3 S3).
	finishOwnChunk bool
	// errorFrame, when set, is sent as a data event after errorAfter content
	// chunks, followed by [DONE] (vllm.md §2.3 S5/S6, trtllm.md §2.5,
	// sglang.md §8); errorAfter 0 sends it before any chunk.
	errorFrame string
	errorAfter int
	// cut ends the body after errorAfter content chunks without [DONE]
	// (TensorRT-LLM chat re-raises: trtllm.md §2.5, §6 #18).
	cut bool
}

// decodeFields returns a JSON object's top-level keys with raw values;
// anything but one JSON object is an error.
func decodeFields(body []byte) (map[string]json.RawMessage, error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, fmt.Errorf("not a JSON object")
	}
	var f map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &f); err != nil {
		return nil, err
	}
	return f, nil
}

// isNull reports an absent or null value.
func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// boolField is f[key] as a bool; false when absent, null or not a bool.
func boolField(f map[string]json.RawMessage, key string) bool {
	var b bool
	_ = json.Unmarshal(f[key], &b)
	return b
}

// intField is f[key] as an int and whether it is one.
func intField(f map[string]json.RawMessage, key string) (int, bool) {
	var n int
	if isNull(f[key]) || json.Unmarshal(f[key], &n) != nil {
		return 0, false
	}
	return n, true
}

// stringField is f[key] as a string; "" when it is not one.
func stringField(f map[string]json.RawMessage, key string) string {
	var s string
	_ = json.Unmarshal(f[key], &s)
	return s
}

// isChat reports whether the request went to the chat route.
func isChat(r *http.Request) bool { return r.URL.Path == "/v1/chat/completions" }

// promptLen counts a request's prompt tokens as every fake does: per chat
// message, its words plus 4 template tokens; for completions the words of
// the prompt text, or the length of a token-id prompt.
func promptLen(f map[string]json.RawMessage) int {
	var msgs []struct {
		Content string `json:"content"`
	}
	if json.Unmarshal(f["messages"], &msgs) == nil && len(msgs) > 0 {
		n := 0
		for _, m := range msgs {
			n += len(strings.Fields(m.Content)) + 4
		}
		return n
	}
	var ids []int
	if json.Unmarshal(f["prompt"], &ids) == nil {
		return len(ids)
	}
	return len(strings.Fields(stringField(f, "prompt")))
}

// outputLimit is the request's max_completion_tokens or max_tokens, 0 when
// neither is set.
func outputLimit(f map[string]json.RawMessage) int {
	if n, ok := intField(f, "max_completion_tokens"); ok {
		return n
	}
	n, _ := intField(f, "max_tokens")
	return n
}

// generate returns what a decode fake produces under the request's output
// limit and its finish reason: all of genTokens ending in "stop" (an end of
// sequence), or the first max tokens ending in "length".
func generate(f map[string]json.RawMessage) ([]string, string) {
	if max := outputLimit(f); max > 0 && max < len(genTokens) {
		return genTokens[:max], "length"
	}
	return genTokens, "stop"
}

// includeUsage reports stream_options.include_usage.
func includeUsage(f map[string]json.RawMessage) bool {
	var so struct {
		IncludeUsage bool `json:"include_usage"`
	}
	_ = json.Unmarshal(f["stream_options"], &so)
	return so.IncludeUsage
}
