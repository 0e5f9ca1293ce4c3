package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/duet-serve/duet/proto/openai"
)

func TestMain(m *testing.M) {
	if scale := os.Getenv(benchChildEnv); scale != "" {
		os.Exit(runBenchChild(scale))
	}
	// fasthttp's server keeps a process-wide date updater and a worker-pool
	// cleaner that exits a little after Serve; both are fasthttp's own.
	// zmq4 (v0.17.0) starts a writer goroutine per PUB socket that its Close
	// never stops (socket.Close does not close the pubMWriter), so every
	// closed kvevents.Publisher leaves one behind, idle.
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"),
	)
}

// testWorker is a Server listening on 127.0.0.1:0.
type testWorker struct {
	s       *Server
	url     string
	cancel  context.CancelFunc
	done    chan error
	stopped bool
}

// testConfig is fast and deterministic: time_scale 0.01, no early EOS, free
// ports.
func testConfig(role, protocol string) Config {
	cfg := Defaults()
	cfg.Role, cfg.Protocol, cfg.Port, cfg.BootstrapPort = role, protocol, 0, 0
	cfg.TimeScale = 0.01
	cfg.EOSProbability = 0
	cfg.DefaultMaxTokens = 16
	cfg.ShutdownTimeout = 2 * time.Second
	return cfg
}

// startWorker starts a worker and registers its shutdown; at cleanup it
// checks that nothing is left running, waiting, pinned or referenced.
func startWorker(t *testing.T, cfg Config) *testWorker {
	t.Helper()
	// An observer at debug level runs every log call without printing.
	core, _ := observer.New(zap.DebugLevel)
	s, err := New(cfg, testTokenizer(t, "cl100k_base"), zap.New(core))
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	w := &testWorker{s: s, cancel: cancel, done: make(chan error, 1)}
	go func() { w.done <- s.Serve(ctx, ln) }()
	<-s.ready
	w.url = s.URL()
	t.Cleanup(func() {
		if !w.stopped {
			if !t.Failed() {
				w.requireIdle(t)
			}
			require.NoError(t, w.stop(t))
		}
		st := s.sched.stats()
		require.Zero(t, st.Running+st.Waiting+st.Pins+st.KV.Referenced, "state after shutdown: %+v", st)
		require.Zero(t, s.streams.Load()+s.hijacked.Load(), "stream writers or hangs left")
	})
	return w
}

// stop cancels Serve and returns its result.
func (w *testWorker) stop(t *testing.T) error {
	t.Helper()
	w.cancel()
	select {
	case err := <-w.done:
		w.stopped = true
		return err
	case <-time.After(15 * time.Second):
		t.Fatal("Serve did not return after cancel")
		return nil
	}
}

// requireIdle waits until every request has ended and its blocks are
// released.
func (w *testWorker) requireIdle(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		st := w.s.sched.stats()
		return st.Running == 0 && st.Waiting == 0 && st.Pins == 0 && st.KV.Referenced == 0 && w.s.streams.Load() == 0
	}, 5*time.Second, 2*time.Millisecond, "worker not idle: %+v", w.s.sched.stats())
}

var httpClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}

type httpResult struct {
	status int
	header http.Header
	body   []byte
	closed bool // the server announced Connection: close
}

func (r httpResult) errorBody(t *testing.T) openai.ErrorBody {
	t.Helper()
	var e openai.ErrorBody
	require.NoError(t, json.Unmarshal(r.body, &e), "error body: %s", r.body)
	require.NotEmpty(t, e.Error.Message)
	require.NotEmpty(t, e.Error.Type)
	return e
}

func do(t *testing.T, method, url string, body any, header map[string]string) httpResult {
	t.Helper()
	r, err := doErr(method, url, body, header)
	require.NoError(t, err)
	return r
}

// doErr is do for goroutines other than the test's (which must not call
// require).
func doErr(method, url string, body any, header map[string]string) (httpResult, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = bytes.NewReader([]byte(b))
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return httpResult{}, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return httpResult{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return httpResult{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return httpResult{status: resp.StatusCode, header: resp.Header, body: raw, closed: resp.Close}, err
}

func post(t *testing.T, url string, body any) httpResult {
	t.Helper()
	return do(t, http.MethodPost, url, body, nil)
}

// sseEvents splits an SSE body into its data payloads.
func sseEvents(t *testing.T, body []byte) [][]byte {
	t.Helper()
	r := openai.NewSSEReader(bytes.NewReader(body), 0)
	var out [][]byte
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		out = append(out, append([]byte(nil), ev...))
	}
}

func chatReq(content string, extra map[string]any) map[string]any {
	b := map[string]any{
		"model":    Defaults().Model,
		"messages": []map[string]any{{"role": "user", "content": content}},
	}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

func completionReq(prompt any, extra map[string]any) map[string]any {
	b := map[string]any{"model": Defaults().Model, "prompt": prompt}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

func decodeChat(t *testing.T, r httpResult) openai.ChatResponse {
	t.Helper()
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	var resp openai.ChatResponse
	require.NoError(t, json.Unmarshal(r.body, &resp))
	require.Len(t, resp.Choices, 1)
	return resp
}

func decodeCompletion(t *testing.T, r httpResult) openai.CompletionResponse {
	t.Helper()
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	var resp openai.CompletionResponse
	require.NoError(t, json.Unmarshal(r.body, &resp))
	require.Len(t, resp.Choices, 1)
	return resp
}

// longText returns about n tokens of filler text that is unique per seed.
func longText(seed string, n int) string {
	var b bytes.Buffer
	b.WriteString(seed)
	for i := 0; b.Len() < n*5; i++ {
		b.WriteString(" the quick brown fox jumps over the lazy dog")
	}
	return b.String()
}
