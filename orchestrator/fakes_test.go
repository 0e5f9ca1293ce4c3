package orchestrator

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/router"
	"github.com/duet-serve/duet/tokenizer"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// fakeWorker is a TensorRT-LLM-protocol worker whose behaviour a test sets.
// It records every body it received.
type fakeWorker struct {
	t       *testing.T
	srv     *httptest.Server
	mu      sync.Mutex // guards bodies, traceparents and remotes
	bodies  []map[string]json.RawMessage
	parents []string        // each request's traceparent header
	remotes map[string]bool // the client addresses (connections) requests came on
	handle  func(w http.ResponseWriter, body map[string]json.RawMessage)
	// accepted counts the connections the server has taken from its
	// listener: only those are closed by srv.CloseClientConnections.
	accepted atomic.Int64
}

func newFakeWorker(t *testing.T, handle func(w http.ResponseWriter, body map[string]json.RawMessage)) *fakeWorker {
	f := &fakeWorker{t: t, handle: handle, remotes: map[string]bool{}}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]json.RawMessage
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Errorf("worker got invalid JSON: %s", raw)
			return
		}
		f.mu.Lock()
		f.bodies = append(f.bodies, body)
		f.parents = append(f.parents, r.Header.Get("traceparent"))
		f.remotes[r.RemoteAddr] = true
		f.mu.Unlock()
		f.handle(w, body)
	}))
	f.srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			f.accepted.Add(1)
		}
	}
	f.srv.Start()
	t.Cleanup(f.srv.Close)
	return f
}

// traceparents returns the traceparent header of each request, in order.
func (f *fakeWorker) traceparents() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.parents...)
}

// connections returns how many connections requests came on.
func (f *fakeWorker) connections() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.remotes)
}

func (f *fakeWorker) calls() []map[string]json.RawMessage {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]json.RawMessage(nil), f.bodies...)
}

// ctxOK answers a context-only request with a valid handle.
func ctxOK(w http.ResponseWriter, body map[string]json.RawMessage) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, `{"id":"c1","object":"chat.completion","created":1,"model":"m","prompt_token_ids":[1,2,3],
	 "choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"not_finished",
	 "disaggregated_params":{"request_type":"context_only","first_gen_tokens":[7],"ctx_request_id":18446744073709551615,"encoded_opaque_state":"b3BhcXVl","draft_tokens":null}}],
	 "usage":{"prompt_tokens":30,"completion_tokens":1,"total_tokens":31,"prompt_tokens_details":{"cached_tokens":20}}}`)
}

// ctxFinished answers as if EOS came at the first token.
func ctxFinished(w http.ResponseWriter, _ map[string]json.RawMessage) {
	fmt.Fprint(w, `{"id":"c2","object":"chat.completion","created":1,"model":"m","prompt_token_ids":[1],
	 "choices":[{"index":0,"message":{"role":"assistant","content":"Bye"},"finish_reason":"stop"}],
	 "usage":{"prompt_tokens":30,"completion_tokens":1,"total_tokens":31,"prompt_tokens_details":{"cached_tokens":0}}}`)
}

func status(code int) func(http.ResponseWriter, map[string]json.RawMessage) {
	return func(w http.ResponseWriter, _ map[string]json.RawMessage) {
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"error":{"message":"fake %d","type":"x","param":null,"code":null}}`, code)
	}
}

// genStream streams n content chunks, then (when complete) a finish chunk,
// a usage chunk and [DONE].
func genStream(n int, complete bool) func(http.ResponseWriter, map[string]json.RawMessage) {
	return func(w http.ResponseWriter, body map[string]json.RawMessage) {
		if string(body["stream"]) != "true" {
			fmt.Fprint(w, `{"id":"g","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i := 0; i < n; i++ {
			fmt.Fprintf(w, "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" t%d\"},\"finish_reason\":null}]}\n\n", i)
			fl.Flush()
		}
		if !complete {
			return
		}
		fmt.Fprint(w, "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n")
		fmt.Fprint(w, "data: {\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":5,\"total_tokens\":8}}\n\n")
		fmt.Fprint(w, "data: [DONE]\n\n")
	}
}

// harness builds an Orchestrator over fake workers.
type harness struct {
	o       *Orchestrator
	pool    *router.Pool
	members []router.Member
}

func newHarness(t *testing.T, cfg Config, ctxs, gens []*fakeWorker) *harness {
	t.Helper()
	return newTracedHarness(t, cfg, ctxs, gens, nil)
}

// newTracedHarness is newHarness with a tracer (nil: tracing off).
func newTracedHarness(t *testing.T, cfg Config, ctxs, gens []*fakeWorker, tracer trace.Tracer) *harness {
	t.Helper()
	pool := router.NewPool()
	var ms []router.Member
	for i, w := range ctxs {
		ms = append(ms, router.Member{ID: fmt.Sprintf("ctx-%d", i), URL: w.srv.URL, Role: disagg.RoleContext, Healthy: true})
	}
	for i, w := range gens {
		ms = append(ms, router.Member{ID: fmt.Sprintf("gen-%d", i), URL: w.srv.URL, Role: disagg.RoleGeneration, Healthy: true})
	}
	pool.Sync(ms)
	rcfg := router.Defaults()
	rcfg.Policy = router.PolicyRoundRobin
	r, err := router.New(pool, rcfg, nil)
	require.NoError(t, err)
	tok, err := tokenizer.New(tokenizer.Defaults())
	require.NoError(t, err)
	o, err := New(Options{Config: cfg, Router: r, Tokenizer: tok, Log: zap.NewNop(), Tracer: tracer})
	require.NoError(t, err)
	h := &harness{o: o, pool: pool, members: ms}
	t.Cleanup(func() { h.requireNoLoad(t) })
	return h
}

// addWorker adds a worker that is not a fakeWorker.
func (h *harness) addWorker(t *testing.T, id, url string, context bool) {
	t.Helper()
	role := disagg.RoleGeneration
	if context {
		role = disagg.RoleContext
	}
	h.members = append(h.members, router.Member{ID: id, URL: url, Role: role, Healthy: true})
	h.pool.Sync(h.members)
}

func (h *harness) requireNoLoad(t *testing.T) {
	for _, ep := range h.pool.All() {
		require.Eventually(t, func() bool { return ep.Load() == 0 && ep.InFlight() == 0 }, 2*time.Second, 5*time.Millisecond,
			"worker %s load %d inflight %d", ep.ID, ep.Load(), ep.InFlight())
	}
}

func testConfig() Config {
	c := Defaults()
	c.ContextTimeout = 2 * time.Second
	c.FirstEventTimeout = 2 * time.Second
	c.StreamIdleTimeout = 2 * time.Second
	return c
}

func testChatBody(stream bool, extra string) []byte {
	return []byte(fmt.Sprintf(`{"model":"m","stream":%t,"messages":[{"role":"user","content":"hello there"}]%s}`, stream, extra))
}

// run handles a request and, for a stream, relays it into a buffer.
func (h *harness) run(body []byte, hdr map[string]string) (*Response, string) {
	resp := h.o.Handle(context.Background(), Incoming{Endpoint: 1, Body: body, RequestID: "r1", Received: time.Now(),
		Header: func(n string) string { return hdr[n] }})
	if !resp.Streaming() {
		return resp, string(resp.Body)
	}
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	resp.Relay(w)
	return resp, buf.String()
}

// failingWriter fails every write after the first n bytes: a gone client.
type failingWriter struct{ n int }

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("broken pipe")
	}
	f.n -= len(p)
	return len(p), nil
}
