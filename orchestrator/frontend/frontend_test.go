package frontend

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/duet-serve/duet/orchestrator"
	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/router"
	"github.com/duet-serve/duet/tokenizer"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
	"go.uber.org/zap"
)

// fakeAdmin records admin calls.
type fakeAdmin struct {
	drained  []string
	migrated []string // drained with migrate
	added    []router.Member
}

func (f *fakeAdmin) AddWorker(m router.Member) error {
	f.added = append(f.added, m)
	return nil
}
func (f *fakeAdmin) RemoveWorker(id string) error { return ErrNotFound }
func (f *fakeAdmin) SetDraining(id string, d, migrate bool) error {
	f.drained = append(f.drained, id)
	if migrate {
		f.migrated = append(f.migrated, id)
	}
	return nil
}

// testServer serves a frontend over an in-memory listener; its pool holds
// the given members (their URLs are never called by these tests).
func testServer(t *testing.T, members []router.Member, mutate func(*Config)) (*fasthttp.Client, *router.Pool, *fakeAdmin) {
	c, pool, admin, _ := testServerListener(t, members, mutate)
	return c, pool, admin
}

// testServerListener is testServer that also returns the listener, for raw
// connections.
func testServerListener(t *testing.T, members []router.Member, mutate func(*Config)) (*fasthttp.Client, *router.Pool, *fakeAdmin, *fasthttputil.InmemoryListener) {
	srv, pool, admin := newTestFrontend(t, members, mutate)
	ln := fasthttputil.NewInmemoryListener()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	client := &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }}
	return client, pool, admin, ln
}

// newTestFrontend builds a frontend whose pool holds members.
func newTestFrontend(t *testing.T, members []router.Member, mutate func(*Config)) (*Server, *router.Pool, *fakeAdmin) {
	pool := router.NewPool()
	pool.Sync(members)
	rt, err := router.New(pool, router.Defaults(), nil)
	require.NoError(t, err)
	tok, err := tokenizer.New(tokenizer.Defaults())
	require.NoError(t, err)
	ocfg := orchestrator.Defaults()
	ocfg.Models = []string{"m"}
	orch, err := orchestrator.New(orchestrator.Options{Config: ocfg, Router: rt, Tokenizer: tok, Log: zap.NewNop()})
	require.NoError(t, err)
	cfg := Defaults()
	cfg.MaxBodyBytes = 4096
	if mutate != nil {
		mutate(&cfg)
	}
	admin := &fakeAdmin{}
	srv, err := New(Options{Config: cfg, Orchestrator: orch, Pool: pool, Log: zap.NewNop(), Version: "v-test", Admin: admin})
	require.NoError(t, err)
	return srv, pool, admin
}

// Regression (issue 12, found by the soak suite's restarts): fasthttp's
// Shutdown closes only the listeners Serve has registered, so a stop
// arriving before Serve's goroutine ran left Serve accepting forever and
// the process hanging at SIGTERM.
func TestServeReturnsWhenStoppedBeforeItStarts(t *testing.T) {
	for i := 0; i < 20; i++ {
		srv, _, _ := newTestFrontend(t, bothRoles, nil)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx, fasthttputil.NewInmemoryListener()) }()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(20 * time.Second): // a hang, not a timing check
			t.Fatalf("run %d: Serve still running after a stop that came before it started", i)
		}
	}
}

func do(t *testing.T, c *fasthttp.Client, method, path, body string, headers ...string) (int, *fasthttp.ResponseHeader, string) {
	t.Helper()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://duet" + path)
	req.Header.SetMethod(method)
	req.SetBodyString(body)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	require.NoError(t, c.DoTimeout(req, resp, 5*time.Second))
	hdr := &fasthttp.ResponseHeader{}
	resp.Header.CopyTo(hdr)
	return resp.StatusCode(), hdr, string(resp.Body())
}

var bothRoles = []router.Member{
	{ID: "ctx-0", URL: "http://127.0.0.1:1", Role: disagg.RoleContext, Healthy: true},
	{ID: "gen-0", URL: "http://127.0.0.1:2", Role: disagg.RoleGeneration, Healthy: true},
}

func TestRoutesAndMethods(t *testing.T) {
	c, _, _ := testServer(t, bothRoles, nil)
	cases := []struct {
		method, path string
		want         int
	}{
		{"GET", "/health", 200},
		{"GET", "/version", 200},
		{"GET", "/v1/models", 200},
		{"GET", "/cluster_info", 200},
		{"GET", "/metrics", 404}, // no gatherer configured
		{"GET", "/v1/embeddings", 404},
		{"POST", "/health", 405},
		{"GET", "/v1/chat/completions", 405},
		{"POST", "/admin/workers", 404}, // disabled without a token
	}
	for _, tc := range cases {
		code, _, body := do(t, c, tc.method, tc.path, "")
		require.Equal(t, tc.want, code, "%s %s: %s", tc.method, tc.path, body)
		if code >= 400 {
			require.Contains(t, body, `"error":{"message":`)
		}
	}
}

func TestRequestIDHonouredOrMinted(t *testing.T) {
	c, _, _ := testServer(t, bothRoles, nil)
	_, hdr, _ := do(t, c, "POST", "/v1/chat/completions", `{"model":`, "X-Request-ID", "abc-123")
	require.Equal(t, "abc-123", string(hdr.Peek("X-Request-ID")))
	_, hdr, _ = do(t, c, "POST", "/v1/chat/completions", `{"model":`, "X-Request-ID", "has space")
	require.Len(t, string(hdr.Peek("X-Request-ID")), 32, "an unusable id is replaced")
	_, hdr, _ = do(t, c, "POST", "/v1/chat/completions", `{"model":`)
	require.Len(t, string(hdr.Peek("X-Request-ID")), 32)
}

func TestBodyLimit(t *testing.T) {
	c, _, _ := testServer(t, bothRoles, nil)
	code, _, body := do(t, c, "POST", "/v1/completions", `{"model":"m","prompt":"`+strings.Repeat("x", 5000)+`"}`)
	require.Equal(t, 413, code)
	require.Contains(t, body, "larger than 4096 bytes")
}

func TestHealthReasons(t *testing.T) {
	cases := []struct {
		name    string
		members []router.Member
		want    int
		reason  string
	}{
		{"both", bothRoles, 200, "ok"},
		{"no ctx", bothRoles[1:], 503, "no healthy context worker"},
		{"no gen", bothRoles[:1], 503, "no healthy generation worker"},
		{"none", nil, 503, "no healthy context or generation worker"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, _, _ := testServer(t, tc.members, nil)
			code, _, body := do(t, c, "GET", "/health", "")
			require.Equal(t, tc.want, code)
			var h struct{ Status string }
			require.NoError(t, json.Unmarshal([]byte(body), &h))
			require.Equal(t, tc.reason, h.Status)
		})
	}
}

func TestAdminAuth(t *testing.T) {
	c, _, admin := testServer(t, bothRoles, func(c *Config) { c.AdminToken = "tok" })
	code, hdr, _ := do(t, c, "POST", "/admin/workers/gen-0/drain", "")
	require.Equal(t, 401, code)
	require.Equal(t, "Bearer", string(hdr.Peek("WWW-Authenticate")))
	code, _, _ = do(t, c, "POST", "/admin/workers/gen-0/drain", "", "Authorization", "Bearer tok")
	require.Equal(t, 200, code)
	require.Equal(t, []string{"gen-0"}, admin.drained)
	code, _, _ = do(t, c, "DELETE", "/admin/workers/zz", "", "Authorization", "Bearer tok")
	require.Equal(t, 404, code)
	code, _, _ = do(t, c, "PUT", "/admin/workers/gen-0", "", "Authorization", "Bearer tok")
	require.Equal(t, 404, code)
}

func TestAdminDrainWithMigration(t *testing.T) {
	c, _, admin := testServer(t, bothRoles, func(c *Config) { c.AdminToken = "tok" })
	for body, want := range map[string]int{`{"migrate":true}`: 200, `{"migrate":false}`: 200, ` `: 200,
		`{"migrate":"yes"}`: 400, `{"move":true}`: 400, `{}`: 400, `[`: 400} {
		code, _, out := do(t, c, "POST", "/admin/workers/gen-0/drain", body, "Authorization", "Bearer tok")
		require.Equal(t, want, code, "%s: %s", body, out)
		if want == 400 {
			require.Contains(t, string(out), `"param":"migrate"`)
		}
	}
	require.Len(t, admin.drained, 3, "a bad body changes nothing")
	require.Equal(t, []string{"gen-0"}, admin.migrated)
}

func TestConfigValidate(t *testing.T) {
	cfg := Defaults()
	cfg.Port = 70000
	require.EqualError(t, cfg.Validate(), "port: must be in [0, 65535], got 70000")
	cfg = Defaults()
	cfg.MaxBodyBytes = 10
	require.EqualError(t, cfg.Validate(), "max_body_bytes: must be >= 1024, got 10")
}

// Regression (issue 10): the OpenAI SDKs' models.retrieve is GET
// /v1/models/{id}; a 404 carries X-Request-ID like every response.
func TestModelRetrieve(t *testing.T) {
	c, _, _ := testServer(t, bothRoles, nil)
	code, hdr, body := do(t, c, "GET", "/v1/models/m", "")
	require.Equal(t, 200, code, body)
	require.JSONEq(t, `"m"`, mustField(t, body, "id"))
	require.JSONEq(t, `"model"`, mustField(t, body, "object"))
	require.NotEmpty(t, hdr.Peek("X-Request-ID"))
	for _, path := range []string{"/v1/models/other", "/v1/models/"} {
		code, hdr, body = do(t, c, "GET", path, "", "X-Request-ID", "rid-404")
		require.Equal(t, 404, code, path)
		require.Equal(t, "rid-404", string(hdr.Peek("X-Request-ID")), path)
		require.Contains(t, body, `"code":"model_not_found"`, path)
	}
	code, _, _ = do(t, c, "POST", "/v1/models/m", "")
	require.Equal(t, 405, code)
	code, hdr, _ = do(t, c, "GET", "/no/such/route", "")
	require.Equal(t, 404, code)
	require.NotEmpty(t, hdr.Peek("X-Request-ID"), "every response carries X-Request-ID")
}

func mustField(t *testing.T, body, key string) string {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(body), &m), body)
	return string(m[key])
}

// trtllmWorker answers context-only requests with a handle and streams n
// tokens ("a", "b", ...), one every gap, then a stop chunk and [DONE]. It
// stops early when the caller goes away.
func trtllmWorker(t *testing.T, n int, gap time.Duration) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), `"context_only"`) {
			fmt.Fprint(w, `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"a"},"finish_reason":"not_finished","disaggregated_params":{"request_type":"context_only","first_gen_tokens":[1],"ctx_request_id":7,"encoded_opaque_state":"eA=="}}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < n; i++ {
			if _, err := fmt.Fprintf(w, "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":null}]}\n\n", string(rune('a'+i%26))); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(gap):
			}
		}
		fmt.Fprint(w, "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// Regression (issue 10): an HTTP/1.0 client asking for a stream got
// Transfer-Encoding: chunked, which HTTP/1.0 forbids; the body must be
// delimited by closing the connection.
func TestHTTP10StreamIsCloseDelimited(t *testing.T) {
	url := trtllmWorker(t, 3, 0)
	_, _, _, ln := testServerListener(t, []router.Member{
		{ID: "ctx-0", URL: url, Role: disagg.RoleContext, Healthy: true},
		{ID: "gen-0", URL: url, Role: disagg.RoleGeneration, Healthy: true},
	}, nil)
	conn, err := ln.Dial()
	require.NoError(t, err)
	defer conn.Close()
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	_, err = fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.0\r\nHost: duet\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	raw, err := io.ReadAll(conn) // ends only when duet closes the connection
	require.NoError(t, err)
	head, payload, ok := strings.Cut(string(raw), "\r\n\r\n")
	require.True(t, ok, "%q", raw)
	require.Contains(t, head, " 200 OK")
	require.NotContains(t, strings.ToLower(head), "transfer-encoding")
	require.NotContains(t, strings.ToLower(head), "content-length")
	require.Contains(t, strings.ToLower(head), "connection: close")
	require.Contains(t, head, "text/event-stream")
	require.Contains(t, payload, `"content":"a"`)
	require.True(t, strings.HasSuffix(payload, "data: [DONE]\n\n"), "%q", payload)
}

// An HTTP/1.0 stream runs on a hijacked connection: a client that leaves
// mid-stream must still release the request's leases.
func TestHTTP10ClientGoneReleasesLeases(t *testing.T) {
	url := trtllmWorker(t, 200, 10*time.Millisecond)
	_, pool, _, ln := testServerListener(t, []router.Member{
		{ID: "ctx-0", URL: url, Role: disagg.RoleContext, Healthy: true},
		{ID: "gen-0", URL: url, Role: disagg.RoleGeneration, Healthy: true},
	}, nil)
	conn, err := ln.Dial()
	require.NoError(t, err)
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	_, err = fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	require.NoError(t, err)
	buf := make([]byte, 512)
	_, err = io.ReadAtLeast(conn, buf, 200) // headers and the first events
	require.NoError(t, err)
	require.Positive(t, pool.Get("gen-0").InFlight(), "the stream is live")
	require.NoError(t, conn.Close())
	require.Eventually(t, func() bool {
		return pool.Get("gen-0").InFlight() == 0 && pool.Get("ctx-0").InFlight() == 0
	}, 5*time.Second, 10*time.Millisecond, "leases released after the client left")
}

func TestAdminAddWorkerBootstrapPort(t *testing.T) {
	c, _, admin := testServer(t, bothRoles, func(c *Config) { c.AdminToken = "tok" })
	add := func(body string) (int, string) {
		code, _, out := do(t, c, "POST", "/admin/workers", body, "Authorization", "Bearer tok")
		return code, out
	}
	code, out := add(`{"id":"p9","url":"http://10.0.0.9:30000","role":"context","bootstrap_port":9001}`)
	require.Equal(t, 200, code, out)
	require.Equal(t, router.Member{ID: "p9", URL: "http://10.0.0.9:30000", Role: disagg.RoleContext, BootstrapPort: 9001}, admin.added[0])
	for body, want := range map[string]string{
		`{"id":"p","url":"http://h:1","role":"context","bootstrap_port":70000}`:   "bootstrap_port must be in 1..65535",
		`{"id":"p","url":"http://h:1","role":"context","bootstrap_port":-1}`:      "bootstrap_port must be in 1..65535",
		`{"id":"d","url":"http://h:1","role":"generation","bootstrap_port":9001}`: "a generation worker has none",
	} {
		code, out := add(body)
		require.Equal(t, 400, code, body)
		require.Contains(t, out, want, body)
		require.Contains(t, out, `"param":"bootstrap_port"`, body)
	}
	require.Len(t, admin.added, 1, "a rejected call changes nothing")
}

func TestClusterInfoShowsBootstrapPorts(t *testing.T) {
	members := append([]router.Member{{ID: "ctx-1", URL: "http://127.0.0.1:3", Role: disagg.RoleContext, Healthy: true, BootstrapPort: 8999}}, bothRoles...)
	c, _, _ := testServer(t, members, nil)
	code, _, body := do(t, c, "GET", "/cluster_info", "")
	require.Equal(t, 200, code)
	require.Contains(t, body, `"id":"ctx-1","url":"http://127.0.0.1:3","role":"context","bootstrap_port":8999`)
	require.NotContains(t, body, `"id":"ctx-0","url":"http://127.0.0.1:1","role":"context","bootstrap_port"`)
}
